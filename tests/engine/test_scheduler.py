"""The scheduler on plain data: slots, FIFO waiting with queue_wait, chunked prefill beside decodes, aborts."""

from __future__ import annotations

import pytest

from lexi.engine.config import EngineConfig
from lexi.engine.errors import ContextOverflow
from lexi.engine.scheduler import Scheduler
from lexi.engine.sequence import SeqStatus, Sequence


def seq(rid: str, n: int, max_tokens: int = 8, base: int = 0) -> Sequence:
    return Sequence(rid, [base + i for i in range(n)], max_tokens)


def run_step(sched: Scheduler, now: float = 0.0, token: int = 7):
    """One step with a fake model: every sampling row yields `token`."""
    out = sched.schedule(now)
    sched.advance(out.scheduled, [[token] if s.sample else None for s in out.scheduled])
    return out


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="parallel"):
        EngineConfig(parallel=0)
    with pytest.raises(ValueError, match="ctx_size"):
        EngineConfig(ctx_size=8, block_size=16)
    with pytest.raises(ValueError, match="queue_wait"):
        EngineConfig(queue_wait=-1)
    assert EngineConfig(parallel=3, ctx_size=100, block_size=16).num_blocks == 3 * 7


def test_context_overflow_is_refused_before_taking_a_slot():
    sched = Scheduler(EngineConfig(parallel=1, ctx_size=64, block_size=16))
    with pytest.raises(ContextOverflow, match="64"):
        sched.add(seq("a", 60, max_tokens=5), 0.0)
    assert not sched.waiting and not sched.running
    sched.add(seq("b", 60, max_tokens=4), 0.0)  # exactly fits
    assert len(sched.waiting) == 1


def test_long_prompt_is_chunked_while_decodes_keep_flowing():
    sched = Scheduler(EngineConfig(parallel=2, ctx_size=256, batch_size=32, block_size=16))
    short = seq("short", 5)
    sched.add(short, 0.0)
    out = run_step(sched)
    assert [(s.seq.request_id, s.num_new, s.sample) for s in out.scheduled] == [("short", 5, True)]
    long = seq("long", 100, base=1000)
    sched.add(long, 0.0)
    chunks = []
    while long.prefilling:
        out = run_step(sched)
        plan = {s.seq.request_id: (s.num_new, s.sample) for s in out.scheduled}
        assert plan["short"] == (1, True)  # the decode is in every step
        chunks.append(plan["long"])
        assert out.num_tokens <= 32
    assert chunks == [(31, False), (31, False), (31, False), (7, True)]
    assert long.num_output == 1 and long.num_computed == 100
    assert short.num_output == 5


def test_parallel_slots_and_fifo_wait_then_busy():
    sched = Scheduler(EngineConfig(parallel=2, ctx_size=64, block_size=16, queue_wait=1.0))
    for i, rid in enumerate("abcd"):
        sched.add(seq(rid, 4, base=10 * i), now=0.1 * i)
    out = run_step(sched, now=0.5)
    assert [s.request_id for s in out.admitted] == ["a", "b"]
    assert [s.request_id for s in sched.waiting] == ["c", "d"] and not out.rejected
    a = sched.running[0]
    sched.finish(a)
    assert a.status is SeqStatus.FINISHED
    out = run_step(sched, now=1.05)  # c (arrived 0.2) takes the slot before d, first in first out
    assert [s.request_id for s in out.admitted] == ["c"] and not out.rejected
    out = run_step(sched, now=1.35)  # d arrived at 0.3: its deadline 1.3 has passed
    assert [s.request_id for s in out.rejected] == ["d"] and not sched.waiting
    assert out.rejected[0].status is SeqStatus.FINISHED


def test_zero_queue_wait_rejects_at_once_without_a_free_slot():
    sched = Scheduler(EngineConfig(parallel=1, ctx_size=64, block_size=16))
    sched.add(seq("a", 4), 0.0)
    sched.add(seq("b", 4), 0.0)
    out = run_step(sched, now=0.0)
    assert [s.request_id for s in out.admitted] == ["a"]
    assert [s.request_id for s in out.rejected] == ["b"]


def test_abort_at_next_step_frees_blocks_running_and_waiting():
    config = EngineConfig(parallel=2, ctx_size=64, block_size=16, queue_wait=10)
    sched = Scheduler(config)
    for rid in "abc":
        sched.add(seq(rid, 20), 0.0)
    run_step(sched)
    assert sched.blocks.num_free < config.num_blocks
    sched.abort("a")
    sched.abort("c")  # still waiting
    assert len(sched.running) == 2  # nothing happens until the next step
    out = run_step(sched)
    assert sorted(s.request_id for s in out.aborted) == ["a", "c"]
    assert [s.request_id for s in sched.running] == ["b"] and not sched.waiting
    sched.finish(sched.running[0])
    assert sched.blocks.num_free == config.num_blocks


def test_prefix_hit_skips_cached_tokens():
    sched = Scheduler(EngineConfig(parallel=2, ctx_size=128, block_size=16))
    first = seq("first", 40)
    sched.add(first, 0.0)
    run_step(sched)
    second = seq("second", 40)
    sched.add(second, 0.0)
    out = run_step(sched)
    plan = {s.seq.request_id: s.num_new for s in out.scheduled}
    assert second.num_cached == 32 and plan["second"] == 8
    assert second.block_table[:2] == first.block_table[:2]


def test_pool_never_runs_dry_with_every_slot_at_its_limit():
    config = EngineConfig(parallel=3, ctx_size=48, batch_size=64, block_size=16)
    sched = Scheduler(config)
    for rid in "abc":
        sched.add(seq(rid, 17, max_tokens=31, base=ord(rid) * 100), 0.0)
    steps = 0
    while sched.has_work:
        run_step(sched)
        steps += 1
        for s in list(sched.running):
            if s.num_output >= s.max_tokens:
                sched.finish(s)
    assert steps == 31 and not sched.running
    assert sched.blocks.num_free == config.num_blocks


def test_a_group_takes_its_slots_together_and_prefills_its_prompt_once():
    sched = Scheduler(EngineConfig(parallel=3, ctx_size=256, batch_size=512, block_size=16, queue_wait=60))
    other = seq("other", 5, base=500)
    sched.add(other, 0.0)
    run_step(sched)
    choices = [seq(f"c{i}", 40) for i in range(3)]  # three choices of one prompt: 3 slots, only 2 free
    for follower in choices[1:]:
        follower.leader = choices[0]  # as the engine marks sequences that share a prompt
    sched.add_group(choices, 0.0)
    out = run_step(sched)
    assert not out.admitted and len(sched.waiting) == 3  # all or nothing
    sched.finish(other)
    out = run_step(sched)
    assert [s.request_id for s in out.admitted] == ["c0", "c1", "c2"]
    assert [(s.seq.request_id, s.num_new) for s in out.scheduled] == [("c0", 40)]  # the first prefills alone
    out = run_step(sched)
    # the followers found the first's two full blocks in the cache and compute only the last, partial one
    assert [(s.seq.request_id, s.num_new) for s in out.scheduled if s.seq.request_id != "c0"] == [("c1", 8), ("c2", 8)]
    assert [c.num_cached for c in choices] == [0, 32, 32] and out.matched == choices[1:]


def test_a_group_larger_than_the_slots_takes_them_all_then_queues_without_a_deadline():
    """Was: such a group is refused (ValueError). Now its first members take every slot, the rest follow."""
    sched = Scheduler(EngineConfig(parallel=2, ctx_size=256, batch_size=512, block_size=16))  # queue_wait 0
    choices = [seq(f"c{i}", 40) for i in range(5)]
    for follower in choices[1:]:
        follower.leader = choices[0]
    sched.add_group(choices, 0.0)
    computed: dict[str, int] = {}  # prompt tokens computed, per choice

    def step(now: float):
        out = run_step(sched, now=now)
        for s in out.scheduled:
            if s.seq.num_computed <= s.seq.num_prompt:
                computed[s.seq.request_id] = computed.get(s.seq.request_id, 0) + s.num_new
        return out

    out = step(0.0)
    assert [s.request_id for s in out.admitted] == ["c0", "c1"] and not out.rejected
    assert [(s.seq.request_id, s.num_new) for s in out.scheduled] == [("c0", 40)]  # the first prefills alone
    late = seq("late", 4, base=900)  # a later request: FIFO, behind the rest of the group, with its own deadline
    sched.add(late, 5.0)
    out = step(100.0)  # long past any queue_wait: the group's rest still waits, `late` does not
    assert [s.request_id for s in out.rejected] == ["late"]
    assert [s.request_id for s in sched.waiting] == ["c2", "c3", "c4"]
    while sched.has_work:
        step(100.0)
        assert len(sched.running) <= 2
        for s in list(sched.running):
            if s.num_output >= 2:
                sched.finish(s)
    # the prompt once: every follower, queued or not, found its two full blocks in the cache
    assert computed == {"c0": 40, "c1": 8, "c2": 8, "c3": 8, "c4": 8}
    assert [c.num_cached for c in choices] == [0, 32, 32, 32, 32]
    assert sched.blocks.num_free == sched.config.num_blocks


def test_a_waiting_member_of_a_group_can_leave():
    sched = Scheduler(EngineConfig(parallel=2, ctx_size=64, block_size=16, queue_wait=60))
    busy = seq("busy", 4)
    sched.add(busy, 0.0)
    run_step(sched)
    group = [seq("g0", 4), seq("g1", 4)]
    sched.add_group(group, 0.0)
    run_step(sched)
    assert len(sched.waiting) == 2
    sched.finish(group[0])  # aborted while queued: the rest needs one slot, which is free
    out = run_step(sched)
    assert [s.request_id for s in out.admitted] == ["g1"] and group[1].num_output == 1


def test_a_waiting_group_expires_whole():
    sched = Scheduler(EngineConfig(parallel=2, ctx_size=64, block_size=16, queue_wait=1.0))
    sched.add(seq("busy", 4), 0.0)
    run_step(sched, now=0.0)
    sched.add_group([seq("g0", 4), seq("g1", 4)], 0.0)
    assert not run_step(sched, now=0.5).rejected and len(sched.waiting) == 2  # one slot free of the two it needs
    out = run_step(sched, now=2.0)
    assert [s.request_id for s in out.rejected] == ["g0", "g1"] and not sched.waiting
