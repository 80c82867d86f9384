"""POST /v1/chat/completions: parse -> render and tokenize -> generate -> one body or SSE chunks."""

from __future__ import annotations

from lexi.chat.prompt import build_chat_prompt
from lexi.chat.reasoning import ReasoningSplitter
from lexi.chat.template import TemplateRenderError, ThinkingUnsupported
from lexi.engine.request import GenerationRequest
from lexi.http.errors import ApiError, bad_request
from lexi.http.generation import chat_logprobs, finish_reason, merge_usage, sampling_params
from lexi.http.handlers.base import GenerationHandler
from lexi.http.protocol_chat import ChatRequest, parse_chat_request
from lexi.http.responses import ChatChunks, chat_body
from lexi.http.sse import DONE, frame


def render_prompt(state, req: ChatRequest):
    try:
        return build_chat_prompt(
            state.template,
            state.runtime.tokenizer,
            req.messages,
            tools=req.tools,
            kwargs=req.template_kwargs,
            reasoning_effort=req.reasoning_effort,
        )
    except ThinkingUnsupported as exc:
        raise ApiError(501, str(exc), param="reasoning_effort", code="thinking_not_supported") from None
    except TemplateRenderError as exc:
        raise bad_request(str(exc), param="messages", code="template_error") from None
    except ValueError as exc:
        raise bad_request(str(exc), param="chat_template_kwargs") from None


class ChatCompletionsHandler(GenerationHandler):
    route = "chat_completions"

    async def post(self) -> None:
        state = self.state
        req = parse_chat_request(self.json_body(), state.sampling)
        model = state.names.resolve(req.model)
        prompt = render_prompt(state, req)
        params = sampling_params(req.sampling, len(prompt.ids), state.engine_config.ctx_size, state.extra_stop)
        stream = await self.start_generation(GenerationRequest(prompt.ids, params))
        split = state.config.reasoning_format == "auto"
        splitter = ReasoningSplitter(opened=prompt.opened) if split else None
        if req.stream:
            await self.stream_failures(self._stream(req, model, stream, splitter))
        else:
            await self._whole(req, model, stream, splitter)

    async def _whole(self, req: ChatRequest, model: str, stream, splitter: ReasoningSplitter | None) -> None:
        merged = merge_usage([d async for d in stream.events()])
        self.count_tokens(merged)
        reasoning, content = None, merged.text
        if splitter is not None:
            events = splitter.feed(merged.text) + splitter.finish()
            reasoning = "".join(e.text for e in events if e.kind == "reasoning")
            content = "".join(e.text for e in events if e.kind == "content")
        tokenizer = self.state.runtime.tokenizer
        self.write_json(chat_body(model, merged, reasoning, content, tokenizer, req.sampling.logprobs is not None))

    async def _stream(self, req: ChatRequest, model: str, stream, splitter: ReasoningSplitter | None) -> None:
        """role chunk, then content/reasoning deltas, the finish chunk, the usage chunk if asked, [DONE]."""
        tokenizer = self.state.runtime.tokenizer
        want_logprobs = req.sampling.logprobs is not None
        chunks = ChatChunks(model)
        self.start_sse()
        if not await self.send(frame(chunks.chunk({"role": "assistant"}))):
            return
        pending = []  # logprobs of tokens whose text the splitter still holds back
        async for delta in stream.events():
            pending.extend(delta.logprobs)
            if splitter is None:
                events = [("content", delta.text)]
            else:
                found = splitter.feed(delta.text) + (splitter.finish() if delta.finish_reason is not None else [])
                events = [(e.kind, e.text) for e in found]
            for kind, text in events:
                if not text:
                    continue
                lp = chat_logprobs(tokenizer, tuple(pending)) if want_logprobs else None
                pending = []
                key = "reasoning_content" if kind == "reasoning" else "content"
                if not await self.send(frame(chunks.chunk({key: text}, logprobs=lp))):
                    return
        last = stream.last
        self.count_tokens(last)
        if stream.aborted or last is None or last.finish_reason == "abort":
            return
        lp = chat_logprobs(tokenizer, tuple(pending)) if want_logprobs and pending else None
        if not await self.send(frame(chunks.chunk({}, finish_reason(last), lp))):
            return
        if req.include_usage and not await self.send(frame(chunks.usage_chunk(last))):
            return
        await self.send(DONE)
        self.finish()
