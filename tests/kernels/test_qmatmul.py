"""Quantized matmul: both Triton kernels (under TRITON_INTERPRET=1) against qmatmul_ref, and qmatmul_ref
against gguf-py's dequantizer, for every supported type.

Interpreter rules (FACTS.md): power-of-two tiles, big tiles (each tl.dot step costs ~2 ms), fp16/fp32
activations only (bf16 tl.dot is wrong in the interpreter). Shapes are deliberately ragged: N is not a
multiple of BLOCK_N and K is 3 GGUF blocks against a BLOCK_K of 2 blocks, so the last K step is half masked.
Outputs (and the split-K workspace) are NaN-poisoned, so an element a kernel forgets to write fails.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize as gguf_dequantize
from gguf_blocks import random_blocks

from lexi.kernels.qmatmul import choose_variant, qmatmul, qmatmul_ref
from lexi.kernels.qmatmul_gemm import qmatmul_gemm
from lexi.kernels.qmatmul_gemv import qmatmul_gemv
from lexi.kernels.qmatmul_ref import dequantize_weight
from lexi.kernels.quant_weight import QMATMUL_TYPES, QuantWeight

Q = GGMLQuantizationType
TYPES = [
    Q.F32, Q.F16, Q.BF16, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K,
    Q.IQ4_NL, Q.IQ4_XS, Q.MXFP4,
]  # fmt: skip
RTOL = 1e-3


def random_weight(qtype: GGMLQuantizationType, n: int, k: int, seed: int) -> QuantWeight:
    """Random valid weight: uniform bytes, with each fp16 scale field a finite value in (-1, 1)."""
    gen = torch.Generator().manual_seed(seed)
    if qtype in (Q.F32, Q.F16, Q.BF16):
        return QuantWeight.from_float(torch.randn(n, k, generator=gen), qtype)
    return QuantWeight(qtype, (n, k), random_blocks(qtype, n * k, gen).reshape(n, -1))


def shape_for(qtype: GGMLQuantizationType) -> tuple[int, int, int]:
    """(N, K, BLOCK_K): K is three GGUF blocks, BLOCK_K two of them (float types: 96 against 64)."""
    block = GGML_QUANT_SIZES[qtype][0]
    block = 32 if block == 1 else block
    return 72 if block == 256 else 40, 3 * block, 2 * block


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    """max |got - want| / max |want|: elementwise relative error is meaningless where outputs cross zero."""
    return ((got.double() - want.double()).abs().max() / want.double().abs().max()).item()


def check(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, f"{what}: {got.shape} {got.dtype}"
    bad = ~torch.isfinite(got)
    assert not bad.any(), f"{what}: {int(bad.sum())} non-finite outputs, first at {bad.nonzero()[:5].tolist()}"
    err = rel_err(got, want)
    if err > RTOL:
        diff = (got.double() - want.double()).abs()
        idx = diff.flatten().topk(5).indices
        raise AssertionError(
            f"{what}: rel err {err:.2e}; worst {idx.tolist()}: got {got.flatten()[idx].tolist()} "
            f"want {want.flatten()[idx].tolist()}"
        )


@pytest.mark.parametrize("m", [1, 3, 16])
@pytest.mark.parametrize("qtype", TYPES, ids=lambda q: q.name)
def test_gemv_matches_reference(qtype, m):
    n, k, block_k = shape_for(qtype)
    w = random_weight(qtype, n, k, seed=int(qtype))
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m))
    want = qmatmul_ref(x, w)
    out = torch.full((m, n), float("nan"))
    workspace = torch.full((4 * m * n,), float("nan"))
    # BLOCK_N 32 < N: two column tiles, the second ragged; K = 1.5 BLOCK_K: split-K over 2 slices.
    got = qmatmul_gemv(x, w, out=out, workspace=workspace, block_n=32, block_k=block_k)
    assert got.data_ptr() == out.data_ptr()
    check(got, want, f"gemv {qtype.name} M={m}")


@pytest.mark.parametrize("m", [1, 3, 16, 33])
@pytest.mark.parametrize("qtype", TYPES, ids=lambda q: q.name)
def test_gemm_matches_reference(qtype, m):
    n, k, block_k = shape_for(qtype)
    w = random_weight(qtype, n, k, seed=int(qtype))
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m))
    want = qmatmul_ref(x, w)
    out = torch.full((m, n), float("nan"))
    # BLOCK_M 32 with M=33: a second, one-row tile; BLOCK_N 64 > N=40 or < N=72: ragged either way.
    got = qmatmul_gemm(x, w, out=out, block_m=32, block_n=64, block_k=block_k)
    check(got, want, f"gemm {qtype.name} M={m}")


@pytest.mark.parametrize("qtype", TYPES, ids=lambda q: q.name)
def test_kernel_dequantization_is_bit_exact(qtype):
    """x = the identity: every output is one weight times 1.0 plus exact zeros, so the GEMM returns the weight
    its dequant_tile built, which must equal the reference dequantizer's exactly (same products in the same
    order; only the sign of a zero can change, in the sums). MXFP4 gets every E8M0 scale byte up to 250
    (subnormal scales included; past that 12 * 2^e is inf, and inf * 0 in the other columns would be NaN)."""
    n, k, block_k = shape_for(qtype)
    w = random_weight(qtype, n, k, seed=11)
    if qtype == Q.MXFP4:
        blocks = w.data.view(-1, 17)
        blocks[:, 0] = torch.arange(blocks.shape[0]) % 251
    got = qmatmul_gemm(torch.eye(k), w, block_m=64, block_n=64, block_k=block_k)
    want = dequantize_weight(w).T
    diff = (got != want).nonzero()  # as floats: the sums turn a weight of -0.0 into +0.0
    assert diff.numel() == 0, f"{qtype.name}: {len(diff)} elements differ, first {diff[:5].tolist()}"


@pytest.mark.parametrize(("variant", "m"), [("gemv", 1), ("gemv", 5), ("gemm", 33)])
@pytest.mark.parametrize(
    "qtype", [Q.F16, Q.Q4_0, Q.Q5_1, Q.Q8_0, Q.Q3_K, Q.Q4_K, Q.Q6_K, Q.IQ4_XS, Q.MXFP4], ids=lambda q: q.name
)
def test_fp16_activations(qtype, variant, m):
    """fp16 x: the kernels feed tl.dot fp16 tiles (the weight rounded to fp16), accumulate in fp32, store fp16.

    Compared with the fp32 reference on the same fp16 x, so the error measured is the kernel's own (weight
    rounding plus its output rounding), not the reference's fp16 rounding on top. m=1 takes the GEMV's
    broadcast path, m=5 its padded-to-16 tl.dot path.
    """
    n, k, block_k = shape_for(qtype)
    w = random_weight(qtype, n, k, seed=7)
    # Scaled down: random Q6_K/Q3_K scales reach |w| ~ 4000, and sums of 768 such products overflow fp16.
    x = (torch.randn(m, k, generator=torch.Generator().manual_seed(1)) / 32).to(torch.float16)
    want = qmatmul_ref(x.float(), w)
    if variant == "gemv":
        got = qmatmul_gemv(x, w, block_n=32, block_k=block_k, split_k=1)  # direct fp16 store, no workspace
    else:
        got = qmatmul_gemm(x, w, block_m=32, block_n=64, block_k=block_k)
    assert got.dtype == torch.float16
    check(got.float(), want, f"{variant} fp16 {qtype.name} M={m}")


@pytest.mark.parametrize("qtype", TYPES, ids=lambda q: q.name)
def test_reference_matches_gguf_dequantizer(qtype):
    n, k, _ = shape_for(qtype)
    w = random_weight(qtype, n, k, seed=3)
    x = torch.randn(4, k, dtype=torch.float64)
    if qtype == Q.F32:
        dense = w.data.view(torch.float32).numpy()
    elif qtype == Q.F16:
        dense = gguf_dequantize(w.data.view(torch.float16).numpy(), qtype)
    else:
        dense = gguf_dequantize(w.data.numpy(), qtype)
    want = x @ torch.from_numpy(np.asarray(dense, np.float64)).T
    got = qmatmul_ref(x.float(), w)
    assert rel_err(got, want) < 1e-6


def test_batched_input_and_strides():
    """(B, T, K) activations with a non-unit row stride: flattened to rows, output shaped (B, T, N)."""
    w = random_weight(Q.Q4_K, 40, 512, seed=5)
    x = torch.randn(2, 3, 1024)[..., ::2]  # stride 2 along K: the launcher makes it contiguous
    want = qmatmul_ref(x, w)
    assert want.shape == (2, 3, 40)
    check(qmatmul(x, w, variant="gemv"), want, "gemv batched")
    check(qmatmul(x, w, variant="gemm"), want, "gemm batched")


def test_dispatch():
    w = random_weight(Q.Q8_0, 40, 64, seed=1)
    cpu = torch.zeros(1, 64)
    assert choose_variant(cpu, w) == "ref"
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        x = torch.randn(3, 64).to(dtype)
        got = qmatmul(x, w)
        assert got.dtype == dtype and torch.equal(got, qmatmul_ref(x, w))
    meta = torch.empty(16, 64, device="meta")
    assert choose_variant(meta, w) == "ref"
    # --kernels triton: the Triton kernels by row count on any device (the interpreter on a CPU).
    assert [choose_variant(torch.zeros(m, 64), w, "triton") for m in (1, 16, 17)] == ["gemv", "gemv", "gemm"]
    assert choose_variant(meta, w, "reference") == "ref"
    for m in (3, 40):  # through the dispatch with the interpreter's tiles
        x = torch.randn(m, 64)
        check(qmatmul(x, w, kernels="triton"), qmatmul_ref(x, w), f"dispatched triton m={m}")
    with pytest.raises(ValueError, match="variant"):
        qmatmul(cpu, w, variant="fast")
    empty = torch.zeros(0, 64)
    assert qmatmul_gemv(empty, w).shape == (0, 40) and qmatmul_gemm(empty, w).shape == (0, 40)
    with pytest.raises(ValueError, match="at most 16 rows"):
        qmatmul_gemv(torch.zeros(17, 64), w)


def test_quant_weight_validation():
    assert QMATMUL_TYPES == frozenset(TYPES)
    # dequant_tile dispatches on these id ranges.
    assert (Q.F32, Q.F16, Q.Q4_0, Q.Q8_0, Q.Q2_K, Q.Q6_K, Q.BF16) == (0, 1, 2, 8, 10, 14, 30)
    assert (Q.IQ4_NL, Q.IQ4_XS, Q.MXFP4) == (20, 23, 39)
    odd = torch.zeros(4 * 68 + 1, dtype=torch.uint8)[1:].view(4, 68)
    with pytest.raises(ValueError, match="even address"):
        QuantWeight(Q.Q8_0, (4, 64), odd)
    with pytest.raises(ValueError, match="data"):
        QuantWeight(Q.Q4_0, (4, 64), torch.zeros(4, 35, dtype=torch.uint8))
    with pytest.raises(ValueError, match="multiple"):
        QuantWeight(Q.Q4_K, (4, 128), torch.zeros(4, 72, dtype=torch.uint8))
    with pytest.raises(ValueError, match="qtype"):
        QuantWeight(Q.IQ2_XXS, (4, 256), torch.zeros(4, 66, dtype=torch.uint8))
    with pytest.raises(ValueError, match="features"):
        qmatmul_ref(torch.zeros(1, 32), QuantWeight(Q.Q8_0, (4, 64), torch.zeros(4, 68, dtype=torch.uint8)))


def test_from_gguf_real_tensors(smollm2_gguf):
    """Real SmolLM2 weights (Q4_1 projections, Q8_0 embedding) through both kernels."""
    for name in ("blk.0.attn_q.weight", "blk.0.ffn_down.weight"):
        info = smollm2_gguf.tensors[name]
        w = QuantWeight.from_gguf(info, "cpu")
        assert w.qtype == info.qtype == Q.Q4_1 and w.shape == info.shape
        # Only the first rows: the interpreter is slow and a row slice of GGUF blocks is itself valid.
        rows = QuantWeight(w.qtype, (64, w.shape[1]), w.data[:64].contiguous())
        x = torch.randn(2, w.shape[1], generator=torch.Generator().manual_seed(0))
        want = x @ torch.from_numpy(gguf_dequantize(np.asarray(info.data[:64]), info.qtype)).T
        check(qmatmul_ref(x, rows), want, f"ref {name}")
        check(qmatmul_gemv(x, rows, block_n=64, block_k=256), want, f"gemv {name}")
        check(qmatmul_gemm(x, rows, block_m=16, block_n=64, block_k=256), want, f"gemm {name}")
