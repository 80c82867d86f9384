"""Synthetic GGUF models of real shapes: random but valid blocks in a Q4_K_M-like type mix, a real vocabulary.

Why: the device machine receives at most 64 MiB per call, so no real 8B model (nor even the bundled 98 MB SmolLM2)
can travel there; this writes one on the spot in seconds. Weights are random bytes, except every fp16 scale
field, which gets a finite value sized so that each layer's outputs keep roughly unit scale (no NaN/Inf
anywhere): the text is nonsense, the shapes, types, bytes read and FLOPs are the real model's.

Type mix, after llama.cpp's Q4_K_M: Q4_K everywhere, Q6_K for the output layer and for attn_v and ffn_down of
the first and last eighth of the layers and of every third layer between; norms F32. The vocabulary and
tokenizer metadata come from a bundled model (or a small export of them, `export-vocab`), padded with plain
tokens `[synthN]` up to the shape's vocabulary size, or cut to a smaller one (its first tokens and the merges
that build them).

    python bench/synth_gguf.py write llama3-8b /tmp/llama3-8b.gguf            # ~4.9 GB
    python bench/synth_gguf.py export-vocab .whl/smollm2-vocab.json.gz       # 0.4 MB, travels to the device
    python bench/synth_gguf.py write tiny-gemma3 /tmp/t.gguf --vocab-from .whl/smollm2-vocab.json.gz --vocab 1024
    python bench/synth_gguf.py write qwen3moe-small /tmp/moe.gguf            # ~1.0 GB, 1.6B total, 0.36B active
    python bench/synth_gguf.py write tiny-gpt-oss /tmp/g.gguf --vocab 4096   # a few MB, MXFP4 experts
    python bench/synth_gguf.py write tiny-gpt-oss /tmp/h.gguf --vocab 4096 --harmony   # + gpt-oss's chat tokens

Mixture-of-experts shapes (qwen3moe) write a float32 router `ffn_gate_inp` (E, dim) and 3-D expert tensors
`ffn_{gate,up,down}_exps` (E, rows, cols) in place of the dense FFN, typed as the dense ones would be. gpt-oss
shapes write llama.cpp's gpt-oss layout: biased Q8_0 attention with `attn_sinks`, a biased router, biased MXFP4
experts, YaRN keys, the sliding window of the even layers.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q

# Byte offsets of the fp16 fields (d, dmin) in each block type this script writes (ggml-common.h).
_F16_FIELDS = {Q.Q4_K: (0, 2), Q.Q6_K: (208,), Q.Q8_0: (0,)}
_TOKENIZER_KEYS = (
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
)


@dataclass(frozen=True, slots=True)
class Shape:
    arch: str  # llama | qwen3 | qwen3moe | gemma3 | gpt-oss
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_dim: int
    vocab: int
    context: int
    rope_base: float
    tied: bool
    sliding_window: int = 0  # gemma3: every sliding_pattern-th layer global, the others windowed
    sliding_pattern: int = 6
    n_experts: int = 0  # qwen3moe: experts per layer (0: a dense FFN of ffn_dim)
    n_experts_used: int = 0
    expert_ffn_dim: int = 0
    yarn: tuple[float, int] | None = None  # gpt-oss: YaRN (rope.scaling.factor, original_context_length)

    @property
    def qk_norm(self) -> bool:
        return self.arch in ("qwen3", "qwen3moe", "gemma3")

    @property
    def gpt_oss(self) -> bool:
        return self.arch == "gpt-oss"


SHAPES = {
    "llama3-8b": Shape("llama", 4096, 32, 32, 8, 128, 14336, 128256, 8192, 500000.0, tied=False),
    "llama3-3b": Shape("llama", 3072, 28, 24, 8, 128, 8192, 128256, 8192, 500000.0, tied=True),
    "llama3-1b": Shape("llama", 2048, 16, 32, 8, 64, 8192, 128256, 8192, 500000.0, tied=True),
    "qwen3-8b": Shape("qwen3", 4096, 36, 32, 8, 128, 12288, 151936, 40960, 1000000.0, tied=False),
    "gemma3-4b": Shape("gemma3", 2560, 34, 8, 4, 256, 10240, 262208, 131072, 1000000.0, True, 1024),
    # Qwen3-30B-A3B (and Qwen3-Coder-30B-A3B): 30.5B total, 3.3B active; ~18.6 GB at this type mix. Not written
    # by any test (disk, time); tests check its tensor list and size.
    "qwen3moe-30b-a3b": Shape(
        "qwen3moe", 2048, 48, 32, 4, 128, 6144, 151936, 40960, 1000000.0, False,
        n_experts=128, n_experts_used=8, expert_ffn_dim=768,
    ),
    # A small one for CPU benches: 1.6B total, 0.36B active per token.
    "qwen3moe-small": Shape(
        "qwen3moe", 1024, 16, 8, 4, 128, 3072, 151936, 40960, 1000000.0, False,
        n_experts=32, n_experts_used=4, expert_ffn_dim=768,
    ),
    # gpt-oss-20b: 20.9B total, 3.6B active; 24 layers alternating a 128-token window with global attention, 32
    # experts (top-4) in MXFP4 as OpenAI ships them, everything else Q8_0 here (~12 GB). Not written by any test.
    "gpt-oss-20b": Shape(
        "gpt-oss", 2880, 24, 64, 8, 64, 2880, 201088, 131072, 150000.0, False, 128,
        n_experts=32, n_experts_used=4, expert_ffn_dim=2880, yarn=(32.0, 4096),
    ),
    "tiny-llama": Shape("llama", 256, 2, 4, 2, 64, 512, 49152, 2048, 10000.0, tied=False),
    "tiny-qwen3": Shape("qwen3", 256, 2, 4, 1, 64, 512, 49152, 2048, 1000000.0, tied=False),
    "tiny-qwen3moe": Shape(
        "qwen3moe", 256, 2, 4, 1, 64, 512, 49152, 2048, 1000000.0, False,
        n_experts=4, n_experts_used=2, expert_ffn_dim=256,
    ),
    "tiny-gemma3": Shape("gemma3", 256, 2, 4, 1, 64, 512, 49152, 2048, 1000000.0, True, 16, 2),
    "tiny-gpt-oss": Shape(
        "gpt-oss", 256, 4, 4, 2, 64, 256, 49152, 2048, 150000.0, False, 16,
        n_experts=4, n_experts_used=2, expert_ffn_dim=256, yarn=(32.0, 4096),
    ),
}  # fmt: skip


def tensors(shape: Shape) -> list[tuple[str, tuple[int, ...], Q]]:
    """(name, (rows, cols), (size,) or (experts, rows, cols), type) of every tensor, in file order."""
    s, q_dim, kv_dim = shape, shape.n_heads * shape.head_dim, shape.n_kv_heads * shape.head_dim
    n = s.n_layers
    # MoE shapes: a Q8_0 table, whose random values have mean 0. Random Q4_K rows share a large mean (the quants'
    # offset), and a random router then sends every token of the synthetic model to the same experts.
    embed_type = Q.Q8_0 if s.n_experts else Q.Q4_K
    out: list[tuple[str, tuple[int, ...], Q]] = [("token_embd.weight", (s.vocab, s.dim), embed_type)]
    if s.gpt_oss:
        return (
            out
            + _gpt_oss_tensors(s)
            + [("output_norm.weight", (s.dim,), Q.F32), ("output.weight", (s.vocab, s.dim), Q.Q8_0)]
        )
    for i in range(n):
        # llama.cpp's use_more_bits: the first and last eighth of the layers, and every third one between.
        more = i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2
        wide = Q.Q6_K if more else Q.Q4_K
        p = f"blk.{i}"
        out += [(f"{p}.attn_norm.weight", (s.dim,), Q.F32)]
        out += [(f"{p}.attn_q.weight", (q_dim, s.dim), Q.Q4_K), (f"{p}.attn_k.weight", (kv_dim, s.dim), Q.Q4_K)]
        out += [(f"{p}.attn_v.weight", (kv_dim, s.dim), wide)]
        if s.qk_norm:
            out += [
                (f"{p}.attn_q_norm.weight", (s.head_dim,), Q.F32),
                (f"{p}.attn_k_norm.weight", (s.head_dim,), Q.F32),
            ]
        out += [(f"{p}.attn_output.weight", (s.dim, q_dim), Q.Q4_K)]
        if s.arch == "gemma3":
            out += [(f"{p}.post_attention_norm.weight", (s.dim,), Q.F32)]
        out += [(f"{p}.ffn_norm.weight", (s.dim,), Q.F32)]
        if s.n_experts:
            e, ff = s.n_experts, s.expert_ffn_dim
            out += [(f"{p}.ffn_gate_inp.weight", (e, s.dim), Q.F32)]
            out += [(f"{p}.ffn_gate_exps.weight", (e, ff, s.dim), Q.Q4_K)]
            out += [(f"{p}.ffn_up_exps.weight", (e, ff, s.dim), Q.Q4_K)]
            out += [(f"{p}.ffn_down_exps.weight", (e, s.dim, ff), wide)]
        else:
            out += [
                (f"{p}.ffn_gate.weight", (s.ffn_dim, s.dim), Q.Q4_K),
                (f"{p}.ffn_up.weight", (s.ffn_dim, s.dim), Q.Q4_K),
            ]
            out += [(f"{p}.ffn_down.weight", (s.dim, s.ffn_dim), wide)]
        if s.arch == "gemma3":
            out += [(f"{p}.post_ffw_norm.weight", (s.dim,), Q.F32)]
    out += [("output_norm.weight", (s.dim,), Q.F32)]
    if not s.tied:
        out += [("output.weight", (s.vocab, s.dim), Q.Q6_K)]
    return out


def _gpt_oss_tensors(s: Shape) -> list[tuple[str, tuple[int, ...], Q]]:
    """llama.cpp's gpt-oss layer: biased Q8_0 attention with sinks, post_attention_norm before a biased router and
    biased MXFP4 experts."""
    q_dim, kv_dim, e, ff = s.n_heads * s.head_dim, s.n_kv_heads * s.head_dim, s.n_experts, s.expert_ffn_dim
    out: list[tuple[str, tuple[int, ...], Q]] = []
    for i in range(s.n_layers):
        p = f"blk.{i}"
        out += [(f"{p}.attn_norm.weight", (s.dim,), Q.F32)]
        for name, rows in (("q", q_dim), ("k", kv_dim), ("v", kv_dim)):
            out += [(f"{p}.attn_{name}.weight", (rows, s.dim), Q.Q8_0), (f"{p}.attn_{name}.bias", (rows,), Q.F32)]
        out += [(f"{p}.attn_output.weight", (s.dim, q_dim), Q.Q8_0), (f"{p}.attn_output.bias", (s.dim,), Q.F32)]
        out += [(f"{p}.attn_sinks.weight", (s.n_heads,), Q.F32), (f"{p}.post_attention_norm.weight", (s.dim,), Q.F32)]
        out += [(f"{p}.ffn_gate_inp.weight", (e, s.dim), Q.F32), (f"{p}.ffn_gate_inp.bias", (e,), Q.F32)]
        for name, rows, cols in (("gate", ff, s.dim), ("up", ff, s.dim), ("down", s.dim, ff)):
            out += [(f"{p}.ffn_{name}_exps.weight", (e, rows, cols), Q.MXFP4)]
            out += [(f"{p}.ffn_{name}_exps.bias", (e, rows), Q.F32)]
    return out


def file_bytes(shape: Shape) -> int:
    """The tensor data's size in bytes (the file adds its metadata and alignment padding)."""
    return sum(_nbytes(dims, qtype) for _, dims, qtype in tensors(shape))


def _nbytes(dims: tuple[int, ...], qtype: Q) -> int:
    block, size = GGML_QUANT_SIZES[qtype]
    return int(np.prod(dims)) // block * size


def _unit_spread(qtype: Q) -> float:
    """Standard deviation of the values of random blocks whose fp16 fields are all 1.0."""
    rng = np.random.default_rng(0)
    raw = rng.integers(0, 256, size=(256, GGML_QUANT_SIZES[qtype][1]), dtype=np.uint8)
    if qtype == Q.MXFP4:
        raw[:, 0] = 128  # a scale of 1
    for off in _F16_FIELDS.get(qtype, ()):
        raw[:, off : off + 2] = np.full((256, 1), 1.0, np.float16).view(np.uint8)
    return float(gguf.quants.dequantize(raw, qtype).std())


def random_blocks(rng: np.random.Generator, rows: int, cols: int, qtype: Q, std: float, spread: float) -> np.ndarray:
    """(rows, row_bytes) uint8: random quants, fp16 fields set so the values have about `std` (finite). MXFP4: its
    E8M0 scale byte e (2^(e-128) times the doubled E2M1 values) near the power of two that gives `std`."""
    block, size = GGML_QUANT_SIZES[qtype]
    n_blocks = rows * cols // block
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)  # measured 25x less CPU than rng.bytes
    if qtype == Q.MXFP4:
        e = 128 + int(round(np.log2(std / spread)))
        raw[:, 0] = rng.integers(e - 1, e + 2, size=n_blocks, dtype=np.uint8)
        return raw.reshape(rows, cols // block * size)
    scale = (std / spread) * rng.uniform(0.5, 1.5, size=(n_blocks, 1)).astype(np.float32)
    scale_bytes = scale.astype(np.float16).view(np.uint8)
    for off in _F16_FIELDS[qtype]:
        raw[:, off : off + 2] = scale_bytes
    return raw.reshape(rows, cols // block * size)


def load_vocab(source: str) -> dict:
    """Tokenizer metadata from a GGUF path, a bundled model's name, or an `export-vocab` file (.json.gz)."""
    if source.endswith(".json.gz"):
        with gzip.open(source, "rt", encoding="utf-8") as fh:
            return json.load(fh)
    from lexi.gguf.bundled import resolve_model
    from lexi.gguf.reader import read_gguf

    path = Path(source) if Path(source).exists() else resolve_model(source)
    meta = read_gguf(path).metadata
    return {k: (list(meta[k]) if isinstance(meta[k], list | tuple) else meta[k]) for k in _TOKENIZER_KEYS}


def sized_vocab(vocab: dict, size: int) -> dict:
    """The vocabulary cut to its first `size` tokens (with the merges that build them), or padded with plain
    `[synthN]` tokens up to `size` (a model's vocabulary size decides its output layer's cost)."""
    tokens, types = list(vocab["tokenizer.ggml.tokens"]), list(vocab["tokenizer.ggml.token_type"])
    merges = list(vocab["tokenizer.ggml.merges"])
    if size <= len(tokens):
        tokens, types = tokens[:size], types[:size]
        kept = set(tokens)
        merges = [m for m in merges if m.replace(" ", "", 1) in kept and all(p in kept for p in m.split(" ", 1))]
    else:
        tokens += [f"[synth{i}]" for i in range(len(tokens), size)]
        types += [1] * (size - len(types))  # NORMAL: visible text when a random model samples one
    if max(vocab["tokenizer.ggml.bos_token_id"], vocab["tokenizer.ggml.eos_token_id"]) >= size:
        raise ValueError(f"vocab size {size} drops the BOS or EOS token")
    return {
        **vocab,
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": merges,
    }


# gpt-oss's o200k_harmony control tokens (ids 200002-200012 there, less the reserved ones): `--harmony` makes them a
# vocabulary's last tokens and `<|return|>` its end of sequence, so the model can be served in the harmony format.
HARMONY_TOKENS = ("<|return|>", "<|constrain|>", "<|channel|>", "<|start|>", "<|end|>", "<|message|>", "<|call|>")


def with_harmony(vocab: dict, size: int) -> dict:
    """`vocab` sized to `size` tokens, the last of them the harmony tokens (control tokens, as gpt-oss's file has)."""
    base = sized_vocab(vocab, size - len(HARMONY_TOKENS))
    tokens = base["tokenizer.ggml.tokens"]
    return {
        **base,
        "tokenizer.ggml.tokens": [*tokens, *HARMONY_TOKENS],
        "tokenizer.ggml.token_type": [*base["tokenizer.ggml.token_type"], *[3] * len(HARMONY_TOKENS)],  # CONTROL
        "tokenizer.ggml.eos_token_id": len(tokens),
    }


def write_synthetic(path: Path, shape: Shape, vocab: dict, seed: int = 0) -> int:
    """Write the model; returns the file's size in bytes. Streams tensor by tensor (memory: the largest one)."""
    vocab = sized_vocab(vocab, shape.vocab)
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), shape.arch)
    w.add_name(f"synthetic-{shape.arch}")
    w.add_block_count(shape.n_layers)
    w.add_context_length(shape.context)
    w.add_embedding_length(shape.dim)
    w.add_feed_forward_length(shape.ffn_dim)
    w.add_head_count(shape.n_heads)
    w.add_head_count_kv(shape.n_kv_heads)
    w.add_key_length(shape.head_dim)
    w.add_value_length(shape.head_dim)
    w.add_rope_dimension_count(shape.head_dim)
    w.add_rope_freq_base(shape.rope_base)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(shape.vocab)
    if shape.n_experts:
        w.add_expert_count(shape.n_experts)
        w.add_expert_used_count(shape.n_experts_used)
        w.add_expert_feed_forward_length(shape.expert_ffn_dim)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    if shape.sliding_window:
        w.add_sliding_window(shape.sliding_window)
        if not shape.gpt_oss:  # gpt-oss alternates its layers (llama.cpp: set_swa_pattern(2)), no key
            w.add_sliding_window_pattern(shape.sliding_pattern)
    if shape.yarn is not None:
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(shape.yarn[0])
        w.add_rope_scaling_orig_ctx_len(shape.yarn[1])
    w.add_tokenizer_model(vocab["tokenizer.ggml.model"])
    w.add_tokenizer_pre(vocab["tokenizer.ggml.pre"])
    w.add_token_list(vocab["tokenizer.ggml.tokens"])
    w.add_token_types(vocab["tokenizer.ggml.token_type"])
    w.add_token_merges(vocab["tokenizer.ggml.merges"])
    w.add_bos_token_id(vocab["tokenizer.ggml.bos_token_id"])
    w.add_eos_token_id(vocab["tokenizer.ggml.eos_token_id"])
    w.add_add_bos_token(False)
    plan = tensors(shape)
    for name, dims, qtype in plan:
        if qtype == Q.F32:
            w.add_tensor_info(name, dims, np.dtype(np.float32), _nbytes(dims, qtype))
        else:
            block, size = GGML_QUANT_SIZES[qtype]
            byte_dims = (*dims[:-1], dims[-1] // block * size)
            w.add_tensor_info(name, byte_dims, np.dtype(np.uint8), _nbytes(dims, qtype), qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    spreads = {q: _unit_spread(q) for q in {q for _, _, q in plan if q != Q.F32}}
    for name, dims, qtype in plan:
        if name.endswith(".bias"):  # gpt-oss's biases: small beside the unit-scale outputs
            w.write_tensor_data((0.05 * rng.standard_normal(dims)).astype(np.float32))
            continue
        if qtype == Q.F32 and len(dims) == 2:  # a router: logits of about unit scale
            w.write_tensor_data((rng.standard_normal(dims) * dims[1] ** -0.5).astype(np.float32))
            continue
        if qtype == Q.F32:
            w.write_tensor_data((1.0 + 0.05 * rng.standard_normal(dims[0])).astype(np.float32))
            continue
        if len(dims) == 3:  # experts, one after another
            e, rows, cols = dims
            blocks = [random_blocks(rng, rows, cols, qtype, cols**-0.5, spreads[qtype]) for _ in range(e)]
            w.write_tensor_data(np.stack(blocks))
            continue
        rows, cols = dims
        # Unit-variance inputs give unit-variance outputs. Embedding rows have unit scale as the model reads them:
        # gemma3 multiplies them by sqrt(dim), so its (tied) table is stored that much smaller.
        std = cols**-0.5
        if name == "token_embd.weight":
            std = cols**-0.5 if shape.arch == "gemma3" else 1.0
        w.write_tensor_data(random_blocks(rng, rows, cols, qtype, std, spreads[qtype]))
    w.close()
    return path.stat().st_size


def export_vocab(source: str, out: Path) -> int:
    with gzip.open(out, "wt", encoding="utf-8") as fh:
        json.dump(load_vocab(source), fh, ensure_ascii=False)
    return out.stat().st_size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    write = sub.add_parser("write", help="write a synthetic model")
    write.add_argument("shape", choices=sorted(SHAPES))
    write.add_argument("out", type=Path)
    write.add_argument("--vocab-from", default="smollm2-135m-instruct", help="GGUF path, bundled name or .json.gz")
    write.add_argument("--vocab", type=int, default=None, help="vocabulary size (default: the shape's)")
    write.add_argument("--seed", type=int, default=0)
    write.add_argument("--harmony", action="store_true", help="end the vocabulary with gpt-oss's harmony tokens")
    export = sub.add_parser("export-vocab", help="write a bundled model's tokenizer metadata as .json.gz")
    export.add_argument("out", type=Path)
    export.add_argument("--vocab-from", default="smollm2-135m-instruct")
    args = parser.parse_args(argv)
    started = time.monotonic()
    if args.command == "export-vocab":
        size = export_vocab(args.vocab_from, args.out)
    else:
        shape = SHAPES[args.shape]
        if args.vocab is not None:
            shape = dataclasses.replace(shape, vocab=args.vocab)
        vocab = load_vocab(args.vocab_from)
        if args.harmony:
            vocab = with_harmony(vocab, shape.vocab)
        size = write_synthetic(args.out, shape, vocab, args.seed)
    print(f"{args.out}: {size / 1e6:.1f} MB in {time.monotonic() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
