"""The data the mixture-of-experts kernels share: a layer's expert weights in GGUF blocks, its gated activation,
and the token-expert assignments grouped by expert.

Its own module, so that `fused_moe` (dispatch), `fused_moe_ref` (the reference and CPU path), `moe_routing` and
`fused_moe_triton` (the kernels) all import it and none of them imports another's internals.

Shapes: T tokens, D = the model's width (n_embd), F = one expert's FFN width (expert_feed_forward_length),
E experts, k experts per token (expert_used_count). Assignment a = t * k + s is token t's s-th choice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from lexi.kernels.quant_weight import QMATMUL_TYPES, row_bytes

if TYPE_CHECKING:
    from lexi.gguf.reader import TensorInfo

GEMV_MAX_TOKENS = 16  # decode batches up to this many tokens take the fused MoE's GEMV form
_FLOAT_DTYPES = {
    GGMLQuantizationType.F32: torch.float32,
    GGMLQuantizationType.F16: torch.float16,
    GGMLQuantizationType.BF16: torch.bfloat16,
}


@dataclass(frozen=True, slots=True)
class ExpertWeights:
    """One projection of every expert of a layer (GGUF `ffn_gate_exps`, `ffn_up_exps`, `ffn_down_exps`), still in
    its GGUF blocks: expert e's (N, K) matrix is `data[e]`, laid out like a `QuantWeight`'s."""

    qtype: GGMLQuantizationType
    shape: tuple[int, int, int]  # (E, N, K): experts, out_features, in_features (ggml's [K, N, E] reversed)
    data: torch.Tensor  # (E, N, row_bytes(qtype, K)) uint8, contiguous: the GGUF bytes on the device

    def __post_init__(self) -> None:
        if self.qtype not in QMATMUL_TYPES:
            raise ValueError(
                f"qtype: {getattr(self.qtype, 'name', self.qtype)} has no kernel; supported: "
                f"{sorted(q.name for q in QMATMUL_TYPES)}"
            )
        if len(self.shape) != 3 or min(self.shape) < 1:
            raise ValueError(f"shape: must be (E, N, K) with every size >= 1, got {self.shape}")
        block_size = GGML_QUANT_SIZES[self.qtype][0]
        if self.shape[2] % block_size:
            raise ValueError(
                f"shape: K={self.shape[2]} is not a multiple of the {self.qtype.name} block ({block_size})"
            )
        want = (*self.shape[:2], row_bytes(self.qtype, self.shape[2]))
        if self.data.dtype != torch.uint8 or tuple(self.data.shape) != want or not self.data.is_contiguous():
            raise ValueError(
                f"data: must be contiguous uint8 {want} for {self.qtype.name} {self.shape}, "
                f"got {self.data.dtype} {tuple(self.data.shape)}"
            )
        if self.data.device.type != "meta" and self.data.data_ptr() % 2:
            raise ValueError("data: must start at an even address (the kernels read fp16 fields as 2-byte words)")

    @classmethod
    def from_gguf(cls, info: TensorInfo, device: torch.device | str = "cpu") -> ExpertWeights:
        """Copy a 3-D GGUF expert tensor's bytes (memory-mapped) to `device` without dequantizing them."""
        if len(info.shape) != 3:
            raise ValueError(f"{info.name}: an expert tensor must be 3-D (E, N, K), got shape {info.shape}")
        e, n, k = (int(s) for s in info.shape)
        raw = np.ascontiguousarray(info.data).view(np.uint8).reshape(e, n, -1)
        data = torch.empty(raw.shape, dtype=torch.uint8, device=device)
        data.copy_(torch.from_numpy(np.array(raw, copy=True)))
        return cls(GGMLQuantizationType(info.qtype), (e, n, k), data)

    @classmethod
    def from_float(cls, weight: torch.Tensor, qtype: GGMLQuantizationType = GGMLQuantizationType.F32) -> ExpertWeights:
        """F32/F16/BF16 expert weights from a float (E, N, K) tensor (cast to that dtype), on its device."""
        if qtype not in _FLOAT_DTYPES:
            raise ValueError(f"qtype: from_float takes F32, F16 or BF16, got {qtype.name}")
        w = weight.to(_FLOAT_DTYPES[qtype]).contiguous()
        return cls(qtype, tuple(w.shape), w.view(torch.uint8).reshape(*w.shape[:2], -1))

    def kernel_view(self) -> torch.Tensor:
        """`data` as the kernels read it: the (E, N, K) float tensor for F32/F16/BF16, the bytes otherwise."""
        dtype = _FLOAT_DTYPES.get(self.qtype)
        return self.data if dtype is None else self.data.view(dtype)

    @property
    def expert_nbytes(self) -> int:
        """Bytes of one expert's matrix: what a decode step reads per chosen expert."""
        return self.data[0].numel()


@dataclass(frozen=True, slots=True)
class GatedActivation:
    """act(g, u) between the gate/up projections (g, u) and the down projection.

    `silu` (qwen3moe, llama.cpp's LLM_FFN_SILU): silu(g) * u.
    `swiglu_oai` (gpt-oss, ggml's swiglu_oai): g' = min(g, limit), u' = clamp(u, -limit, limit), then
    g' * sigmoid(alpha * g') * (u' + 1).
    """

    kind: Literal["silu", "swiglu_oai"] = "silu"
    alpha: float = 1.702  # swiglu_oai only (gpt-oss's value)
    limit: float = 7.0  # swiglu_oai only (gpt-oss's swiglu_limit)

    def __post_init__(self) -> None:
        if self.kind not in ("silu", "swiglu_oai"):
            raise ValueError(f"kind: must be silu or swiglu_oai, got {self.kind!r}")
        if not (math.isfinite(self.alpha) and self.alpha > 0):
            raise ValueError(f"alpha: must be a finite number > 0, got {self.alpha}")
        if not (math.isfinite(self.limit) and self.limit > 0):
            raise ValueError(f"limit: must be a finite number > 0, got {self.limit}")


SILU = GatedActivation("silu")
SWIGLU_OAI = GatedActivation("swiglu_oai")


@dataclass(frozen=True, slots=True)
class ExpertFFN:
    """A layer's experts: y_t = sum_s w[t, s] * (down_e (act(gate_e x_t + bg_e, up_e x_t + bu_e)) + bd_e) over token
    t's chosen experts e = ids[t, s]. The biases (gpt-oss's `ffn_{gate,up,down}_exps.bias`) are float (E, F) for
    gate and up and (E, D) for down, or None. The three projections may have different GGUF types."""

    gate: ExpertWeights  # (E, F, D)
    up: ExpertWeights  # (E, F, D)
    down: ExpertWeights  # (E, D, F)
    activation: GatedActivation = SILU
    gate_bias: torch.Tensor | None = None
    up_bias: torch.Tensor | None = None
    down_bias: torch.Tensor | None = None

    def __post_init__(self) -> None:
        e, f, d = self.gate.shape
        if self.up.shape != (e, f, d):
            raise ValueError(f"up: shape {self.up.shape} differs from gate's {self.gate.shape}")
        if self.down.shape != (e, d, f):
            raise ValueError(f"down: shape must be (E, D, F) = {(e, d, f)} for gate {self.gate.shape}, got "
                             f"{self.down.shape}")  # fmt: skip
        device = self.gate.data.device
        for name in ("up", "down"):
            if getattr(self, name).data.device != device:
                raise ValueError(f"{name}: on {getattr(self, name).data.device}, gate on {device}")
        for name, want in (("gate_bias", (e, f)), ("up_bias", (e, f)), ("down_bias", (e, d))):
            bias = getattr(self, name)
            if bias is None:
                continue
            if tuple(bias.shape) != want or not bias.is_floating_point() or not bias.is_contiguous():
                raise ValueError(f"{name}: must be a contiguous float tensor {want}, got {bias.dtype} "
                                 f"{tuple(bias.shape)}")  # fmt: skip
            if bias.device != device:
                raise ValueError(f"{name}: on {bias.device}, the weights on {device}")

    def check_inputs(self, x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor) -> None:
        """x (T, D) float, topk_ids (T, k) int32/int64, topk_weights (T, k) float, all on the weights' device."""
        if x.dim() != 2 or x.shape[1] != self.dim:
            raise ValueError(f"x: must be (T, {self.dim}), got {tuple(x.shape)}")
        if x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
            raise ValueError(f"x: dtype must be float16, bfloat16 or float32, got {x.dtype}")
        if topk_ids.dim() != 2 or topk_ids.shape[0] != x.shape[0] or topk_ids.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"topk_ids: must be ({x.shape[0]}, k) int32 or int64, got {topk_ids.dtype} "
                             f"{tuple(topk_ids.shape)}")  # fmt: skip
        if not 1 <= topk_ids.shape[1] <= self.n_experts:
            raise ValueError(f"topk_ids: k={topk_ids.shape[1]} must be in [1, {self.n_experts}] (the experts)")
        if tuple(topk_weights.shape) != tuple(topk_ids.shape) or not topk_weights.is_floating_point():
            raise ValueError(f"topk_weights: must be a float tensor {tuple(topk_ids.shape)} like topk_ids, got "
                             f"{topk_weights.dtype} {tuple(topk_weights.shape)}")  # fmt: skip
        device = self.gate.data.device
        for name, t in (("x", x), ("topk_ids", topk_ids), ("topk_weights", topk_weights)):
            if t.device != device:
                raise ValueError(f"{name}: on {t.device}, the expert weights on {device}")

    @property
    def n_experts(self) -> int:
        return self.gate.shape[0]

    @property
    def dim(self) -> int:
        """D, the model's width: the activations' last dimension and the output's."""
        return self.gate.shape[2]

    @property
    def ffn_dim(self) -> int:
        """F, one expert's hidden width."""
        return self.gate.shape[1]


@dataclass(frozen=True, slots=True)
class ExpertRouting:
    """Token-expert assignments grouped by expert, in blocks of `block_m` rows that each hold one expert's rows.

    Built by `lexi.kernels.moe_routing.group_by_expert` with torch ops only (no host sync, so it can run inside
    a CUDA graph): one program of a grouped kernel takes one block and reads only that block's expert.
    """

    sorted_ids: torch.Tensor  # (n_blocks * block_m,) int32: assignments expert by expert; each expert's run is
    #   padded to a multiple of block_m with n_assignments, an id no assignment has
    block_expert: torch.Tensor  # (n_blocks,) int32: each block's expert; -1 for blocks past the last used one
    block_m: int  # rows a block holds
    n_assignments: int  # T * k
    top_k: int  # k: assignment a belongs to token a // k

    @property
    def n_blocks(self) -> int:
        """Blocks allocated: a bound that holds for any routing of these many assignments (see max_blocks)."""
        return self.block_expert.numel()
