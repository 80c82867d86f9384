"""The mixture-of-experts FFN on LexiEngine's CPU kernels: each expert's gate/up/down as `CpuWeight`s (the file's
blocks, or their x8 interleaving), multiplied by `cpu_qmatmul` without dequantizing anything.

Math as `fused_moe_ref`: for token t and its k experts e = ids[t, s] with weights w[t, s],
y_t = sum_s w[t, s] * (down_e(act(gate_e x_t + bg_e, up_e x_t + bu_e)) + bd_e), act SiLU without biases (qwen3moe)
or gpt-oss's clamped SwiGLU with them. Assignments are sorted by expert and each
chosen expert multiplies all of its rows in one call (gate and up fused); the k outputs of a token are summed in
slot order. The CPU kernels compute each output row the same way whatever the row count, so a row's result does not
depend on which other rows share its experts (--deterministic costs nothing here).

Why beside the reference: the reference dequantizes every chosen expert on every step (measured on the 1.6B
synthetic qwen3moe, 2 cores: 0.44 tok/s decode); these kernels read the blocks as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from lexi.kernels.cpu_qmatmul import CPU_KERNEL_TYPES, CpuKernels, CpuWeight, cpu_qmatmul
from lexi.kernels.fused_moe_ref import gated_activation_ref
from lexi.kernels.moe_types import SILU, GatedActivation

if TYPE_CHECKING:
    from lexi.gguf.reader import TensorInfo


@dataclass(frozen=True, slots=True)
class CpuExperts:
    """A layer's experts for the CPU kernels: gate[e], up[e] (F, D) and down[e] (D, F), one weight per expert."""

    gate: tuple[CpuWeight, ...]
    up: tuple[CpuWeight, ...]
    down: tuple[CpuWeight, ...]
    kernels: CpuKernels
    activation: GatedActivation = SILU
    gate_bias: torch.Tensor | None = None  # float32 (E, F) (gpt-oss), or None
    up_bias: torch.Tensor | None = None  # float32 (E, F)
    down_bias: torch.Tensor | None = None  # float32 (E, D)

    def __post_init__(self) -> None:
        e = len(self.gate)
        if not e or len(self.up) != e or len(self.down) != e:
            raise ValueError(f"gate, up and down need one weight per expert, got {e}, {len(self.up)}, {len(self.down)}")
        f, d = self.gate[0].shape
        for name, ws, shape in (("gate", self.gate, (f, d)), ("up", self.up, (f, d)), ("down", self.down, (d, f))):
            if any(w.shape != shape for w in ws):
                raise ValueError(f"{name}: every expert must be {shape}")
        for name, want in (("gate_bias", (e, f)), ("up_bias", (e, f)), ("down_bias", (e, d))):
            bias = getattr(self, name)
            if bias is not None and (tuple(bias.shape) != want or bias.dtype != torch.float32):
                raise ValueError(f"{name}: must be float32 {want}, got {bias.dtype} {tuple(bias.shape)}")

    @staticmethod
    def supports(*infos: TensorInfo) -> bool:
        """Whether the CPU kernels read every one of these expert tensors' types."""
        return all(info.qtype in CPU_KERNEL_TYPES for info in infos)

    @classmethod
    def from_gguf(
        cls, gate: TensorInfo, up: TensorInfo, down: TensorInfo, kernels: CpuKernels,
        activation: GatedActivation = SILU, biases: tuple[torch.Tensor | None, ...] = (None, None, None),
    ) -> CpuExperts:  # fmt: skip
        """Each expert's slice of the 3-D GGUF tensors (E, N, K), repacked where this CPU has x8 kernels for its type
        (the mapped pages then given back), else read from the mapped file in place. `biases`: gate's, up's, down's."""

        def split(info: TensorInfo) -> tuple[CpuWeight, ...]:
            e, n, k = (int(s) for s in info.shape)
            rows = np.asarray(info.data).view(np.uint8).reshape(e, n, -1)
            return tuple(CpuWeight.repacked(kernels, rows[i], info.qtype, (n, k)) for i in range(e))

        gb, ub, db = (None if b is None else b.to(torch.float32).contiguous() for b in biases)
        return cls(split(gate), split(up), split(down), kernels, activation, gb, ub, db)

    @property
    def n_experts(self) -> int:
        return len(self.gate)

    @property
    def dim(self) -> int:
        return self.gate[0].shape[1]

    @property
    def ffn_dim(self) -> int:
        return self.gate[0].shape[0]

    @property
    def nbytes(self) -> int:
        return sum(w.nbytes for ws in (self.gate, self.up, self.down) for w in ws)


def fused_moe_cpu(
    x: torch.Tensor, experts: CpuExperts, topk_ids: torch.Tensor, topk_weights: torch.Tensor
) -> torch.Tensor:
    """x (T, D) float, topk_ids / topk_weights (T, k) -> (T, D) float32; see the module docstring."""
    if x.dim() != 2 or x.shape[1] != experts.dim:
        raise ValueError(f"x: must be (T, {experts.dim}), got {tuple(x.shape)}")
    n_tokens, k = topk_ids.shape
    flat = topk_ids.reshape(-1).to(torch.int64)
    if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= experts.n_experts):
        raise ValueError(f"topk_ids: expert ids must be in [0, {experts.n_experts}), got {flat.min()}..{flat.max()}")
    xf = x.to(torch.float32)
    route_w = topk_weights.reshape(-1).to(torch.float32)
    y = torch.empty(flat.numel(), experts.dim, dtype=torch.float32)
    if n_tokens == 1:  # decode of one sequence: k distinct experts, one row each, no sort
        for s, e in enumerate(flat.tolist()):
            y[s] = _expert(experts, e, xf)[0] * route_w[s]
        return y.view(1, k, experts.dim).sum(1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=experts.n_experts).tolist()
    start = 0
    for e, count in enumerate(counts):
        if not count:
            continue
        ids = order[start : start + count]
        start += count
        y[ids] = _expert(experts, e, xf.index_select(0, ids // k)) * route_w[ids, None]
    return y.view(n_tokens, k, experts.dim).sum(1)


def _expert(experts: CpuExperts, e: int, rows: torch.Tensor) -> torch.Tensor:
    """rows (n, D) float32 through expert e: gate and up in one call, the biases, the activation, down."""
    f = experts.ffn_dim
    gu = cpu_qmatmul(rows, (experts.gate[e], experts.up[e]), experts.kernels)
    g, u = gu[:, :f], gu[:, f:]
    if experts.gate_bias is not None:
        g = g + experts.gate_bias[e]
    if experts.up_bias is not None:
        u = u + experts.up_bias[e]
    y = cpu_qmatmul(gated_activation_ref(g, u, experts.activation), (experts.down[e],), experts.kernels)
    return y if experts.down_bias is None else y + experts.down_bias[e]
