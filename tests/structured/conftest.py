"""Fixtures the constraint tests share: SmolLM2's constraint vocabulary and a compiler over it, one per module."""

from __future__ import annotations

import pytest

from lexi.structured.compiler import CompilerConfig, ConstraintCompiler
from lexi.structured.vocabulary import ConstraintVocabulary


@pytest.fixture(scope="module")
def vocab(smollm2_tokenizer):
    return ConstraintVocabulary(smollm2_tokenizer)


@pytest.fixture(scope="module")
def compiler(vocab):
    compiler = ConstraintCompiler(vocab, CompilerConfig(timeout=600))  # a busy machine must not fail a walk
    yield compiler
    compiler.shutdown()
