"""Reference mixture-of-experts FFN over GGUF expert blocks: the yardstick of the Triton kernels and the CPU path.

Math (see `ExpertFFN`): for token t and its k chosen experts e = ids[t, s] with router weights w[t, s],
    h = act(x_t Wg_e^T + bg_e, x_t Wu_e^T + bu_e),   y_t = sum_s w[t, s] * (h Wd_e^T + bd_e),
products and sums in fp32, the result in x's dtype.

It runs only the chosen experts: assignments are sorted by expert, and each expert that any row chose is
dequantized (`lexi.gguf.dequant`, from its own slice of the GGUF bytes) once, for all the rows that share it,
which go through it as one matmul. An expert no row chose is never read, and no dense copy of a weight outlives
the expert's turn (DESIGN.md: nothing dense outlives the step that needs it; a dense gather of every expert would
be E / k times the work). The k outputs of a token are summed in slot order from one (T * k, D) buffer, the same
order the Triton path sums them in.
"""

from __future__ import annotations

import torch

from lexi.gguf.dequant import dequantize
from lexi.kernels.moe_types import ExpertFFN, ExpertWeights, GatedActivation


def gated_activation_ref(g: torch.Tensor, u: torch.Tensor, activation: GatedActivation) -> torch.Tensor:
    """act(g, u) in g's dtype; see `GatedActivation`."""
    if activation.kind == "silu":
        return torch.nn.functional.silu(g) * u
    g = g.clamp(max=activation.limit)
    u = u.clamp(min=-activation.limit, max=activation.limit)
    return g * torch.sigmoid(activation.alpha * g) * (u + 1)


def dequantize_expert(w: ExpertWeights, expert: int) -> torch.Tensor:
    """Expert `expert`'s (N, K) float32 matrix, on w's device; the other experts' bytes are not touched."""
    return dequantize(w.data[expert], w.qtype, w.shape[1:])


def _project(rows: torch.Tensor, w: ExpertWeights, expert: int, bias: torch.Tensor | None) -> torch.Tensor:
    y = rows @ dequantize_expert(w, expert).T
    return y if bias is None else y + bias[expert].to(torch.float32)


def fused_moe_ref(x: torch.Tensor, ffn: ExpertFFN, topk_ids: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
    """x (T, D), topk_ids / topk_weights (T, k) -> (T, D) in x's dtype; see the module docstring."""
    ffn.check_inputs(x, topk_ids, topk_weights)
    n_tokens, k = topk_ids.shape
    flat = topk_ids.reshape(-1).to(torch.int64)
    if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= ffn.n_experts):
        raise ValueError(f"topk_ids: expert ids must be in [0, {ffn.n_experts}), got {flat.min()}..{flat.max()}")
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=ffn.n_experts).tolist()
    xf = x.to(torch.float32)
    route_w = topk_weights.reshape(-1).to(torch.float32)
    y = torch.empty(flat.numel(), ffn.dim, dtype=torch.float32, device=x.device)
    start = 0
    for expert, count in enumerate(counts):
        if not count:
            continue
        ids = order[start : start + count]  # this expert's assignments
        start += count
        rows = xf.index_select(0, ids // k)
        g = _project(rows, ffn.gate, expert, ffn.gate_bias)
        u = _project(rows, ffn.up, expert, ffn.up_bias)
        out = _project(gated_activation_ref(g, u, ffn.activation), ffn.down, expert, ffn.down_bias)
        y[ids] = out * route_w[ids, None]
    return y.view(n_tokens, k, ffn.dim).sum(1).to(x.dtype)
