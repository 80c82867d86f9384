"""Where a step's drafts come from: prompt lookup (lexi.engine.ngram) or a draft model (lexi.engine.draft_model).

Before each step the engine asks `Speculator.propose` for the running sequences' drafts, within the step's
budget of draft tokens (lexi.engine.draft_budget); the step checks every draft position at once and `checked`
records how each draft fared (the sequence's pace, the counters). Only speed depends on what is proposed: a
check keeps the output what one token a step gives.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from lexi.engine.draft_budget import draft_budget, worth_checking
from lexi.engine.draft_model import DraftCursor, DraftProposer, DraftRow
from lexi.engine.ngram import NgramIndex
from lexi.engine.step_cost import StepCost

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
        self.cost = StepCost()  # what decode steps cost by their sequences and draft tokens, learned as they run
        # --deterministic: what a step holds depends on the requests alone, never on timings (the prior's cost)
        self.untimed = bool(getattr(runner.model, "deterministic", False))
        if draft_model is not None:
            vocab = min(vocab_size, draft_model.args.vocab_size)
            self.drafter = DraftProposer(draft_model, config.num_blocks, config.block_size, config.batch_size, vocab,
                                         config.spec.p_min)  # fmt: skip

    def propose(self, running: list[Sequence], stats: EngineStats) -> None:
        """Set `seq.draft` (and the sampler's per-position masks) for every running sequence: empty for one that
        takes none this step (one still prefilling never does).

        A draft keeps the tokens worth their rows (lexi.engine.draft_budget: each sequence's acceptance, the
        step's learned cost), within the step's budget where several sequences decode; what is proposed past
        that is cut (counted in `stats`). A sequence whose drafts are worth nothing checks one token now and then
        (`DraftPace.probe_due`), so that it notices when its text starts repeating.

        A constrained request's draft is walked through its constraint first (which must be able to come back:
        `snapshot`/`restore`): it keeps the prefix the constraint allows, short of a token that would finish the
        output, and the masks of every position go with it, so the check applies each position's own mask. A
        draft never reaches past max_tokens."""
        decoding = sum(not seq.prefilling for seq in running)
        budget = draft_budget(self.runner.cheap_rows, decoding)
        wanted: list[tuple[Sequence, int]] = []
        for seq in running:
            stream = seq.payload
            seq.draft, stream.sampler.draft_masks = [], None
            if seq.prefilling or not stream.request.params.speculative:
                continue
            limit = min(seq.max_tokens - seq.num_output - 1, self.spec.max_tokens)
            if budget is not None and not self._sized_alone(seq):  # a seeded row's draft is its own (`_worth`)
                limit = min(limit, budget)
            constraint = stream.request.constraint
            if constraint is not None and (self.runner.sampler is None or not hasattr(constraint, "snapshot")):
                continue
            if limit > 0:
                wanted.append((seq, limit))
        if not wanted:
            return
        cost = self.cost.prior(decoding) if self.untimed else self.cost.estimate(decoding)
        acceptance = [seq.payload.pace.acceptance for seq, _ in wanted]
        if self.drafter is not None:  # a draft model's tokens cost its passes: what is worth checking is asked for
            limits = self._worth([limit for _, limit in wanted], acceptance, wanted, decoding, cost, budget)
            wanted = [(seq, limit) for (seq, _), limit in zip(wanted, limits, strict=True) if limit]
            drafts = self._model_drafts(wanted)
            kept = [len(d) for d in drafts]
        else:  # a lookup costs next to nothing, and often finds no match: what it found is weighed
            drafts = self._lookup_drafts(wanted)
            kept = self._worth([len(d) for d in drafts], acceptance, wanted, decoding, cost, budget)
        stats.spec_budget_cut_total += sum(len(d) for d in drafts) - sum(kept)
        for (seq, _), draft, keep in zip(wanted, drafts, kept, strict=True):
            draft = draft[:keep]
            constraint = seq.payload.request.constraint
            if draft and constraint is not None:
                draft, seq.payload.sampler.draft_masks = self._constrained_draft(constraint, draft)
            seq.draft = draft

    def _worth(self, lengths, acceptance, wanted, decoding, cost, budget) -> list[int]:
        """`worth_checking`, and one token for each sequence left out whose probe is due (within the budget).

        A seeded sampled sequence draws its random numbers along the positions its checks feed, so what its drafts
        hold must depend on nothing but its own tokens: not on how long steps took, nor on the other sequences
        (whose progress does). Its drafts are weighed by the cost model's prior alone (a draft token at
        `prior_ratio` of a one-sequence step) outside the step's budget; the other sequences share what is left.
        Under --deterministic every draft is weighed by the prior (`untimed`): what a step holds then depends on
        the requests alone, so the other sequences' progress does too."""
        kept = [0] * len(wanted)

        def probes(i: int) -> bool:  # a draft left out whose probe is due checks one token
            return bool(lengths[i]) and not kept[i] and wanted[i][0].payload.pace.probe_due()

        alone = [self._sized_alone(seq) for seq, _ in wanted]
        for i in (i for i in range(len(wanted)) if alone[i]):
            kept[i] = worth_checking([lengths[i]], [acceptance[i]], 1, self.cost.prior(1), None)[0]
            kept[i] = 1 if probes(i) else kept[i]
        rows = [i for i in range(len(wanted)) if not alone[i]]
        left = None if budget is None else max(budget - sum(kept), 0)
        part = worth_checking([lengths[i] for i in rows], [acceptance[i] for i in rows], decoding, cost, left)
        for i, n in zip(rows, part, strict=True):
            kept[i] = n
        for i in rows:
            if (budget is None or budget > sum(kept)) and probes(i):
                kept[i] = 1
        return kept

    def _sized_alone(self, seq: Sequence) -> bool:
        """Whether `seq`'s draft is sized by the prior alone, apart from the batch: a seeded sampled request's
        (`_worth` says why), except under --deterministic, where nothing depends on timings anyway."""
        params = seq.payload.request.params
        return not self.untimed and params.seed is not None and not params.greedy

    @staticmethod
    def decode_shape(scheduled: list[ScheduledSeq]) -> tuple[int, int] | None:
        """(decoding sequences, draft tokens) of a step about to run, for the cost model (`cost.observe` once it
        ran); None for a step that also prefills, which says nothing about what decoding rows cost."""
        if not scheduled or any(item.seq.prefilling for item in scheduled):
            return None
        return len(scheduled), sum(len(item.draft) for item in scheduled)

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
