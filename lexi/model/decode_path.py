"""How a step runs the layers: the one decode path the loader hands a `Transformer` (lexi/model/loader.py).

- `ModuleDecode`: every step through the blocks' modules. On CUDA, and with Triton kernels anywhere (on a CPU,
  the interpreter, for tests).
- `CpuDecode`: a CPU load on the reference kernels. A short step (every sequence adds 1 to SHORT_STEP_ROWS rows)
  runs as one C call for every layer where the program takes it (lexi/model/decode_c.py); other decode steps run
  the lean loop where every layer's matmuls are on the CPU kernels (lexi/model/decode_cpu.py); the rest, the
  modules, with the CPU's decode attention plan.

The paths differ only in how many calls a step makes: tests/model/test_decode_c.py and test_short_steps.py hold
each to the others.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

import torch

from lexi.kernels.paged_attention import AttentionMetadata
from lexi.model.block import Block
from lexi.model.decode_c import DecodeProgram, short_step
from lexi.model.decode_cpu import DecodeStack, run_decode
from lexi.model.step import StepPlan

KVCache = list[tuple[torch.Tensor, torch.Tensor]]
# The step's StepPlan, given whether it should carry the CPU's decode attention plan (lexi/model/step.py).
PlanOf = Callable[[bool], StepPlan]


class DecodePath(Protocol):
    """What a `Transformer` asks of its layers: one step's rows through every layer."""

    cpu_paths: ClassVar[bool]  # whether the CPU's own paths (the C step, the lean loop) can take a step
    stack: DecodeStack | None  # the lean loop's view of the layers, where there is one
    program: DecodeProgram | None  # the C step, where there is one

    def run(
        self, x: torch.Tensor, meta: AttentionMetadata, kv_cache: KVCache, plan_of: PlanOf, deterministic: bool
    ) -> torch.Tensor:
        """x (T, dim), the step's rows in the residual stream's dtype -> x after every layer."""
        ...


def run_blocks(
    blocks: Sequence[Block], x: torch.Tensor, plan: StepPlan, meta: AttentionMetadata, kv_cache: KVCache
) -> torch.Tensor:
    for block, cache in zip(blocks, kv_cache, strict=True):
        x = block(x, plan, meta, cache)
    return x


@dataclass(frozen=True, slots=True)
class ModuleDecode:
    """Every step through the blocks' modules."""

    blocks: tuple[Block, ...]
    cpu_paths: ClassVar[bool] = False
    stack: ClassVar[None] = None
    program: ClassVar[None] = None

    def run(
        self, x: torch.Tensor, meta: AttentionMetadata, kv_cache: KVCache, plan_of: PlanOf, deterministic: bool
    ) -> torch.Tensor:
        return run_blocks(self.blocks, x, plan_of(False), meta, kv_cache)


@dataclass(frozen=True, slots=True)
class CpuDecode:
    """The C step where it applies, else the lean loop, else the modules (see the module docstring)."""

    blocks: tuple[Block, ...]
    stack: DecodeStack | None  # None where a layer does not fit the lean loop (dense weights, FFN biases, softcap)
    program: DecodeProgram | None  # None where the C step does not apply; tests pass None to force the loop
    cpu_paths: ClassVar[bool] = True

    @classmethod
    def build(cls, blocks: Sequence[Block], cache_dtype: torch.dtype) -> CpuDecode:
        stack = DecodeStack.from_blocks(list(blocks))
        return cls(tuple(blocks), stack, DecodeProgram.build(stack, cache_dtype))

    def run(
        self, x: torch.Tensor, meta: AttentionMetadata, kv_cache: KVCache, plan_of: PlanOf, deterministic: bool
    ) -> torch.Tensor:
        program = self.program
        if program is not None and not deterministic and short_step(meta) and program.accepts(kv_cache):
            plan = plan_of(False)  # the C step plans its own attention
            return program.run(x, meta, plan.rope_global, plan.rope_local, kv_cache)
        plan = plan_of(True)
        if plan.decode is not None and self.stack is not None:
            return run_decode(self.stack, x, plan, meta.slot_mapping, kv_cache)
        return run_blocks(self.blocks, x, plan, meta, kv_cache)


def decode_path(blocks: Sequence[Block], device: torch.device, kernels: str, cache_dtype: torch.dtype) -> DecodePath:
    """The path for a load. The CPU's own paths serve the reference kernels only: with Triton kernels on a CPU (the
    interpreter, for tests) every step takes the modules, as it does on CUDA."""
    if device.type == "cpu" and kernels == "reference":
        return CpuDecode.build(blocks, cache_dtype)
    return ModuleDecode(tuple(blocks))
