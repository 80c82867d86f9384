"""The KV block pool on plain data: tables, prefix sharing with reference counts, LRU eviction."""

from __future__ import annotations

import pytest

from lexi.engine.block_manager import BlockManager
from lexi.engine.sequence import Sequence

BS = 4


def prefill(bm: BlockManager, seq: Sequence) -> None:
    """What a scheduler + step do for a whole prompt: match, grow, compute, commit."""
    bm.match_prefix(seq)
    bm.ensure_capacity(seq, seq.num_prompt)
    seq.num_computed = seq.num_prompt
    bm.commit(seq)


def test_table_grows_by_blocks_and_free_returns_everything():
    bm = BlockManager(num_blocks=8, block_size=BS)
    seq = Sequence("a", list(range(10)), max_tokens=4)
    bm.match_prefix(seq)
    assert seq.num_cached == 0
    bm.ensure_capacity(seq, 10)
    assert len(seq.block_table) == 3 and len(set(seq.block_table)) == 3
    bm.ensure_capacity(seq, 12)
    assert len(seq.block_table) == 3
    bm.ensure_capacity(seq, 13)
    assert len(seq.block_table) == 4
    assert bm.num_free == 4
    bm.free(seq)
    assert bm.num_free == 8 and seq.block_table == []


def test_shared_prefix_is_reused_with_reference_counts():
    bm = BlockManager(num_blocks=16, block_size=BS)
    a = Sequence("a", list(range(13)), max_tokens=4)
    prefill(bm, a)
    assert bm.num_cached == 3  # three full blocks, the partial fourth is not hashable
    b = Sequence("b", list(range(9)) + [99, 98, 97], max_tokens=4)
    bm.match_prefix(b)
    assert b.num_cached == 8 and b.block_table == a.block_table[:2]
    assert [bm.blocks[i].ref_count for i in a.block_table] == [2, 2, 1, 1]
    bm.ensure_capacity(b, b.num_prompt)
    assert b.block_table[2] not in a.block_table
    bm.free(a)
    assert [bm.blocks[i].ref_count for i in b.block_table[:2]] == [1, 1]
    bm.free(b)
    assert bm.num_free == 16


def test_whole_prompt_hit_still_leaves_a_token_to_compute():
    bm = BlockManager(num_blocks=8, block_size=BS)
    prefill(bm, Sequence("a", list(range(8)), max_tokens=1))
    again = Sequence("b", list(range(8)), max_tokens=1)
    bm.match_prefix(again)
    assert again.num_cached == 4  # the second block holds the last prompt token: recomputed


def test_prefix_hash_covers_all_earlier_tokens():
    bm = BlockManager(num_blocks=8, block_size=BS)
    prefill(bm, Sequence("a", [1, 2, 3, 4, 5, 6, 7, 8, 9], max_tokens=1))
    other = Sequence("b", [0, 2, 3, 4, 5, 6, 7, 8, 9], max_tokens=1)  # same second block, other first
    bm.match_prefix(other)
    assert other.num_cached == 0


def test_blocks_are_not_findable_until_computed():
    bm = BlockManager(num_blocks=8, block_size=BS)
    a = Sequence("a", list(range(9)), max_tokens=1)
    bm.match_prefix(a)
    bm.ensure_capacity(a, 9)
    a.num_computed = 4  # a chunk of one block so far
    bm.commit(a)
    b = Sequence("b", list(range(9)), max_tokens=1)
    bm.match_prefix(b)
    assert b.num_cached == 4


def test_freed_cached_blocks_stay_hashable_until_evicted_lru():
    bm = BlockManager(num_blocks=4, block_size=BS)
    a = Sequence("a", list(range(9)), max_tokens=1)  # two full blocks + one partial
    prefill(bm, a)
    bm.free(a)
    assert bm.num_free == 4 and bm.num_cached == 2
    hit = Sequence("hit", list(range(9)), max_tokens=1)
    bm.match_prefix(hit)
    assert hit.num_cached == 8
    bm.free(hit)
    # Plain blocks go first, then cached ones in LRU order (the deeper block was freed first).
    c = Sequence("c", [50] * 16, max_tokens=1)
    bm.match_prefix(c)
    bm.ensure_capacity(c, 9)
    assert bm.num_cached == 1
    survivor = Sequence("s", list(range(5)), max_tokens=1)
    bm.match_prefix(survivor)
    assert survivor.num_cached == 4
    bm.free(survivor)
    bm.ensure_capacity(c, 16)
    assert bm.num_cached == 0 and bm.num_free == 0
    with pytest.raises(RuntimeError, match="exhausted"):
        bm.ensure_capacity(c, 17)


def test_token_collisions_are_ruled_out_by_content():
    bm = BlockManager(num_blocks=8, block_size=BS)
    a = Sequence("a", list(range(5)), max_tokens=1)
    prefill(bm, a)
    block = bm.blocks[a.block_table[0]]
    block.token_ids = (9, 9, 9, 9)  # pretend another prefix hashed the same
    b = Sequence("b", list(range(5)), max_tokens=1)
    bm.match_prefix(b)
    assert b.num_cached == 0
