"""Paged attention for decode steps: one new query token per sequence, ragged context lengths.

Math, for sequence s with L = seq_lens[s] cached tokens (its new token included, at position p = L - 1),
query head h and its KV head g = h // (H / KVH):

    keys j in [lo, L), lo = max(0, L - sliding_window) (0 when the window is 0)
    z_j  = scale * q[s, h] . K[s, j, g]          then z_j = softcap * tanh(z_j / softcap) if softcap > 0
    out[s, h] = sum_j softmax(z)_j V[s, j, g]
    with sinks (gpt-oss), head h's logit sinks[h] joins the softmax's denominator and has no value:
    out[s, h] = sum_j e^(z_j) V[s, j, g] / (sum_j e^(z_j) + e^(sinks[h]))

Layout read: q (S, H, D) (row s is sequence s; a decode batch has T == S), k_cache / v_cache
(num_blocks, block_size, KVH, D) through block_tables (S, max_blocks) int32, seq_lens (S,) int32.

One program handles one (sequence, KV head, split): the H / KVH query heads that share a KV head are the
rows of one tile, so each K/V row is read once for the whole group (GQA costs no extra traffic), and the
tile has at least 16 rows so `tl.dot` maps onto tensor cores. The softmax is online in fp32 (running max
m, running sum l, rescaled accumulator), in base 2.

Split-K: when S * KVH programs are too few to fill the GPU and contexts are long, the key range of each
sequence is cut into NUM_SPLITS contiguous chunks; each writes its unnormalised accumulator with its m and
l, and `_paged_attention_reduce_kernel` merges them: out = sum_i 2^(m_i - M) acc_i / sum_i 2^(m_i - M) l_i.
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

# Contexts shorter than this never split: one program streams them faster than a second launch merges.
SPLIT_MIN_TOKENS = 1024


@triton.jit
def _paged_attention_decode_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, sinks_ptr, out_ptr, part_o_ptr, part_m_ptr,
    part_l_ptr, scale, softcap, sliding_window, num_heads,
    stride_qt, stride_qh, stride_cb, stride_ct, stride_ch, stride_bt, stride_ot, stride_oh,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr, BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, NUM_SPLITS: tl.constexpr, HAS_SOFTCAP: tl.constexpr,
    HAS_SINKS: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)

    seq_len = tl.load(seq_lens_ptr + seq)
    lo, split_lo, split_hi = _split_keys(seq_len, sliding_window, split, BLOCK_N, NUM_SPLITS)

    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_D)
    h_mask = offs_h < GROUP
    d_mask = offs_d < HEAD_DIM
    heads = kv_head * GROUP + offs_h
    q = tl.load(
        q_ptr + seq.to(tl.int64) * stride_qt + heads[:, None] * stride_qh + offs_d[None, :],
        mask=h_mask[:, None] & d_mask[None, :],
        other=0.0,
    )
    bt_row = block_tables_ptr + seq.to(tl.int64) * stride_bt

    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_D], tl.float32)
    # Every tile visited holds at least one key in [lo, split_hi), so m_i is finite after the first step.
    for start in range(split_lo, split_hi, BLOCK_N):
        tok = start + tl.arange(0, BLOCK_N)
        tok_mask = (tok >= lo) & (tok < split_hi)
        k = _load_kv_tile(k_cache_ptr, bt_row, kv_head, tok, tok_mask, offs_d, d_mask,
                          stride_cb, stride_ct, stride_ch, BLOCK_SIZE)  # fmt: skip
        z = tl.dot(q, tl.trans(k.to(q.dtype)), input_precision=DOT_PRECISION) * scale
        if HAS_SOFTCAP:
            z = _cap_scores(z, softcap)
        z = tl.where(tok_mask[None, :], z * LOG2E, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(z, 1))
        p = tl.exp2(z - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        v = _load_kv_tile(v_cache_ptr, bt_row, kv_head, tok, tok_mask, offs_d, d_mask,
                          stride_cb, stride_ct, stride_ch, BLOCK_SIZE)  # fmt: skip
        acc = acc * alpha[:, None] + tl.dot(p.to(q.dtype), v.to(q.dtype), input_precision=DOT_PRECISION)
        l_i = l_i * alpha + tl.sum(p, 1)
        m_i = m_new

    store_mask = h_mask[:, None] & d_mask[None, :]
    if NUM_SPLITS == 1:
        if HAS_SINKS:  # the sink joins the denominator (split runs: the merge adds it once)
            acc, l_i = _with_sink(acc, m_i, l_i, sinks_ptr + heads, h_mask)
        out = acc / l_i[:, None]
        out_ptrs = out_ptr + seq.to(tl.int64) * stride_ot + heads[:, None] * stride_oh + offs_d[None, :]
        tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=store_mask)
    else:
        _store_partials(part_o_ptr, part_m_ptr, part_l_ptr, acc, m_i, l_i, seq, split, heads, num_heads, offs_d,
                        h_mask, store_mask, HEAD_DIM, NUM_SPLITS)  # fmt: skip


@triton.jit
def _split_keys(seq_len, sliding_window, split, BLOCK_N: tl.constexpr, NUM_SPLITS: tl.constexpr):
    """(lo, split_lo, split_hi): the sequence's first key (its window's start), and the keys this split walks."""
    lo = tl.where(sliding_window > 0, tl.maximum(seq_len - sliding_window, 0), 0)
    # Tiles start on a BLOCK_N boundary; the keys before lo in the first tile are masked.
    lo_aligned = (lo // BLOCK_N) * BLOCK_N
    chunk = tl.cdiv(tl.cdiv(seq_len - lo_aligned, NUM_SPLITS), BLOCK_N) * BLOCK_N
    split_lo = lo_aligned + split * chunk
    split_hi = tl.minimum(seq_len, split_lo + chunk)
    return lo, split_lo, split_hi


@triton.jit
def _store_partials(
    part_o_ptr, part_m_ptr, part_l_ptr, acc, m_i, l_i, seq, split, heads, num_heads, offs_d, h_mask, store_mask,
    HEAD_DIM: tl.constexpr, NUM_SPLITS: tl.constexpr,
):  # fmt: skip
    """A split's unnormalised output and its softmax max and sum, for the merge kernel."""
    # Partials are (S, H, NUM_SPLITS[, HEAD_DIM]) fp32, contiguous; an empty split stores m=-inf, l=0.
    row = (seq.to(tl.int64) * num_heads + heads) * NUM_SPLITS + split
    tl.store(part_o_ptr + row[:, None] * HEAD_DIM + offs_d[None, :], acc, mask=store_mask)
    tl.store(part_m_ptr + row, m_i, mask=h_mask)
    tl.store(part_l_ptr + row, l_i, mask=h_mask)


@triton.jit
def _paged_attention_reduce_kernel(
    part_o_ptr, part_m_ptr, part_l_ptr, sinks_ptr, out_ptr,
    num_heads, stride_ot, stride_oh,
    HEAD_DIM: tl.constexpr, NUM_SPLITS: tl.constexpr, SPLITS_PAD: tl.constexpr, BLOCK_D: tl.constexpr,
    HAS_SINKS: tl.constexpr,
):  # fmt: skip
    seq = tl.program_id(0)
    head = tl.program_id(1)
    offs_sp = tl.arange(0, SPLITS_PAD)
    offs_d = tl.arange(0, BLOCK_D)
    sp_mask = offs_sp < NUM_SPLITS
    d_mask = offs_d < HEAD_DIM
    row = (seq.to(tl.int64) * num_heads + head) * NUM_SPLITS + offs_sp
    m = tl.load(part_m_ptr + row, mask=sp_mask, other=float("-inf"))
    l_s = tl.load(part_l_ptr + row, mask=sp_mask, other=0.0)
    acc = tl.load(part_o_ptr + row[:, None] * HEAD_DIM + offs_d[None, :], mask=sp_mask[:, None] & d_mask[None, :],
                  other=0.0)  # fmt: skip
    # Split 0 always holds the first key, so the max is finite and empty splits weigh 2^-inf = 0.
    top = tl.max(m, 0)
    if HAS_SINKS:
        sink = tl.load(sinks_ptr + head).to(tl.float32) * LOG2E
        top = tl.maximum(top, sink)
    w = tl.exp2(m - top)
    total = tl.sum(l_s * w, 0)
    if HAS_SINKS:
        total += tl.exp2(sink - top)
    out = tl.sum(acc * w[:, None], 0) / total
    out_ptrs = out_ptr + seq.to(tl.int64) * stride_ot + head * stride_oh + offs_d
    tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=d_mask)


def decode_tiles(head_dim: int, dtype: torch.dtype) -> tuple[int, int]:
    """(BLOCK_N keys per loop step, num_warps). Any power of two works with any block_size (token rows are
    looked up one by one); fp32 inputs at wide heads halve it to stay in registers (checked for sm_90), and
    quarter it at head_dim 256 on ROCm, whose 64 KiB of LDS a workgroup 32 keys overflow (66 KiB, gfx942)."""
    if dtype == torch.float32 and head_dim > 64:
        if head_dim > 128 and gpu_backend() == "hip":
            return 16, 8
        return 32, (4 if head_dim <= 128 else 8)
    return 64, (4 if head_dim <= 128 else 8)


def choose_num_splits(n_programs: int, max_context: int, n_sms: int) -> int:
    """Splits per sequence: enough programs for ~2 waves over the SMs, chunks of at least 512 keys, at most 16."""
    if max_context < SPLIT_MIN_TOKENS or n_programs >= n_sms:
        return 1
    return max(1, min(16, triton.cdiv(2 * n_sms, n_programs), max_context // 512))


def paged_attention_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    *,
    scale: float,
    sliding_window: int = 0,
    softcap: float = 0.0,
    sinks: torch.Tensor | None = None,
    num_splits: int | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Decode attention, q (S, H, D) -> (S, H, D) in q's dtype; caches already hold this step's K/V;
    `sinks` (H,): gpt-oss's per-head sink logits.

    num_splits None picks split-K from the batch shape (CUDA); tests force a value. `out`, if given, is
    written in place (every element) and returned.
    """
    group = check_inputs(q, k_cache, v_cache, meta.block_tables)
    n_seqs, n_heads, head_dim = q.shape
    if n_seqs != meta.num_seqs or any(b - a != 1 for a, b in pairwise(meta.query_start_host)):
        raise ValueError("decode needs exactly one new token per sequence")
    n_kv = k_cache.shape[2]
    out = torch.empty_like(q) if out is None else check_out(out, q)
    if n_seqs == 0:
        return out
    if num_splits is None:
        n_sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else 1
        keys = max(meta.seq_lens_host) if sliding_window <= 0 else min(max(meta.seq_lens_host), sliding_window)
        num_splits = choose_num_splits(n_seqs * n_kv, keys, n_sms)
    if num_splits < 1:
        raise ValueError(f"num_splits must be >= 1, got {num_splits}")
    sinks_arg = check_sinks(sinks, n_heads, q)
    block_d = triton.next_power_of_2(head_dim)
    block_n, num_warps = decode_tiles(head_dim, q.dtype)
    if num_splits > 1:
        part_o = torch.empty(n_seqs, n_heads, num_splits, head_dim, dtype=torch.float32, device=q.device)
        part_m = torch.empty(n_seqs, n_heads, num_splits, dtype=torch.float32, device=q.device)
        part_l = torch.empty_like(part_m)
    else:
        part_o = part_m = part_l = out  # unused: the kernel writes the output itself
    _paged_attention_decode_kernel[(n_seqs, n_kv, num_splits)](
        q, k_cache, v_cache, meta.block_tables, meta.seq_lens, sinks_arg, out, part_o, part_m, part_l,
        float(scale), float(softcap), int(sliding_window), n_heads,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        meta.block_tables.stride(0), out.stride(0), out.stride(1),
        GROUP=group, HEAD_DIM=head_dim, BLOCK_SIZE=k_cache.shape[1], BLOCK_H=max(16, triton.next_power_of_2(group)),
        BLOCK_N=block_n, BLOCK_D=block_d, NUM_SPLITS=num_splits, HAS_SOFTCAP=softcap > 0.0,
        HAS_SINKS=sinks is not None, DOT_PRECISION=dot_precision(q.dtype), num_warps=num_warps, num_stages=2,
    )  # fmt: skip
    if num_splits > 1:
        _paged_attention_reduce_kernel[(n_seqs, n_heads)](
            part_o, part_m, part_l, sinks_arg, out, n_heads, out.stride(0), out.stride(1),
            HEAD_DIM=head_dim, NUM_SPLITS=num_splits, SPLITS_PAD=triton.next_power_of_2(num_splits), BLOCK_D=block_d,
            HAS_SINKS=sinks is not None,
        )  # fmt: skip
    return out
