"""Grouping a batch's token-expert assignments by expert, for the grouped MoE kernels (a sort and a histogram).

The router (the caller) picks k experts per token; assignment a = t * k + s is token t's s-th choice of expert
ids[t, s]. `group_by_expert` lays the assignments out expert by expert, each expert's run padded to whole blocks
of `block_m` rows, so one program of a grouped kernel takes one block: one expert's weight tile, read once for
every row of the block. Experts nobody chose get no block, so their weights are never read.

Everything is torch ops on the ids' device with sizes known from the shapes alone (`max_blocks`), so nothing
waits for the GPU: the number of blocks actually used is only known on the device, and the blocks past it carry
expert -1, which the kernels skip. `scatter_add_` counts (not `bincount`, which reads the largest id back to the
host to size its output).
"""

from __future__ import annotations

import torch

from lexi.kernels.moe_types import ExpertRouting


def max_blocks(n_assignments: int, n_experts: int, block_m: int) -> int:
    """The most blocks any routing of `n_assignments` over `n_experts` can need: with u <= min(E, A) experts in use,
    sum over them of ceil(c_e / block_m) <= (A + u (block_m - 1)) / block_m."""
    used = min(n_experts, n_assignments)
    return (n_assignments + used * (block_m - 1)) // block_m


def group_by_expert(topk_ids: torch.Tensor, n_experts: int, block_m: int) -> ExpertRouting:
    """(T, k) integer expert ids in [0, n_experts) -> their `ExpertRouting` in blocks of `block_m` rows.

    Ids outside the range are not checked here (that would cost a host sync on a GPU): the router's top-k over
    n_experts logits cannot produce one, and `fused_moe_ref` checks them on the CPU path.
    """
    if topk_ids.dim() != 2 or topk_ids.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"topk_ids: must be (T, k) int32 or int64, got {topk_ids.dtype} {tuple(topk_ids.shape)}")
    if block_m < 1 or n_experts < 1:
        raise ValueError(f"block_m and n_experts must be >= 1, got {block_m} and {n_experts}")
    device = topk_ids.device
    flat = topk_ids.reshape(-1).to(torch.int64)
    n_assign = flat.numel()
    n_blocks = max_blocks(n_assign, n_experts, block_m)
    counts = torch.zeros(n_experts, dtype=torch.int64, device=device).scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_m - 1) // block_m * block_m
    padded_end = torch.cumsum(padded, 0)
    padded_start = padded_end - padded
    order = torch.argsort(flat, stable=True)  # assignments expert by expert, each expert's in assignment order
    expert_of = flat[order]
    rank = torch.arange(n_assign, device=device) - (torch.cumsum(counts, 0) - counts)[expert_of]
    sorted_ids = torch.full((n_blocks * block_m,), n_assign, dtype=torch.int32, device=device)
    sorted_ids[padded_start[expert_of] + rank] = order.to(torch.int32)
    # A block's expert: the first whose padded run ends after the block's first row (empty runs end where the
    # previous one does, so `right=True` passes over them).
    block_start = torch.arange(n_blocks, device=device) * block_m
    block_expert = torch.searchsorted(padded_end, block_start, right=True).to(torch.int32)
    block_expert = torch.where(block_start < padded_end[-1], block_expert, -1).to(torch.int32)
    return ExpertRouting(sorted_ids, block_expert, block_m, n_assign, topk_ids.shape[1])
