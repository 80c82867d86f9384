"""`--kernels`: which implementations a model runs, and a clear refusal when Triton cannot run."""

from __future__ import annotations

import pytest

from lexi.kernels.backend import resolve_kernels, triton_problem


def test_auto_is_triton_on_cuda_and_the_reference_elsewhere():
    assert resolve_kernels("auto", "cuda") == "triton"
    assert resolve_kernels("auto", "cpu") == "reference"  # even with the interpreter enabled (this session)
    assert resolve_kernels("reference", "cuda") == "reference"


def test_triton_on_a_cpu_needs_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert triton_problem("cpu") is None and resolve_kernels("triton", "cpu") == "triton"
    monkeypatch.delenv("TRITON_INTERPRET")
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        resolve_kernels("triton", "cpu")
    with pytest.raises(ValueError, match="kernels must be one of"):
        resolve_kernels("cuda", "cpu")
