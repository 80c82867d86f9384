"""Engine configuration: how many slots, how much context each holds, how the KV pool is cut up."""

from __future__ import annotations

from dataclasses import dataclass

from lexi.engine.ngram import SpecConfig


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """What `lexi-engine serve` options decide about the engine; one field per option.

    The KV pool holds ``ctx_size * parallel`` tokens, so every admitted request (prompt + max_tokens
    within ctx_size) can always grow to its limit: blocks are allocated lazily and never preempted.
    """

    parallel: int = 4  # slots: sequences decoded together
    ctx_size: int = 4096  # tokens per slot (prompt + generated)
    batch_size: int = 512  # prompt tokens prefilled per step, so running decodes keep flowing
    block_size: int = 16  # tokens per KV block
    queue_wait: float = 0.0  # seconds a request waits for a free slot before EngineBusy
    spec: SpecConfig = SpecConfig()  # speculative decoding (lexi.engine.ngram); off here, `serve` defaults to ngram

    def __post_init__(self) -> None:
        if not 1 <= self.parallel <= 256:
            raise ValueError(f"parallel must be in [1, 256], got {self.parallel}")
        if not 1 <= self.block_size <= 256:
            raise ValueError(f"block_size must be in [1, 256], got {self.block_size}")
        if not self.block_size <= self.ctx_size <= 1 << 20:
            raise ValueError(f"ctx_size must be in [block_size={self.block_size}, 1048576], got {self.ctx_size}")
        if not 1 <= self.batch_size <= 1 << 16:
            raise ValueError(f"batch_size must be in [1, 65536], got {self.batch_size}")
        if not 0.0 <= self.queue_wait <= 86400.0:
            raise ValueError(f"queue_wait must be in [0, 86400] seconds, got {self.queue_wait}")

    @property
    def blocks_per_slot(self) -> int:
        return -(-self.ctx_size // self.block_size)

    @property
    def num_blocks(self) -> int:
        """Blocks in the pool: enough for every slot to reach ctx_size at once."""
        return self.blocks_per_slot * self.parallel
