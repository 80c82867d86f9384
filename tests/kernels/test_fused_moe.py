"""Fused MoE: the token grouping on plain data, the reference against a naive per-token loop over gguf-py's
dequantized experts, and both Triton forms (under TRITON_INTERPRET=1) against the reference.

Shapes are deliberately odd: 10 experts, D and F a few GGUF blocks that no power-of-two tile divides, token
counts 1, 3, 11 (the GEMV form's broadcast and tl.dot paths) and 37 (the grouped GEMM, several blocks per
expert). Routing is uneven: a few experts take most rows, two experts are never chosen.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize as gguf_dequantize
from gguf_blocks import random_blocks

from lexi.kernels.fused_moe import choose_moe_variant, fused_moe
from lexi.kernels.fused_moe_ref import dequantize_expert, fused_moe_ref
from lexi.kernels.fused_moe_triton import fused_moe_triton
from lexi.kernels.moe_routing import group_by_expert, max_blocks
from lexi.kernels.moe_types import SILU, SWIGLU_OAI, ExpertFFN, ExpertWeights, GatedActivation

# The kernels' sigmoid is 1 / (1 + exp(-z)): for z below -88, exp overflows to inf and the sigmoid is 0, as
# intended; the interpreter's numpy says so on every such element.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
Q = GGMLQuantizationType
N_EXPERTS = 10
RTOL = 1e-3  # fp32 kernels against the fp32 reference: summation order only


def dims_for(qtype: GGMLQuantizationType) -> tuple[int, int]:
    """(D, F): 3 and 5 blocks of a 32-element type (no power-of-two tile divides them); one 256-element block for
    the K-quants and IQ4_XS (D must be whole blocks for gate/up, F for down), read in half-block K tiles."""
    block = GGML_QUANT_SIZES[qtype][0]
    return (256, 256) if block == 256 else (96, 160)


def random_experts(qtype: GGMLQuantizationType, e: int, n: int, k: int, gen: torch.Generator) -> ExpertWeights:
    """Scaled so that activations stay O(1) through two projections (no overflow in fp16, the clamps in range)."""
    if qtype in (Q.F32, Q.F16, Q.BF16):
        return ExpertWeights.from_float(torch.randn(e, n, k, generator=gen) * k**-0.5, qtype)
    return ExpertWeights(qtype, (e, n, k), random_blocks(qtype, e * n * k, gen, scale=2e-3).reshape(e, n, -1))


def make_ffn(types, activation=SILU, biases=False, seed=0, dims=None) -> ExpertFFN:
    gate_t, up_t, down_t = types if isinstance(types, tuple) else (types,) * 3
    gen = torch.Generator().manual_seed(seed)
    d, f = dims or max(dims_for(gate_t), dims_for(down_t))
    bias = {}
    if biases:
        bias = {
            f"{name}_bias": torch.randn(N_EXPERTS, n, generator=gen)
            for name, n in (("gate", f), ("up", f), ("down", d))
        }
    return ExpertFFN(random_experts(gate_t, N_EXPERTS, f, d, gen), random_experts(up_t, N_EXPERTS, f, d, gen),
                     random_experts(down_t, N_EXPERTS, d, f, gen), activation, **bias)  # fmt: skip


def uneven_routing(n_tokens: int, top_k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each token's k distinct experts, the first from experts 0-2 (so they take most rows), the rest from 0-7:
    experts 8 and 9 are never chosen. Weights are a softmax over random logits of the chosen ones."""
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n_tokens):
        first = int(torch.randint(0, 3, (1,), generator=gen))
        rest = [e for e in torch.randperm(8, generator=gen).tolist() if e != first][: top_k - 1]
        rows.append([first, *rest])
    ids = torch.tensor(rows, dtype=torch.int64).reshape(n_tokens, top_k)
    weights = torch.softmax(torch.randn(n_tokens, top_k, generator=gen), dim=-1)
    return ids, weights


def naive_moe(x: torch.Tensor, ffn: ExpertFFN, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Token by token, slot by slot, in float64, over every expert dequantized by gguf-py (the outside reference)."""

    def dense(w: ExpertWeights) -> torch.Tensor:
        if w.qtype in (Q.F32, Q.F16, Q.BF16):
            return w.kernel_view().double()
        flat = gguf_dequantize(w.data.reshape(-1, w.data.shape[-1]).numpy(), w.qtype)
        return torch.from_numpy(np.asarray(flat, np.float64)).reshape(w.shape)

    def bias(b: torch.Tensor | None, e: int) -> torch.Tensor | float:
        return 0.0 if b is None else b[e].double()

    wg, wu, wd = dense(ffn.gate), dense(ffn.up), dense(ffn.down)
    act, out = ffn.activation, torch.zeros(x.shape[0], ffn.dim, dtype=torch.float64)
    for t in range(x.shape[0]):
        xt = x[t].double()
        for s in range(ids.shape[1]):
            e = int(ids[t, s])
            g, u = wg[e] @ xt + bias(ffn.gate_bias, e), wu[e] @ xt + bias(ffn.up_bias, e)
            if act.kind == "silu":
                h = g / (1 + torch.exp(-g)) * u
            else:
                g, u = torch.clamp(g, max=act.limit), torch.clamp(u, -act.limit, act.limit)
                h = g / (1 + torch.exp(-act.alpha * g)) * (u + 1)
            out[t] += float(weights[t, s]) * (wd[e] @ h + bias(ffn.down_bias, e))
    return out


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.double() - want.double()).abs().max() / want.double().abs().max()).item()


def check(got: torch.Tensor, want: torch.Tensor, what: str, rtol: float = RTOL) -> None:
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)}, want {tuple(want.shape)}"
    bad = ~torch.isfinite(got)
    assert not bad.any(), f"{what}: {int(bad.sum())} non-finite outputs, first at {bad.nonzero()[:5].tolist()}"
    err = rel_err(got, want)
    if err > rtol:
        diff = (got.double() - want.double()).abs().flatten()
        idx = diff.topk(5).indices
        raise AssertionError(f"{what}: rel err {err:.2e}; worst {idx.tolist()}: got {got.flatten()[idx].tolist()} "
                             f"want {want.flatten()[idx].tolist()}")  # fmt: skip


@pytest.mark.parametrize("block_m", [1, 4, 16])
@pytest.mark.parametrize(("n_tokens", "top_k"), [(1, 1), (1, 8), (5, 2), (37, 4), (64, 1)])
def test_group_by_expert(n_tokens, top_k, block_m):
    """Every assignment exactly once; each block holds one expert's rows (padding only at the end of a run);
    unchosen experts get no block; blocks past the last used one carry -1; the bound holds."""
    ids, _ = uneven_routing(n_tokens, top_k, seed=n_tokens)
    if n_tokens == 64:
        ids[:] = 2  # everything on one expert: the longest run
    r = group_by_expert(ids, N_EXPERTS, block_m)
    n_assign = n_tokens * top_k
    assert r.n_assignments == n_assign and r.top_k == top_k and r.block_m == block_m
    assert r.n_blocks == max_blocks(n_assign, N_EXPERTS, block_m)
    sorted_ids = r.sorted_ids.view(r.n_blocks, block_m).tolist()
    flat_ids = ids.flatten().tolist()
    seen, experts_in_order = [], []
    for block, expert in zip(sorted_ids, r.block_expert.tolist(), strict=True):
        real = [a for a in block if a < n_assign]
        if expert == -1:
            assert real == [], f"a block without an expert holds {real}"
            continue
        assert real and real == block[: len(real)], f"padding must end a run: {block}"
        assert all(flat_ids[a] == expert for a in real), f"block of expert {expert} holds {real}"
        assert real == sorted(real)  # within an expert, assignment order (a stable sort)
        seen += real
        experts_in_order.append(expert)
    assert sorted(seen) == list(range(n_assign))
    assert experts_in_order == sorted(experts_in_order)
    assert set(experts_in_order) == set(flat_ids)  # unchosen experts have no block
    used = r.block_expert.tolist()
    assert used == [e for e in used if e >= 0] + [-1] * used.count(-1)  # the unused blocks are the last ones


@pytest.mark.parametrize("top_k", [1, 2, 4, 8])
@pytest.mark.parametrize("qtype", [Q.F32, Q.Q8_0, Q.Q4_K, Q.Q6_K, Q.MXFP4, Q.IQ4_NL, Q.IQ4_XS], ids=lambda q: q.name)
def test_reference_matches_naive_loop(qtype, top_k):
    ffn = make_ffn(qtype, seed=int(qtype))
    ids, weights = uneven_routing(9, top_k, seed=top_k)
    x = torch.randn(9, ffn.dim, generator=torch.Generator().manual_seed(1))
    check(fused_moe_ref(x, ffn, ids, weights), naive_moe(x, ffn, ids, weights).float(), f"ref {qtype.name}", 1e-5)


@pytest.mark.parametrize("activation", [SILU, SWIGLU_OAI], ids=lambda a: a.kind)
def test_reference_biases_and_activations(activation):
    """gpt-oss's form: biases on all three projections, and pre-activations large enough that swiglu_oai's clamps
    engage (|g|, |u| beyond the limit for a good share of them)."""
    ffn = make_ffn(Q.MXFP4, activation, biases=True, seed=3)
    ids, weights = uneven_routing(7, 4, seed=2)
    x = 150 * torch.randn(7, ffn.dim, generator=torch.Generator().manual_seed(2))
    g = x @ dequantize_expert(ffn.gate, 0).T
    assert (g.abs() > activation.limit).float().mean() > 0.2
    check(fused_moe_ref(x, ffn, ids, weights), naive_moe(x, ffn, ids, weights).float(), activation.kind, 1e-5)


# (variant, tokens): the GEMV form's broadcast (1, 3) and tl.dot (11) paths, the grouped GEMM (37).
FORMS = [("gemv", 1), ("gemv", 3), ("gemv", 11), ("gemm", 37)]


@pytest.mark.parametrize("top_k", [1, 2, 4, 8])
@pytest.mark.parametrize(("variant", "n_tokens"), FORMS)
@pytest.mark.parametrize("qtype", [Q.F32, Q.Q8_0, Q.Q4_K, Q.MXFP4, Q.IQ4_XS], ids=lambda q: q.name)
def test_triton_matches_reference(qtype, variant, n_tokens, top_k):
    ffn = make_ffn(qtype, seed=int(qtype))
    ids, weights = uneven_routing(n_tokens, top_k, seed=n_tokens + top_k)
    x = torch.randn(n_tokens, ffn.dim, generator=torch.Generator().manual_seed(n_tokens))
    want = fused_moe_ref(x, ffn, ids, weights)
    check(fused_moe(x, ffn, ids, weights, variant=variant), want, f"{variant} {qtype.name} T={n_tokens} k={top_k}")


def test_gemm_several_blocks_and_tiles_per_expert():
    """GPU-like tiles: 16-row blocks with one expert taking 50 rows (four blocks, the last ragged), 64-wide n-tiles
    over F = 160 and D = 96 (ragged), 32-wide K steps; each block's rows must meet their own expert's tiles."""
    ffn = make_ffn(Q.Q8_0, SWIGLU_OAI, biases=True, seed=8)
    ids, weights = uneven_routing(50, 2, seed=8)
    ids[:, 0] = 4
    ids[:, 1] = torch.where(ids[:, 1] == 4, 5, ids[:, 1])  # 50 rows exactly: one per token
    x = torch.randn(50, ffn.dim, generator=torch.Generator().manual_seed(8))
    r = group_by_expert(ids, N_EXPERTS, 16)
    assert (r.block_expert == 4).sum() == 4
    got = fused_moe_triton(x, ffn, ids, weights, "gemm", block_m=16, block_n=64, block_k=32)
    check(got, fused_moe_ref(x, ffn, ids, weights), "gemm GPU tiles")


@pytest.mark.parametrize(("variant", "n_tokens"), FORMS)
@pytest.mark.parametrize(
    ("types", "activation", "biases"),
    [
        ((Q.Q4_K, Q.Q4_K, Q.Q6_K), SILU, False),
        ((Q.MXFP4,) * 3, SWIGLU_OAI, True),
        ((Q.BF16, Q.F16, Q.IQ4_NL), SILU, True),
    ],
    ids=["q4_k_m", "gpt-oss", "mixed"],
)
def test_triton_mixed_types_biases_activations(types, activation, biases, variant, n_tokens):
    """A Q4_K_M-like layer (Q6_K down), gpt-oss's (MXFP4, biases, clamped SwiGLU at pre-activations that reach the
    clamps), and gate and up of different types."""
    ffn = make_ffn(types, activation, biases, seed=5, dims=(256, 256))
    ids, weights = uneven_routing(n_tokens, 4, seed=n_tokens)
    x = 20 * torch.randn(n_tokens, ffn.dim, generator=torch.Generator().manual_seed(3))
    want = fused_moe_ref(x, ffn, ids, weights)
    check(fused_moe(x, ffn, ids, weights, variant=variant), want, f"{variant} {types} T={n_tokens}")


@pytest.mark.parametrize(("variant", "n_tokens"), [("gemv", 3), ("gemm", 37)])
def test_unchosen_experts_are_never_read(variant, n_tokens):
    """Experts 8 and 9 (never chosen) filled with 0xFF bytes: NaN fp16 scales in Q8_0 and Q4_K, 2^127 scales times
    -12 (-inf) in MXFP4. Neither path's output may change: neither reads them."""
    for qtype in (Q.Q8_0, Q.Q4_K, Q.MXFP4):
        ffn = make_ffn(qtype, seed=9)
        ids, weights = uneven_routing(n_tokens, 4, seed=4)
        x = torch.randn(n_tokens, ffn.dim, generator=torch.Generator().manual_seed(4))
        clean_ref = fused_moe_ref(x, ffn, ids, weights)
        clean = fused_moe(x, ffn, ids, weights, variant=variant)
        for w in (ffn.gate, ffn.up, ffn.down):
            w.data[8:] = 0xFF
        assert torch.equal(fused_moe_ref(x, ffn, ids, weights), clean_ref), qtype.name
        assert torch.equal(fused_moe(x, ffn, ids, weights, variant=variant), clean), qtype.name


@pytest.mark.parametrize(("variant", "n_tokens"), FORMS)
def test_fp16_activations(variant, n_tokens):
    """fp16 x: tl.dot (and the broadcast path) on fp16 tiles, h stored in fp16, output fp16; against the fp32
    reference on the same x, so the error is the kernel's own roundings."""
    ffn = make_ffn(Q.Q4_K, SWIGLU_OAI, biases=True, seed=6)
    ids, weights = uneven_routing(n_tokens, 8, seed=6)
    x = torch.randn(n_tokens, ffn.dim, generator=torch.Generator().manual_seed(6)).to(torch.float16)
    want = fused_moe_ref(x.float(), ffn, ids, weights)
    got = fused_moe(x, ffn, ids, weights, variant=variant)
    assert got.dtype == torch.float16
    check(got.float(), want, f"{variant} fp16 T={n_tokens}", 5e-3)


def test_dispatch_and_validation():
    ffn = make_ffn(Q.Q8_0, seed=1)
    ids, weights = uneven_routing(3, 2, seed=1)
    x = torch.randn(3, ffn.dim)
    assert choose_moe_variant(x) == "ref" and choose_moe_variant(x, "reference") == "ref"
    assert [choose_moe_variant(torch.zeros(t, ffn.dim), "triton") for t in (1, 16, 17)] == ["gemv", "gemv", "gemm"]
    assert torch.equal(fused_moe(x, ffn, ids, weights), fused_moe_ref(x, ffn, ids, weights))
    check(fused_moe(x, ffn, ids, weights, kernels="triton"), fused_moe_ref(x, ffn, ids, weights), "dispatched")
    empty = torch.zeros(0, ffn.dim)
    none = torch.zeros(0, 2, dtype=torch.int64)
    for variant in ("ref", "gemv", "gemm"):
        assert fused_moe(empty, ffn, none, none.float(), variant=variant).shape == (0, ffn.dim)
    with pytest.raises(ValueError, match="variant"):
        fused_moe(x, ffn, ids, weights, variant="fast")
    with pytest.raises(ValueError, match="at most 16 tokens"):
        fused_moe(torch.zeros(17, ffn.dim), ffn, ids.repeat(6, 1)[:17], weights.repeat(6, 1)[:17], variant="gemv")
    with pytest.raises(ValueError, match="x: must be"):
        fused_moe(torch.zeros(3, ffn.dim + 1), ffn, ids, weights)
    with pytest.raises(ValueError, match="topk_ids"):
        fused_moe(x, ffn, ids.float(), weights)
    with pytest.raises(ValueError, match="topk_weights"):
        fused_moe(x, ffn, ids, weights[:, :1])
    with pytest.raises(ValueError, match=r"expert ids must be in \[0, 10\)"):
        fused_moe(x, ffn, ids + 9, weights)
    with pytest.raises(ValueError, match="down: shape"):
        ExpertFFN(ffn.gate, ffn.up, ffn.gate)
    with pytest.raises(ValueError, match="gate_bias"):
        ExpertFFN(ffn.gate, ffn.up, ffn.down, gate_bias=torch.zeros(N_EXPERTS, ffn.dim))
    with pytest.raises(ValueError, match="data"):
        ExpertWeights(Q.Q8_0, (2, 4, 64), torch.zeros(2, 4, 67, dtype=torch.uint8))
    with pytest.raises(ValueError, match="qtype"):
        ExpertWeights(Q.IQ2_XXS, (2, 4, 256), torch.zeros(2, 4, 66, dtype=torch.uint8))
    with pytest.raises(ValueError, match="limit"):
        GatedActivation("swiglu_oai", limit=float("inf"))
    with pytest.raises(ValueError, match="kind"):
        GatedActivation("gelu")


def test_expert_tensors_from_a_gguf_file(tmp_path):
    """3-D expert tensors as a converter writes them (gguf-py's MXFP4 and Q8_0 quantizers, F32 biases), read with
    read_gguf and copied as they are: the reference and the Triton path agree with the naive loop over them."""
    import gguf

    from lexi.gguf.reader import read_gguf

    rng = np.random.default_rng(0)
    d, f = 64, 96
    arrays = {"gate": (N_EXPERTS, f, d), "up": (N_EXPERTS, f, d), "down": (N_EXPERTS, d, f)}
    writer = gguf.GGUFWriter(str(tmp_path / "moe.gguf"), arch="llama")
    for name, shape in arrays.items():
        qtype = Q.Q8_0 if name == "down" else Q.MXFP4
        data = rng.standard_normal(shape).astype(np.float32) * shape[-1] ** -0.5
        writer.add_tensor(f"blk.0.ffn_{name}_exps.weight", gguf.quants.quantize(data, qtype), raw_dtype=qtype)
        writer.add_tensor(f"blk.0.ffn_{name}_exps.bias", rng.standard_normal(shape[:2]).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tensors = read_gguf(tmp_path / "moe.gguf").tensors
    w = {name: ExpertWeights.from_gguf(tensors[f"blk.0.ffn_{name}_exps.weight"]) for name in arrays}
    b = {name: torch.from_numpy(np.array(tensors[f"blk.0.ffn_{name}_exps.bias"].data)) for name in arrays}
    assert w["gate"].qtype == Q.MXFP4 and w["gate"].shape == (N_EXPERTS, f, d) and w["down"].qtype == Q.Q8_0
    ffn = ExpertFFN(w["gate"], w["up"], w["down"], SWIGLU_OAI, b["gate"], b["up"], b["down"])
    ids, weights = uneven_routing(5, 4, seed=5)
    x = torch.randn(5, d, generator=torch.Generator().manual_seed(5))
    want = naive_moe(x, ffn, ids, weights).float()
    check(fused_moe_ref(x, ffn, ids, weights), want, "ref from gguf", 1e-5)
    check(fused_moe(x, ffn, ids, weights, kernels="triton"), want, "triton from gguf")
    with pytest.raises(ValueError, match="3-D"):
        ExpertWeights.from_gguf(tensors["blk.0.ffn_gate_exps.bias"])
