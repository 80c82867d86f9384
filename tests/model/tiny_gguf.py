"""Tiny GGUF files with random weights, written with gguf-py, for the families and tensor types that the
bundled models lack. The vocabulary (tokens, types, merges) is SmolLM2's, so the files are complete
enough for transformers to load as well; `small_vocab` cuts it to its first tokens for tests where the output
layer's size matters (Triton's interpreter pays for every weight element of every step).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

# Byte offsets of the fp16 super-block scales (d, dmin) in each K-quant block (ggml-common.h).
_K_SCALE_FIELDS = {Q.Q2_K: (80, 82), Q.Q3_K: (108,), Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,)}


@dataclass(frozen=True)
class TinySpec:
    arch: str
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_dim: int
    linear_types: tuple[Q, ...]  # cycled over the linear weights in file order
    embed_type: Q = Q.Q8_0
    output_type: Q | None = None  # an untied output layer's type; None: the next of linear_types
    qkv_bias: bool = False
    qk_norm: bool = False
    tied: bool = True
    rope_base: float = 10000.0
    sandwich_norm: bool = False  # gemma3: norms after attention and after the MLP too
    sliding_window: int = 0  # gemma3: window of the sliding layers (0: none written)
    sliding_window_pattern: int = 6  # gemma3: every n-th layer is global
    n_experts: int = 0  # qwen3moe: experts per layer in place of the dense FFN (0: dense)
    n_experts_used: int = 0
    expert_ffn_dim: int = 0
    expert_types: tuple[Q, ...] = (Q.F32,)  # cycled over ffn_{gate,up,down}_exps in file order
    yarn: tuple[float, int] | None = None  # (rope.scaling.factor, original_context_length) of YaRN rope scaling
    extra: dict = field(default_factory=dict)

    @property
    def gpt_oss(self) -> bool:
        """llama.cpp's gpt-oss layout: biased q/k/v/output, attn_sinks, post_attention_norm before the experts, a
        biased router and biased experts; sliding-window layers alternate (no pattern key)."""
        return self.arch == "gpt-oss"


def small_vocab(metadata: dict, size: int) -> dict:
    """The tokenizer metadata of `metadata` (a GPT-2 BPE vocabulary: control tokens, the 256 bytes, then one token
    per merge, in merge order) cut to its first `size` tokens and the merges that build them: every text still
    encodes, with fewer merges."""
    tokens = metadata["tokenizer.ggml.tokens"][:size]
    kept = set(tokens)
    merges = [m for m in metadata["tokenizer.ggml.merges"] if m.replace(" ", "", 1) in kept]
    assert all(a in kept and b in kept for a, b in (m.split(" ", 1) for m in merges))
    return {
        **metadata,
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": metadata["tokenizer.ggml.token_type"][:size],
        "tokenizer.ggml.merges": merges,
    }


def _random_k_blocks(rng: np.random.Generator, rows: int, cols: int, qtype: Q, std: float) -> np.ndarray:
    """Random but valid K-quant blocks whose dequantized values have roughly the given std."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    n_blocks = rows * cols // block
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    offsets = _K_SCALE_FIELDS[qtype]
    for off in offsets:  # unit scales first, to measure the spread the quants and sub-scales give
        raw[:, off : off + 2] = np.full((n_blocks, 1), 1.0, np.float16).view(np.uint8)
    spread = float(gguf.quants.dequantize(raw, qtype).std())
    for off in offsets:
        s = (std / spread) * rng.uniform(0.5, 1.5, size=(n_blocks, 1))
        raw[:, off : off + 2] = s.astype(np.float16).view(np.uint8)
    return raw.reshape(rows, cols // block * size)


def _tensor(rng: np.random.Generator, shape: tuple[int, ...], qtype: Q, std: float) -> np.ndarray:
    if qtype in _K_SCALE_FIELDS:
        return _random_k_blocks(rng, shape[0], shape[1], qtype, std)
    data = (rng.standard_normal(shape) * std).astype(np.float32)
    if qtype == Q.F32:
        return data
    if qtype == Q.F16:
        return data.astype(np.float16)
    return gguf.quants.quantize(data, qtype)


def write_tiny_gguf(path: Path, spec: TinySpec, vocab_from: dict, seed: int = 0) -> Path:
    """Write a random model of `spec` to `path`, with the tokenizer metadata of `vocab_from` (GGUF metadata)."""
    rng = np.random.default_rng(seed)
    tokens = vocab_from["tokenizer.ggml.tokens"]
    vocab = len(tokens)
    w = gguf.GGUFWriter(str(path), spec.arch)
    w.add_name(f"tiny-{spec.arch}")
    w.add_block_count(spec.n_layers)
    w.add_context_length(2048)
    w.add_embedding_length(spec.dim)
    w.add_feed_forward_length(spec.ffn_dim)
    w.add_head_count(spec.n_heads)
    w.add_head_count_kv(spec.n_kv_heads)
    w.add_key_length(spec.head_dim)
    w.add_value_length(spec.head_dim)
    w.add_rope_dimension_count(spec.head_dim)
    w.add_rope_freq_base(spec.rope_base)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_tokenizer_model(vocab_from["tokenizer.ggml.model"])
    w.add_tokenizer_pre(vocab_from["tokenizer.ggml.pre"])
    w.add_token_list(tokens)
    w.add_token_types(vocab_from["tokenizer.ggml.token_type"])
    w.add_token_merges(vocab_from["tokenizer.ggml.merges"])
    w.add_bos_token_id(vocab_from["tokenizer.ggml.bos_token_id"])
    w.add_eos_token_id(vocab_from["tokenizer.ggml.eos_token_id"])
    w.add_add_bos_token(False)
    if spec.sliding_window:
        w.add_sliding_window(spec.sliding_window)
        if not spec.gpt_oss:
            w.add_sliding_window_pattern(spec.sliding_window_pattern)
    if spec.yarn is not None:
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(spec.yarn[0])
        w.add_rope_scaling_orig_ctx_len(spec.yarn[1])
    if spec.n_experts:
        w.add_expert_count(spec.n_experts)
        w.add_expert_used_count(spec.n_experts_used)
        w.add_expert_feed_forward_length(spec.expert_ffn_dim)
    for key, value in spec.extra.items():
        w.add_key_value(key, value[0], value[1])

    d, hd, q_dim, kv_dim = spec.dim, spec.head_dim, spec.n_heads * spec.head_dim, spec.n_kv_heads * spec.head_dim
    kinds = iter(spec.linear_types * 1000)
    expert_kinds = iter(spec.expert_types * 1000)

    def norm(name: str, size: int) -> None:
        w.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(size)).astype(np.float32))

    def bias(name: str, shape: tuple[int, ...], std: float = 0.1) -> None:
        w.add_tensor(name, (std * rng.standard_normal(shape)).astype(np.float32))

    def add(name: str, data: np.ndarray, qtype: Q) -> None:
        w.add_tensor(name, data, raw_dtype=qtype if data.dtype == np.uint8 else None)

    def linear(name: str, out_f: int, in_f: int) -> None:
        qtype = next(kinds)
        add(name, _tensor(rng, (out_f, in_f), qtype, in_f**-0.5), qtype)

    add("token_embd.weight", _tensor(rng, (vocab, d), spec.embed_type, 1.0), spec.embed_type)
    for i in range(spec.n_layers):
        p = f"blk.{i}"
        norm(f"{p}.attn_norm.weight", d)
        linear(f"{p}.attn_q.weight", q_dim, d)
        linear(f"{p}.attn_k.weight", kv_dim, d)
        linear(f"{p}.attn_v.weight", kv_dim, d)
        if spec.qkv_bias or spec.gpt_oss:
            for n, size in (("q", q_dim), ("k", kv_dim), ("v", kv_dim)):
                bias(f"{p}.attn_{n}.bias", (size,))
        if spec.qk_norm:
            norm(f"{p}.attn_q_norm.weight", hd)
            norm(f"{p}.attn_k_norm.weight", hd)
        linear(f"{p}.attn_output.weight", d, q_dim)
        if spec.gpt_oss:
            bias(f"{p}.attn_output.bias", (d,))
            bias(f"{p}.attn_sinks.weight", (spec.n_heads,), 1.0)
        if spec.sandwich_norm or spec.gpt_oss:
            norm(f"{p}.post_attention_norm.weight", d)
        if not spec.gpt_oss:
            norm(f"{p}.ffn_norm.weight", d)
        if spec.n_experts:
            e, ff = spec.n_experts, spec.expert_ffn_dim
            w.add_tensor(f"{p}.ffn_gate_inp.weight", (rng.standard_normal((e, d)) * d**-0.5).astype(np.float32))
            if spec.gpt_oss:
                bias(f"{p}.ffn_gate_inp.bias", (e,))
            for name, out_f, in_f in (("gate", ff, d), ("up", ff, d), ("down", d, ff)):
                qtype = next(expert_kinds)
                data = np.stack([_tensor(rng, (out_f, in_f), qtype, in_f**-0.5) for _ in range(e)])
                add(f"{p}.ffn_{name}_exps.weight", data, qtype)
                if spec.gpt_oss:
                    bias(f"{p}.ffn_{name}_exps.bias", (e, out_f))
        else:
            linear(f"{p}.ffn_gate.weight", spec.ffn_dim, d)
            linear(f"{p}.ffn_up.weight", spec.ffn_dim, d)
            linear(f"{p}.ffn_down.weight", d, spec.ffn_dim)
        if spec.sandwich_norm:
            norm(f"{p}.post_ffw_norm.weight", d)
    norm("output_norm.weight", d)
    if not spec.tied and spec.output_type is not None:
        add("output.weight", _tensor(rng, (vocab, d), spec.output_type, d**-0.5), spec.output_type)
    elif not spec.tied:
        linear("output.weight", vocab, d)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
