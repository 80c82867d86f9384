"""Paged attention for prefill and mixed steps: each sequence's chunk of new rows, causal, ragged.

Math, for sequence s owning rows query_start[s]:query_start[s+1] (n = their count) with L = seq_lens[s]
tokens cached after this step: row i (0 <= i < n) is the token at position p_i = L - n + i, and for query
head h with KV head g = h // (H / KVH)

    keys j with max(0, p_i - sliding_window + 1) <= j <= p_i (all j <= p_i when the window is 0)
    z_ij = scale * q[row, h] . K[s, j, g]          then z_ij = softcap * tanh(z_ij / softcap) if softcap > 0
    out[row, h] = sum_j softmax_j(z_i)_j V[s, j, g]

so a chunk attends to its cached prefix and causally to itself, whose K/V `write_kv` has already put in
the cache. Layout read: q (T, H, D) flat over the batch, k_cache / v_cache (num_blocks, block_size, KVH,
D) through block_tables (S, max_blocks) int32, query_start (S+1,) and seq_lens (S,) int32.

Grid (query tiles of the longest chunk, S, KVH): a program takes BLOCK_Q = BLOCK_M // G new tokens of
one sequence times the G = H / KVH query heads sharing one KV head, packed as BLOCK_M tile rows (row r is
token r // G, head r % G; the last BLOCK_M - BLOCK_Q * G rows are padding), so each K/V tile is read once
for the whole group, as in the decode kernel. Tiles past the end of a shorter chunk return at once. A
program walks key tiles of BLOCK_N from the window start of its first token to its last token's
position: no tile beyond the causal diagonal is read. The online softmax runs in fp32 in base 2; a row
whose keys all lie in later tiles (window) keeps m = -inf until its first key arrives, and the guard
below keeps that from turning into NaN.
"""

from __future__ import annotations

from itertools import pairwise

import torch
import triton
import triton.language as tl

from lexi.kernels.attention_metadata import AttentionMetadata
from lexi.kernels.paged_attention_common import (
    LOG2E,
    _cap_scores,
    _load_kv_tile,
    _with_sink,
    check_inputs,
    check_out,
    check_sinks,
    dot_precision,
    gpu_backend,
)


@triton.jit
def _paged_attention_prefill_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, query_start_ptr, seq_lens_ptr, sinks_ptr, out_ptr,
    scale, softcap, sliding_window,
    stride_qt, stride_qh, stride_cb, stride_ct, stride_ch, stride_bt, stride_ot, stride_oh,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_SINKS: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    BLOCK_Q = BLOCK_M // GROUP  # constexpr: tokens per tile
    tile = tl.program_id(0)
    seq = tl.program_id(1)
    kv_head = tl.program_id(2)

    row_start = tl.load(query_start_ptr + seq)
    n_new = tl.load(query_start_ptr + seq + 1) - row_start
    if tile * BLOCK_Q >= n_new:
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    context = seq_len - n_new

    tokens, heads, row_mask = _tile_rows(tile, kv_head, n_new, GROUP, BLOCK_M, BLOCK_Q)
    pos = context + tokens
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < HEAD_DIM
    rows = (row_start + tokens).to(tl.int64)
    q_ptrs = q_ptr + rows[:, None] * stride_qt + heads[:, None] * stride_qh + offs_d[None, :]
    q = tl.load(q_ptrs, mask=row_mask[:, None] & d_mask[None, :], other=0.0)
    bt_row = block_tables_ptr + seq.to(tl.int64) * stride_bt

    lo, hi = _key_span(context + tile * BLOCK_Q, seq_len, sliding_window, BLOCK_Q, BLOCK_N)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for start in range(lo, hi, BLOCK_N):
        tok = start + tl.arange(0, BLOCK_N)
        tok_mask = tok < hi
        k = _load_kv_tile(k_cache_ptr, bt_row, kv_head, tok, tok_mask, offs_d, d_mask,
                          stride_cb, stride_ct, stride_ch, BLOCK_SIZE)  # fmt: skip
        z = tl.dot(q, tl.trans(k.to(q.dtype)), input_precision=DOT_PRECISION) * scale
        if HAS_SOFTCAP:
            z = _cap_scores(z, softcap)
        z = tl.where(_visible(tok, tok_mask, pos, sliding_window), z * LOG2E, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(z, 1))
        # Rows with no allowed key yet: subtract 0 instead of -inf, so p = 0 and alpha = 0, not NaN.
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(z - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        v = _load_kv_tile(v_cache_ptr, bt_row, kv_head, tok, tok_mask, offs_d, d_mask,
                          stride_cb, stride_ct, stride_ch, BLOCK_SIZE)  # fmt: skip
        acc = acc * alpha[:, None] + tl.dot(p.to(q.dtype), v.to(q.dtype), input_precision=DOT_PRECISION)
        l_i = l_i * alpha + tl.sum(p, 1)
        m_i = m_new

    _store_rows(out_ptr, acc, m_i, l_i, sinks_ptr, rows, heads, row_mask, offs_d, d_mask, stride_ot, stride_oh,
                HAS_SINKS)  # fmt: skip


@triton.jit
def _store_rows(
    out_ptr, acc, m_i, l_i, sinks_ptr, rows, heads, row_mask, offs_d, d_mask, stride_ot, stride_oh,
    HAS_SINKS: tl.constexpr,
):  # fmt: skip
    """Each valid row's output: the accumulated values over the softmax's sum (with its sink)."""
    if HAS_SINKS:  # the sink joins the denominator (see paged_attention_decode)
        acc, l_i = _with_sink(acc, m_i, l_i, sinks_ptr + heads, row_mask)
    # Valid rows always see their own key, so l > 0 there; padding rows are not stored.
    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    out_ptrs = out_ptr + rows[:, None] * stride_ot + heads[:, None] * stride_oh + offs_d[None, :]
    tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=row_mask[:, None] & d_mask[None, :])


@triton.jit
def _tile_rows(tile, kv_head, n_new, GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_Q: tl.constexpr):
    """(tokens, heads, row_mask) of the tile's BLOCK_M rows: row r is token r // GROUP of the tile (its index within
    the chunk) and query head r % GROUP of the KV head's group; padding rows and tokens past the chunk are masked."""
    offs_m = tl.arange(0, BLOCK_M)
    tokens = tile * BLOCK_Q + offs_m // GROUP  # index of each tile row's token within the chunk
    heads = kv_head * GROUP + offs_m % GROUP
    row_mask = (offs_m < BLOCK_Q * GROUP) & (tokens < n_new)
    return tokens, heads, row_mask


@triton.jit
def _key_span(first_pos, seq_len, sliding_window, BLOCK_Q: tl.constexpr, BLOCK_N: tl.constexpr):
    """(lo, hi): the keys a tile whose first token sits at `first_pos` reads, lo on a BLOCK_N boundary (from the
    window start of its first token) to one past its last token's position."""
    hi = tl.minimum(first_pos + BLOCK_Q, seq_len)  # one past the last token's position
    lo = tl.where(sliding_window > 0, tl.maximum(first_pos - sliding_window + 1, 0), 0)
    lo = (lo // BLOCK_N) * BLOCK_N
    return lo, hi


@triton.jit
def _visible(tok, tok_mask, pos, sliding_window):
    """(rows, keys) mask: key `tok` is at or before each row's position `pos`, and within its window."""
    allowed = tok_mask[None, :] & (tok[None, :] <= pos[:, None])
    return allowed & ((sliding_window <= 0) | (tok[None, :] > pos[:, None] - sliding_window))


def prefill_tiles(head_dim: int, dtype: torch.dtype) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps). The fp32 accumulator is BLOCK_M x head_dim, so wide heads take
    narrower key tiles; fp32 inputs (3xTF32 products hold hi and lo halves of every operand) need smaller
    tiles still. Checked by compiling for sm_90 (tests/kernels/test_paged_attention_sm90.py): <= 255
    registers with at most ~120 bytes of stack, shared memory well under the 227 KB a block may use. On ROCm
    (gfx942: 64 KiB of LDS a workgroup) fp32 at head_dim 256 takes 16-key tiles: 32 asked for 66 KiB."""
    if dtype == torch.float32:
        if head_dim > 128:
            return (16, 16, 4) if gpu_backend() == "hip" else (16, 32, 4)
        return 32, 32, 4
    if head_dim <= 128:
        return 64, 64, 4
    return 64, 32, 8


def paged_attention_prefill(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    *,
    scale: float,
    sliding_window: int = 0,
    softcap: float = 0.0,
    sinks: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Varlen causal attention, q (T, H, D) -> (T, H, D) in q's dtype; caches already hold this step's K/V;
    `sinks` (H,): gpt-oss's per-head sink logits.

    `out`, if given, is written in place (every row of every sequence) and returned.
    """
    group = check_inputs(q, k_cache, v_cache, meta.block_tables)
    n_tokens, n_heads, head_dim = q.shape
    if n_tokens != meta.query_start_host[-1]:
        raise ValueError(f"q has {n_tokens} rows, query_start ends at {meta.query_start_host[-1]}")
    out = torch.empty_like(q) if out is None else check_out(out, q)
    starts = meta.query_start_host
    max_new = max((b - a for a, b in pairwise(starts)), default=0)
    if max_new == 0:
        return out
    sinks_arg = check_sinks(sinks, n_heads, q)
    block_m, block_n, num_warps = prefill_tiles(head_dim, q.dtype)
    block_m = max(block_m, triton.next_power_of_2(group))  # at least one token per tile
    grid = (triton.cdiv(max_new, block_m // group), meta.num_seqs, k_cache.shape[2])
    _paged_attention_prefill_kernel[grid](
        q, k_cache, v_cache, meta.block_tables, meta.query_start, meta.seq_lens, sinks_arg, out,
        float(scale), float(softcap), int(sliding_window),
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        meta.block_tables.stride(0), out.stride(0), out.stride(1),
        GROUP=group, HEAD_DIM=head_dim, BLOCK_SIZE=k_cache.shape[1], BLOCK_M=block_m, BLOCK_N=block_n,
        BLOCK_D=triton.next_power_of_2(head_dim), HAS_SOFTCAP=softcap > 0.0, HAS_SINKS=sinks is not None,
        DOT_PRECISION=dot_precision(q.dtype), num_warps=num_warps, num_stages=2,
    )  # fmt: skip
    return out
