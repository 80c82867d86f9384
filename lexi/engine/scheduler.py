"""Decides what runs each step: slots, FIFO waiting with a deadline, chunked prefill beside decodes (no torch).

Every step feeds one token to each decoding sequence first, then spends what is left of the
``batch_size`` token budget on prompt chunks, oldest request first: a long prompt never stalls the
sequences already streaming. Requests join and leave between steps (continuous batching).

A group (the sequences of one request: its n choices, its prompts) takes its slots together or not
at all, and a prompt its sequences share is computed once: a sequence with a leader waits until the
leader has prefilled, then matches its blocks in the prefix cache and computes only what is left
(the last, partial block). A group larger than the slots starts with every slot at once; its other
members then queue at the front, one slot at a time as slots come free, with no deadline (the request
is admitted: they are its choices, not new requests), and match the prefix cache the same way.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from lexi.engine.block_manager import BlockManager
from lexi.engine.config import EngineConfig
from lexi.engine.errors import ContextOverflow
from lexi.engine.sequence import SeqStatus, Sequence


@dataclass(slots=True)
class ScheduledSeq:
    seq: Sequence
    num_new: int  # tokens fed this step, starting at seq.num_computed (a decode's draft included)
    sample: bool  # the last of them yields logits to sample the next token from
    draft: tuple[int, ...] = ()  # proposed tokens fed after the last sampled one: every row's logits checks one


@dataclass(slots=True)
class SchedulerOutput:
    scheduled: list[ScheduledSeq] = field(default_factory=list)
    admitted: list[Sequence] = field(default_factory=list)  # took a slot this step
    matched: list[Sequence] = field(default_factory=list)  # followers that matched the prefix cache this step
    rejected: list[Sequence] = field(default_factory=list)  # waited past queue_wait: EngineBusy
    aborted: list[Sequence] = field(default_factory=list)  # removed, blocks freed

    @property
    def num_tokens(self) -> int:
        return sum(s.num_new for s in self.scheduled)


class Scheduler:
    """Owns the waiting queue, the running slots and the block pool; the engine thread alone calls it."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.blocks = BlockManager(config.num_blocks, config.block_size)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self._abort_ids: set[str] = set()

    def check_fits(self, num_prompt: int, max_tokens: int) -> None:
        if num_prompt < 1:
            raise ValueError("prompt_ids must hold at least one token")
        if num_prompt + max_tokens > self.config.ctx_size:
            raise ContextOverflow(
                f"prompt ({num_prompt} tokens) + max_tokens ({max_tokens}) exceeds the context size "
                f"of {self.config.ctx_size} tokens"
            )

    def add(self, seq: Sequence, now: float) -> None:
        """Queue a sequence; ContextOverflow if it could never fit a slot."""
        self.add_group([seq], now)

    def add_group(self, seqs: list[Sequence], now: float) -> None:
        """Queue sequences that take their slots together (one request's choices; the first prefills for all).

        A group larger than the slots takes all of them first and the rest as they free up (the module
        docstring). ContextOverflow if one could never fit a slot.
        """
        for seq in seqs:
            self.check_fits(seq.num_prompt, seq.max_tokens)
        group = list(seqs) if len(seqs) > 1 else None
        for seq in seqs:
            seq.arrival, seq.deadline = now, now + self.config.queue_wait
            seq.status = SeqStatus.WAITING
            seq.group = group
            self.waiting.append(seq)

    def abort(self, request_id: str) -> None:
        """Honoured at the next schedule()."""
        self._abort_ids.add(request_id)

    @property
    def has_work(self) -> bool:
        return bool(self.running or self.waiting or self._abort_ids)

    def schedule(self, now: float) -> SchedulerOutput:
        out = SchedulerOutput()
        if self._abort_ids:
            self._remove_aborted(out)
        while self.waiting and len(self.running) + self._admission_size(self.waiting[0]) <= self.config.parallel:
            for _ in range(self._admission_size(self.waiting[0])):
                seq = self.waiting.popleft()
                if seq.leader is None:
                    self.blocks.match_prefix(seq)
                else:
                    seq.awaiting_leader = True
                seq.status = SeqStatus.RUNNING
                self.running.append(seq)
                out.admitted.append(seq)
                if seq.group and seq.deadline != math.inf:  # the group's first: the request is in, so its
                    for rest in seq.group:  # other choices wait for slots, however long
                        if rest.status is SeqStatus.WAITING:
                            rest.deadline = math.inf
        # FIFO: a later request never overtakes an earlier one. A group expires whole: its members share a
        # deadline, and a started group's rest has none. Behind such a group later requests still expire
        # on time, so the whole queue is looked at, not only its front.
        if self.waiting and min(s.deadline for s in self.waiting) <= now:
            expired = [s for s in self.waiting if s.deadline <= now]
            self.waiting = deque(s for s in self.waiting if s.deadline > now)
            out.rejected.extend(self._drop(s) for s in expired)
        self._build_batch(out)
        return out

    def _build_batch(self, out: SchedulerOutput) -> None:
        budget = self.config.batch_size
        for seq in self.running:
            if not seq.prefilling:
                draft, seq.draft = tuple(seq.draft), []
                self.blocks.ensure_capacity(seq, seq.num_computed + 1 + len(draft))
                out.scheduled.append(ScheduledSeq(seq, 1 + len(draft), True, draft))
                budget -= 1 + len(draft)
        budget = max(budget, 1)
        for seq in self.running:
            if budget == 0:
                break
            if seq.awaiting_leader and not self._leader_done(seq, out):
                continue
            if seq.prefilling:
                n = min(seq.num_prompt - seq.num_computed, budget)
                self.blocks.ensure_capacity(seq, seq.num_computed + n)
                out.scheduled.append(ScheduledSeq(seq, n, seq.num_computed + n == seq.num_prompt))
                budget -= n

    def _admission_size(self, seq: Sequence) -> int:
        """How many sequences from the front of the queue take their slots together with `seq`.

        A group not yet started: all its members (at most all the slots). A started one: one at a time.
        """
        if not seq.group:
            return 1
        waiting = sum(1 for s in seq.group if s.status is SeqStatus.WAITING)
        if waiting < len(seq.group):
            return 1
        return min(waiting, self.config.parallel)

    def _leader_done(self, seq: Sequence, out: SchedulerOutput) -> bool:
        """Whether a follower may start: its leader has prefilled (or left). It matches the prefix cache then."""
        leader = seq.leader
        if leader is not None and leader.status is SeqStatus.RUNNING and leader.prefilling:
            return False
        seq.awaiting_leader = False
        self.blocks.match_prefix(seq)
        out.matched.append(seq)
        return True

    def advance(self, scheduled: list[ScheduledSeq], sampled: list[list[int] | None]) -> None:
        """Record a finished step: fed tokens are now cached; sampled tokens join their sequences.

        A row with a draft samples the accepted draft tokens and one more: only the accepted ones' K/V count
        as cached (the rejected positions are written over later, and no block holding them is hashed)."""
        for item, tokens in zip(scheduled, sampled, strict=True):
            accepted = min(len(tokens) - 1, len(item.draft)) if tokens else 0
            item.seq.num_computed += item.num_new - len(item.draft) + accepted
            if tokens is not None:
                item.seq.token_ids.extend(tokens)
            self.blocks.commit(item.seq)

    def finish(self, seq: Sequence) -> None:
        """Give the slot and its blocks back (finished, failed or aborted)."""
        if seq.status is SeqStatus.RUNNING:
            self.running.remove(seq)
        elif seq.status is SeqStatus.WAITING:
            self.waiting.remove(seq)
        if seq.group is not None and seq in seq.group and seq.status is SeqStatus.WAITING:
            seq.group.remove(seq)  # still queued: the rest of the group waits for fewer slots
        self._drop(seq)

    def _drop(self, seq: Sequence) -> Sequence:
        self.blocks.free(seq)
        seq.status = SeqStatus.FINISHED
        return seq

    def _remove_aborted(self, out: SchedulerOutput) -> None:
        ids, self._abort_ids = self._abort_ids, set()
        for seq in [s for s in (*self.running, *self.waiting) if s.request_id in ids]:
            self.finish(seq)
            out.aborted.append(seq)
