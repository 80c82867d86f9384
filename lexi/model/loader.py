"""Build a `Transformer` from a read GGUF file: tensors by their GGUF names, family switches from `ModelArgs`."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from lexi.gguf.dequant import dequantize_tensor
from lexi.gguf.errors import GGUFError
from lexi.kernels.backend import KERNELS, Kernels, interpreter_enabled, resolve_kernels
from lexi.kernels.cpu_qmatmul import ACTIVATIONS, CpuKernels
from lexi.kernels.fused_moe_cpu import CpuExperts
from lexi.kernels.moe_types import SILU, SWIGLU_OAI, ExpertFFN, ExpertWeights
from lexi.model.args import ModelArgs, model_args_from_gguf
from lexi.model.attention import Attention
from lexi.model.head import OutputHead
from lexi.model.linear import BlockEmbedding, FusedLinear, QuantLinear, TokenEmbedding, dense_weight
from lexi.model.mlp import GatedMLP
from lexi.model.moe import MoEFFN
from lexi.model.norms import RMSNorm
from lexi.model.transformer import Block, Transformer

if TYPE_CHECKING:
    from lexi.gguf.reader import GGUFFile, TensorInfo

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DEVICES = ("auto", "cpu", "cuda")

# Measured on the 2-core AVX-512 CPU machine (SmolLM2 / Gemma 3 270M, 2 threads): bfloat16 prefills
# 1.6-2x faster than float32 (~700 vs ~420 tok/s) and decodes no slower (~57 vs ~70 ms/token);
# float16 decodes fastest (~33 ms) but prefills 4-5x slower than bfloat16. bfloat16 still agrees with
# llama.cpp's top-1 on >= 98% of teacher-forced positions (tests/model/test_llamacpp.py).
CPU_AUTO_DTYPE = torch.bfloat16
CUDA_AUTO_DTYPE = torch.bfloat16


class LoadConfigError(ValueError):
    """A LoadConfig that cannot be served on this machine; `field` names the field (and CLI option) at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


@dataclass(frozen=True, slots=True)
class LoadConfig:
    dtype: str = "auto"  # auto | float32 | bfloat16 | float16: the compute dtype of activations and dense weights
    device: str = "auto"  # auto | cpu | cuda
    # How quantized weights are held. None: the CPU kernels on a CPU (lexi/kernels/cpu_qmatmul.py; dense float32
    # copies for a float32 load, the exact reference tests compare with transformers), GGUF blocks for qmatmul on
    # CUDA or with Triton kernels. True: GGUF blocks for qmatmul everywhere (on a CPU its PyTorch reference, which
    # dequantizes per call: tests check the CUDA path's wiring with it). False: dense copies in the compute dtype.
    quantized: bool | None = None
    # Row-independent paths only (lexi/model/step.py): greedy tokens then do not depend on the batch a request
    # shares or on prefix-cache hits, at the price of slower prefill (bench/RESULTS.md measures it).
    deterministic: bool = False
    # auto | triton | reference (lexi/kernels/backend.py): auto is Triton on CUDA, the PyTorch references
    # elsewhere; triton on a CPU runs the kernels in Triton's interpreter (TRITON_INTERPRET=1; tests).
    kernels: str = "auto"
    # int16 | int8: how the CPU kernels carry a matmul's input (lexi/kernels/cpu_qmatmul.py CpuKernels): two int8
    # terms (finer than bfloat16), or one, llama.cpp's arithmetic and the faster prefill.
    activations: str = "int16"

    def __post_init__(self) -> None:
        if self.activations not in ACTIVATIONS:
            raise ValueError(f"activations must be one of {', '.join(ACTIVATIONS)}; got {self.activations!r}")
        if not isinstance(self.deterministic, bool):
            raise ValueError(f"deterministic must be True or False; got {self.deterministic!r}")
        if self.quantized not in (None, True, False):
            raise ValueError(f"quantized must be None, True or False; got {self.quantized!r}")
        if self.dtype != "auto" and self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of auto, {', '.join(DTYPES)}; got {self.dtype!r}")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {', '.join(DEVICES)}; got {self.device!r}")
        if self.kernels not in KERNELS:
            raise ValueError(f"kernels must be one of {', '.join(KERNELS)}; got {self.kernels!r}")
        if self.kernels == "triton" and self.quantized is False:
            raise ValueError("kernels 'triton' reads the GGUF blocks: quantized cannot be False")
        if self.kernels == "triton" and self.deterministic:
            raise LoadConfigError(
                "deterministic", "takes the CPU reference's row-independent paths: not with kernels 'triton'"
            )

    def resolve(self) -> tuple[torch.device, torch.dtype, Kernels]:
        """(device, compute dtype, kernels) on this machine; LoadConfigError names the field that cannot be met."""
        if self.device == "auto":
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        else:
            device = torch.device(self.device)
        if self.deterministic and device.type != "cpu":
            # On CUDA the kernels (Triton and cuBLAS alike) choose their path by row count: refuse, never ignore.
            raise LoadConfigError(
                "deterministic", f"the row-independent paths are the CPU's; on {device.type} use --device cpu"
            )
        if device.type == "cuda" and not torch.cuda.is_available():
            raise LoadConfigError("device", "'cuda' was asked for but torch sees no CUDA device")
        try:
            kernels = resolve_kernels(self.kernels, device.type)
        except ValueError as exc:
            raise LoadConfigError("kernels", str(exc)) from None
        interpreted = kernels == "triton" and device.type != "cuda" and interpreter_enabled()
        if self.dtype != "auto":
            dtype = DTYPES[self.dtype]
            if interpreted and dtype == torch.bfloat16:
                # Measured (triton 3.9): a bfloat16 tl.dot returns values near 1e10 in the interpreter.
                raise LoadConfigError("dtype", "Triton's interpreter computes bfloat16 tl.dot wrongly; use float32")
        elif device.type == "cuda":
            dtype = CUDA_AUTO_DTYPE
        else:
            dtype = torch.float32 if interpreted else CPU_AUTO_DTYPE
        return device, dtype, kernels


class _Tensors:
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


def _progress_bar(f: GGUFFile, enabled: bool):
    """A tqdm bar over the tensors, on an interactive terminal only (logs and pipes stay clean)."""
    if not enabled or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=len(f.tensors), desc=f"loading {f.path.name}", unit="tensor", leave=False)


def _check_shape(f: GGUFFile, info: TensorInfo, shape: tuple[int, ...]) -> None:
    if tuple(info.shape) != shape:
        raise GGUFError(f"{f.path}: tensor {info.name!r} has shape {tuple(info.shape)}, expected {shape}")


def load_model(f: GGUFFile, config: LoadConfig | None = None, progress: bool = False) -> Transformer:
    """Every tensor of `f` into a ready `Transformer`: CPU-kernel weights (CPU), GGUF blocks (CUDA), or dense."""
    config = config or LoadConfig()
    args = model_args_from_gguf(f)
    device, dtype, kernels = config.resolve()
    if dtype == torch.float16 and args.family == "gemma3":
        # Measured: Gemma 3's activations pass 65504 and every logit comes out NaN in float16.
        raise ValueError("dtype float16 overflows Gemma 3's activations (NaN logits); use bfloat16 or float32")
    if config.quantized is None:
        quantized = device.type == "cuda" or kernels == "triton"
        dense = not quantized and dtype == torch.float32
    else:
        quantized, dense = config.quantized, not config.quantized
    cpu_kernels = None
    if device.type == "cpu" and not quantized and not dense:
        cpu_kernels = CpuKernels(torch.get_num_threads(), activations=config.activations)
    bar = _progress_bar(f, progress)
    try:
        model = _build(f, args, _Tensors(f, bar), dtype, device, quantized, config.deterministic, kernels, cpu_kernels)
    finally:
        if bar is not None:
            bar.close()
    return model.eval()


def _build(
    f: GGUFFile,
    args: ModelArgs,
    t: _Tensors,
    dtype: torch.dtype,
    device: torch.device,
    quantized: bool,
    deterministic: bool = False,
    kernels: Kernels = "reference",
    cpu_kernels: CpuKernels | None = None,
) -> Transformer:
    def norm(name: str, size: int) -> RMSNorm:
        info = t.get(name)
        _check_shape(f, info, (size,))
        return RMSNorm(dequantize_tensor(info).to(device), args.norm_eps)

    def linear(name: str, out_f: int, in_f: int, bias: bool = False) -> QuantLinear:
        info = t.get(f"{name}.weight")
        _check_shape(f, info, (out_f, in_f))
        b = t.get(f"{name}.bias") if bias else None
        return QuantLinear.from_gguf(info, dtype, device, b, quantized, kernels, cpu_kernels)

    def experts(p: str) -> MoEFFN:
        """A layer's router (float32) and its experts, kept in their GGUF blocks for lexi.kernels.fused_moe."""
        e, ff = a.expert_count, a.expert_ffn_dim
        router = t.get(f"{p}.ffn_gate_inp.weight")
        _check_shape(f, router, (e, a.dim))
        infos = []
        for name, shape in (("gate", (e, ff, a.dim)), ("up", (e, ff, a.dim)), ("down", (e, a.dim, ff))):
            infos.append(t.get(f"{p}.ffn_{name}_exps.weight"))
            _check_shape(f, infos[-1], shape)
        router_w = dequantize_tensor(router).to(device)
        router_b, biases, activation, routing = None, (None, None, None), SILU, "softmax_topk"
        if a.moe_style == "gpt-oss":
            info = t.get(f"{p}.ffn_gate_inp.bias")
            _check_shape(f, info, (e,))
            router_b = dequantize_tensor(info).to(device)
            biases = tuple(bias_of(f"{p}.ffn_{name}_exps.bias", (e, size)) for name, size in
                           (("gate", ff), ("up", ff), ("down", a.dim)))  # fmt: skip
            activation, routing = SWIGLU_OAI, "topk_softmax"
        moe = dict(kernels=kernels, router_bias=router_b, routing=routing)
        if cpu_kernels is not None and CpuExperts.supports(*infos):
            cpu = CpuExperts.from_gguf(*infos, cpu_kernels, activation, biases)
            return MoEFFN(router_w, cpu, a.expert_used_count, **moe)
        parts = []
        for info in infos:
            try:
                parts.append(ExpertWeights.from_gguf(info, device))
            except ValueError as exc:
                raise GGUFError(f"{f.path}: tensor {info.name!r}: {exc}") from None
        return MoEFFN(router_w, ExpertFFN(*parts, activation, *biases), a.expert_used_count, **moe)

    def bias_of(name: str, shape: tuple[int, ...]) -> torch.Tensor:
        info = t.get(name)
        _check_shape(f, info, shape)
        return dequantize_tensor(info).to(device).contiguous()

    a = args
    emb_info = t.get("token_embd.weight")
    _check_shape(f, emb_info, (a.vocab_size, a.dim))
    head_info = emb_info if a.tied_output else t.get("output.weight")
    _check_shape(f, head_info, (a.vocab_size, a.dim))
    # Rows come out in the residual stream's dtype (float32 on a CPU, see Transformer).
    rows_dtype = torch.float32 if device.type == "cpu" else dtype
    dense = cpu_kernels is None and not quantized
    if dense or emb_info.qtype.name in ("F32", "F16", "BF16"):
        embed = TokenEmbedding(dense_weight(emb_info, dtype if not dense else torch.float32, device), a.embed_scale,
                               rows_dtype)  # fmt: skip
    else:
        embed = BlockEmbedding(emb_info, a.embed_scale, rows_dtype, device)
    blocks = []
    for i in range(a.n_layers):
        p = f"blk.{i}"
        wq = linear(f"{p}.attn_q", a.q_dim, a.dim, a.qkv_bias)
        wk = linear(f"{p}.attn_k", a.kv_dim, a.dim, a.qkv_bias)
        wv = linear(f"{p}.attn_v", a.kv_dim, a.dim, a.qkv_bias)
        attn = Attention(
            wq,
            wk,
            wv,
            linear(f"{p}.attn_output", a.dim, a.q_dim, a.out_bias),
            n_heads=a.n_heads,
            n_kv_heads=a.n_kv_heads,
            head_dim=a.head_dim,
            rope_dim=a.rope_dim,
            rope_style=a.rope_style,
            scale=a.attn_scale,
            sliding_window=a.layer_windows[i],
            softcap=a.attn_softcap,
            q_norm=norm(f"{p}.attn_q_norm.weight", a.head_dim) if a.qk_norm else None,
            k_norm=norm(f"{p}.attn_k_norm.weight", a.head_dim) if a.qk_norm else None,
            qkv=FusedLinear.maybe([wq, wk, wv]),
            sinks=bias_of(f"{p}.attn_sinks.weight", (a.n_heads,)) if a.attn_sinks else None,
            kernels=kernels,
        )
        if a.is_moe:
            mlp = experts(p)
        else:
            gate = linear(f"{p}.ffn_gate", a.ffn_dim, a.dim)
            up = linear(f"{p}.ffn_up", a.ffn_dim, a.dim)
            down = linear(f"{p}.ffn_down", a.dim, a.ffn_dim)
            mlp = GatedMLP(gate, up, down, a.activation, FusedLinear.maybe([gate, up]))
        blocks.append(
            Block(
                norm(f"{p}.attn_norm.weight", a.dim),
                attn,
                # gpt-oss names its pre-FFN norm post_attention_norm (after attention, before the experts).
                norm(
                    f"{p}.post_attention_norm.weight"
                    if a.moe_style == "gpt-oss" and a.is_moe
                    else f"{p}.ffn_norm.weight",
                    a.dim,
                ),  # fmt: skip
                mlp,
                norm(f"{p}.post_attention_norm.weight", a.dim) if a.sandwich_norm else None,
                norm(f"{p}.post_ffw_norm.weight", a.dim) if a.sandwich_norm else None,
            )
        )
    if a.tied_output and isinstance(embed, TokenEmbedding) and embed.weight.dtype == torch.float32:
        # A float32 table doubles as the head: no second copy of the largest tensor.
        output = OutputHead(QuantLinear(embed.weight.data, None))
    else:
        head_dtype = torch.float32 if device.type == "cpu" else dtype
        output = OutputHead(QuantLinear.from_gguf(head_info, head_dtype, device, None, quantized, kernels, cpu_kernels))
    freq_factors = None
    if a.has_rope_freqs:
        info = t.get("rope_freqs.weight")
        _check_shape(f, info, (a.rope_dim // 2,))
        freq_factors = dequantize_tensor(info)
    final_norm = norm("output_norm.weight", a.dim)
    return Transformer(
        args, embed, blocks, final_norm, output, dtype, device, freq_factors, deterministic, kernels, cpu_kernels
    )
