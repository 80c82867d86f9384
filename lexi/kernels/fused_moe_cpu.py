"""The mixture-of-experts FFN on LexiEngine's CPU kernels: each expert's gate/up/down as `CpuWeight`s (the file's
blocks, or their x8 interleaving), multiplied by the C kernels without dequantizing anything.

Math as `fused_moe_ref`: for token t and its k experts e = ids[t, s] with weights w[t, s],
y_t = sum_s w[t, s] * (down_e(act(gate_e x_t + bg_e, up_e x_t + bu_e)) + bd_e), act SiLU without biases (qwen3moe)
or gpt-oss's clamped SwiGLU with them. The whole layer is one call into the C kernels (lexi/kernels/cpu/moe.c):
assignments sorted by expert, every chosen expert's gate and up as one job, the activation, every down as one job,
the k outputs of a token summed in slot order. The CPU kernels compute each output row the same way whatever the
row count, so a row's result does not depend on which other rows share its experts (--deterministic costs nothing
here).

Why beside the reference: the reference dequantizes every chosen expert on every step (measured on the 1.6B
synthetic qwen3moe, 2 cores: 0.44 tok/s decode); these kernels read the blocks as they are. Why one call: with two
kernel calls and a few torch ops per chosen expert from Python, decode was bound by the calls, not by the weights.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from lexi.kernels.cpu_qmatmul import CPU_KERNEL_TYPES, CpuKernels, CpuWeight
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
    # int64 (3, E, 6): each expert's gate, up and down descriptors as the C call reads them, built once
    table: torch.Tensor = field(init=False, repr=False)

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
            if bias is not None and not bias.is_contiguous():
                raise ValueError(f"{name}: must be contiguous")
        rows = [[w.descriptor(0) for w in ws] for ws in (self.gate, self.up, self.down)]
        object.__setattr__(self, "table", torch.tensor(rows, dtype=torch.int64))

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
    if topk_ids.dim() != 2 or topk_ids.shape[0] != x.shape[0] or topk_weights.shape != topk_ids.shape:
        raise ValueError(f"topk_ids and topk_weights: must both be (T, k) with T = {x.shape[0]}, got "
                         f"{tuple(topk_ids.shape)} and {tuple(topk_weights.shape)}")  # fmt: skip
    n_tokens, k = topk_ids.shape
    if not 1 <= k <= experts.n_experts:
        raise ValueError(f"topk_ids: k must be in [1, {experts.n_experts}], got {k}")
    ids = topk_ids.to(torch.int32).contiguous()  # ids out of [0, E) are refused by the C call (ValueError)
    y = torch.empty(n_tokens, experts.dim, dtype=torch.float32)
    if not n_tokens:
        return y
    xf = x.to(torch.float32).contiguous()
    route = topk_weights.to(torch.float32).contiguous()
    act = experts.activation
    biases = (experts.gate_bias, experts.up_bias, experts.down_bias)
    experts.kernels.impl.moe(
        experts.table.data_ptr(), experts.n_experts, xf.data_ptr(), n_tokens, experts.dim, experts.ffn_dim, k,
        ids.data_ptr(), route.data_ptr(), y.data_ptr(), experts.kernels.terms, 0 if act.kind == "silu" else 1,
        act.alpha, act.limit, *(0 if b is None else b.data_ptr() for b in biases),
    )  # fmt: skip
    return y
