"""POST /v1/completions: raw prompts (text or ids) in, text out; no template and no reasoning split.

A batch of prompts and n choices each are one group of generations: the choices of a prompt are
`index` prompt * n + choice, and share its computed prompt. With `echo` the prompt's text leads each
choice (as its tokens spell it, so that `text_offset` indexes the returned text); with `logprobs` too,
the prompt tokens' logprobs lead the generated ones, the first null.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from lexi.engine.request import CompletionDelta
from lexi.http.completions.reply import CompletionChunks, completion_body
from lexi.http.completions.request import CompletionRequest, parse_completion_request
from lexi.http.errors import bad_request
from lexi.http.exchange import Reply
from lexi.http.generation.logprobs import completion_logprobs
from lexi.http.generation.route import GenerationRoute
from lexi.http.generation.sampling import choice_requests, finish_reason, merge_usage, sampling_params
from lexi.http.sse import DONE, frame
from lexi.structured import ConstraintError


class CompletionsRoute(GenerationRoute):
    route = "completions"

    async def post(self) -> Reply | None:
        state = self.state
        req = parse_completion_request(self.json_body(), state.sampling)
        model = state.names.resolve(req.model)
        n = req.sampling.n
        self.check_choices(len(req.prompts) * n, "n" if len(req.prompts) == 1 else "prompt")
        prompts = [self._prompt_ids(p) for p in req.prompts]
        prompt_logprobs = req.sampling.logprobs if req.echo and req.sampling.logprobs is not None else None
        try:
            plan, param = req.plan()
        except ConstraintError as exc:  # a schema no value satisfies
            raise bad_request(str(exc), param=exc.param, code="invalid_constraint") from None
        requests = []
        for ids in prompts:
            params = sampling_params(req.sampling, len(ids), state.engine_config.ctx_size)
            constraints = (
                [await self.compile_plan(plan, param, params.max_tokens) for _ in range(n)]
                if plan is not None
                else None
            )
            group = choice_requests(ids, params, n, constraints)
            group[0].prompt_logprobs = prompt_logprobs  # computed once, for every choice of the prompt
            requests += group
        stream = await self.start_generation(requests)
        echoes = [state.runtime.tokenizer.decode(ids) if req.echo else "" for ids in prompts]
        if req.stream:
            return self.sse(self._stream(req, model, stream, prompts, echoes))
        return await self._whole(req, model, stream, prompts, echoes)

    def _prompt_ids(self, prompt: str | list[int]) -> list[int]:
        tokenizer = self.state.runtime.tokenizer
        if isinstance(prompt, str):
            ids = tokenizer.encode(prompt, special=True)
        else:
            if max(prompt) >= tokenizer.vocab_size:
                raise bad_request(f"prompt token ids must be < {tokenizer.vocab_size}", param="prompt")
            ids = prompt
        if not ids:
            raise bad_request("prompt is empty", param="prompt")
        return ids

    def _prompt_entries(self, req, prompts, firsts: list[CompletionDelta | None], choice: int) -> dict | None:
        """The echoed prompt's logprobs of a choice (computed with its prompt's first choice)."""
        if not req.echo or req.sampling.logprobs is None:
            return None
        lead = firsts[choice - choice % req.sampling.n]
        ids = prompts[choice // req.sampling.n]
        logprobs = lead.prompt_logprobs if lead is not None and lead.prompt_logprobs else (None,) * len(ids)
        return completion_logprobs(self.state.runtime.tokenizer, logprobs, 0, ids)

    async def _whole(self, req: CompletionRequest, model: str, stream, prompts, echoes) -> Reply | None:
        deltas: list[list[CompletionDelta]] = [[] for _ in range(stream.n)]
        async for i, delta in stream.events():
            deltas[i].append(delta)
        self.count_tokens()
        if stream.cut_short:
            return None
        tokenizer = self.state.runtime.tokenizer
        choices = []
        for i, events in enumerate(deltas):
            merged = merge_usage(events)
            echo = echoes[i // req.sampling.n]
            logprobs = None
            if req.sampling.logprobs is not None:
                logprobs = completion_logprobs(tokenizer, merged.logprobs, len(echo))
                head = self._prompt_entries(req, prompts, [d[0] if d else None for d in deltas], i)
                if head is not None:
                    logprobs = {key: head[key] + logprobs[key] for key in logprobs}
            choices.append(
                {"index": i, "text": echo + merged.text, "logprobs": logprobs, "finish_reason": finish_reason(merged)}
            )
        groups = [stream.last[p * req.sampling.n : (p + 1) * req.sampling.n] for p in range(len(prompts))]
        return self.json(completion_body(model, self.state.fingerprint, choices, groups))

    async def _stream(self, req: CompletionRequest, model: str, stream, prompts, echoes) -> AsyncIterator[bytes]:
        tokenizer = self.state.runtime.tokenizer
        want_logprobs = req.sampling.logprobs is not None
        chunks = CompletionChunks(model, self.state.fingerprint, req.include_usage)
        offsets = [len(echoes[i // req.sampling.n]) for i in range(stream.n)]
        firsts: list[CompletionDelta | None] = [None] * stream.n
        async for i, delta in stream.events():
            if firsts[i] is None:
                firsts[i] = delta
                if req.echo:
                    head = self._prompt_entries(req, prompts, firsts, i)
                    yield frame(chunks.chunk(i, echoes[i // req.sampling.n], logprobs=head))
            if delta.finish_reason == "abort":
                continue
            lp = completion_logprobs(tokenizer, delta.logprobs, offsets[i]) if want_logprobs else None
            offsets[i] += len(delta.text)
            finish = finish_reason(delta) if delta.finish_reason is not None else None
            if delta.text or finish:
                yield frame(chunks.chunk(i, delta.text, finish, lp))
        self.count_tokens()
        if stream.cut_short:
            return
        groups = [stream.last[p * req.sampling.n : (p + 1) * req.sampling.n] for p in range(len(prompts))]
        if req.include_usage:
            yield frame(chunks.usage_chunk(groups))
        yield DONE
