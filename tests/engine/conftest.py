"""Engine fixtures: a bundled model with its tokenizer."""

from __future__ import annotations

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
