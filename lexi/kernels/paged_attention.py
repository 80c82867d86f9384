"""Paged attention: the PyTorch reference and the dispatch (the step's metadata is in attention_metadata.py).

`paged_attention` runs the Triton kernels on CUDA (paged_attention_decode.py for batches of one new token
per sequence, paged_attention_prefill.py for anything else) and the reference elsewhere; importing this
module does not import Triton.

The KV cache of one layer is a pair of tensors (num_blocks, block_size, n_kv_heads, head_dim).
A sequence owns a list of blocks (its block table); token at position p of sequence s lives in
block ``block_tables[s, p // block_size]`` at offset ``p % block_size``.
"""

from __future__ import annotations

from itertools import pairwise

import torch
import torch.nn.functional as F

from lexi.kernels.attention_metadata import AttentionMetadata


def write_kv(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    """Scatter this step's K/V rows (T, n_kv_heads, head_dim) into their cache slots."""
    k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slot_mapping, k.to(k_cache.dtype))
    v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slot_mapping, v.to(v_cache.dtype))


def gather_kv(cache: torch.Tensor, block_table: torch.Tensor, length: int) -> torch.Tensor:
    """The first `length` cached rows of one sequence, (length, n_kv_heads, head_dim)."""
    block_size = cache.shape[1]
    n_blocks = (length + block_size - 1) // block_size
    return cache[block_table[:n_blocks].long()].reshape(-1, *cache.shape[2:])[:length]


def paged_attention_ref(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    *,
    scale: float,
    sliding_window: int = 0,
    softcap: float = 0.0,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal attention of each sequence's new rows over its cached prefix plus themselves.

    q: (T, H, D); caches (num_blocks, block_size, KVH, D) already hold this step's K/V.
    Row at position p attends to positions [max(0, p - sliding_window + 1), p] (all of [0, p] when the
    window is 0). `sinks` (H,) float (gpt-oss): a learned logit per head that joins each row's softmax with no
    value (it only takes probability away from the keys). Returns (T, H, D) in q's dtype. Math in q's dtype via
    SDPA, except with a softcap or sinks (float32).
    """
    out = torch.empty_like(q)
    n_heads, n_kv = q.shape[1], k_cache.shape[2]
    group = n_heads // n_kv
    qs_host = meta.query_start_host
    decoding = [s for s in range(meta.num_seqs) if qs_host[s + 1] - qs_host[s] == 1]
    if decoding and softcap == 0.0 and sinks is None:
        _attend_one_token_rows(q, k_cache, v_cache, meta, decoding, scale, sliding_window, out)
    else:
        decoding = []
    for s in range(meta.num_seqs):
        start, end = meta.query_start_host[s], meta.query_start_host[s + 1]
        if end == start or (decoding and end - start == 1):
            continue
        length = meta.seq_lens_host[s]
        n_new = end - start
        first = 0
        if sliding_window > 0:
            # Keys older than the window of the chunk's first row are never needed.
            first = max(0, length - n_new - sliding_window + 1)
        k = gather_kv(k_cache, meta.block_tables[s], length)[first:]
        v = gather_kv(v_cache, meta.block_tables[s], length)[first:]
        qs = q[start:end].transpose(0, 1)  # (H, n_new, D)
        ks = k.transpose(0, 1).repeat_interleave(group, dim=0).to(q.dtype)  # (H, L, D)
        vs = v.transpose(0, 1).repeat_interleave(group, dim=0).to(q.dtype)
        q_pos = torch.arange(length - n_new, length, device=q.device)
        k_pos = torch.arange(first, length, device=q.device)
        allowed = k_pos[None, :] <= q_pos[:, None]
        if sliding_window > 0:
            allowed &= k_pos[None, :] > q_pos[:, None] - sliding_window
        if softcap > 0.0 or sinks is not None:
            scores = (qs.float() @ ks.float().transpose(1, 2)) * scale
            if softcap > 0.0:
                scores = softcap * torch.tanh(scores / softcap)
            scores = scores.masked_fill(~allowed, float("-inf"))
            o = softmax_with_sinks(scores, sinks) @ vs.float()
        elif n_new == 1 and sliding_window == 0:
            o = F.scaled_dot_product_attention(qs, ks, vs, scale=scale)
        else:
            o = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=allowed, scale=scale)
        out[start:end] = o.transpose(0, 1).to(q.dtype)
    return out


def softmax_with_sinks(scores: torch.Tensor, sinks: torch.Tensor | None) -> torch.Tensor:
    """softmax over the last dim of float32 scores (..., H, n, L), with head h's sink logit sinks[h] as one more
    column that is then dropped (gpt-oss's attention sinks; ggml_soft_max_ext's sinks); plain softmax for None."""
    if sinks is None:
        return torch.softmax(scores, dim=-1)
    sink = sinks.to(torch.float32).view(-1, 1, 1).expand(*scores.shape[:-1], 1)
    return torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]


def _attend_one_token_rows(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    seqs: list[int],
    scale: float,
    sliding_window: int,
    out: torch.Tensor,
) -> None:
    """Every one-token (decode) sequence in one SDPA call: blocks gathered to the longest, the rest masked.

    One batched call instead of a Python loop per sequence: with 8 decoding streams on the CPU the loop's
    gathers and small SDPA calls were over half of a step.
    """
    block_size = k_cache.shape[1]
    lens = [meta.seq_lens_host[s] for s in seqs]
    n_blocks = (max(lens) + block_size - 1) // block_size
    index = torch.tensor(seqs, device=q.device)
    tables = meta.block_tables[index, :n_blocks].long()  # (B, n_blocks)
    k = k_cache[tables].flatten(1, 2).transpose(1, 2).to(q.dtype)  # (B, KVH, n_blocks * block_size, D)
    v = v_cache[tables].flatten(1, 2).transpose(1, 2).to(q.dtype)
    key_pos = torch.arange(k.shape[2], device=q.device)[None, :]
    length = torch.tensor(lens, device=q.device)[:, None]
    allowed = key_pos < length  # the query sits at position length - 1
    if sliding_window > 0:
        allowed &= key_pos >= length - sliding_window
    # Padding slots may hold anything (freed blocks, torch.empty): a masked NaN still poisons the sums.
    hidden = ~allowed[:, None, :, None]
    k, v = k.masked_fill(hidden, 0.0), v.masked_fill(hidden, 0.0)
    rows = torch.tensor([meta.query_start_host[s] for s in seqs], device=q.device)
    o = F.scaled_dot_product_attention(
        q[rows].unsqueeze(2), k, v, attn_mask=allowed[:, None, None, :], scale=scale, enable_gqa=True
    )
    out[rows] = o.squeeze(2).to(q.dtype)


PAGED_ATTENTION_VARIANTS = ("auto", "reference", "decode", "prefill")


def choose_variant(device: torch.device, meta: AttentionMetadata, kernels: str = "auto") -> str:
    """The implementation `paged_attention` runs: a Triton kernel for kernels "triton" (and for "auto" on CUDA):
    the decode kernel when every sequence adds exactly one token, the prefill kernel for any other mix; the
    PyTorch reference for kernels "reference" (and for "auto" elsewhere)."""
    if kernels == "reference" or (kernels == "auto" and device.type != "cuda"):
        return "reference"
    if meta.num_seqs > 0 and all(b - a == 1 for a, b in pairwise(meta.query_start_host)):
        return "decode"
    return "prefill"


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    *,
    scale: float,
    sliding_window: int = 0,
    softcap: float = 0.0,
    sinks: torch.Tensor | None = None,
    variant: str = "auto",
    kernels: str = "auto",
) -> torch.Tensor:
    """Same contract as `paged_attention_ref`; `variant` forces one implementation (tests run the Triton
    ones on the CPU under TRITON_INTERPRET=1), "auto" asks `choose_variant` with `kernels` (auto | triton |
    reference, see lexi/kernels/backend.py)."""
    if variant not in PAGED_ATTENTION_VARIANTS:
        raise ValueError(f"variant must be one of {PAGED_ATTENTION_VARIANTS}, got {variant!r}")
    if variant == "auto":
        variant = choose_variant(q.device, meta, kernels)
    kwargs = {"scale": scale, "sliding_window": sliding_window, "softcap": softcap, "sinks": sinks}
    if variant == "decode":
        # Imported here: importing the model must not import Triton (nor fix its interpreter choice).
        from lexi.kernels.paged_attention_decode import paged_attention_decode

        return paged_attention_decode(q, k_cache, v_cache, meta, **kwargs)
    if variant == "prefill":
        from lexi.kernels.paged_attention_prefill import paged_attention_prefill

        return paged_attention_prefill(q, k_cache, v_cache, meta, **kwargs)
    return paged_attention_ref(q, k_cache, v_cache, meta, **kwargs)
