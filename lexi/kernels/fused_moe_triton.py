"""Triton fused mixture-of-experts over GGUF expert blocks: one grouped launch per projection for all the experts.

Math (`lexi.kernels.fused_moe_ref` states it in full): h = act(x Wg_e^T + bg_e, x Wu_e^T + bu_e) per assignment,
y_t = sum_s w[t, s] (h Wd_e^T + bd_e). Shapes: x (T, D) fp16/bf16/fp32, expert weights (E, N, row_bytes) uint8 GGUF
blocks (or (E, N, K) F32/F16/BF16), expert e's rows laid out as `qmatmul_dequant` reads them; ids and router weights
(T, k); biases float (E, N).

Two launches of `_moe_matmul_grouped_kernel` over one `ExpertRouting` (tokens grouped by expert, in blocks of
BLOCK_M rows of one expert each):
  1. gate/up, GATED: program (block, n-tile) dequantizes expert e's gate and up tiles in registers, multiplies the
     block's x rows (row a // k of x for assignment a) by both, adds the biases, applies the activation, and
     writes h (T * k, F) in x's dtype at the block's assignment rows;
  2. down, WEIGHTED: the same over h's rows (assignment a reads row a), plus the bias, times the router weight
     w[a], into an fp32 (T * k, D) buffer; the launcher sums each token's k rows in slot order (deterministic:
     no atomics, the reference's order).
Programs walk the blocks fastest within an n-tile, so blocks of one expert that follow each other read the same
weight tile while it is in L2. Blocks past the last used one (expert -1) exit at once.

The two forms differ only in tiles: the GEMV form (decode, T <= 16) takes BLOCK_M >= T, so every used expert has
exactly one block and its weights are read once per step; up to 4 rows it multiplies by broadcast and sum (tl.dot
needs 16 rows), from 5 to 16 rows it pads to 16 and uses tl.dot. The grouped GEMM (prefill) takes large tiles and
tl.dot with fp32 accumulation (fp32 activations: exact "ieee" products), like qmatmul_gemm.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from lexi.kernels.moe_routing import group_by_expert
from lexi.kernels.moe_types import GEMV_MAX_TOKENS, ExpertFFN, ExpertRouting, ExpertWeights, GatedActivation
from lexi.kernels.qmatmul_dequant import dequant_tile

_ACT = {"silu": 0, "swiglu_oai": 1}


@triton.jit
def _mac(acc, x, w, USE_DOT: tl.constexpr, DOT_FP32: tl.constexpr):
    """acc += x @ w^T for x (BLOCK_M, BLOCK_K) and an fp32 weight tile w (BLOCK_N, BLOCK_K)."""
    if USE_DOT:
        if DOT_FP32:
            acc = tl.dot(x.to(tl.float32), tl.trans(w), acc, input_precision="ieee")
        else:
            acc = tl.dot(x, tl.trans(w.to(x.dtype)), acc)
    else:
        acc += tl.sum(x.to(tl.float32)[:, None, :] * w[None, :, :], axis=2)
    return acc


@triton.jit
def _moe_matmul_grouped_kernel(
    x_ptr, w1_ptr, w2_ptr, b1_ptr, b2_ptr, route_w_ptr, y_ptr, sorted_ids_ptr, block_expert_ptr,
    N, K, n_assign, n_blocks, rows_per_x,
    stride_xm, stride_w1e, stride_w1n, stride_w2e, stride_w2n, stride_b1e, stride_b2e, stride_ym,
    alpha, limit,
    QTYPE1: tl.constexpr, QTYPE2: tl.constexpr, GATED: tl.constexpr, ACT: tl.constexpr, HAS_BIAS: tl.constexpr,
    WEIGHTED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    USE_DOT: tl.constexpr, DOT_FP32: tl.constexpr,
):  # fmt: skip
    """y[a, n] for the assignments a of one block and one n-tile; see the module docstring."""
    pid = tl.program_id(0)
    pid_m = pid % n_blocks
    pid_n = pid // n_blocks
    expert = tl.load(block_expert_ptr + pid_m)
    if expert < 0:
        return
    expert = expert.to(tl.int64)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    ids = tl.load(sorted_ids_ptr + offs_m)
    row_ok = ids < n_assign
    x_rows = (ids // rows_per_x).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    w1 = w1_ptr + expert * stride_w1e
    w2 = w2_ptr + expert * stride_w2e
    acc1 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        x_mask = row_ok[:, None] & (offs_k[None, :] < K)
        x = tl.load(x_ptr + x_rows[:, None] * stride_xm + offs_k[None, :], mask=x_mask, other=0.0)
        acc1 = _mac(acc1, x, dequant_tile(w1, stride_w1n, offs_n, offs_k, N, K, QTYPE1), USE_DOT, DOT_FP32)
        if GATED:
            acc2 = _mac(acc2, x, dequant_tile(w2, stride_w2n, offs_n, offs_k, N, K, QTYPE2), USE_DOT, DOT_FP32)
    n_ok = offs_n < N
    if HAS_BIAS:
        acc1 += tl.load(b1_ptr + expert * stride_b1e + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
        if GATED:
            acc2 += tl.load(b2_ptr + expert * stride_b2e + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    out = acc1
    if GATED:
        if ACT == 0:  # silu(g) * u
            out = acc1 / (1.0 + tl.exp(-acc1)) * acc2
        else:  # swiglu_oai: min(g, limit) * sigmoid(alpha * min(g, limit)) * (clamp(u, -limit, limit) + 1)
            g = tl.minimum(acc1, limit)
            u = tl.maximum(tl.minimum(acc2, limit), -limit)
            out = g / (1.0 + tl.exp(-alpha * g)) * (u + 1.0)
    if WEIGHTED:
        out = out * tl.load(route_w_ptr + ids, mask=row_ok, other=0.0).to(tl.float32)[:, None]
    y_ptrs = y_ptr + ids.to(tl.int64)[:, None] * stride_ym + offs_n[None, :]
    tl.store(y_ptrs, out.to(y_ptr.dtype.element_ty), mask=row_ok[:, None] & n_ok[None, :])


def moe_tiles(variant: str, n_tokens: int, dtype: torch.dtype) -> dict[str, int]:
    """GPU launch options. GEMV: BLOCK_M covers every row an expert can get (a token picks an expert at most once,
    so at most T rows): broadcast products up to 4 rows, tl.dot on 16 from 5. fp32 activations take smaller tiles
    where tl.dot is used, their "ieee" products being FMA loops that need more registers. Chosen by the compile
    check (tests/kernels/test_fused_moe_compile.py): with these no configuration spills on sm_90 (fp32 GEMM tiles
    of 64 x 64 x 32 spilled 64-168 bytes, the bf16 tl.dot GEMV on 16-wide tiles 8)."""
    if variant == "gemv":
        if n_tokens <= 4:
            return {"block_m": triton.next_power_of_2(max(1, n_tokens)), "block_n": 16, "block_k": 64, "num_warps": 4,
                    "num_stages": 2}  # fmt: skip
        block_n = 16 if dtype == torch.float32 else 32
        return {"block_m": 16, "block_n": block_n, "block_k": 64, "num_warps": 4, "num_stages": 2}
    if dtype == torch.float32:
        return {"block_m": 32, "block_n": 64, "block_k": 32, "num_warps": 8, "num_stages": 2}
    return {"block_m": 64, "block_n": 64, "block_k": 32, "num_warps": 4, "num_stages": 3}


def moe_matmul(
    x: torch.Tensor, w: ExpertWeights, routing: ExpertRouting, out: torch.Tensor, *, rows_per_x: int,
    second: ExpertWeights | None = None, bias: torch.Tensor | None = None, second_bias: torch.Tensor | None = None,
    activation: GatedActivation | None = None, route_weights: torch.Tensor | None = None, block_n: int,
    block_k: int, num_warps: int, num_stages: int,
) -> torch.Tensor:  # fmt: skip
    """One grouped projection into `out` (T * k, N): row a = x[a // rows_per_x] @ W_e^T (+ bias), gated with
    `second` through `activation` when given, times route_weights[a] when given. Shapes are the caller's to check
    (fused_moe_triton does)."""
    _, n, k = w.shape
    wv = w.kernel_view()
    second_view = wv if second is None else second.kernel_view()
    b1 = bias if bias is not None else out
    b2 = second_bias if second_bias is not None else b1
    use_dot = routing.block_m >= 16
    grid = (routing.n_blocks * triton.cdiv(n, block_n),)
    act = activation or GatedActivation()
    _moe_matmul_grouped_kernel[grid](
        x, wv, second_view, b1, b2, route_weights if route_weights is not None else out, out,
        routing.sorted_ids, routing.block_expert,
        n, k, routing.n_assignments, routing.n_blocks, rows_per_x,
        x.stride(0), wv.stride(0), wv.stride(1), second_view.stride(0), second_view.stride(1),
        b1.stride(0) if bias is not None else 0, b2.stride(0) if second_bias is not None else 0, out.stride(0),
        act.alpha, act.limit,
        QTYPE1=int(w.qtype), QTYPE2=int((second or w).qtype), GATED=second is not None, ACT=_ACT[act.kind],
        HAS_BIAS=bias is not None, WEIGHTED=route_weights is not None, BLOCK_M=routing.block_m, BLOCK_N=block_n,
        BLOCK_K=block_k, USE_DOT=use_dot, DOT_FP32=x.dtype == torch.float32, num_warps=num_warps,
        num_stages=num_stages,
    )  # fmt: skip
    return out


def fused_moe_triton(
    x: torch.Tensor, ffn: ExpertFFN, topk_ids: torch.Tensor, topk_weights: torch.Tensor, variant: str = "gemm", *,
    block_m: int | None = None, block_n: int | None = None, block_k: int | None = None,
    num_warps: int | None = None, num_stages: int | None = None,
) -> torch.Tensor:  # fmt: skip
    """x (T, D) -> (T, D) in x's dtype through the Triton kernels; `variant` gemv (T <= 16) or gemm. Tile options
    left None come from `moe_tiles`; block_m, if given, must hold every row an expert gets for the GEMV form."""
    ffn.check_inputs(x, topk_ids, topk_weights)
    if variant not in ("gemv", "gemm"):
        raise ValueError(f"variant: must be gemv or gemm, got {variant!r}")
    n_tokens, top_k = topk_ids.shape
    if variant == "gemv" and n_tokens > GEMV_MAX_TOKENS:
        raise ValueError(f"the gemv form takes at most {GEMV_MAX_TOKENS} tokens, got {n_tokens}")
    given = dict(block_m=block_m, block_n=block_n, block_k=block_k, num_warps=num_warps, num_stages=num_stages)
    tiles = moe_tiles(variant, n_tokens, x.dtype) | {k: v for k, v in given.items() if v is not None}
    if variant == "gemv" and tiles["block_m"] < n_tokens:
        raise ValueError(f"block_m: the gemv form needs block_m >= T = {n_tokens}, got {tiles['block_m']}")
    out = torch.empty(n_tokens, ffn.dim, dtype=x.dtype, device=x.device)
    if n_tokens == 0:  # a zero-sized grid is not a valid launch
        return out
    x = x if x.stride(1) == 1 else x.contiguous()
    routing = group_by_expert(topk_ids, ffn.n_experts, tiles.pop("block_m"))
    n_assign = routing.n_assignments
    hidden = torch.empty(n_assign, ffn.ffn_dim, dtype=x.dtype, device=x.device)
    moe_matmul(x, ffn.gate, routing, hidden, rows_per_x=top_k, second=ffn.up, bias=ffn.gate_bias,
               second_bias=ffn.up_bias, activation=ffn.activation, **tiles)  # fmt: skip
    y = torch.empty(n_assign, ffn.dim, dtype=torch.float32, device=x.device)
    route_w = topk_weights.reshape(-1).contiguous()
    moe_matmul(hidden, ffn.down, routing, y, rows_per_x=1, bias=ffn.down_bias, route_weights=route_w, **tiles)
    return out.copy_(y.view(n_tokens, top_k, ffn.dim).sum(1))
