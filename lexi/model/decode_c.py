"""The CPU decode step as one call into the C kernels (lexi/kernels/cpu/decode.c): every layer of a step whose
sequences each add a few rows (decode, or a speculative draft's positions), with nothing between the layers in
Python or torch.

Why: the lean loop (decode_cpu.run_decode, the reference this is tested against) still made ~200 torch ops a layer:
SmolLM2's step took 17.6 ms of which the matmuls were ~5. Here the layers' weights, norms and biases are described
once, as int64 records of addresses and sizes (`decode_records.h`'s `dec_model` and `dec_layer`, written by numpy in the
same field order), and a step passes its rows' positions, slots, block tables and rope rows.

The records hold raw addresses, so `DecodeProgram` keeps the `DecodeStack` (whose tensors they name) alive; a KV
cache's addresses are read from the cache list each step is given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from lexi.kernels.fused_moe_cpu import CpuExperts
from lexi.kernels.paged_attention_cpu import SHORT_STEP_ROWS

if TYPE_CHECKING:
    from lexi.kernels.attention_metadata import AttentionMetadata
    from lexi.kernels.cpu_qmatmul import CpuWeight
    from lexi.model.decode_cpu import DecodeStack
    from lexi.model.rope import RopeTable

CACHE_TYPES = {torch.float32: 0, torch.bfloat16: 1}
ACTIVATIONS = {"silu": 0, "gelu_tanh": 1}
ROUTINGS = {"softmax_topk": 0, "topk_softmax": 1}
MOE_ACTIVATIONS = {"silu": 0, "swiglu_oai": 1}
WEIGHT = 6  # int64 fields of a dec_weight: CpuWeight.descriptor's
# dec_layer's fields in decode_records.h's order: name -> (first int64 column, width); alpha and limit are float64.
_LAYER_FIELDS = (
    ("attn_norm", 1), ("qkv_bias", 1), ("qk_norm", 1), ("wo_bias", 1), ("sinks", 1), ("post_attn_norm", 1),
    ("ffn_norm", 1), ("post_ffn_norm", 1), ("qkv", 3 * WEIGHT), ("wo", WEIGHT), ("gate_up", 2 * WEIGHT),
    ("down", WEIGHT), ("window", 1), ("router", 1), ("router_bias", 1), ("moe_table", 1), ("n_experts", 1),
    ("top_k", 1), ("expert_ffn", 1), ("gate_bias", 1), ("up_bias", 1), ("down_bias", 1), ("moe_act", 1),
    ("routing", 1), ("alpha", 1), ("limit", 1),
)  # fmt: skip
_MODEL_FIELDS = ("n_layers", "dim", "n_heads", "n_kv_heads", "head_dim", "rope_dim", "rope_neox", "ffn_dim",
                 "activation", "terms", "cache_type", "scale", "eps", "layers")  # fmt: skip
_FLOATS = frozenset({"alpha", "limit", "scale", "eps"})


def _columns(fields) -> dict[str, slice]:
    at, out = 0, {}
    for name, width in fields:
        out[name] = slice(at, at + width)
        at += width
    return out


_LAYER = _columns(_LAYER_FIELDS)
_LAYER_WIDTH = sum(w for _, w in _LAYER_FIELDS)
_MODEL = _columns((name, 1) for name in _MODEL_FIELDS)


def _put(record: np.ndarray, columns: dict[str, slice], name: str, value) -> None:
    if name in _FLOATS:
        record.view(np.float64)[columns[name]] = value
    else:
        record[columns[name]] = value


def _address(t: torch.Tensor | None) -> int:
    if t is None:
        return 0
    if t.dtype != torch.float32 or not t.is_contiguous() or t.device.type != "cpu":
        raise ValueError("decode records read contiguous float32 CPU tensors")
    return t.data_ptr()


def _weights(ws: tuple[CpuWeight, ...]) -> list[int]:
    out, col = [], 0
    for w in ws:
        out.extend(w.descriptor(col))
        col += w.shape[0]
    return out


def short_step(meta: AttentionMetadata) -> bool:
    """Whether every sequence of the step adds between 1 and SHORT_STEP_ROWS rows (a decode step)."""
    qs = meta.query_start_host
    return len(qs) > 1 and all(1 <= qs[i + 1] - qs[i] <= SHORT_STEP_ROWS for i in range(len(qs) - 1))


class DecodeProgram:
    """A `DecodeStack` as the C call reads it, for one KV cache dtype (float32 or bfloat16)."""

    def __init__(self, stack: DecodeStack, cache_dtype: torch.dtype) -> None:
        if cache_dtype not in CACHE_TYPES:
            raise ValueError(f"cache_dtype: must be float32 or bfloat16, got {cache_dtype}")
        if stack.activation not in ACTIVATIONS:
            raise ValueError(f"activation: {stack.activation!r} has no C form")
        self.stack, self.cache_dtype = stack, cache_dtype
        self.kernels = stack.kernels
        layers = np.zeros((len(stack.layers), _LAYER_WIDTH), dtype=np.int64)
        for record, layer in zip(layers, stack.layers, strict=True):
            self._describe(record, layer)
        self.layers = layers
        model = np.zeros(len(_MODEL_FIELDS), dtype=np.int64)
        values = {
            "n_layers": len(stack.layers), "dim": stack.layers[0].attn_norm.numel(),
            "n_heads": stack.n_heads, "n_kv_heads": stack.n_kv_heads, "head_dim": stack.head_dim,
            "rope_dim": stack.rope_dim, "rope_neox": int(stack.rope_style == "neox"), "ffn_dim": stack.ffn_dim,
            "activation": ACTIVATIONS[stack.activation], "terms": stack.kernels.terms,
            "cache_type": CACHE_TYPES[cache_dtype], "scale": stack.scale, "eps": stack.eps,
            "layers": layers.ctypes.data,
        }  # fmt: skip
        for name, value in values.items():
            _put(model, _MODEL, name, value)
        self.model = model
        self.kernels.impl.decode_check(model.ctypes.data)

    @classmethod
    def build(cls, stack: DecodeStack | None, cache_dtype: torch.dtype) -> DecodeProgram | None:
        """The program, or None where the C step does not apply (no lean stack, a cache dtype or an FFN it lacks)."""
        if stack is None or cache_dtype not in CACHE_TYPES or stack.activation not in ACTIVATIONS:
            return None
        if any(layer.moe is not None and not isinstance(layer.moe.experts, CpuExperts) for layer in stack.layers):
            return None
        return cls(stack, cache_dtype)

    @staticmethod
    def _describe(record: np.ndarray, layer) -> None:
        for name in ("attn_norm", "qkv_bias", "qk_norm", "wo_bias", "sinks", "post_attn_norm", "ffn_norm",
                     "post_ffn_norm"):  # fmt: skip
            _put(record, _LAYER, name, _address(getattr(layer, name)))
        if len(layer.qkv) != 3:
            raise ValueError("decode records need q, k and v as three weights")
        _put(record, _LAYER, "qkv", _weights(layer.qkv))
        _put(record, _LAYER, "wo", _weights((layer.wo,)))
        _put(record, _LAYER, "window", layer.window)
        moe = layer.moe
        if moe is None:
            _put(record, _LAYER, "gate_up", _weights(layer.gate_up))
            _put(record, _LAYER, "down", _weights((layer.down,)))
            return
        e = moe.experts
        values = {
            "router": _address(moe.router), "router_bias": _address(moe.router_bias),
            "moe_table": e.table.data_ptr(), "n_experts": e.n_experts, "top_k": moe.top_k, "expert_ffn": e.ffn_dim,
            "gate_bias": _address(e.gate_bias), "up_bias": _address(e.up_bias), "down_bias": _address(e.down_bias),
            "moe_act": MOE_ACTIVATIONS[e.activation.kind], "routing": ROUTINGS[moe.routing],
            "alpha": e.activation.alpha, "limit": e.activation.limit,
        }  # fmt: skip
        for name, value in values.items():
            _put(record, _LAYER, name, value)

    def accepts(self, kv_cache: list[tuple[torch.Tensor, torch.Tensor]]) -> bool:
        """Whether a step over this cache can run here (its dtype is the program's)."""
        return kv_cache[0][0].dtype == self.cache_dtype

    def _kv_table(self, kv_cache: list[tuple[torch.Tensor, torch.Tensor]]) -> np.ndarray:
        """Every layer's k and v cache addresses, taken afresh each step (a kept table would keep a cache alive
        after its engine, or name freed memory): ~15 us for 30 layers."""
        if len(kv_cache) != len(self.stack.layers):
            raise ValueError(f"kv_cache has {len(kv_cache)} layers, the program {len(self.stack.layers)}")
        shape = kv_cache[0][0].shape
        want = (self.stack.n_kv_heads, self.stack.head_dim)
        if len(shape) != 4 or tuple(shape[2:]) != want:
            raise ValueError(f"kv_cache rows must be {want}, got {tuple(shape[2:])}")
        addresses = []
        for pair in kv_cache:
            for c in pair:
                if c.dtype != self.cache_dtype or c.shape != shape or not c.is_contiguous() or c.device.type != "cpu":
                    raise ValueError("every layer's k and v cache: contiguous CPU tensors of one shape and dtype")
                addresses.append(c.data_ptr())
        return np.array(addresses, dtype=np.int64)

    def run(
        self, x: torch.Tensor, meta: AttentionMetadata, rope_global: RopeTable, rope_local: RopeTable,
        kv_cache: list[tuple[torch.Tensor, torch.Tensor]],
    ) -> torch.Tensor:  # fmt: skip
        """x (T, dim) float32, the step's new rows -> x after every layer (a new tensor)."""
        kv = self._kv_table(kv_cache)
        if x.dim() != 2 or x.shape[1] != self.model[_MODEL["dim"]][0]:
            raise ValueError(f"x: must be (T, {int(self.model[_MODEL['dim']][0])}), got {tuple(x.shape)}")
        x = x.to(torch.float32, copy=True).contiguous()
        tables = meta.block_tables.to(torch.int32).contiguous()
        query_start = meta.query_start.to(torch.int32).contiguous()
        positions, slots = (t.to(torch.int64).contiguous() for t in (meta.positions, meta.slot_mapping))
        tables_of_rope = (rope_global.cos_full, rope_global.sin_signed, rope_local.cos_full, rope_local.sin_signed)
        rope = [t.to(torch.float32).contiguous() for t in tables_of_rope]
        num_blocks, block_size = kv_cache[0][0].shape[:2]
        self.kernels.impl.decode(
            self.model.ctypes.data, x.data_ptr(), x.shape[0], len(meta.seq_lens_host), positions.data_ptr(),
            slots.data_ptr(), query_start.data_ptr(), tables.data_ptr(), tables.shape[1], block_size, num_blocks,
            kv.ctypes.data, *(t.data_ptr() for t in rope),
        )  # fmt: skip
        return x
