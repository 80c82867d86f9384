"""The gated MLP every supported family uses: down(act(gate(x)) * up(x))."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lexi.model.linear import FusedLinear, QuantLinear


def gated(g: torch.Tensor, u: torch.Tensor, activation: str) -> torch.Tensor:
    """act(g) * u: gemma uses the tanh approximation of GELU (gelu_pytorch_tanh), the llama family SiLU."""
    return (F.gelu(g, approximate="tanh") if activation == "gelu_tanh" else F.silu(g)) * u


class GatedMLP(nn.Module):
    """`gate_up` (CPU kernels) multiplies gate and up in one call."""

    def __init__(
        self,
        gate: QuantLinear,
        up: QuantLinear,
        down: QuantLinear,
        activation: str,
        gate_up: FusedLinear | None = None,
    ) -> None:
        super().__init__()
        self.gate, self.up, self.down = gate, up, down
        self.activation = activation
        self.gate_up = gate_up

    def forward(self, x: torch.Tensor, force_rowwise: bool = False) -> torch.Tensor:
        if self.gate_up is not None:
            g, u = self.gate_up(x).split(self.gate_up.sizes, dim=-1)
        else:
            g, u = self.gate(x, force_rowwise), self.up(x, force_rowwise)
        return self.down(gated(g, u, self.activation), force_rowwise)
