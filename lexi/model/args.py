"""`ModelArgs`: the shape and conventions of one transformer, read from GGUF metadata per family.

The families differ only in a handful of switches (biases, per-head q/k norms, sandwich norms,
the activation, the rope layout, sliding-window layers, mixture-of-experts FFNs), so one module tree serves them
all and this file is where each family's switches are set. Values follow llama.cpp's reading of the same keys,
because llama.cpp wrote the files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lexi.gguf.errors import GGUFError

if TYPE_CHECKING:
    from lexi.gguf.reader import GGUFFile

FAMILIES = ("llama", "qwen2", "qwen3", "qwen3moe", "gemma3", "gpt-oss")
ROPE_STYLES = ("norm", "neox")  # norm: adjacent pairs (2i, 2i+1); neox: halves (i, i + d/2)
ACTIVATIONS = ("silu", "gelu_tanh")
MOE_STYLES = ("qwen3moe", "gpt-oss")  # routing, biases and expert activation (lexi/model/moe.py)


@dataclass(frozen=True, slots=True)
class ModelArgs:
    """Everything the modules need to know about one model; tensors are looked up by GGUF name."""

    family: str  # one of FAMILIES
    dim: int  # embedding_length
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_dim: int
    vocab_size: int
    norm_eps: float
    context_length: int
    rope_dim: int  # leading dims of each head that are rotated (== head_dim for all supported families)
    rope_base: float  # global layers
    rope_base_local: float  # sliding-window layers (gemma3: 10000); == rope_base elsewhere
    rope_scale: float  # linear position scale of global layers (1 / rope.scaling.factor); 1.0 = none
    rope_style: str  # one of ROPE_STYLES
    has_rope_freqs: bool  # llama 3.x: a `rope_freqs.weight` tensor divides each frequency
    layer_windows: tuple[int, ...]  # per layer: sliding window in tokens, 0 = global attention
    qkv_bias: bool  # qwen2
    qk_norm: bool  # qwen3, gemma3: RMSNorm over each head of q and k, before rope
    sandwich_norm: bool  # gemma3: norms after attention and after the MLP as well as before
    activation: str  # one of ACTIVATIONS, the gate of the gated MLP
    embed_scale: float  # gemma3: sqrt(dim); 1.0 elsewhere
    attn_scale: float  # softmax scale: 1/sqrt(head_dim), gemma3: 1/sqrt(query_pre_attn_scalar)
    tied_output: bool  # no `output.weight`: logits use the token embedding
    attn_softcap: float = 0.0  # 0 = none
    final_softcap: float = 0.0  # 0 = none
    # Mixture of experts (qwen3moe): every layer's FFN is `expert_count` gated MLPs of width `expert_ffn_dim`
    # (`expert_feed_forward_length`), `expert_used_count` of them per token. 0 = a dense FFN of width ffn_dim.
    expert_count: int = 0
    expert_used_count: int = 0
    expert_ffn_dim: int = 0
    # gpt-oss: biases on attn_output, the router and the experts; a learned per-head sink logit in every softmax;
    # experts chosen by their top-k logits and weighted by the softmax over those k; clamped SwiGLU experts.
    attn_sinks: bool = False
    out_bias: bool = False  # `attn_output.bias` (gpt-oss)
    moe_style: str = "qwen3moe"  # one of MOE_STYLES
    # YaRN (rope.scaling.type "yarn"): factor 0 = none; then rope_scale stays 1 and these shape the frequencies.
    yarn_factor: float = 0.0
    yarn_orig_ctx: int = 0  # rope.scaling.original_context_length
    yarn_beta_fast: float = 32.0
    yarn_beta_slow: float = 1.0
    yarn_attn_factor: float = 1.0  # rope.scaling.attn_factor: multiplies YaRN's magnitude scale
    rope_local_scaled: bool = False  # sliding-window layers rotate as the global ones do (gpt-oss), not unscaled

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {FAMILIES}, got {self.family!r}")
        if self.rope_style not in ROPE_STYLES:
            raise ValueError(f"rope_style must be one of {ROPE_STYLES}, got {self.rope_style!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        for name in ("dim", "n_layers", "n_heads", "n_kv_heads", "head_dim", "ffn_dim", "vocab_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        if not 0 < self.rope_dim <= self.head_dim or self.rope_dim % 2:
            raise ValueError(f"rope_dim must be even and in (0, head_dim={self.head_dim}], got {self.rope_dim}")
        if len(self.layer_windows) != self.n_layers:
            raise ValueError(f"layer_windows needs {self.n_layers} entries, got {len(self.layer_windows)}")
        if self.norm_eps <= 0 or self.rope_base <= 0 or self.rope_base_local <= 0 or self.rope_scale <= 0:
            raise ValueError("norm_eps, rope_base, rope_base_local and rope_scale must be > 0")
        if self.expert_count < 0:
            raise ValueError(f"expert_count must be >= 0 (0 = dense FFN), got {self.expert_count}")
        if self.expert_count and not 1 <= self.expert_used_count <= self.expert_count:
            raise ValueError(
                f"expert_used_count must be in [1, expert_count={self.expert_count}], got {self.expert_used_count}"
            )
        if self.expert_count and self.expert_ffn_dim <= 0:
            raise ValueError(f"expert_ffn_dim must be > 0 with experts, got {self.expert_ffn_dim}")
        if self.moe_style not in MOE_STYLES:
            raise ValueError(f"moe_style must be one of {MOE_STYLES}, got {self.moe_style!r}")
        if self.yarn_factor < 0 or (self.yarn_factor and self.yarn_orig_ctx <= 0):
            raise ValueError(f"yarn_factor must be >= 0 and needs yarn_orig_ctx > 0, got {self.yarn_factor}, "
                             f"{self.yarn_orig_ctx}")  # fmt: skip

    @property
    def is_moe(self) -> bool:
        return self.expert_count > 0

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim


class _Meta:
    """Typed reads of `<arch>.<key>` with a GGUFError naming the file and the key when one is missing."""

    def __init__(self, f: GGUFFile) -> None:
        self.f = f
        self.arch = f.architecture

    def key(self, suffix: str) -> str:
        return f"{self.arch}.{suffix}"

    def get(self, suffix: str, default: Any = None) -> Any:
        return self.f.metadata.get(self.key(suffix), default)

    def need(self, suffix: str) -> Any:
        value = self.f.metadata.get(self.key(suffix))
        if value is None:
            raise GGUFError(f"{self.f.path}: metadata key {self.key(suffix)!r} is missing ({self.arch} needs it)")
        return value

    def int(self, suffix: str, default: int | None = None) -> int:
        value = self.need(suffix) if default is None else self.get(suffix, default)
        if isinstance(value, list):  # some converters write per-layer arrays; we need them uniform
            if len(set(value)) != 1:
                raise GGUFError(f"{self.f.path}: {self.key(suffix)} varies per layer ({value}), not supported")
            value = value[0]
        return int(value)


def _rope_scale(m: _Meta) -> float:
    kind = m.get("rope.scaling.type", "none")
    factor = float(m.get("rope.scaling.factor", 0.0) or 0.0)
    if kind in ("none", "", "yarn") or factor in (0.0, 1.0):
        return 1.0  # yarn: see _yarn
    if kind == "linear":
        return 1.0 / factor
    raise GGUFError(f"{m.f.path}: rope scaling {kind!r} ({m.key('rope.scaling.type')}) is not supported")


def _yarn(m: _Meta) -> dict[str, Any]:
    """YaRN's keys as llama.cpp reads them (beta_fast 32 and beta_slow 1 unless the file says otherwise)."""
    factor = float(m.get("rope.scaling.factor", 0.0) or 0.0)
    if m.get("rope.scaling.type", "none") != "yarn" or factor in (0.0, 1.0):
        return {}
    for key in ("rope.scaling.yarn_log_multiplier", "rope.scaling.yarn_ext_factor", "rope.scaling.yarn_attn_factor"):
        if m.get(key) is not None:
            raise GGUFError(f"{m.f.path}: {m.key(key)} is not supported")
    return dict(
        yarn_attn_factor=float(m.get("rope.scaling.attn_factor", 1.0) or 1.0),
        yarn_factor=factor,
        yarn_orig_ctx=m.int("rope.scaling.original_context_length"),
        yarn_beta_fast=float(m.get("rope.scaling.yarn_beta_fast", 32.0) or 32.0),
        yarn_beta_slow=float(m.get("rope.scaling.yarn_beta_slow", 1.0) or 1.0),
    )


def _gemma3_windows(m: _Meta, n_layers: int) -> tuple[int, ...]:
    """Five sliding-window layers to one global one, unless the file spells the pattern out."""
    window = m.int("attention.sliding_window")
    pattern = m.get("attention.sliding_window_pattern", 6)
    if isinstance(pattern, list):  # per-layer booleans: True = sliding
        if len(pattern) != n_layers:
            raise GGUFError(f"{m.f.path}: {m.key('attention.sliding_window_pattern')} has {len(pattern)} entries")
        return tuple(window if bool(p) else 0 for p in pattern)
    pattern = int(pattern)
    return tuple(window if (i + 1) % pattern else 0 for i in range(n_layers))


def model_args_from_gguf(f: GGUFFile) -> ModelArgs:
    """Read one model's `ModelArgs`; a GGUFError names the architecture or key that cannot be used."""
    arch = f.architecture
    if arch not in FAMILIES:
        raise GGUFError(f"{f.path}: architecture {arch!r} is not supported (supported: {', '.join(FAMILIES)})")
    if "token_embd.weight" not in f.tensors:
        raise GGUFError(f"{f.path}: tensor 'token_embd.weight' is missing")
    m = _Meta(f)
    common = _common_args(m)
    return ModelArgs(**{**common, **_FAMILY_ARGS[arch](m, common)})


def _heads(m: _Meta) -> dict[str, int]:
    """The residual width, the layer count and the attention heads' shape."""
    dim = m.int("embedding_length")
    n_layers = m.int("block_count")
    n_heads = m.int("attention.head_count")
    n_kv_heads = m.int("attention.head_count_kv", n_heads)
    head_dim = m.int("attention.key_length", dim // n_heads)
    value_dim = m.int("attention.value_length", head_dim)
    if value_dim != head_dim:
        raise GGUFError(f"{m.f.path}: value_length {value_dim} != key_length {head_dim} is not supported")
    return dict(dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=head_dim)


def _common_args(m: _Meta) -> dict[str, Any]:
    """Every family's fields, read the same way for all (the family's own function then overrides some)."""
    f, heads = m.f, _heads(m)
    head_dim, n_layers = heads["head_dim"], heads["n_layers"]
    rope_base = float(m.get("rope.freq_base", 10000.0))
    # The mixture-of-experts families may omit the dense FFN width (unused), the others must give it.
    moe = m.arch in ("qwen3moe", "gpt-oss")
    return dict(
        family=m.arch,
        **heads,
        ffn_dim=m.int("feed_forward_length", 0) if moe else m.int("feed_forward_length"),
        vocab_size=int(f.tensors["token_embd.weight"].shape[0]),
        norm_eps=float(m.need("attention.layer_norm_rms_epsilon")),
        context_length=m.int("context_length"),
        rope_dim=m.int("rope.dimension_count", head_dim),
        rope_base=rope_base,
        rope_base_local=rope_base,
        rope_scale=_rope_scale(m),
        has_rope_freqs="rope_freqs.weight" in f.tensors,
        layer_windows=(0,) * n_layers,
        qkv_bias="blk.0.attn_q.bias" in f.tensors,
        out_bias="blk.0.attn_output.bias" in f.tensors,
        qk_norm="blk.0.attn_q_norm.weight" in f.tensors,
        sandwich_norm=False,
        activation="silu",
        embed_scale=1.0,
        attn_scale=1.0 / math.sqrt(head_dim),
        tied_output="output.weight" not in f.tensors,
        attn_softcap=float(m.get("attn_logit_softcapping", 0.0) or 0.0),
        final_softcap=float(m.get("final_logit_softcapping", 0.0) or 0.0),
        **_yarn(m),
    )


def _llama(m: _Meta, common: dict[str, Any]) -> dict[str, Any]:
    return dict(rope_style="norm")  # llama.cpp's converter permutes q/k rows for adjacent-pair rope


def _qwen(m: _Meta, common: dict[str, Any]) -> dict[str, Any]:
    """qwen2 and qwen3: halves rope; qwen2's q/k/v biases and qwen3's q/k norms are found among the tensors."""
    return dict(rope_style="neox")


def _qwen3moe(m: _Meta, common: dict[str, Any]) -> dict[str, Any]:
    """Qwen3 attention (neox rope, q/k norms); every layer's FFN is a mixture of experts (llama.cpp's
    llm_build_qwen3moe). feed_forward_length (the dense width, unused) may be absent."""
    expert_ffn = m.int("expert_feed_forward_length")
    return dict(
        rope_style="neox",
        ffn_dim=m.int("feed_forward_length", expert_ffn),
        expert_count=m.int("expert_count"),
        expert_used_count=m.int("expert_used_count"),
        expert_ffn_dim=expert_ffn,
    )


def _gpt_oss(m: _Meta, common: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp's llm_build_openai_moe_iswa: neox rope (YaRN), biased q/k/v/output, sinks, even layers sliding
    (set_swa_pattern(2)), every FFN a mixture of experts behind `post_attention_norm`."""
    expert_ffn = m.int("expert_feed_forward_length")
    window = m.int("attention.sliding_window")
    return dict(
        rope_style="neox",
        ffn_dim=m.int("feed_forward_length", expert_ffn),
        layer_windows=tuple(window if i % 2 == 0 else 0 for i in range(common["n_layers"])),
        expert_count=m.int("expert_count"),
        expert_used_count=m.int("expert_used_count"),
        expert_ffn_dim=expert_ffn,
        attn_sinks=True,
        moe_style="gpt-oss",
        rope_local_scaled=True,
    )


def _gemma3(m: _Meta, common: dict[str, Any]) -> dict[str, Any]:
    dim, n_heads, n_layers = common["dim"], common["n_heads"], common["n_layers"]
    # The 27B model scales queries by hidden/heads instead of head_dim (llama.cpp: LLM_TYPE_27B).
    scalar = dim // n_heads if n_layers == 62 else common["head_dim"]
    return dict(
        rope_style="neox",
        rope_base_local=float(m.get("rope.freq_base_swa", 10000.0)),
        layer_windows=_gemma3_windows(m, n_layers),
        qk_norm=True,
        sandwich_norm=True,
        activation="gelu_tanh",
        embed_scale=math.sqrt(dim),
        attn_scale=1.0 / math.sqrt(scalar),
    )


# Each family's own fields over the common ones: one function a family (FAMILIES, in the same order).
_FAMILY_ARGS = {
    "llama": _llama,
    "qwen2": _qwen,
    "qwen3": _qwen,
    "qwen3moe": _qwen3moe,
    "gemma3": _gemma3,
    "gpt-oss": _gpt_oss,
}
