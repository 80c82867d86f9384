"""The CPU int4 path: the repack of 4-bit GGUF blocks is lossless up to bf16, and decode through it matches dense."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES

from lexi.gguf.dequant import dequantize
from lexi.kernels.int4_cpu import INT4_TYPES, Int4Weight, Q, int4_mm, int4_supported
from lexi.model.generate import GenerateConfig, generate_tokens, greedy
from lexi.model.linear import QuantLinear

pytestmark = pytest.mark.skipif(not int4_supported(), reason="this torch has no CPU int4 weight-only matmul")


def random_blocks(qtype, n: int, k: int, seed: int) -> np.ndarray:
    """Valid random blocks: the bytes of finite fp16 values of both signs, so every d/m/dmin is finite."""
    block, size = GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (n, k // block * size // 2)).astype(np.float16).view(np.uint8)


@pytest.mark.parametrize(
    ("qtype", "n", "k"), [(Q.Q4_0, 37, 96), (Q.Q4_1, 37, 96), (Q.Q4_1, 64, 576), (Q.Q4_K, 33, 512)]
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


def test_repack_rejects_other_types():
    with pytest.raises(ValueError, match="Q4_0/Q4_1/Q4_K"):
        Int4Weight.from_blocks(random_blocks(Q.Q8_0, 16, 32, 0), Q.Q8_0, (16, 32))
    assert Q.Q8_0 not in INT4_TYPES


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
