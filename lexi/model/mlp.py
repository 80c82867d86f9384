"""The gated MLP every supported family uses: down(act(gate(x)) * up(x))."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lexi.model.fast_weights import StackedProjection
from lexi.model.linear import QuantLinear, fast_max_rows


class GatedMLP(nn.Module):
    """`gate_up` (CPU bfloat16 loads of quantized weights) stacks gate and up for decode-sized steps."""

    def __init__(
        self,
        gate: QuantLinear,
        up: QuantLinear,
        down: QuantLinear,
        activation: str,
        gate_up: StackedProjection | None = None,
    ) -> None:
        super().__init__()
        self.gate, self.up, self.down = gate, up, down
        self.activation = activation
        self.gate_up = gate_up
        self.gate_up_max_rows = fast_max_rows(gate_up.weight) if gate_up is not None else 0

    def forward(self, x: torch.Tensor, force_fast: bool = False) -> torch.Tensor:
        stack = self.gate_up is not None and x.dtype == torch.bfloat16
        if stack and (force_fast or x.shape[0] <= self.gate_up_max_rows):
            g, u = self.gate_up(x).split(self.gate_up.sizes, dim=-1)
        else:
            g, u = self.gate(x, force_fast), self.up(x, force_fast)
        # gemma uses the tanh approximation of GELU (gelu_pytorch_tanh); the llama family uses SiLU.
        g = F.gelu(g, approximate="tanh") if self.activation == "gelu_tanh" else F.silu(g)
        return self.down(g * u, force_fast)
