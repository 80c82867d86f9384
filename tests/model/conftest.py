"""Fixtures of the model tests: our models at float32, and the peers (transformers, llama.cpp), each loaded once.

The bundled models' paths, GGUF files, tokenizers and models (default dtype and float32) come from tests/conftest.py.
"""

from __future__ import annotations

import pytest
import torch


def load_hf(path):
    """transformers' own GGUF loader (dequantized to float32): the reference implementation of each family."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    return model.eval()


@pytest.fixture(scope="session")
def hf_smollm2(smollm2_path):
    return load_hf(smollm2_path)


@pytest.fixture(scope="session")
def hf_gemma3(gemma3_path):
    return load_hf(gemma3_path)


def load_llamacpp(path):
    import llama_cpp

    return llama_cpp.Llama(str(path), logits_all=True, n_threads=2, n_ctx=256, verbose=False)


@pytest.fixture(scope="session")
def lcpp_smollm2(smollm2_path):
    return load_llamacpp(smollm2_path)


@pytest.fixture(scope="session")
def lcpp_gemma3(gemma3_path):
    return load_llamacpp(gemma3_path)


@pytest.fixture
def bundled(request):
    """Everything about one bundled model by name, so each test runs over both models."""
    names = {
        "smollm2": ("smollm2_gguf", "smollm2_tokenizer", "smollm2_f32", "smollm2_model", "hf_smollm2", "lcpp_smollm2"),
        "gemma3": ("gemma3_gguf", "gemma3_tokenizer", "gemma3_f32", "gemma3_model", "hf_gemma3", "lcpp_gemma3"),
    }[request.param]
    return Bundled(request, *names)


class Bundled:
    """Lazy access to one model's fixtures: a test pays only for the peers it touches."""

    def __init__(self, request, gguf, tokenizer, f32, auto, hf, lcpp) -> None:
        self._request = request
        self._names = dict(gguf=gguf, tokenizer=tokenizer, f32=f32, auto=auto, hf=hf, lcpp=lcpp)

    def __getattr__(self, item):
        if item.startswith("_") or item not in self._names:
            raise AttributeError(item)
        return self._request.getfixturevalue(self._names[item])
