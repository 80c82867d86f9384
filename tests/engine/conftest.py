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


# --deterministic at the default dtype: row-independent paths only (lexi/model/step.py), so a request's greedy
# tokens must not depend on the batch it shares or on prefix-cache hits.
@pytest.fixture(scope="session")
def smollm2_deterministic(smollm2_gguf, smollm2_tokenizer):
    from lexi.model.loader import LoadConfig, load_model

    return load_model(smollm2_gguf, LoadConfig(deterministic=True)), smollm2_tokenizer


@pytest.fixture(scope="session")
def gemma3_deterministic(gemma3_gguf, gemma3_tokenizer):
    from lexi.model.loader import LoadConfig, load_model

    return load_model(gemma3_gguf, LoadConfig(deterministic=True)), gemma3_tokenizer
