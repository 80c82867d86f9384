"""POST /v1/chat/completions: parse -> the chat turn -> generate n choices -> one body or SSE chunks."""

from __future__ import annotations

from collections.abc import AsyncIterator

from lexi.chat.prompt import ChatTurn
from lexi.http.chat.reply import ChatChunks, chat_body, chat_choice, chat_finish_reason, reply_tool_call
from lexi.http.chat.request import ChatRequest, parse_chat_request
from lexi.http.exchange import Reply
from lexi.http.generation.logprobs import ContentLogprobs, chat_entries
from lexi.http.generation.route import GenerationRoute
from lexi.http.generation.stream import output_events
from lexi.http.generation.turn import chat_turn
from lexi.http.sse import DONE, frame


class ChatCompletionsRoute(GenerationRoute):
    route = "chat_completions"

    async def post(self) -> Reply | None:
        state = self.state
        req = parse_chat_request(self.json_body(), state.sampling)
        model = state.names.resolve(req.model)
        self.check_choices(req.sampling.n)
        turn = chat_turn(state, req.conversation)
        _, stream = await self.generate(turn, req.sampling, req.sampling.n)
        if req.stream:
            return self.sse(self._stream(req, model, stream, turn))
        return await self._whole(req, model, stream, turn)

    async def _whole(self, req: ChatRequest, model: str, stream, turn: ChatTurn) -> Reply | None:
        n = stream.n
        outputs = [turn.output() for _ in range(n)]
        tokenizer = self.state.runtime.tokenizer
        logprobs = [ContentLogprobs(tokenizer) for _ in range(n)]
        text = [{"reasoning": [], "content": [], "logprobs": []} for _ in range(n)]
        async for i, delta, events in output_events(stream, outputs):
            attached = logprobs[i].feed(delta.logprobs, events, outputs[i].fed_reasoning)
            for event, tokens in zip(events, attached, strict=True):
                if event.kind != "tool_call":
                    text[i][event.kind].append(event.text)
                text[i]["logprobs"] += tokens
        self.count_tokens()
        if stream.cut_short:
            return None
        want_logprobs = req.sampling.logprobs is not None
        choices = [
            chat_choice(
                i, "".join(text[i]["reasoning"]), "".join(text[i]["content"]), outputs[i].calls, stream.last[i],
                {"content": chat_entries(tokenizer, text[i]["logprobs"])} if want_logprobs else None,
            )
            for i in range(n)
        ]  # fmt: skip
        reasoning_tokens = sum(o.reasoning_tokens for o in outputs)
        return self.json(chat_body(model, self.state.fingerprint, choices, stream.last, reasoning_tokens))

    async def _stream(self, req: ChatRequest, model: str, stream, turn: ChatTurn) -> AsyncIterator[bytes]:
        """Per choice: a role chunk, then reasoning/content/tool-call deltas and a finish chunk; then the usage
        chunk if asked, then [DONE]."""
        n = stream.n
        tokenizer = self.state.runtime.tokenizer
        want_logprobs = req.sampling.logprobs is not None
        outputs = [turn.output() for _ in range(n)]
        logprobs = [ContentLogprobs(tokenizer) for _ in range(n)]
        chunks = ChatChunks(model, self.state.fingerprint, req.include_usage)
        first = {"role": "assistant", "content": None}  # text deltas come only with text (llama.cpp checks that)
        for i in range(n):
            yield frame(chunks.chunk(i, first))
        async for i, delta, events in output_events(stream, outputs):
            attached = logprobs[i].feed(delta.logprobs, events, outputs[i].fed_reasoning)
            for event, tokens in zip(events, attached, strict=True):
                if event.kind == "tool_call":
                    index = outputs[i].calls.index(event.call)
                    chunk = chunks.chunk(i, {"tool_calls": [reply_tool_call(event.call, index)]})
                else:
                    content = event.kind == "content"
                    lp = {"content": chat_entries(tokenizer, tokens)} if want_logprobs and content else None
                    key = "reasoning_content" if event.kind == "reasoning" else "content"
                    chunk = chunks.chunk(i, {key: event.text}, logprobs=lp)
                yield frame(chunk)
            if delta.finish_reason is not None and delta.finish_reason != "abort":
                finish = chat_finish_reason(delta, outputs[i].calls)
                yield frame(chunks.chunk(i, {}, finish))
        self.count_tokens()
        if stream.cut_short:
            return
        reasoning_tokens = sum(o.reasoning_tokens for o in outputs)
        if req.include_usage:
            yield frame(chunks.usage_chunk(stream.last, reasoning_tokens))
        yield DONE
