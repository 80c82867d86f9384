"""A thought held to its token budget (Anthropic's budget_tokens), over the real SmolLM2 vocabulary.

Walks pick uniformly among the allowed tokens (tests/structured/test_turn.py's harness): if the budget
could be overrun, some walk would overrun it.
"""

from __future__ import annotations

import asyncio
import json
import random

import numpy as np
import pytest

from lexi.chat.constraint_plan import plan_output, with_thought_budget
from lexi.chat.reasoning import DELIMITERS
from lexi.chat.response_format import ResponseFormat

THINK = DELIMITERS[0]  # ("<think>", "</think>")


def allowed(constraint, row: np.ndarray, size: int) -> np.ndarray | None:
    """The allowed ids, or None when the step is unrestricted."""
    if constraint.mask_key() is None:
        return None
    row.fill(0)
    constraint.fill_mask(row)
    return np.flatnonzero(np.unpackbits(row.view(np.uint8), bitorder="little")[:size])


def walk(constraint, tokenizer, seed: int, steps: int) -> tuple[list[int], list[bool]]:
    """(tokens, whether each step was restricted); stops at the end of output."""
    rnd, size = random.Random(seed), tokenizer.vocab_size
    row = np.zeros((size + 31) // 32, dtype=np.int32)
    eog = set(tokenizer.eog_ids) | {tokenizer.eos_id}
    ids, restricted = [], []
    for _ in range(steps):
        if constraint.is_finished():
            break
        ok = allowed(constraint, row, size)
        assert ok is None or len(ok), "the mask allows nothing"
        token = rnd.randrange(size) if ok is None else int(rnd.choice(ok))
        restricted.append(ok is not None)
        if token in eog:
            break
        constraint.advance(token)
        ids.append(token)
    return ids, restricted


def tokens_to_close(tokenizer, ids: list[int], closer: str = THINK[1]) -> int | None:
    """How many of `ids` it took to write `closer` (None: never written)."""
    for n in range(1, len(ids) + 1):
        if closer in tokenizer.decode(ids[:n]):
            return n
    return None


@pytest.mark.parametrize("budget", [3, 4, 7, 16, 40])
def test_an_opened_thought_closes_within_its_budget_then_the_output_is_free(compiler, smollm2_tokenizer, budget):
    plan = with_thought_budget(None, budget, THINK)
    for seed in range(6):
        constraint = asyncio.run(compiler.constraint(plan))
        ids, restricted = walk(constraint, smollm2_tokenizer, seed, budget + 12)
        closed = tokens_to_close(smollm2_tokenizer, ids)
        assert closed is not None and closed <= budget, (budget, seed, smollm2_tokenizer.decode(ids))
        assert not any(restricted[closed:]), "the answer after the thought is free"
        assert any(restricted), "the closer was forced"


def test_a_thought_the_output_opens_is_held_to_the_budget(compiler, smollm2_tokenizer):
    plan = with_thought_budget(None, 6, None)
    opener = smollm2_tokenizer.encode("\n" + THINK[0], add_bos=False, special=False)
    for seed in range(6):
        constraint = asyncio.run(compiler.constraint(plan))
        for token in opener:
            assert constraint.mask_key() is None
            constraint.advance(token)
        ids, _ = walk(constraint, smollm2_tokenizer, seed, 20)
        closed = tokens_to_close(smollm2_tokenizer, ids)
        assert closed is not None and closed <= 6, smollm2_tokenizer.decode(ids)


def test_an_answer_without_a_thought_is_never_restricted(compiler, smollm2_tokenizer):
    plan = with_thought_budget(None, 3, None)
    first = smollm2_tokenizer.encode("Hello", add_bos=False, special=False)
    for seed in range(4):
        constraint = asyncio.run(compiler.constraint(plan))
        for token in first:
            constraint.advance(token)
        _, restricted = walk(constraint, smollm2_tokenizer, seed, 30)
        assert not any(restricted)
        assert not constraint.is_finished()


@pytest.mark.parametrize("budget", [4, 12])
def test_a_json_answer_after_a_budgeted_thought_still_parses(compiler, smollm2_tokenizer, budget):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    plan = with_thought_budget(plan_output(None, "json", ResponseFormat("json_schema", schema), THINK), budget, THINK)
    for seed in range(6):
        constraint = asyncio.run(compiler.constraint(plan, 40))
        ids, _ = walk(constraint, smollm2_tokenizer, seed, 40)
        text = smollm2_tokenizer.decode(ids)
        closed = tokens_to_close(smollm2_tokenizer, ids)
        assert closed is not None and closed <= budget, text
        assert constraint.is_finished(), text
        assert isinstance(json.loads(text.split(THINK[1], 1)[1])["a"], int)
