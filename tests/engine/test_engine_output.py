"""Stop strings and finish reasons on plain text, over every way of splitting an output into tokens."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest

from lexi.engine.output import OutputProcessor, held_back_length

EOS = 0


class PieceDetokenizer:
    """Token id i decodes to pieces[i]: the output processor's contract is only feed/finish."""

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces

    def feed(self, token_id: int) -> str:
        return self.pieces[token_id]

    def finish(self) -> str:
        return ""


def splits(text: str, max_parts: int = 4):
    for cuts in itertools.chain.from_iterable(
        itertools.combinations(range(1, len(text)), k) for k in range(0, max_parts)
    ):
        bounds = (0, *cuts, len(text))
        yield [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def run(pieces: list[str], stop: tuple[str, ...], max_tokens: int = 100, eos_at_end: bool = False):
    detok = PieceDetokenizer(["<eos>", *pieces])
    proc = OutputProcessor(detok, stop, frozenset({EOS}), max_tokens)
    streamed = []
    ids = [*range(1, len(pieces) + 1), *([EOS] if eos_at_end else [])]
    for token in ids:
        streamed.append(proc.feed(token))
        if proc.finish_reason:
            break
    return streamed, proc.finish_reason


def test_held_back_length():
    assert held_back_length("hello wo", ["world"]) == 2
    assert held_back_length("hello", ["world"]) == 0
    assert held_back_length("abab", ["abac"]) == 2
    assert held_back_length("xaba", ["abac"]) == 3
    assert held_back_length("xyz", ["z", "yzq"]) == 2


@pytest.mark.parametrize("text", ["Hello, world! END more", "ENENDD", "a</s>b", "no stop here at all"])
def test_stop_string_across_every_token_boundary(text):
    stops = ("END", "</s>")
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=len(text))
    for pieces in splits(text):
        streamed, reason = run(pieces, stops, eos_at_end=True)
        assert "".join(streamed) == text[:cut], pieces
        assert reason == "stop"
        for piece in streamed:  # nothing streamed is ever a stop string's start that got retracted
            assert not any(s in piece for s in stops)


def test_partial_match_is_released_when_it_fails_or_at_the_end():
    streamed, reason = run(["abc E", "N", "x"], ("END",), max_tokens=3)
    assert streamed == ["abc ", "", "ENx"] and reason == "length"
    streamed, reason = run(["abc E", "N"], ("END",), eos_at_end=True)
    assert streamed == ["abc ", "", "EN"] and reason == "stop"


def test_max_tokens_gives_length_and_eos_text_is_not_shown():
    streamed, reason = run(["a", "b", "c"], (), max_tokens=2)
    assert streamed == ["a", "b"] and reason == "length"
    streamed, reason = run(["a"], (), eos_at_end=True)
    assert streamed == ["a", ""] and reason == "stop"


def test_scheduler_and_block_manager_import_no_torch():
    code = "import sys, lexi.engine.scheduler, lexi.engine.output; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
