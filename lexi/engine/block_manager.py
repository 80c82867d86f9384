"""KV block pool: per-sequence block tables, reference-counted prefix sharing, LRU reuse (no torch).

A full block is identified by a chained hash of every token up to and including it, so two
sequences share a block only when their whole prefix matches. Hashes are registered only once a
block's K/V has been computed, so a sequence can never pick up a block that is still being filled.
A block whose holders are all gone keeps its hash and stays findable until the pool needs it back;
blocks without a hash are reused first, then cached ones oldest-freed first.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field

from lexi.engine.sequence import Sequence


def block_hash(parent: int | None, tokens: list[int] | tuple[int, ...]) -> int:
    """The chained hash of a block: its tokens and the hash of the block before it."""
    return hash((parent, tuple(tokens)))


@dataclass(slots=True)
class Block:
    block_id: int
    ref_count: int = 0
    hash: int | None = None  # set once full and computed
    token_ids: tuple[int, ...] = ()  # kept with the hash to rule out collisions


@dataclass(slots=True)
class BlockManager:
    num_blocks: int
    block_size: int
    blocks: list[Block] = field(init=False)
    _free_plain: deque[int] = field(init=False)  # free, no hash: reused first
    _free_cached: OrderedDict[int, None] = field(init=False)  # free with a hash, oldest first
    _by_hash: dict[int, int] = field(init=False)  # hash -> block id

    def __post_init__(self) -> None:
        if self.num_blocks < 1 or self.block_size < 1:
            raise ValueError(f"num_blocks and block_size must be >= 1, got {self.num_blocks}, {self.block_size}")
        self.blocks = [Block(i) for i in range(self.num_blocks)]
        self._free_plain = deque(range(self.num_blocks))
        self._free_cached = OrderedDict()
        self._by_hash = {}

    @property
    def num_free(self) -> int:
        """Blocks nobody holds (cached ones included: they are evictable)."""
        return len(self._free_plain) + len(self._free_cached)

    @property
    def num_cached(self) -> int:
        return len(self._by_hash)

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def _take_free(self) -> Block:
        if self._free_plain:
            block = self.blocks[self._free_plain.popleft()]
        elif self._free_cached:
            block_id, _ = self._free_cached.popitem(last=False)
            block = self.blocks[block_id]
            del self._by_hash[block.hash]
            block.hash, block.token_ids = None, ()
        else:
            raise RuntimeError("KV block pool exhausted")  # the scheduler's sizing makes this unreachable
        block.ref_count = 1
        return block

    def _hold(self, block: Block) -> None:
        if block.ref_count == 0:
            del self._free_cached[block.block_id]
        block.ref_count += 1

    def match_prefix(self, seq: Sequence) -> None:
        """Give a newly admitted sequence the cached blocks of its longest matching prompt prefix.

        At least one prompt token is always left to compute, since its logits pick the first output token.
        """
        assert not seq.block_table, "prefix matching is for a sequence without blocks"
        if seq.wants_prompt_logits:  # every prompt position's logits are wanted: nothing comes from the cache
            return
        parent: int | None = None
        full = (seq.num_prompt - 1) // self.block_size
        for i in range(full):
            tokens = tuple(seq.token_ids[i * self.block_size : (i + 1) * self.block_size])
            h = block_hash(parent, tokens)
            block_id = self._by_hash.get(h)
            if block_id is None or self.blocks[block_id].token_ids != tokens:
                break
            self._hold(self.blocks[block_id])
            seq.block_table.append(block_id)
            seq.block_hashes.append(h)
            parent = h
        seq.num_cached = seq.num_computed = len(seq.block_table) * self.block_size

    def ensure_capacity(self, seq: Sequence, num_tokens: int) -> None:
        """Grow the sequence's block table to hold its first `num_tokens` tokens."""
        while len(seq.block_table) < self.blocks_needed(num_tokens):
            seq.block_table.append(self._take_free().block_id)

    def commit(self, seq: Sequence) -> None:
        """Register the hashes of blocks that became full and computed (after a step wrote their K/V)."""
        while (len(seq.block_hashes) + 1) * self.block_size <= seq.num_computed:
            i = len(seq.block_hashes)
            tokens = tuple(seq.token_ids[i * self.block_size : (i + 1) * self.block_size])
            h = block_hash(seq.block_hashes[-1] if seq.block_hashes else None, tokens)
            seq.block_hashes.append(h)
            block = self.blocks[seq.block_table[i]]
            if block.hash is None and h not in self._by_hash:
                block.hash, block.token_ids = h, tokens
                self._by_hash[h] = block.block_id

    def free(self, seq: Sequence) -> None:
        """Drop the sequence's hold on its blocks; last blocks first, so they are evicted first."""
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            assert block.ref_count >= 0, f"block {block_id} freed twice"
            if block.ref_count == 0:
                if block.hash is None:
                    self._free_plain.append(block_id)
                else:
                    self._free_cached[block_id] = None
        seq.block_table.clear()
        seq.block_hashes.clear()
