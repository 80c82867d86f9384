"""Decode-time quantized matmul (M <= 16): a split-K GEMV that streams each weight byte once.

Math: y[m, n] = sum_k x[m, k] * W[n, k], W dequantized from GGUF blocks in registers (qmatmul_dequant).
Shapes: x (M, K) fp16/bf16/fp32 with unit K stride, weight (N, row_bytes) uint8 (or the (N, K) float
matrix for F32/F16/BF16), y (M, N) in x's dtype.

Grid (cdiv(N, BLOCK_N), SPLIT_K): program (i, s) owns output columns [i*BLOCK_N, (i+1)*BLOCK_N) and the
s-th contiguous slice of K, so the weight is read exactly once over the whole grid, in row-major order.
Decode weights are skinny-and-tall or square; with few column tiles the K split is what fills the GPU.
Partial sums go to an fp32 (SPLIT_K, M, N) buffer summed by the launcher (deterministic, no atomics);
with SPLIT_K == 1 the program writes y directly. For M <= 4 the product is a broadcast multiply-reduce
(tl.dot needs 16 rows); for 5 <= M <= 16 the rows are padded to 16 and fed to tl.dot.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from lexi.kernels.qmatmul_dequant import dequant_tile
from lexi.kernels.quant_weight import GEMV_MAX_M, QuantWeight, flatten_input

# Programs wanted in flight: a few per SM of a large GPU, so the memory system stays saturated.
TARGET_PROGRAMS = 512


@triton.jit
def _qmatmul_gemv_kernel(
    x_ptr, w_ptr, y_ptr,
    M, N, K, k_per_split,
    stride_xm, stride_wn, stride_ys, stride_ym,
    QTYPE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    USE_DOT: tl.constexpr, DOT_FP32: tl.constexpr,
):  # fmt: skip
    """y[s, m, n] = sum over k in split s of x[m, k] * W[n, k]; see the module docstring."""
    pid_n = tl.program_id(0)
    split = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    k_lo = split * k_per_split
    k_hi = tl.minimum(K, k_lo + k_per_split)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        x_mask = (offs_m[:, None] < M) & (offs_k[None, :] < k_hi)
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :], mask=x_mask, other=0.0)
        w = dequant_tile(w_ptr, stride_wn, offs_n, offs_k, N, k_hi, QTYPE)
        if USE_DOT:
            if DOT_FP32:
                acc = tl.dot(x.to(tl.float32), tl.trans(w), acc, input_precision="ieee")
            else:
                acc = tl.dot(x, tl.trans(w.to(x.dtype)), acc)
        else:
            acc += tl.sum(x.to(tl.float32)[:, None, :] * w[None, :, :], axis=2)
    y_ptrs = y_ptr + split * stride_ys + offs_m[:, None] * stride_ym + offs_n[None, :]
    y_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=y_mask)


def gemv_split_k(n: int, k: int, block_n: int, block_k: int) -> int:
    """Enough K slices to reach TARGET_PROGRAMS, never a slice shorter than one BLOCK_K step."""
    n_tiles = triton.cdiv(n, block_n)
    return max(1, min(triton.cdiv(k, block_k), triton.cdiv(TARGET_PROGRAMS, n_tiles)))


def qmatmul_gemv(
    x: torch.Tensor, w: QuantWeight, *, out: torch.Tensor | None = None, workspace: torch.Tensor | None = None,
    block_n: int = 16, block_k: int = 64, split_k: int | None = None, num_warps: int = 4,
) -> torch.Tensor:  # fmt: skip
    """x (..., K) with at most GEMV_MAX_M rows @ W^T -> (..., N) in x's dtype.

    `out` (M, N) in x's dtype and `workspace` (>= SPLIT_K * M * N fp32 elements) are optional caller-owned
    buffers, so a runner can preallocate them (CUDA graphs); every element the result needs is overwritten.
    """
    x2 = flatten_input(x, w)
    m, (n, k) = x2.shape[0], w.shape
    if m > GEMV_MAX_M:
        raise ValueError(f"qmatmul_gemv takes at most {GEMV_MAX_M} rows, got {m}")
    if m == 0:  # an empty batch: a zero-sized grid is not a valid launch
        return torch.empty(*x.shape[:-1], n, dtype=x.dtype, device=x.device) if out is None else out
    use_dot = m > 4
    block_m = 16 if use_dot else triton.next_power_of_2(m)
    split_k = split_k or gemv_split_k(n, k, block_n, block_k)
    # Each slice starts on a BLOCK_K boundary so no tile straddles two programs.
    k_per_split = triton.cdiv(triton.cdiv(k, split_k), block_k) * block_k
    split_k = triton.cdiv(k, k_per_split)
    if out is None:
        out = torch.empty(m, n, dtype=x2.dtype, device=x2.device)
    elif out.shape != (m, n) or out.dtype != x2.dtype or not out.is_contiguous():
        raise ValueError(f"out: must be contiguous {x2.dtype} ({m}, {n}), got {out.dtype} {tuple(out.shape)}")
    if split_k == 1:
        y = out.view(1, m, n)
    elif workspace is None:
        y = torch.empty(split_k, m, n, dtype=torch.float32, device=x2.device)
    elif workspace.dtype != torch.float32 or workspace.numel() < split_k * m * n:
        raise ValueError(f"workspace: needs {split_k * m * n} fp32 elements, got {workspace.dtype} {workspace.numel()}")
    else:
        y = workspace.view(-1)[: split_k * m * n].view(split_k, m, n)
    wv = w.kernel_view()
    grid = (triton.cdiv(n, block_n), split_k)
    _qmatmul_gemv_kernel[grid](
        x2, wv, y, m, n, k, k_per_split, x2.stride(0), wv.stride(0), y.stride(0), y.stride(1),
        QTYPE=int(w.qtype), BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, USE_DOT=use_dot,
        DOT_FP32=x2.dtype == torch.float32, num_warps=num_warps,
    )  # fmt: skip
    if split_k > 1:
        out.copy_(y.sum(0))
    return out.reshape(*x.shape[:-1], n)
