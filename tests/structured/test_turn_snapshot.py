"""A constraint walked along a speculative draft and brought back (TurnConstraint.snapshot/restore), over the real
SmolLM2 vocabulary: after every detour of 1-8 allowed tokens (into and out of strings, across a call's opener and
the phases after it) the constraint allows what it allowed before, and its later steps match a twin walked along
the same tokens without detours."""

from __future__ import annotations

import asyncio
import random

import numpy as np
import pytest
from test_turn import NOTE, WEATHER, allowed_ids, closing_ids

from lexi.chat.constraint_plan import plan_output, with_thought_budget
from lexi.chat.reasoning import DELIMITERS
from lexi.chat.response_format import ResponseFormat
from lexi.chat.tools import ToolChoice, ToolSet


def plans():
    forced = ToolSet((WEATHER, NOTE), ToolChoice("required"), parallel=True)
    auto = ToolSet((WEATHER, NOTE), ToolChoice("auto"), parallel=True)
    fmt = ResponseFormat("json_schema", WEATHER.parameters)
    return {
        "forced calls, json form": plan_output(forced, "json", None, None),
        "forced call, function form": plan_output(forced, "function", None, None),
        "auto, text then calls": plan_output(auto, "json", None, None),
        # as lexi/chat/prompt.py builds it for a template that opened the thought
        "json answer after a budgeted thought": with_thought_budget(
            plan_output(None, "json", fmt, DELIMITERS[0]), 6, DELIMITERS[0]
        ),
    }


def pick(rnd: random.Random, allowed: np.ndarray, prefer: np.ndarray, eog: set[int]) -> int | None:
    choices = [t for t in (np.intersect1d(allowed, prefer) if rnd.random() < 0.4 else allowed) if t not in eog]
    return int(rnd.choice(choices)) if choices else None


@pytest.mark.parametrize("name", list(plans()))
def test_a_detour_along_a_draft_comes_back_exactly(compiler, smollm2_tokenizer, name):
    plan = plans()[name]
    size = smollm2_tokenizer.vocab_size
    row = np.zeros((size + 31) // 32, dtype=np.int32)
    eog = set(compiler.vocab.eog_ids)
    prefer = np.asarray(closing_ids(smollm2_tokenizer) + smollm2_tokenizer.encode("<tool_call>", add_bos=False))
    detours = 0
    for seed in range(3):
        rnd = random.Random(seed)
        walked = asyncio.run(compiler.constraint(plan, budget=80))
        twin = asyncio.run(compiler.constraint(plan, budget=80))
        for _ in range(60):
            if walked.is_finished():
                break
            key, allowed = walked.mask_key(), allowed_ids(walked, row, size)
            assert key == twin.mask_key() and np.array_equal(allowed, allowed_ids(twin, row, size))
            snapshot = walked.snapshot()
            for _ in range(rnd.randint(1, 8)):  # the detour: a draft the check then refuses
                token = None if walked.is_finished() else pick(rnd, allowed_ids(walked, row, size), prefer, eog)
                if token is None:
                    break
                walked.advance(token)
                detours += 1
            walked.restore(snapshot)
            assert walked.mask_key() == key and np.array_equal(allowed_ids(walked, row, size), allowed)
            token = pick(rnd, allowed, prefer, eog)
            if token is None:
                break
            walked.advance(token)
            twin.advance(token)
        assert walked.is_finished() == twin.is_finished()
    assert detours > 60
