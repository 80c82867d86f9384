"""Modules from a GGUF file's tensors: `ModelBuilder` looks each tensor up by its GGUF name, checks it against the
shape `ModelArgs` gives it, and builds the layer, the embedding and the head that read it (lexi/model/loader.py
decides how the weights are held: CPU kernels, GGUF blocks or dense)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from lexi.gguf.dequant import dequantize_tensor
from lexi.gguf.errors import GGUFError
from lexi.kernels.cpu_qmatmul import CpuKernels
from lexi.kernels.fused_moe_cpu import CpuExperts
from lexi.kernels.moe_types import SILU, SWIGLU_OAI, ExpertFFN, ExpertWeights
from lexi.model.args import ModelArgs
from lexi.model.attention import Attention
from lexi.model.block import Block
from lexi.model.decode_path import decode_path
from lexi.model.head import OutputHead
from lexi.model.linear import BlockEmbedding, FusedLinear, QuantLinear, TokenEmbedding, dense_weight
from lexi.model.mlp import GatedMLP
from lexi.model.moe import MoEFFN
from lexi.model.norms import RMSNorm
from lexi.model.transformer import Transformer

if TYPE_CHECKING:
    from lexi.gguf.reader import GGUFFile, TensorInfo
    from lexi.kernels.backend import Kernels


class Tensors:
    """Looks tensors up by name, refusing a missing one with the file and name, and ticks the progress bar."""

    def __init__(self, f: GGUFFile, bar) -> None:
        self.f, self.bar = f, bar

    def get(self, name: str) -> TensorInfo:
        info = self.f.tensors.get(name)
        if info is None:
            raise GGUFError(f"{self.f.path}: tensor {name!r} is missing")
        if self.bar is not None:
            self.bar.update(1)
        return info

    def maybe(self, name: str) -> TensorInfo | None:
        return self.get(name) if name in self.f.tensors else None


def check_shape(f: GGUFFile, info: TensorInfo, shape: tuple[int, ...]) -> None:
    if tuple(info.shape) != shape:
        raise GGUFError(f"{f.path}: tensor {info.name!r} has shape {tuple(info.shape)}, expected {shape}")


@dataclass(frozen=True, slots=True)
class ModelBuilder:
    """One load's modules, each from its tensors. `quantized`: GGUF blocks for qmatmul; `cpu_kernels`: the CPU
    kernels' weights (None: not on the CPU kernels); neither: dense copies in `dtype`."""

    f: GGUFFile
    args: ModelArgs
    t: Tensors
    dtype: torch.dtype
    device: torch.device
    quantized: bool
    kernels: Kernels = "reference"
    cpu_kernels: CpuKernels | None = None

    def tensor(self, name: str, shape: tuple[int, ...]) -> TensorInfo:
        info = self.t.get(name)
        check_shape(self.f, info, shape)
        return info

    def vector(self, name: str, shape: tuple[int, ...]) -> torch.Tensor:
        """A small tensor (a bias, sinks) dequantized onto the device."""
        return dequantize_tensor(self.tensor(name, shape)).to(self.device).contiguous()

    def norm(self, name: str, size: int) -> RMSNorm:
        return RMSNorm(dequantize_tensor(self.tensor(name, (size,))).to(self.device), self.args.norm_eps)

    def linear(self, name: str, out_f: int, in_f: int, bias: bool = False) -> QuantLinear:
        info = self.tensor(f"{name}.weight", (out_f, in_f))
        b = self.t.get(f"{name}.bias") if bias else None
        return QuantLinear.from_gguf(info, self.dtype, self.device, b, self.quantized, self.kernels, self.cpu_kernels)

    def transformer(self, deterministic: bool) -> Transformer:
        a = self.args
        emb_info = self.tensor("token_embd.weight", (a.vocab_size, a.dim))
        head_info = emb_info if a.tied_output else self.tensor("output.weight", (a.vocab_size, a.dim))
        embed = self.embedding(emb_info)
        blocks = [self.block(i) for i in range(a.n_layers)]
        output = self.head(embed, head_info)
        freq_factors = None
        if a.has_rope_freqs:
            freq_factors = dequantize_tensor(self.tensor("rope_freqs.weight", (a.rope_dim // 2,)))
        final_norm = self.norm("output_norm.weight", a.dim)
        path = decode_path(blocks, self.device, self.kernels, self.dtype)
        return Transformer(
            a, embed, blocks, final_norm, output, self.dtype, self.device, path, freq_factors, deterministic,
            self.kernels, self.cpu_kernels,
        )  # fmt: skip

    def embedding(self, info: TensorInfo) -> TokenEmbedding | BlockEmbedding:
        """Rows come out in the residual stream's dtype (float32 on a CPU, see Transformer)."""
        rows_dtype = torch.float32 if self.device.type == "cpu" else self.dtype
        dense = self.cpu_kernels is None and not self.quantized
        if dense or info.qtype.name in ("F32", "F16", "BF16"):
            weight = dense_weight(info, self.dtype if not dense else torch.float32, self.device)
            return TokenEmbedding(weight, self.args.embed_scale, rows_dtype)
        return BlockEmbedding(info, self.args.embed_scale, rows_dtype, self.device)

    def head(self, embed: TokenEmbedding | BlockEmbedding, info: TensorInfo) -> OutputHead:
        if self.args.tied_output and isinstance(embed, TokenEmbedding) and embed.weight.dtype == torch.float32:
            # A float32 table doubles as the head: no second copy of the largest tensor.
            return OutputHead(QuantLinear(embed.weight.data, None))
        head_dtype = torch.float32 if self.device.type == "cpu" else self.dtype
        weight = QuantLinear.from_gguf(
            info, head_dtype, self.device, None, self.quantized, self.kernels, self.cpu_kernels
        )
        return OutputHead(weight)

    def block(self, i: int) -> Block:
        a, p = self.args, f"blk.{i}"
        attn = self.attention(i)
        mlp = self.experts(p) if a.is_moe else self.dense_ffn(p)
        # gpt-oss names its pre-FFN norm post_attention_norm (after attention, before the experts).
        gpt_oss = a.moe_style == "gpt-oss" and a.is_moe
        ffn_norm = f"{p}.post_attention_norm.weight" if gpt_oss else f"{p}.ffn_norm.weight"
        return Block(
            self.norm(f"{p}.attn_norm.weight", a.dim),
            attn,
            self.norm(ffn_norm, a.dim),
            mlp,
            self.norm(f"{p}.post_attention_norm.weight", a.dim) if a.sandwich_norm else None,
            self.norm(f"{p}.post_ffw_norm.weight", a.dim) if a.sandwich_norm else None,
        )

    def attention(self, i: int) -> Attention:
        a, p = self.args, f"blk.{i}"
        wq = self.linear(f"{p}.attn_q", a.q_dim, a.dim, a.qkv_bias)
        wk = self.linear(f"{p}.attn_k", a.kv_dim, a.dim, a.qkv_bias)
        wv = self.linear(f"{p}.attn_v", a.kv_dim, a.dim, a.qkv_bias)
        return Attention(
            wq,
            wk,
            wv,
            self.linear(f"{p}.attn_output", a.dim, a.q_dim, a.out_bias),
            n_heads=a.n_heads,
            n_kv_heads=a.n_kv_heads,
            head_dim=a.head_dim,
            rope_dim=a.rope_dim,
            rope_style=a.rope_style,
            scale=a.attn_scale,
            sliding_window=a.layer_windows[i],
            softcap=a.attn_softcap,
            q_norm=self.norm(f"{p}.attn_q_norm.weight", a.head_dim) if a.qk_norm else None,
            k_norm=self.norm(f"{p}.attn_k_norm.weight", a.head_dim) if a.qk_norm else None,
            qkv=FusedLinear.maybe([wq, wk, wv]),
            sinks=self.vector(f"{p}.attn_sinks.weight", (a.n_heads,)) if a.attn_sinks else None,
            kernels=self.kernels,
        )

    def dense_ffn(self, p: str) -> GatedMLP:
        a = self.args
        gate = self.linear(f"{p}.ffn_gate", a.ffn_dim, a.dim)
        up = self.linear(f"{p}.ffn_up", a.ffn_dim, a.dim)
        down = self.linear(f"{p}.ffn_down", a.dim, a.ffn_dim)
        return GatedMLP(gate, up, down, a.activation, FusedLinear.maybe([gate, up]))

    def experts(self, p: str) -> MoEFFN:
        """A layer's router (float32) and its experts, kept in their GGUF blocks for lexi.kernels.fused_moe."""
        a = self.args
        e, ff = a.expert_count, a.expert_ffn_dim
        router = self.tensor(f"{p}.ffn_gate_inp.weight", (e, a.dim))
        shapes = (("gate", (e, ff, a.dim)), ("up", (e, ff, a.dim)), ("down", (e, a.dim, ff)))
        infos = [self.tensor(f"{p}.ffn_{name}_exps.weight", shape) for name, shape in shapes]
        router_w = dequantize_tensor(router).to(self.device)
        router_b, biases, activation, routing = None, (None, None, None), SILU, "softmax_topk"
        if a.moe_style == "gpt-oss":
            router_b = dequantize_tensor(self.tensor(f"{p}.ffn_gate_inp.bias", (e,))).to(self.device)
            biases = tuple(self.vector(f"{p}.ffn_{name}_exps.bias", (e, size)) for name, size in
                           (("gate", ff), ("up", ff), ("down", a.dim)))  # fmt: skip
            activation, routing = SWIGLU_OAI, "topk_softmax"
        moe = dict(kernels=self.kernels, router_bias=router_b, routing=routing)
        if self.cpu_kernels is not None and CpuExperts.supports(*infos):
            cpu = CpuExperts.from_gguf(*infos, self.cpu_kernels, activation, biases)
            return MoEFFN(router_w, cpu, a.expert_used_count, **moe)
        parts = []
        for info in infos:
            try:
                parts.append(ExpertWeights.from_gguf(info, self.device))
            except ValueError as exc:
                raise GGUFError(f"{self.f.path}: tensor {info.name!r}: {exc}") from None
        return MoEFFN(router_w, ExpertFFN(*parts, activation, *biases), a.expert_used_count, **moe)
