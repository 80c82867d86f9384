"""The CPU decode kernels: int4 repacks (one plane for 4-bit types, two for Q5_0/Q5_1/Q8_0) are lossless up to
bf16 scales, the int8 copies stay within their rounding, every kernel's rows are independent of the row count
bit for bit (what --deterministic rests on), and decode through them matches dense."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES

from lexi.gguf.dequant import dequantize
from lexi.kernels.int4_cpu import INT4_TYPES, PLANE_TYPES, Int4Weight, Q, int4_mm, int4_supported, quantize_int4
from lexi.kernels.int8_cpu import Int8Weight, int8_dynamic_mm, int8_mm
from lexi.model.generate import GenerateConfig, generate_tokens, greedy
from lexi.model.linear import QuantLinear

pytestmark = pytest.mark.skipif(not int4_supported(), reason="this torch has no CPU int4 weight-only matmul")


def random_blocks(qtype, n: int, k: int, seed: int) -> np.ndarray:
    """Valid random blocks: the bytes of finite fp16 values of both signs, so every d/m/dmin is finite."""
    block, size = GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (n, k // block * size // 2)).astype(np.float16).view(np.uint8)


@pytest.mark.parametrize(
    ("qtype", "n", "k"),
    [
        (Q.Q4_0, 37, 96),
        (Q.Q4_1, 37, 96),
        (Q.Q4_1, 64, 576),
        (Q.Q4_K, 33, 512),
        (Q.Q5_0, 37, 96),
        (Q.Q5_1, 21, 64),
        (Q.Q8_0, 37, 96),
    ],
)
@pytest.mark.parametrize("m", [1, 5])
def test_int4_matmul_matches_dequantized_reference(qtype, n, k, m):
    raw = random_blocks(qtype, n, k, seed=n * k + m)
    w = Int4Weight.from_blocks(raw, qtype, (n, k))
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(torch.bfloat16)
    ref = x.float() @ dequantize(raw, qtype, (n, k)).T  # exact weights, fp32 math, the same bf16 input
    got = int4_mm(x, w)
    assert got.shape == (m, n) and got.dtype == torch.bfloat16
    # bf16 rounding of scale and zero (2^-9 relative each) and of the output; a wrong nibble order or scale
    # unpacking (e.g. Q4_K sub-blocks 4-7) is off by tens of percent.
    scale = ref.abs().amax(dim=1, keepdim=True)
    err = (got.float() - ref).abs() / scale
    assert err.max().item() < 1.5e-2, err.max().item()


def test_two_plane_types_and_stacked_parts():
    """Q5_0, Q5_1 and Q8_0 take two planes (lo + 16 hi); stacking a 4-bit part with them gives it a zero plane."""
    assert PLANE_TYPES - INT4_TYPES == {Q.Q5_0, Q.Q5_1, Q.Q8_0}
    parts = [(random_blocks(Q.Q5_0, 40, 96, 1), Q.Q5_0, (40, 96)), (random_blocks(Q.Q4_1, 24, 96, 2), Q.Q4_1, (24, 96))]
    w = Int4Weight.from_parts(parts)
    assert (w.planes, w.shape) == (2, (64, 96))
    x = torch.randn(3, 96, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    ref = x.float() @ torch.cat([dequantize(raw, qtype, shape) for raw, qtype, shape in parts]).T
    err = (int4_mm(x, w).float() - ref).abs() / ref.abs().amax(dim=1, keepdim=True)
    assert err.max().item() < 1.5e-2


def test_repack_rejects_other_types():
    with pytest.raises(ValueError, match="int4 repack"):
        Int4Weight.from_blocks(random_blocks(Q.Q6_K, 16, 256, 0), Q.Q6_K, (16, 256))
    assert Q.Q6_K not in PLANE_TYPES


def test_int8_copies_stay_within_their_rounding():
    w = torch.randn(50, 96, generator=torch.Generator().manual_seed(3)) * 0.1
    w[7] = 0.0  # an all-zero row keeps scale 0
    x = torch.randn(4, 96, generator=torch.Generator().manual_seed(4))
    q = Int8Weight.from_dense(w)
    step = w.abs().amax(dim=1, keepdim=True) / 127
    assert ((q.dequantize() - w).abs() <= 0.51 * step + 1e-8).all()  # half a step (scale rounded to bf16)
    ref = x @ q.dequantize().T
    got = int8_mm(x.to(torch.bfloat16), q).float()
    assert ((got - ref).abs() / ref.abs().amax(dim=1, keepdim=True)).max() < 1.5e-2
    exact = Int8Weight.from_dense(w, torch.float32)
    ref = x @ exact.dequantize().T
    # two int8 terms for x: ~16 bits relative to each row's largest element, then exact int32 sums
    got = int8_dynamic_mm(x, exact)
    assert got.dtype == torch.float32
    assert ((got - ref).abs() / ref.abs().amax(dim=1, keepdim=True)).max() < 1e-4


def test_quantized_head_copy_is_within_half_a_step():
    w = torch.randn(40, 64, generator=torch.Generator().manual_seed(5))
    q = quantize_int4(w)
    x = torch.eye(64, dtype=torch.bfloat16)  # reads W^T back column by column
    back = int4_mm(x, q).float().T
    step = (w.reshape(40, 2, 32).amax(-1) - w.reshape(40, 2, 32).amin(-1)) / 15
    assert ((back - w).abs().reshape(40, 2, 32) <= (0.5 * step[..., None] * 1.02 + 0.02)).all()


@pytest.mark.parametrize("kernel", ["int4", "int4 two planes", "int8", "int8 dynamic"])
def test_rows_do_not_depend_on_the_row_count(kernel):
    """What --deterministic rests on: each output row is the same bits whatever else is in the batch."""
    n, k = 200, 576
    if kernel.startswith("int4"):
        qtype = Q.Q4_1 if kernel == "int4" else Q.Q5_0
        w = Int4Weight.from_blocks(random_blocks(qtype, n, k, 7), qtype, (n, k))
        run = lambda x: int4_mm(x.to(torch.bfloat16), w)  # noqa: E731
    elif kernel == "int8":
        w = Int8Weight.from_dense(torch.randn(n, k))
        run = lambda x: int8_mm(x.to(torch.bfloat16), w)  # noqa: E731
    else:
        w = Int8Weight.from_dense(torch.randn(n, k), torch.float32)
        run = lambda x: int8_dynamic_mm(x, w)  # noqa: E731
    x = torch.randn(100, k, generator=torch.Generator().manual_seed(8))
    whole = run(x)
    for m in (1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 33, 64):
        for start in (0, 100 - m):
            assert torch.equal(run(x[start : start + m]), whole[start : start + m]), (kernel, m, start)


def _set_fast_rows(model, rows: int) -> list[tuple[object, str, int]]:
    """Every decode-path threshold (single layers, stacked q/k/v and gate/up) set to `rows`; the old values."""
    old = []
    for mod in model.modules():
        for attr in ("fast_max_rows", "qkv_max_rows", "gate_up_max_rows"):
            if hasattr(mod, attr):
                old.append((mod, attr, getattr(mod, attr)))
                setattr(mod, attr, rows)
    return old


def test_smollm2_bf16_keeps_int4_and_forced_paths_agree(smollm2_model, smollm2_tokenizer):
    model = smollm2_model
    assert model.dtype == torch.bfloat16  # the default CPU load
    fast = [mod for mod in model.modules() if isinstance(mod, QuantLinear) and isinstance(mod.fast, Int4Weight)]
    assert len(fast) == 2 * model.args.n_layers  # attn_output and ffn_down; q/k/v and gate/up are stacked
    stacked = [b.attn.qkv for b in model.blocks] + [b.mlp.gate_up for b in model.blocks]
    assert all(isinstance(s.weight, Int4Weight) for s in stacked)  # every Q4_1 linear layer
    layer = fast[0]
    assert layer.use_fast(1) and not layer.use_fast(layer.fast_max_rows + 1) and layer.use_fast(1000, force=True)
    ids = smollm2_tokenizer.encode("The capital of France is")
    config = GenerateConfig(n_predict=12, stop_at_eog=False)
    old = _set_fast_rows(model, 0)
    try:
        dense = list(generate_tokens(model, ids, greedy, config))
        _set_fast_rows(model, 1 << 30)  # int4 for the prefill too
        int4 = list(generate_tokens(model, ids, greedy, config))
    finally:
        for mod, attr, rows in old:
            setattr(mod, attr, rows)
    assert int4 == dense, (smollm2_tokenizer.decode(int4), smollm2_tokenizer.decode(dense))
