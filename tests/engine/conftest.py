"""Engine fixtures: a bundled model with its tokenizer."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def smollm2(smollm2_model, smollm2_tokenizer):
    return smollm2_model, smollm2_tokenizer


@pytest.fixture(scope="session")
def gemma3(gemma3_model, gemma3_tokenizer):
    return gemma3_model, gemma3_tokenizer
