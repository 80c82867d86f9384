"""Engine fixtures: a bundled model with its tokenizer."""

from __future__ import annotations

import contextlib

import pytest


@pytest.fixture(scope="session")
def smollm2(smollm2_model, smollm2_tokenizer):
    return smollm2_model, smollm2_tokenizer


@pytest.fixture(scope="session")
def gemma3(gemma3_model, gemma3_tokenizer):
    return gemma3_model, gemma3_tokenizer


# bfloat16 matmuls (and the CPU int4 decode path) round differently with the number of rows in a step, so
# near-ties can flip between a prompt run alone and the same prompt batched with others. Tests that compare
# outputs across different batch make-ups use float32, which isolates what they test: the scheduling.
@pytest.fixture(scope="session")
def smollm2_exact(smollm2_f32, smollm2_tokenizer):
    return smollm2_f32, smollm2_tokenizer


@pytest.fixture(scope="session")
def gemma3_exact(gemma3_f32, gemma3_tokenizer):
    return gemma3_f32, gemma3_tokenizer


# --deterministic at the default dtype: row-independent paths only (lexi/model/step.py), so a request's greedy
# tokens must not depend on the batch it shares or on prefix-cache hits. The flag only changes which paths a
# step takes, so the session's default models serve, switched for the test's duration (no second copy in memory).
@contextlib.contextmanager
def _deterministic(model):
    model.deterministic = True
    try:
        yield model
    finally:
        model.deterministic = False


@pytest.fixture
def smollm2_deterministic(smollm2_model, smollm2_tokenizer):
    with _deterministic(smollm2_model) as model:
        yield model, smollm2_tokenizer


@pytest.fixture
def gemma3_deterministic(gemma3_model, gemma3_tokenizer):
    with _deterministic(gemma3_model) as model:
        yield model, gemma3_tokenizer
