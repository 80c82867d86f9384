"""Pieces shared by the paged-attention kernels: reading K/V through a block table, capping scores.

Both kernels read one layer's cache, k_cache or v_cache of shape (num_blocks, block_size, n_kv_heads,
head_dim) with a unit stride on head_dim, and a block table row of int32 physical block ids: token j of a
sequence lives at ``cache[block_table[j // block_size], j % block_size]``. Tiles of tokens therefore need
not line up with physical blocks: each token row is looked up on its own, and a row is head_dim
contiguous elements, so loads stay coalesced whatever the tile width.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# Scores live in base 2 inside the kernels (exp2 is the native instruction): s * log2(e). A tl.constexpr,
# because a compiled kernel may read no other module global (the interpreter does not check this).
LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _load_kv_tile(
    cache_ptr,
    block_table_ptr,
    kv_head,
    tok,
    tok_mask,
    offs_d,
    d_mask,
    stride_cb,
    stride_ct,
    stride_ch,
    BLOCK_SIZE: tl.constexpr,
):
    """(BLOCK_N, BLOCK_D) cache rows of tokens `tok` for one KV head; masked rows and columns read 0.

    block_table_ptr points at this sequence's row of the block table. Offsets are int64 because a large
    pool (num_blocks * block_size * n_kv_heads * head_dim) overflows int32.
    """
    blk = tl.load(block_table_ptr + tok // BLOCK_SIZE, mask=tok_mask, other=0).to(tl.int64)
    row = blk * stride_cb + (tok % BLOCK_SIZE).to(tl.int64) * stride_ct + kv_head * stride_ch
    return tl.load(cache_ptr + row[:, None] + offs_d[None, :], mask=tok_mask[:, None] & d_mask[None, :], other=0.0)


@triton.jit
def _cap_scores(s, softcap):
    """softcap * tanh(s / softcap), with tanh written through exp so no libdevice call is needed.

    tanh(x) = 1 - 2 / (exp(2x) + 1) stays exact at both ends: exp overflows to inf (-> 1) or to 0 (-> -1).
    """
    return softcap * (1.0 - 2.0 / (tl.exp(2.0 * s / softcap) + 1.0))


def gpu_backend() -> str:
    """The Triton backend torch was built for: "hip" (ROCm, whose devices are still "cuda") or "cuda"."""
    return "hip" if torch.version.hip else "cuda"


def dot_precision(dtype: torch.dtype) -> str:
    """The `tl.dot` precision for fp32 inputs (16-bit inputs ignore it). CUDA: 3xTF32 ("tf32x3"), near-fp32
    products on tensor cores; plain tf32 loses ~3 digits and "ieee" falls back to FMA loops that spill heavily on
    sm_90. ROCm: Triton's AMD backend refuses "tf32x3" (it takes bf16x3, bf16x6, ieee, tf32), so "ieee", exact
    fp32 (compiled for gfx942 without VGPR spills: tests/kernels/test_kernels_gfx942.py)."""
    if dtype != torch.float32:
        return "tf32"
    return "ieee" if gpu_backend() == "hip" else "tf32x3"


def check_inputs(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor) -> int:
    """Validate the shapes and strides the kernels assume; returns the GQA group size H // n_kv_heads."""
    if q.dim() != 3 or k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
        raise ValueError(
            f"q must be (T, H, D) and caches equal (blocks, block_size, KVH, D): {q.shape}, "
            f"{k_cache.shape}, {v_cache.shape}"
        )
    n_heads, head_dim = q.shape[1], q.shape[2]
    n_kv = k_cache.shape[2]
    if k_cache.shape[3] != head_dim or n_heads % n_kv != 0:
        raise ValueError(
            f"head_dim {head_dim} vs cache {k_cache.shape[3]}; H={n_heads} must be a multiple of n_kv_heads={n_kv}"
        )
    if q.stride(2) != 1 or k_cache.stride(3) != 1 or v_cache.stride(3) != 1 or k_cache.stride() != v_cache.stride():
        raise ValueError("q and the caches need a unit stride on head_dim, and the caches equal strides")
    if block_tables.dtype != torch.int32 or block_tables.stride(1) != 1:
        raise ValueError("block_tables must be int32 with contiguous rows")
    return n_heads // n_kv


def check_out(out: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """A caller's output buffer must match q in shape, dtype and device, with a unit stride on head_dim."""
    if out.shape != q.shape or out.dtype != q.dtype or out.device != q.device or out.stride(2) != 1:
        raise ValueError(f"out must be {tuple(q.shape)} {q.dtype} on {q.device}, got {tuple(out.shape)} {out.dtype}")
    return out


@triton.jit
def _with_sink(acc, m_i, l_i, sink_ptrs, mask):
    """acc and l rescaled to max(m, sink), the sink's 2^sink added to l (base 2 like m): the sink joins the
    softmax's denominator and has no value."""
    sink = tl.load(sink_ptrs, mask=mask, other=0.0).to(tl.float32) * LOG2E
    m_fin = tl.maximum(m_i, sink)
    alpha = tl.exp2(m_i - m_fin)
    return acc * alpha[:, None], l_i * alpha + tl.exp2(sink - m_fin)


def check_sinks(sinks: torch.Tensor | None, n_heads: int, q: torch.Tensor) -> torch.Tensor:
    """Sinks as the kernels read them: (H,) float32 on q's device, contiguous; without sinks, q stands in
    for the pointer (never read)."""
    if sinks is None:
        return q
    if sinks.shape != (n_heads,) or sinks.device != q.device:
        raise ValueError(f"sinks must be ({n_heads},) on {q.device}, got {tuple(sinks.shape)} on {sinks.device}")
    return sinks.to(torch.float32).contiguous()
