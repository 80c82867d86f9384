"""Prefill quantized matmul: GGUF weight tiles dequantized in registers feed `tl.dot`, fp32 accumulation.

Math: y[m, n] = sum_k x[m, k] * W[n, k]. Shapes: x (M, K) fp16/bf16/fp32 with unit K stride, weight
(N, row_bytes) uint8 GGUF blocks (or the (N, K) float matrix for F32/F16/BF16), y (M, N) in x's dtype.
Byte layouts: qmatmul_dequant's docstring.

Program p computes one (BLOCK_M, BLOCK_N) tile of y. Programs are ordered in groups of GROUP_M row tiles
that sweep the same column tiles together (Triton tutorial 03), so a dequantized weight tile's bytes are
still in L2 when the next row tile of the group reads them. Each K step: load x (BLOCK_M, BLOCK_K),
dequantize W (BLOCK_N, BLOCK_K) to fp32, cast it to x's dtype (fp16/bf16 tensor cores; fp32 stays fp32
with exact "ieee" products), and accumulate x @ W^T in fp32.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from lexi.kernels.qmatmul_dequant import dequant_tile
from lexi.kernels.quant_weight import QuantWeight, flatten_input


@triton.jit
def _qmatmul_gemm_kernel(
    x_ptr, w_ptr, y_ptr,
    M, N, K,
    stride_xm, stride_wn, stride_ym,
    QTYPE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, DOT_FP32: tl.constexpr,
):  # fmt: skip
    """y[m, n] = sum_k x[m, k] * W[n, k] for one output tile; see the module docstring."""
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    group = pid // (GROUP_M * tiles_n)
    first_m = group * GROUP_M
    group_size = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * tiles_n)) % group_size
    pid_n = (pid % (GROUP_M * tiles_n)) // group_size

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        x_mask = (offs_m[:, None] < M) & (offs_k[None, :] < K)
        x = tl.load(x_ptr + offs_m[:, None].to(tl.int64) * stride_xm + offs_k[None, :], mask=x_mask, other=0.0)
        w = dequant_tile(w_ptr, stride_wn, offs_n, offs_k, N, K, QTYPE)
        if DOT_FP32:
            acc = tl.dot(x.to(tl.float32), tl.trans(w), acc, input_precision="ieee")
        else:
            acc = tl.dot(x, tl.trans(w.to(x.dtype)), acc)
    y_ptrs = y_ptr + offs_m[:, None].to(tl.int64) * stride_ym + offs_n[None, :]
    y_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=y_mask)


def gemm_tiles(dtype: torch.dtype) -> dict[str, int]:
    """Launch options by activation dtype. fp32 activations (the output layer on CUDA, --dtype float32) take
    "ieee" products, FMA loops that need more registers: 128-row tiles spilled 848 bytes on sm_90, these spill
    at most 32 (ptxas; tests/kernels/test_qmatmul_compile.py)."""
    if dtype == torch.float32:
        return {"block_m": 64, "block_n": 64, "block_k": 32, "group_m": 8, "num_warps": 8, "num_stages": 3}
    return {"block_m": 128, "block_n": 64, "block_k": 32, "group_m": 8, "num_warps": 8, "num_stages": 3}


def qmatmul_gemm(
    x: torch.Tensor, w: QuantWeight, *, out: torch.Tensor | None = None, block_m: int | None = None,
    block_n: int | None = None, block_k: int | None = None, group_m: int | None = None, num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:  # fmt: skip
    """x (..., K) @ W^T -> (..., N) in x's dtype, any number of rows; `out` (M, N) is an optional buffer.
    Tile options left None come from `gemm_tiles(x.dtype)`."""
    given = dict(block_m=block_m, block_n=block_n, block_k=block_k, group_m=group_m, num_warps=num_warps,
                 num_stages=num_stages)  # fmt: skip
    tiles = gemm_tiles(x.dtype) | {k: v for k, v in given.items() if v is not None}
    block_m, block_n, block_k = tiles["block_m"], tiles["block_n"], tiles["block_k"]
    group_m, num_warps, num_stages = tiles["group_m"], tiles["num_warps"], tiles["num_stages"]
    x2 = flatten_input(x, w)
    m, (n, k) = x2.shape[0], w.shape
    y = torch.empty(m, n, dtype=x2.dtype, device=x2.device) if out is None else out
    if y.shape != (m, n) or y.dtype != x2.dtype or not y.is_contiguous():
        raise ValueError(f"out: must be contiguous {x2.dtype} ({m}, {n}), got {y.dtype} {tuple(y.shape)}")
    if m == 0:  # an empty batch: a zero-sized grid is not a valid launch
        return y.reshape(*x.shape[:-1], n)
    wv = w.kernel_view()
    grid = (triton.cdiv(m, block_m) * triton.cdiv(n, block_n),)
    _qmatmul_gemm_kernel[grid](
        x2, wv, y, m, n, k, x2.stride(0), wv.stride(0), y.stride(0),
        QTYPE=int(w.qtype), BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m,
        DOT_FP32=x2.dtype == torch.float32, num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    return y.reshape(*x.shape[:-1], n)
