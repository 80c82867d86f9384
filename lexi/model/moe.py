"""The mixture-of-experts FFN (qwen3moe, gpt-oss) beside `GatedMLP`: a router picks k experts per token, and
`lexi.kernels.fused_moe` runs each token through its experts' gated MLPs.

Routing as Qwen3-MoE does it (llama.cpp's llm_build_qwen3moe: softmax gating, `norm_w` true; transformers'
Qwen3MoeSparseMoeBlock with norm_topk_prob): float32 router logits over all E experts, softmax over all of them,
the k largest probabilities, then those k renormalised to sum to 1. gpt-oss (llm_build_openai_moe_iswa) adds a
router bias, takes the k largest logits and softmaxes those k; its experts have biases and a clamped SwiGLU (in the
experts' `GatedActivation`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lexi.kernels.fused_moe import fused_moe
from lexi.kernels.fused_moe_cpu import CpuExperts, fused_moe_cpu
from lexi.kernels.moe_types import ExpertFFN

ROUTINGS = ("softmax_topk", "topk_softmax")


def route_topk_softmax(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """gpt-oss's routing (llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT): the k largest float32 logits
    (T, E), weighted by the softmax over those k alone -> (ids (T, k) int64, weights (T, k) float32)."""
    top, ids = torch.topk(logits.to(torch.float32), k, dim=-1)
    return ids, torch.softmax(top, dim=-1)


def route_softmax_topk(logits: torch.Tensor, k: int, normalize: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 logits (T, E) -> (ids (T, k) int64, weights (T, k) float32): top-k of the softmax over all E,
    renormalised over the k when `normalize`."""
    probs = torch.softmax(logits.to(torch.float32), dim=-1)
    weights, ids = torch.topk(probs, k, dim=-1)
    if normalize:
        weights = weights / weights.sum(-1, keepdim=True)
    return ids, weights


class MoEFFN(nn.Module):
    """y = sum over token t's k chosen experts e of w[t, e] * down_e(silu(gate_e x_t) * up_e x_t).

    `router` (E, D) is float32 (GGUF `ffn_gate_inp.weight`, small: E * D). `experts` are either GGUF blocks for
    `fused_moe` (`kernels` auto | triton | reference chooses: the reference runs only the chosen experts, each
    dequantized once per step for the rows that share it; the float32 CPU load and CUDA), or `CpuExperts` for the
    CPU kernels (the default CPU load: `fused_moe_cpu`, nothing dequantized, row-independent).
    """

    def __init__(
        self, router: torch.Tensor, experts: ExpertFFN | CpuExperts, top_k: int, kernels: str = "auto",
        router_bias: torch.Tensor | None = None, routing: str = "softmax_topk",
    ) -> None:  # fmt: skip
        super().__init__()
        if routing not in ROUTINGS:
            raise ValueError(f"routing must be one of {ROUTINGS}, got {routing!r}")
        if router_bias is not None and tuple(router_bias.shape) != (experts.n_experts,):
            raise ValueError(f"router_bias: must be ({experts.n_experts},), got {tuple(router_bias.shape)}")
        self.routing = routing
        self.router_bias = None
        if router_bias is not None:
            self.router_bias = nn.Parameter(router_bias.to(torch.float32).contiguous(), requires_grad=False)
        if tuple(router.shape) != (experts.n_experts, experts.dim):
            raise ValueError(f"router: must be (E, D) = {(experts.n_experts, experts.dim)}, got {tuple(router.shape)}")
        if not 1 <= top_k <= experts.n_experts:
            raise ValueError(f"top_k must be in [1, {experts.n_experts}], got {top_k}")
        self.router = nn.Parameter(router.to(torch.float32).contiguous(), requires_grad=False)
        self.experts = experts
        self.top_k = top_k
        self.kernels = kernels

    def route(self, x: torch.Tensor, force_rowwise: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """x (T, D) -> each row's expert ids and weights (T, k); see `route_softmax_topk` / `route_topk_softmax`."""
        xf = x.to(torch.float32)
        if force_rowwise and xf.shape[0] > 1 and xf.device.type == "cpu":
            logits = torch.cat([F.linear(xf[i : i + 1], self.router, self.router_bias) for i in range(xf.shape[0])])
        else:
            logits = F.linear(xf, self.router, self.router_bias)
        if self.routing == "topk_softmax":
            return route_topk_softmax(logits, self.top_k)
        return route_softmax_topk(logits, self.top_k)

    def forward(self, x: torch.Tensor, force_rowwise: bool = False) -> torch.Tensor:
        """x (..., D) -> (..., D) in x's dtype. `force_rowwise` (--deterministic): each row alone, so its result does
        not depend on which other rows share its experts (the reference batches them into one matmul)."""
        flat = x.reshape(-1, x.shape[-1])
        ids, weights = self.route(flat, force_rowwise)
        if isinstance(self.experts, CpuExperts):  # row-independent already
            return fused_moe_cpu(flat, self.experts, ids, weights).to(x.dtype).reshape(x.shape)
        if force_rowwise and flat.shape[0] > 1 and flat.device.type == "cpu":
            y = torch.cat(
                [fused_moe(flat[i : i + 1], self.experts, ids[i : i + 1], weights[i : i + 1], kernels=self.kernels)
                 for i in range(flat.shape[0])]
            )  # fmt: skip
        else:
            y = fused_moe(flat, self.experts, ids, weights, kernels=self.kernels)
        return y.reshape(x.shape)

    def extra_repr(self) -> str:
        e = self.experts
        if isinstance(e, CpuExperts):
            types = "/".join(ws[0].qtype.name for ws in (e.gate, e.up, e.down))
            where = f"cpu kernels, {e.kernels.isa}"
        else:
            types = "/".join(w.qtype.name for w in (e.gate, e.up, e.down))
            where = self.kernels
        act = e.activation.kind
        return f"experts={e.n_experts}, top_k={self.top_k}, dim={e.dim}, ffn={e.ffn_dim}, {types}, {act} ({where})"
