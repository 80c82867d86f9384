"""`StepPlan`: what every layer of one forward shares, worked out once per step instead of once per layer.

Why it exists: a decode step of a small model is mostly per-op overhead, so anything the 18-30 layers would
each recompute (rope tables, the decode attention's block gathers and masks) is computed here once.

It also carries `deterministic`. With it the step takes only paths whose result for a row does not depend
on the other rows: every linear through the weight-only kernels (each output row computed the same way
whatever the row count; tests check it bit for bit), the head through exact integer sums, and attention row
by row over exactly each row's keys. Then a greedy request gives the same tokens alone, in any batch, and
after a prefix-cache hit. Without it, decode-sized steps take the weight-only kernels and prefill chunks the
dense GEMM, which round differently, so a near-tie can flip between those cases.
"""

from __future__ import annotations

from dataclasses import dataclass

from lexi.kernels.paged_attention import AttentionMetadata
from lexi.kernels.paged_attention_cpu import DecodeBatch
from lexi.model.rope import RopeCache, RopeTable


@dataclass(frozen=True, slots=True)
class StepPlan:
    rope_global: RopeTable  # rotation of this step's positions for global-attention layers
    rope_local: RopeTable  # ... for sliding-window layers (gemma3's own base); == rope_global elsewhere
    decode: DecodeBatch | None  # CPU decode steps (1 to SHORT_STEP_ROWS new rows a sequence): the attention plan
    deterministic: bool = False  # row-independent paths everywhere (see the module docstring)

    @classmethod
    def build(
        cls,
        meta: AttentionMetadata,
        rope_global: RopeCache,
        rope_local: RopeCache | None,
        *,
        cpu: bool,
        block_size: int,
        windows: frozenset[int],
        deterministic: bool,
    ) -> StepPlan:
        top = max(meta.seq_lens_host, default=1) - 1
        g = rope_global.table(meta.positions, top)
        local = rope_local.table(meta.positions, top) if rope_local is not None else g
        decode = None
        if cpu and not deterministic:
            decode = DecodeBatch.build(meta, block_size, windows)
        return cls(g, local, decode, deterministic)
