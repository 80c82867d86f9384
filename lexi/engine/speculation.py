"""Where a step's drafts come from: prompt lookup (lexi.engine.ngram) or a draft model (lexi.engine.draft_model).

Before each step the engine asks `Speculator.propose` for the running sequences' drafts, within the step's
budget of draft tokens (lexi.engine.draft_budget); the step checks every draft position at once and `checked`
records how each draft fared (the sequence's pace, the counters). Only speed depends on what is proposed: a
check keeps the output what one token a step gives.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from lexi.engine.draft_budget import draft_budget, share_budget
from lexi.engine.draft_model import DraftCursor, DraftProposer, DraftRow
from lexi.engine.ngram import NgramIndex

if TYPE_CHECKING:
    from lexi.engine.config import EngineConfig
    from lexi.engine.runner import ModelRunner
    from lexi.engine.scheduler import ScheduledSeq, Scheduler
    from lexi.engine.sequence import Sequence
    from lexi.engine.stats import EngineStats

log = logging.getLogger(__name__)


class Speculator:
    """Drafts for the engine's decoding sequences; each sequence's payload keeps its own lookup index, draft-model
    cursor and pace (the engine's `_Stream`)."""

    def __init__(
        self, config: EngineConfig, runner: ModelRunner, scheduler: Scheduler, vocab_size: int, draft_model=None
    ) -> None:
        """`vocab_size`: the ids both the tokenizer and the served model have (a draft model proposes only those)."""
        self.spec = config.spec
        self.runner = runner
        self.scheduler = scheduler
        self.drafter = None
        if draft_model is not None:
            vocab = min(vocab_size, draft_model.args.vocab_size)
            self.drafter = DraftProposer(draft_model, config.num_blocks, config.block_size, config.batch_size, vocab,
                                         config.spec.p_min)  # fmt: skip

    def propose(self, running: list[Sequence], stats: EngineStats) -> None:
        """Set `seq.draft` (and the sampler's per-position masks) for every running sequence: empty for one that
        takes none this step (one still prefilling never does).

        With several sequences decoding, the drafts share the step's budget (lexi.engine.draft_budget): no draft
        is asked for more tokens than the whole budget, and what is proposed past it is cut (counted in `stats`).

        A constrained request's draft is walked through its constraint first (which must be able to come back:
        `snapshot`/`restore`): it keeps the prefix the constraint allows, short of a token that would finish the
        output, and the masks of every position go with it, so the check applies each position's own mask. A
        draft never reaches past max_tokens."""
        budget = draft_budget(self.runner.cheap_rows, sum(not seq.prefilling for seq in running))
        wanted: list[tuple[Sequence, int]] = []
        for seq in running:
            stream = seq.payload
            seq.draft, stream.sampler.draft_masks = [], None
            if seq.prefilling or not stream.request.params.speculative:
                continue
            room = seq.max_tokens - seq.num_output - 1
            if room < 1:
                continue
            constraint = stream.request.constraint
            if constraint is not None and (self.runner.sampler is None or not hasattr(constraint, "snapshot")):
                continue
            limit = min(stream.pace.limit(self.spec.max_tokens), room)
            if budget is not None:
                limit = min(limit, budget)
            if limit:
                wanted.append((seq, limit))
        if not wanted:
            return
        if self.drafter is not None:  # a draft model's tokens cost its passes: the budget is shared before it writes
            shares = share_budget([limit for _, limit in wanted], self._promise(wanted), budget)
            wanted = [(seq, share) for (seq, _), share in zip(wanted, shares, strict=True) if share]
            drafts = self._model_drafts(wanted)
        else:  # a lookup costs next to nothing, and often finds no match: shared over what it proposed
            drafts = self._lookup_drafts(wanted)
        kept = share_budget([len(d) for d in drafts], self._promise(wanted), budget)
        stats.spec_budget_cut_total += sum(len(d) for d in drafts) - sum(kept)
        for (seq, _), draft, keep in zip(wanted, drafts, kept, strict=True):
            draft = draft[:keep]
            constraint = seq.payload.request.constraint
            if draft and constraint is not None:
                draft, seq.payload.sampler.draft_masks = self._constrained_draft(constraint, draft)
            seq.draft = draft

    @staticmethod
    def count_rows(scheduled: list[ScheduledSeq], stats: EngineStats) -> None:
        """Keep the most rows a step's decoding sequences fed together (a token each and their drafts) where there
        were several: the figure the step budget holds within the model's cheap rows."""
        rows = [item.num_new for item in scheduled if not item.seq.prefilling]
        if len(rows) > 1:
            stats.spec_batch_rows_max = max(stats.spec_batch_rows_max, sum(rows))

    def checked(self, seq: Sequence, proposed: int, taken: int, stats: EngineStats) -> None:
        """A step checked `proposed` draft tokens of `seq` and took `taken` of them."""
        stats.spec_proposed_total += proposed
        stats.spec_accepted_total += taken
        stats.spec_steps_total += 1
        seq.payload.pace.checked(proposed, taken)
        seq.draft_proposed += proposed
        seq.draft_taken += taken

    @staticmethod
    def _promise(wanted: list[tuple[Sequence, int]]) -> list[int]:
        return [seq.payload.pace.last_taken for seq, _ in wanted]

    def _lookup_drafts(self, wanted: list[tuple[Sequence, int]]) -> list[list[int]]:
        drafts = []
        for seq, limit in wanted:
            stream = seq.payload
            if stream.ngram is None:
                stream.ngram = NgramIndex()
            stream.ngram.sync(seq.token_ids)
            drafts.append(stream.ngram.propose(limit, self.spec.min_match))
        return drafts

    def _model_drafts(self, wanted: list[tuple[Sequence, int]]) -> list[list[int]]:
        rows = []
        for seq, limit in wanted:
            stream = seq.payload
            if stream.draft_cursor is None:
                stream.draft_cursor = DraftCursor()
            # room for the draft model's K/V of the draft tokens it feeds (the step's own need, met early)
            self.scheduler.blocks.ensure_capacity(seq, len(seq.token_ids) + limit)
            rows.append(DraftRow(seq.token_ids, seq.block_table, stream.draft_cursor, limit, stream.sampler.banned))
        try:
            return self.drafter.propose(rows)
        except Exception:  # the draft model broke: this step decodes without drafts, and it starts afresh
            log.exception("the draft model's proposal failed")
            for seq, _ in wanted:
                seq.payload.draft_cursor = None
            return [[] for _ in wanted]

    def _constrained_draft(self, constraint, draft: list[int]) -> tuple[list[int], list | None]:
        """The prefix of `draft` the constraint allows, and its mask at each position (the one after it too); the
        constraint is walked along it and brought back."""
        sampler, masks = self.runner.sampler, []
        snapshot = constraint.snapshot()
        try:
            for token in draft:
                mask = sampler.constraint_mask(constraint, self.runner.device)
                if mask is not None and (mask.allows_nothing or not mask.allows(token)):
                    break
                constraint.advance(token)
                if constraint.is_finished():  # the closing token is left to the step's own pick
                    break
                masks.append(mask)
            else:
                masks.append(sampler.constraint_mask(constraint, self.runner.device))
                return draft, masks
            masks.append(mask)
            return draft[: len(masks) - 1], masks if len(masks) > 1 else None
        except Exception:  # a token the constraint refuses: no draft (the step samples as usual)
            return [], None
        finally:
            constraint.restore(snapshot)
