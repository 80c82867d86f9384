"""The gated MLP every supported family uses: down(act(gate(x)) * up(x))."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lexi.model.linear import QuantLinear


class GatedMLP(nn.Module):
    def __init__(self, gate: QuantLinear, up: QuantLinear, down: QuantLinear, activation: str) -> None:
        super().__init__()
        self.gate, self.up, self.down = gate, up, down
        self.activation = activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = self.gate(x)
        # gemma uses the tanh approximation of GELU (gelu_pytorch_tanh); the llama family uses SiLU.
        g = F.gelu(g, approximate="tanh") if self.activation == "gelu_tanh" else F.silu(g)
        return self.down(g * self.up(x))
