"""The reasoning splitter gives the same fields however the same output is cut into chunks."""

from __future__ import annotations

import itertools

import pytest

from lexi.chat.reasoning import ReasoningSplitter, split_reasoning

CASES = [
    # (output, thinking_open, reasoning, content)
    ("<think>ab</think>cd", False, "ab", "cd"),
    ("<think>\nstep one\n</think>\n\nfinal answer", False, "step one", "final answer"),
    ("  <think>x</think>y", False, "x", "y"),
    ("plain answer", False, "", "plain answer"),
    ("<thin", False, "", "<thin"),
    ("<thinking>no</thinking>", False, "", "<thinking>no</thinking>"),
    ("<think>unclosed </thi", False, "unclosed </thi", ""),
    ("<think>a</think", False, "a</think", ""),
    ("<think>a <b> </ c</think>d</think>", False, "a <b> </ c", "d</think>"),
    ("answer <think>late</think>", False, "", "answer <think>late</think>"),
    ("forced</think>rest", True, "forced", "rest"),
    ("\nforced only", True, "forced only", ""),
    ("", False, "", ""),
    ("<|channel>thought\nplan<channel|>answer", False, "plan", "answer"),
    ("<|channel>thinking", False, "", "<|channel>thinking"),
    ("<|channel>thought x </think> y", False, "x </think> y", ""),
]


def _run(chunks, thinking_open):
    splitter = ReasoningSplitter(thinking_open)
    events = []
    for chunk in chunks:
        events += splitter.feed(chunk)
    events += splitter.finish()
    for event in events:
        assert event.text, "no empty events"
        assert "<think>" not in event.text or event.kind == "content"
    return "".join(e.text for e in events if e.kind == "reasoning"), "".join(
        e.text for e in events if e.kind == "content"
    )


def _every_split(text, max_full=13):
    """All 2^(n-1) ways to cut a short text; for a longer one, every way with at most three cuts."""
    n = len(text)
    if n <= max_full:
        for mask in range(1 << max(n - 1, 0)):
            cuts = [i + 1 for i in range(n - 1) if mask >> i & 1]
            yield [text[a:b] for a, b in zip([0, *cuts], [*cuts, n], strict=True)]
        return
    for k in range(4):
        for cuts in itertools.combinations(range(1, n), k):
            yield [text[a:b] for a, b in zip([0, *cuts], [*cuts, n], strict=True)]


@pytest.mark.parametrize(("text", "thinking_open", "reasoning", "content"), CASES)
def test_every_chunking_gives_the_same_fields(text, thinking_open, reasoning, content):
    assert split_reasoning(text, thinking_open) == (reasoning, content)
    count = 0
    for chunks in _every_split(text):
        assert _run(chunks, thinking_open) == (reasoning, content), chunks
        count += 1
    assert count >= 1


def test_opened_in_prompt():
    from lexi.chat.reasoning import DELIMITERS, opened_in_prompt

    assert opened_in_prompt("<|im_start|>assistant\n<think>\n") == DELIMITERS[0]
    assert opened_in_prompt("<|turn>model\n<|channel>thought\n") == DELIMITERS[1]
    assert opened_in_prompt("<|im_start|>assistant\n") is None
    assert split_reasoning("plan<channel|>answer", opened=DELIMITERS[1]) == ("plan", "answer")
    assert split_reasoning("plan</think>answer", opened=DELIMITERS[1]) == ("plan</think>answer", "")


def test_delimiters_are_held_back_until_decided():
    splitter = ReasoningSplitter()
    assert splitter.feed("<thi") == []
    assert [(e.kind, e.text) for e in splitter.feed("nk>abc</th")] == [("reasoning", "abc")]
    assert [(e.kind, e.text) for e in splitter.feed("ink> done")] == [("content", "done")]
    assert splitter.finish() == []


def test_a_false_close_tag_is_released_as_reasoning_once_it_diverges():
    splitter = ReasoningSplitter()
    assert [(e.kind, e.text) for e in splitter.feed("<think>x</th")] == [("reasoning", "x")]
    assert [(e.kind, e.text) for e in splitter.feed("x y")] == [("reasoning", "</thx y")]
    assert [(e.kind, e.text) for e in splitter.finish()] == []
