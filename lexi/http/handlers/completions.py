"""POST /v1/completions: raw prompt text (or ids) in, text out; no template and no reasoning split."""

from __future__ import annotations

from lexi.engine.request import GenerationRequest
from lexi.http.completion_bodies import CompletionChunks, completion_body
from lexi.http.errors import bad_request
from lexi.http.generation import completion_logprobs, finish_reason, merge_usage, sampling_params
from lexi.http.handlers.base import GenerationHandler
from lexi.http.protocol_completions import parse_completion_request
from lexi.http.sse import DONE, frame


class CompletionsHandler(GenerationHandler):
    route = "completions"

    async def post(self) -> None:
        state = self.state
        req = parse_completion_request(self.json_body(), state.sampling)
        model = state.names.resolve(req.model)
        tokenizer = state.runtime.tokenizer
        if isinstance(req.prompt, str):
            ids = tokenizer.encode(req.prompt, special=True)
            text = req.prompt
        else:
            if max(req.prompt) >= tokenizer.vocab_size:
                raise bad_request(f"prompt token ids must be < {tokenizer.vocab_size}", param="prompt")
            ids, text = req.prompt, tokenizer.decode(req.prompt)
        if not ids:
            raise bad_request("prompt is empty", param="prompt")
        params = sampling_params(req.sampling, len(ids), state.engine_config.ctx_size)
        stream = await self.start_generation(GenerationRequest(ids, params))
        prefix = text if req.echo else ""
        want_logprobs = req.sampling.logprobs is not None
        if not req.stream:
            merged = merge_usage([d async for d in stream.events()])
            self.count_tokens(merged)
            self.write_json(completion_body(model, merged, prefix, tokenizer, want_logprobs))
            return
        await self.stream_failures(self._stream(req, model, stream, prefix))

    async def _stream(self, req, model: str, stream, prefix: str) -> None:
        tokenizer = self.state.runtime.tokenizer
        want_logprobs = req.sampling.logprobs is not None
        chunks = CompletionChunks(model)
        self.start_sse()
        if prefix and not await self.send(frame(chunks.chunk(prefix))):
            return
        offset = len(prefix)
        async for delta in stream.events():
            lp = completion_logprobs(tokenizer, delta.logprobs, offset) if want_logprobs else None
            offset += len(delta.text)
            if delta.finish_reason == "abort":
                break
            finish = finish_reason(delta) if delta.finish_reason is not None else None
            if (delta.text or finish) and not await self.send(frame(chunks.chunk(delta.text, finish, lp))):
                return
        last = stream.last
        self.count_tokens(last)
        if stream.aborted or last is None or last.finish_reason == "abort":
            return
        if req.include_usage and not await self.send(frame(chunks.usage_chunk(last))):
            return
        await self.send(DONE)
        self.finish()
