"""One request's generations (its n choices) as one stream of (choice index, engine event), refusals in HTTP terms.

The engine admits the choices together (they share the prompt, computed once); the first event of
every choice that took a slot at once (all of them, up to --parallel) is awaited before anything is
written, so a refusal (429, 400) keeps its status. Choices past --parallel wait for slots behind them
and stream as they come; a failure of one of those is an error after the status line. The
engine refuses in its own terms (ContextOverflow, EngineBusy, ValueError); this is the one place
that turns those into the statuses the spec gives them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from lexi.chat.output import ChatOutput, OutputError, OutputEvent
from lexi.engine.errors import ContextOverflow, EngineBusy
from lexi.engine.request import CompletionDelta, GenerationRequest
from lexi.http.errors import ApiError, bad_request


class EngineStream:
    """`abort()` (from on_connection_close) asks the engine to stop every choice at its next step."""

    def __init__(
        self, engine, requests: list[GenerationRequest], on_first_token: Callable[[], None] | None = None
    ) -> None:
        self.engine = engine
        self.requests = requests
        self._on_first = on_first_token
        self._streams: list[AsyncIterator[CompletionDelta]] = []
        self._firsts: list[CompletionDelta | None] = []  # None: a choice queued behind the first slots
        self.aborted = False
        self.last: list[CompletionDelta | None] = [None] * len(requests)

    @property
    def n(self) -> int:
        return len(self.requests)

    async def start(self) -> None:
        if self.aborted:
            raise ApiError(400, "the client closed the connection before generation started")
        try:
            self._streams = self.engine.generate_many(self.requests)
            at_once = self._streams[: self.engine.config.parallel]
            firsts = await asyncio.gather(*(anext(s) for s in at_once), return_exceptions=True)
        except (EngineBusy, ContextOverflow, ValueError) as exc:
            raise _http_error(exc) from None
        failure = next((f for f in firsts if isinstance(f, BaseException)), None)
        if failure is not None:
            await self.close()
            if isinstance(failure, StopAsyncIteration):
                raise ApiError(500, "the engine ended the request without an event") from None
            raise _http_error(failure) from None
        self._firsts = [*firsts, *[None] * (self.n - len(firsts))]
        if self._on_first is not None:
            self._on_first()

    async def events(self) -> AsyncIterator[tuple[int, CompletionDelta]]:
        """Every choice's events, merged as they come; each choice's last one carries its finish_reason."""
        assert self._firsts, "start() first"
        if self.n == 1:  # no tasks for the common case
            async with contextlib.aclosing(self._streams[0]):
                delta = self._firsts[0]
                while True:
                    self.last[0] = delta
                    yield 0, delta
                    if delta.finish_reason is not None or self.aborted:
                        return
                    delta = await anext(self._streams[0])
        merged: asyncio.Queue = asyncio.Queue()
        tasks = [asyncio.create_task(self._pump(i, merged)) for i in range(self.n)]
        remaining = self.n
        try:
            while remaining and not self.aborted:
                index, item = await merged.get()
                if isinstance(item, BaseException):
                    raise item
                self.last[index] = item
                yield index, item
                remaining -= item.finish_reason is not None
        finally:
            for task in tasks:
                task.cancel()
            await self.close()

    async def _pump(self, index: int, merged: asyncio.Queue) -> None:
        delta = self._firsts[index]
        try:
            if delta is None:
                delta = await self._next(index)
            while True:
                await merged.put((index, delta))
                if delta.finish_reason is not None:
                    return
                delta = await anext(self._streams[index])
        except Exception as exc:
            await merged.put((index, exc))

    async def _next(self, index: int) -> CompletionDelta:
        """The first event of a queued choice; an engine refusal then is in HTTP terms, as at the start."""
        try:
            return await anext(self._streams[index])
        except StopAsyncIteration:
            raise ApiError(500, "the engine ended the request without an event") from None
        except (EngineBusy, ContextOverflow, ValueError) as exc:
            raise _http_error(exc) from None

    def abort(self) -> None:
        if not self.aborted:
            self.aborted = True
            for request in self.requests:
                self.engine.abort(request.request_id)

    async def close(self) -> None:
        for stream in self._streams:
            await stream.aclose()


def _http_error(exc: BaseException) -> BaseException:
    if isinstance(exc, EngineBusy):
        return ApiError(429, f"all inference slots are busy: {exc}", type="inference_busy", code="inference_busy")
    if isinstance(exc, ContextOverflow):
        return bad_request(str(exc), param="max_tokens", code="context_length_exceeded")
    if isinstance(exc, ValueError):
        return bad_request(str(exc))
    return exc


async def output_events(
    stream: EngineStream, outputs: list[ChatOutput]
) -> AsyncIterator[tuple[int, CompletionDelta, list[OutputEvent]]]:
    """Each engine event with the output events it releases for its choice; an aborted choice releases nothing.

    A forced tool call the model failed to write, or a JSON answer that is not what response_format
    asked for, is a 422: the request was fine, the answer is not what it demanded, and the client can
    act on that (retry, another seed, a larger max_tokens or model). A 5xx would say the server
    broke, which it did not.
    """
    async for index, delta in stream.events():
        if delta.finish_reason == "abort":
            yield index, delta, []
            continue
        try:
            events = outputs[index].feed(delta.text, len(delta.token_ids), delta.finish_reason)
        except OutputError as exc:
            raise ApiError(422, str(exc), type="model_output_error", param=exc.param, code=exc.code) from None
        yield index, delta, events
