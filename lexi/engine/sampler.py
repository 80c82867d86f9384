"""Logits -> tokens for one step's rows, each row with its own parameters, generator and constraint.

Constraint masks come first, applied in place to the rows that have one (`TokenBitmask`); then, per
row (llama.cpp's chain): logit_bias, penalties, EOG mask when ignoring EOS (a masked-out token stays
-inf through all of them); logprobs are read here; then top_k, top_p and min_p on the untempered
distribution, then temperature and a draw from the request's own torch.Generator, so a seed gives
the same tokens whatever else shares the batch. Greedy rows with nothing per-row to apply, constrained
or not, take one batched argmax.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field

import torch

from lexi.engine.bitmask import CompiledMask, TokenBitmask
from lexi.engine.request import TokenConstraint, TokenLogprob
from lexi.engine.sampling import SamplingParams


@dataclass(slots=True)
class SamplerState:
    """One request's sampling state across steps."""

    params: SamplingParams
    constraint: TokenConstraint | None = None
    banned: tuple[int, ...] = ()  # EOG ids masked out when the request ignores EOS
    seed: int = field(init=False)
    generator: torch.Generator | None = field(init=False, default=None)
    output_counts: Counter[int] = field(init=False, default_factory=Counter)
    # A constrained row's draft: the constraint's mask at each of its positions (the one after the draft included),
    # found by walking the constraint along the draft before the step (Speculator.propose); None without one.
    draft_masks: list[CompiledMask] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        seed = self.params.seed if self.params.seed is not None else secrets.randbits(63)
        self.seed = seed % (1 << 64)

    @property
    def simple_greedy(self) -> bool:
        """Argmax of the logits (less any banned EOG ids) is the answer: the batched fast path."""
        p = self.params
        return p.greedy and not p.logit_bias and not p.has_penalties and p.logprobs is None

    def draw(self, probs: torch.Tensor) -> int:
        return int(torch.multinomial(probs, 1, generator=self._generator(probs.device)))

    def uniform(self, device: torch.device) -> float:
        """A draw in [0, 1) from the request's own stream (a draft token's acceptance test)."""
        return float(torch.rand(1, generator=self._generator(device), device=device))

    def _generator(self, device: torch.device) -> torch.Generator:
        if self.generator is None or self.generator.device != device:
            self.generator = torch.Generator(device=device)
            self.generator.manual_seed(self.seed)
        return self.generator


@dataclass(frozen=True, slots=True)
class SampleResult:
    token_id: int
    logprob: TokenLogprob | None = None


class Sampler:
    """Per-request state lives in SamplerState; the sampler keeps only the vocabulary size and the mask buffers."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self._masks: TokenBitmask | None = None  # made when the first constrained row comes

    def _masks_for(self, logits: torch.Tensor) -> TokenBitmask:
        if self._masks is None or self._masks.device != logits.device:
            self._masks = TokenBitmask(logits.shape[-1], logits.device)
        return self._masks

    def constraint_mask(self, constraint: TokenConstraint, device: torch.device) -> CompiledMask | None:
        """The compiled mask of the constraint's next step (None when it restricts nothing); raises what the
        constraint raises."""
        if self._masks is None or self._masks.device != device:
            self._masks = TokenBitmask(self.vocab_size, device)
        key = constraint.mask_key()
        return None if key is None else self._masks.compiled(key, constraint.fill_mask)

    @staticmethod
    def mask_draft_rows(rows: torch.Tensor, masks: Seq[CompiledMask | None]) -> None:
        """A constrained draft's logits rows, each masked (in place) by the constraint at its position."""
        for row, mask in zip(rows, masks, strict=False):
            if mask is not None:
                TokenBitmask.apply(row, mask)

    def sample(
        self, logits: torch.Tensor, states: Seq[SamplerState], histories: Seq[list[int]]
    ) -> list[SampleResult | Exception]:
        """logits (R, V) float32, the step's own tensor (masked in place) -> one result per row.

        A row whose constraint fails (raises, or allows no token) gets its exception instead of a token.
        """
        results: list[SampleResult | Exception | None] = [None] * len(states)
        if any(s.constraint is not None for s in states):
            for i, exc in self._apply_constraints(logits, states, self._masks_for(logits)).items():
                results[i] = exc
        greedy = [i for i, s in enumerate(states) if s.simple_greedy and results[i] is None]
        if greedy:
            for i in greedy:  # logits are this step's own tensor: masking in place is safe
                if states[i].banned:
                    logits[i, list(states[i].banned)] = float("-inf")
            rows = logits if len(greedy) == len(states) else logits[greedy]
            for i, token in zip(greedy, rows.argmax(dim=-1).tolist(), strict=True):
                results[i] = SampleResult(token)
        for i, (row, state, history) in enumerate(zip(logits, states, histories, strict=True)):
            if results[i] is not None:
                continue
            try:
                results[i] = self._sample_row(row, state, history)
            except Exception as exc:  # a broken row fails its own request only
                results[i] = exc
        for state, result in zip(states, results, strict=True):
            if isinstance(result, SampleResult):
                state.output_counts[result.token_id] += 1
        return results  # type: ignore[return-value]

    @staticmethod
    def _apply_constraints(
        logits: torch.Tensor, states: Seq[SamplerState], masks: TokenBitmask
    ) -> dict[int, Exception]:
        """Mask the rows of constrained sequences in place; the rows whose constraint failed."""
        failed: dict[int, Exception] = {}
        for i, state in enumerate(states):
            constraint = state.constraint
            if constraint is None:
                continue
            try:
                key = constraint.mask_key()
                if key is None:
                    continue
                mask = masks.compiled(key, constraint.fill_mask)
            except Exception as exc:  # a broken constraint fails its own request only
                failed[i] = exc
                continue
            if mask.allows_nothing:
                failed[i] = RuntimeError("the token constraint allows no token")
                continue
            masks.apply(logits[i], mask)
        return failed

    def verify_draft(
        self, rows: torch.Tensor, draft: Seq[int], state: SamplerState, history: list[int]
    ) -> list[SampleResult]:
        """A draft checked by speculative sampling: row j of `rows` follows draft[:j]. Draft token d is taken with
        the probability p(d) that sampling that row gives it (every transform applied, history and counts
        including the tokens taken before it); the first one refused is replaced by a draw from p without d,
        renormalized; when all are taken, the last row gives one more token. A proposal that is one fixed token
        makes this exact: each output token has p's distribution, as decoding a token a step gives."""
        out: list[SampleResult] = []
        for j, x in enumerate(rows):
            seen = [*history, *(r.token_id for r in out)]
            self._transform(x, state, seen)
            if j == len(draft):
                out.append(self._result(x, self._choose(x, state), state))
                break
            ids, probs = self._distribution(x, state)
            hit = ids == draft[j]
            taken = bool(hit.any()) and state.uniform(x.device) < float(probs[hit].sum())
            if taken:
                token = draft[j]
            else:
                rest = probs.masked_fill(hit, 0.0)
                token = int(ids[state.draw(rest / rest.sum())]) if float(rest.sum()) > 0 else int(ids[0])
            out.append(self._result(x, token, state))
            state.output_counts[token] += 1
            if not taken:
                return out
        state.output_counts[out[-1].token_id] += 1
        return out

    def _sample_row(self, x: torch.Tensor, state: SamplerState, history: list[int]) -> SampleResult:
        self._transform(x, state, history)
        return self._result(x, self._choose(x, state), state)

    @staticmethod
    def _transform(x: torch.Tensor, state: SamplerState, history: list[int]) -> None:
        """logit_bias, penalties and banned EOG ids, in place, before the choice (llama.cpp's order)."""
        p = state.params  # x is a row of the step's own logits: modified in place, never copied
        if p.logit_bias:
            ids = [t for t in p.logit_bias if t < x.numel()]
            x[ids] += torch.tensor([p.logit_bias[t] for t in ids], dtype=x.dtype, device=x.device)
        if p.repeat_penalty != 1.0 and p.repeat_last_n > 0 and history:
            ids = torch.tensor(sorted(set(history[-p.repeat_last_n :])), dtype=torch.int64, device=x.device)
            vals = x[ids]
            x[ids] = torch.where(vals > 0, vals / p.repeat_penalty, vals * p.repeat_penalty)
        if (p.presence_penalty or p.frequency_penalty) and state.output_counts:
            ids = torch.tensor(list(state.output_counts), dtype=torch.int64, device=x.device)
            counts = torch.tensor(list(state.output_counts.values()), dtype=x.dtype, device=x.device)
            x[ids] -= counts * p.frequency_penalty + p.presence_penalty
        if state.banned:
            x[list(state.banned)] = float("-inf")

    @staticmethod
    def _result(x: torch.Tensor, token: int, state: SamplerState) -> SampleResult:
        """The token, with its logprob (and the top alternatives) when the request asks, read before temperature."""
        p = state.params
        logprob = None
        if p.logprobs is not None:
            lp = torch.log_softmax(x, dim=-1)
            top = ()
            if p.logprobs > 0:
                vals, ids = lp.topk(min(p.logprobs, lp.numel()))
                top = tuple(zip(ids.tolist(), vals.tolist(), strict=True))
            logprob = TokenLogprob(token, float(lp[token]), top)
        return SampleResult(token, logprob)

    @staticmethod
    def _choose(x: torch.Tensor, state: SamplerState) -> int:
        if state.params.greedy:
            return int(x.argmax())
        ids, probs = Sampler._distribution(x, state)
        return int(ids[state.draw(probs)])

    @staticmethod
    def _distribution(x: torch.Tensor, state: SamplerState) -> tuple[torch.Tensor, torch.Tensor]:
        """(token ids, their probabilities) that a draw picks from: top_k, top_p, min_p, then temperature;
        greedy is the argmax alone."""
        p = state.params
        if p.greedy:
            best = x.argmax().reshape(1)
            return best, torch.ones(1, dtype=x.dtype, device=x.device)
        if 0 < p.top_k < x.numel():
            vals, ids = x.topk(p.top_k)
        else:
            vals, ids = x.sort(descending=True)
        if p.top_p < 1.0 or p.min_p > 0.0:
            probs = torch.softmax(vals, dim=-1)
            keep = torch.ones_like(probs, dtype=torch.bool)
            if p.top_p < 1.0:
                keep &= (probs.cumsum(-1) - probs) < p.top_p
            if p.min_p > 0.0:
                keep &= probs >= p.min_p * probs[0]
            keep[0] = True  # both filters keep a sorted prefix; the best token always survives
            n = int(keep.sum())
            vals, ids = vals[:n], ids[:n]
        return ids, torch.softmax(vals / p.temperature, dim=-1)
