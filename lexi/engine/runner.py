"""The device side of a step: owns the model and its KV cache, runs one mixed batch, samples its tokens."""

from __future__ import annotations

from collections.abc import Sequence as Seq

import torch

from lexi.engine.config import EngineConfig
from lexi.engine.request import TokenLogprob
from lexi.engine.sampler import Sampler, SampleResult, SamplerState
from lexi.engine.scheduler import ScheduledSeq
from lexi.kernels.paged_attention import AttentionMetadata


class ModelRunner:
    """Flattens prefill chunks and decode tokens into one forward over the paged KV cache."""

    def __init__(self, model, config: EngineConfig) -> None:
        self.model = model
        self.device = model.device
        self.block_size = config.block_size
        self.kv_cache = model.new_kv_cache(config.num_blocks, config.block_size)
        self.sampler: Sampler | None = None

    @property
    def cheap_rows(self) -> int | None:
        """Rows of x a step may feed while the model's matmuls stay on their decode path; None: no such limit."""
        return self.model.cheap_rows

    def build(self, scheduled: Seq[ScheduledSeq]) -> tuple[torch.Tensor, AttentionMetadata, list[tuple[int, int]]]:
        """Flat token ids, metadata, and where each sequence's logits are: (first logits row, rows).

        Logits are asked only for rows that sample, and for every prompt row of a sequence that wants
        its prompt's logprobs.
        """
        tokens: list[int] = []
        for item in scheduled:
            start = item.seq.num_computed
            tokens.extend(item.seq.token_ids[start : start + item.num_new - len(item.draft)])
            tokens.extend(item.draft)
        meta = AttentionMetadata.build(
            [s.num_new for s in scheduled],
            [s.seq.num_computed for s in scheduled],
            [s.seq.block_table for s in scheduled],
            self.block_size,
            device=self.device,
            logits_of_last_only=False,
        )
        ends = meta.query_start_host[1:]
        rows: list[int] = []
        layout: list[tuple[int, int]] = []
        for end, item in zip(ends, scheduled, strict=True):
            first = len(rows)
            if (item.seq.wants_prompt_logits and item.seq.prefilling) or item.draft:
                rows.extend(range(end - item.num_new, end))
            elif item.sample:
                rows.append(end - 1)
            layout.append((first, len(rows) - first))
        meta.logit_rows = torch.tensor(rows, dtype=torch.int64, device=self.device)
        return torch.tensor(tokens, dtype=torch.int64, device=self.device), meta, layout

    @torch.inference_mode()
    def execute(
        self, scheduled: Seq[ScheduledSeq], states: Seq[SamplerState]
    ) -> tuple[list[list[SampleResult] | Exception | None], dict[int, list[TokenLogprob]]]:
        """One forward: the tokens each scheduled sequence samples (None where it only prefilled a chunk; one
        token, or a draft's accepted tokens and the one after them), and the logprobs of the prompt tokens this
        step computed, by scheduled index, for sequences that want them."""
        tokens, meta, layout = self.build(scheduled)
        logits = self.model.forward(tokens, meta, self.kv_cache)
        prompt_logprobs = {
            i: self._prompt_logprobs(item, logits[first : first + count])
            for i, (item, (first, count)) in enumerate(zip(scheduled, layout, strict=True))
            if item.seq.wants_prompt_logits and item.seq.prefilling
        }
        results: list[list[SampleResult] | Exception | None] = [None] * len(scheduled)
        if self.sampler is None:
            self.sampler = Sampler(logits.shape[-1])
        for i in [i for i, item in enumerate(scheduled) if item.draft]:
            first, count = layout[i]
            rows, draft, state = logits[first : first + count], scheduled[i].draft, states[i]
            try:
                if state.draft_masks is not None:  # a constrained row: each position masked as the constraint says
                    masks, state.draft_masks = state.draft_masks, None
                    if len(masks) != len(draft) + 1:
                        raise RuntimeError("a constrained draft's masks do not match its tokens")
                    self.sampler.mask_draft_rows(rows, masks)
                if state.simple_greedy:
                    results[i] = verify_greedy(rows, draft, state)
                else:
                    results[i] = self.sampler.verify_draft(rows, draft, state, scheduled[i].seq.token_ids)
            except Exception as exc:  # a broken row fails its own request only
                results[i] = exc
        sampling = [i for i, item in enumerate(scheduled) if item.sample and not item.draft]
        if not sampling:
            return results, prompt_logprobs
        if len(layout) and any(count != 1 for first, count in layout if count):
            last_rows = [layout[i][0] + layout[i][1] - 1 for i in sampling]
            logits = logits[torch.tensor(last_rows, dtype=torch.int64, device=logits.device)]
        picked = self.sampler.sample(
            logits, [states[i] for i in sampling], [scheduled[i].seq.token_ids for i in sampling]
        )
        for i, result in zip(sampling, picked, strict=True):
            results[i] = [result] if isinstance(result, SampleResult) else result
        return results, prompt_logprobs

    @staticmethod
    def _prompt_logprobs(item: ScheduledSeq, logits: torch.Tensor) -> list[TokenLogprob]:
        """Row j predicts the token after position num_computed + j: its logprob, and the top alternatives."""
        seq, start = item.seq, item.seq.num_computed
        targets = seq.token_ids[start + 1 : min(start + item.num_new + 1, seq.num_prompt)]
        if not targets:
            return []
        lp = torch.log_softmax(logits[: len(targets)].float(), dim=-1)
        chosen = lp.gather(1, torch.tensor(targets, device=lp.device).unsqueeze(1)).squeeze(1).tolist()
        top_n = seq.prompt_logprobs_top
        tops = lp.topk(top_n, dim=-1) if top_n else None
        out = []
        for j, token in enumerate(targets):
            top = ()
            if tops is not None:
                top = tuple(zip(tops.indices[j].tolist(), tops.values[j].tolist(), strict=True))
            out.append(TokenLogprob(token, chosen[j], top))
        return out


def verify_greedy(logits: torch.Tensor, draft: tuple[int, ...], state: SamplerState) -> list[SampleResult]:
    """A draft checked against the model's own greedy choices: row j of `logits` follows draft[:j]. The tokens
    taken are the draft's longest prefix the model would have chosen itself, then the model's choice after it,
    so the output is token for token what decoding one token a step gives (the batched path of rows whose
    sampling is a plain argmax, SamplerState.simple_greedy; others go through Sampler.verify_draft)."""
    if state.banned:
        logits[:, list(state.banned)] = float("-inf")
    chosen = logits.argmax(dim=-1).tolist()
    taken = 0
    while taken < len(draft) and chosen[taken] == draft[taken]:
        taken += 1
    tokens = [*draft[:taken], chosen[taken]]
    state.output_counts.update(tokens)
    return [SampleResult(t) for t in tokens]
