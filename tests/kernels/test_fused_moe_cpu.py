"""fused_moe_cpu (the experts on the C kernels) against fused_moe_ref over the same GGUF blocks, and its rows'
independence from the batch they share (what --deterministic relies on)."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf_blocks import random_blocks

from lexi.kernels.cpu_qmatmul import CpuKernels, CpuWeight, available_isas
from lexi.kernels.fused_moe_cpu import CpuExperts, fused_moe_cpu
from lexi.kernels.fused_moe_ref import fused_moe_ref
from lexi.kernels.moe_types import SWIGLU_OAI, ExpertFFN, ExpertWeights

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


def _layer(kernels: CpuKernels, types: tuple[Q, Q, Q], d: int, f: int, e: int, seed: int, biases: bool = False,
           activation=None):  # fmt: skip
    """The same experts for the reference (file bytes) and the C call (repacked where this CPU has x8 kernels):
    random valid blocks (gguf-py quantizes no K-quant)."""
    rng, gen = np.random.default_rng(seed), torch.Generator().manual_seed(seed)
    shapes = ((f, d), (f, d), (d, f))
    projections = [
        (random_blocks(q, e * s[0] * s[1], gen, scale=1e-3).numpy().reshape(e, s[0], -1), q, s)
        for q, s in zip(types, shapes, strict=True)
    ]
    bias = (
        tuple(torch.from_numpy(rng.standard_normal((e, n)).astype(np.float32) * 0.1) for n in (f, f, d))
        if biases else (None, None, None)
    )  # fmt: skip
    extra = {} if activation is None else {"activation": activation}
    ref = ExpertFFN(*(ExpertWeights(q, (e, *s), torch.from_numpy(b.copy())) for b, q, s in projections),
                    gate_bias=bias[0], up_bias=bias[1], down_bias=bias[2], **extra)  # fmt: skip
    cpu = CpuExperts(
        *(tuple(CpuWeight.repacked(kernels, b[i], q, s, release=False) for i in range(e)) for b, q, s in projections),
        kernels, gate_bias=bias[0], up_bias=bias[1], down_bias=bias[2], **extra,
    )  # fmt: skip
    return ref, cpu


def _route(n_tokens: int, k: int, e: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.stack([torch.randperm(e, generator=gen)[:k] for _ in range(n_tokens)])
    return ids, torch.softmax(torch.randn(n_tokens, k, generator=gen), -1), gen


@pytest.mark.parametrize("activations", ["int16", "int8"])
@pytest.mark.parametrize("n_tokens", [1, 4, 37])
def test_k_quant_experts_match_the_reference(activations, n_tokens):
    """A real MoE file's layout (qwen3moe Q4_K_M: Q4_K gate/up, Q6_K down, the x8 layout on AVX2, 256-value
    activation blocks) at decode, batched-decode and prefill sizes, in both activation modes."""
    kernels = CpuKernels(torch.get_num_threads(), activations=activations)
    ref, cpu = _layer(kernels, (Q.Q4_K, Q.Q4_K, Q.Q6_K), d=512, f=768, e=16, seed=1)
    ids, w, gen = _route(n_tokens, 8, 16, seed=n_tokens)
    x = torch.randn(n_tokens, 512, generator=gen)
    want = fused_moe_ref(x, ref, ids, w)
    err = float((fused_moe_cpu(x, cpu, ids, w) - want).abs().max() / want.abs().max())
    print(f"{activations} T={n_tokens}: max relative error {err:.2e}")
    assert err < (5e-4 if activations == "int16" else 2e-2)  # one int8 term: llama.cpp's rounding (~5e-3)


def test_gpt_oss_experts_with_biases_and_clamped_swiglu_match_the_reference():
    """gpt-oss: MXFP4 experts read from the file's rows (no x8 layout), biases on all three projections, the
    clamped SwiGLU; large inputs so that the clamps bite."""
    kernels = CpuKernels(torch.get_num_threads())
    ref, cpu = _layer(kernels, (Q.MXFP4, Q.MXFP4, Q.MXFP4), d=256, f=256, e=8, seed=2, biases=True,
                      activation=SWIGLU_OAI)  # fmt: skip
    ids, w, gen = _route(11, 4, 8, seed=5)
    x = torch.randn(11, 256, generator=gen) * 8
    want = fused_moe_ref(x, ref, ids, w)
    err = float((fused_moe_cpu(x, cpu, ids, w) - want).abs().max() / want.abs().max())
    print(f"max relative error {err:.2e}")
    assert err < 5e-4


def test_every_token_on_the_same_experts(layer):
    """One run of many rows per expert (the strip kernels past the decode kernels' 8 rows), the others unused."""
    ref, cpu = layer
    gen = torch.Generator().manual_seed(9)
    x = torch.randn(24, D, generator=gen)
    ids = torch.tensor([[4, 1]] * 24)
    w = torch.softmax(torch.randn(24, 2, generator=gen), -1)
    want = fused_moe_ref(x, ref, ids, w)
    assert float((fused_moe_cpu(x, cpu, ids, w) - want).abs().max() / want.abs().max()) < 5e-4


@pytest.mark.parametrize(
    "ids,weights,message",
    [
        (torch.tensor([[0, 6]]), torch.tensor([[0.5, 0.5]]), "moe: an expert id is out of range"),
        (torch.tensor([[0, -1]]), torch.tensor([[0.5, 0.5]]), "moe: an expert id is out of range"),
        (torch.tensor([[0, 1]]), torch.tensor([[0.5, 0.5, 0.0]]), "topk_ids and topk_weights"),
        (torch.tensor([[0, 1], [2, 3]]), torch.tensor([[0.5, 0.5], [0.5, 0.5]]), "topk_ids and topk_weights"),
        (torch.zeros(1, 7, dtype=torch.int64), torch.zeros(1, 7), r"k must be in \[1, 6\]"),
    ],
)
def test_bad_routing_is_refused_before_the_kernels_run(layer, ids, weights, message):
    _, cpu = layer
    with pytest.raises(ValueError, match=message):
        fused_moe_cpu(torch.randn(1, D), cpu, ids, weights)


def test_the_kernels_check_the_table_against_the_shapes_they_are_given(layer):
    """The C call holds each expert's descriptors to the d and f it is handed, not only the Python wrapper."""
    _, cpu = layer
    x, y = torch.randn(1, D), torch.empty(1, D)
    ids, route = torch.tensor([[0, 5]], dtype=torch.int32), torch.tensor([[0.5, 0.5]])
    with pytest.raises(ValueError, match="moe: an expert's weight has the wrong rows"):
        cpu.kernels.impl.moe(cpu.table.data_ptr(), cpu.n_experts, x.data_ptr(), 1, D, F + 32, 2, ids.data_ptr(),
                             route.data_ptr(), y.data_ptr(), 2, 0, 1.0, 1.0, 0, 0, 0)  # fmt: skip
    with pytest.raises(ValueError, match="moe: terms must be 1 or 2"):
        cpu.kernels.impl.moe(cpu.table.data_ptr(), cpu.n_experts, x.data_ptr(), 1, D, F, 2, ids.data_ptr(),
                             route.data_ptr(), y.data_ptr(), 3, 0, 1.0, 1.0, 0, 0, 0)  # fmt: skip


@pytest.mark.parametrize("n_tokens", [1, 6])
def test_every_isa_gives_the_same_bits(n_tokens):
    """The portable kernels over the file's rows and this CPU's widest over the x8 layout agree bit for bit,
    through the whole layer (sorting, activation and the slot sum are the same C code on every ISA)."""
    results = []
    for isa in available_isas():
        kernels = CpuKernels(torch.get_num_threads(), isa=isa)
        _, cpu = _layer(kernels, (Q.Q4_K, Q.Q4_K, Q.Q6_K), d=256, f=512, e=8, seed=4)
        ids, w, gen = _route(n_tokens, 4, 8, seed=7)
        results.append(fused_moe_cpu(torch.randn(n_tokens, 256, generator=gen), cpu, ids, w))
    assert all(torch.equal(r, results[0]) for r in results[1:])
