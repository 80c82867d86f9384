"""fused_moe_cpu (the experts on the C kernels) against fused_moe_ref over the same GGUF blocks, and its rows'
independence from the batch they share (what --deterministic relies on)."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from lexi.kernels.cpu_qmatmul import CpuKernels, CpuWeight
from lexi.kernels.fused_moe_cpu import CpuExperts, fused_moe_cpu
from lexi.kernels.fused_moe_ref import fused_moe_ref
from lexi.kernels.moe_types import ExpertFFN, ExpertWeights

E, D, F = 6, 256, 512


def _blocks(rng: np.random.Generator, n: int, k: int, qtype: Q) -> np.ndarray:
    """(E, n, row_bytes) uint8 of random values of std k^-0.5, quantized by gguf-py."""
    return gguf.quants.quantize((rng.standard_normal((E, n, k)) * k**-0.5).astype(np.float32), qtype)


@pytest.fixture(scope="module")
def layer():
    rng = np.random.default_rng(0)
    kernels = CpuKernels(torch.get_num_threads())
    raw = [(_blocks(rng, F, D, Q.Q8_0), Q.Q8_0, (F, D)), (_blocks(rng, F, D, Q.Q4_0), Q.Q4_0, (F, D)),
           (_blocks(rng, D, F, Q.Q5_0), Q.Q5_0, (D, F))]  # fmt: skip
    ref = ExpertFFN(*(ExpertWeights(q, (E, *shape), torch.from_numpy(b.copy())) for b, q, shape in raw))
    cpu = CpuExperts(
        *(tuple(CpuWeight.repacked(kernels, b[e], q, shape, release=False) for e in range(E)) for b, q, shape in raw),
        kernels,
    )
    return ref, cpu


@pytest.mark.parametrize("n_tokens,k", [(1, 2), (1, 4), (7, 2), (19, 3)])
def test_matches_the_reference(layer, n_tokens, k):
    ref, cpu = layer
    gen = torch.Generator().manual_seed(n_tokens * 10 + k)
    x = torch.randn(n_tokens, D, generator=gen)
    ids = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(n_tokens)])
    w = torch.softmax(torch.randn(n_tokens, k, generator=gen), -1)
    want = fused_moe_ref(x, ref, ids, w)
    got = fused_moe_cpu(x, cpu, ids, w)
    err = float((got - want).abs().max() / want.abs().max())
    print(f"T={n_tokens} k={k}: max relative error {err:.2e}")
    assert err < 5e-4  # the kernels carry x as two int8 terms (int16 activations): measured ~5e-5


def test_a_row_gives_the_same_bits_alone_and_in_a_batch(layer):
    _, cpu = layer
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(9, D, generator=gen)
    ids = torch.stack([torch.randperm(E, generator=gen)[:2] for _ in range(9)])
    w = torch.softmax(torch.randn(9, 2, generator=gen), -1)
    batched = fused_moe_cpu(x, cpu, ids, w)
    for t in range(9):
        assert torch.equal(fused_moe_cpu(x[t : t + 1], cpu, ids[t : t + 1], w[t : t + 1]), batched[t : t + 1]), t
