"""One request's generations (its n choices) as one stream of (choice index, engine event), refusals in HTTP terms.

The engine admits the choices together (they share the prompt, computed once); the first event of
every choice that took a slot at once (all of them, up to --parallel) is awaited before anything is
written, so a refusal (429, 400) keeps its status. Choices past --parallel wait for slots behind them
and stream as they come; a failure of one of those is an error after the status line.

The stream is also where a request's end is held, once: `abort()` when the client goes away, `stop(error)`
when a shutdown ends it. Both may come before `start()` (while the body is parsed or a constraint compiles):
then `start()` refuses instead of submitting.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from lexi.chat.output import ChatOutput, OutputError, OutputEvent
from lexi.engine.request import CompletionDelta, GenerationRequest
from lexi.http.errors import ENGINE_REFUSALS, ApiError, engine_refusal, unfit_answer


class EngineStream:
    """`abort()` (the client went away) asks the engine to stop every choice at its next step; `stop(error)` (a
    shutdown) does the same, and the abort event that follows is raised as `error` rather than yielded, so every
    route's own failure path answers the client (a 503, or an error frame mid-stream)."""

    def __init__(self, engine, on_first_token: Callable[[], None] | None = None) -> None:
        self.engine = engine
        self.requests: list[GenerationRequest] = []
        self._on_first = on_first_token
        self._streams: list[AsyncIterator[CompletionDelta]] = []
        self._firsts: list[CompletionDelta | None] = []  # None: a choice queued behind the first slots
        self.aborted = False
        self.stop_error: ApiError | None = None
        self.last: list[CompletionDelta | None] = []

    @property
    def n(self) -> int:
        return len(self.requests)

    @property
    def cut_short(self) -> bool:
        """Aborted, or some choice ended without finishing: nothing more is owed to the client."""
        return self.aborted or any(d is None or d.finish_reason == "abort" for d in self.last)

    async def start(self, requests: list[GenerationRequest]) -> None:
        """Submit the choices together and wait for their first events; refusals come back as ApiErrors."""
        self.submit(requests)
        await self.first_events()

    def submit(self, requests: list[GenerationRequest]) -> None:
        """Hand the choices to the engine, which refuses at once what can never run (context overflow, a bad
        value); a slot and the prefill come later (`first_events`), so a busy server is not known yet."""
        if self.stop_error is not None:
            raise self.stop_error
        if self.aborted:
            raise ApiError(400, "the client closed the connection before generation started")
        self.requests = requests
        self.last = [None] * len(requests)
        try:
            self._streams = self.engine.generate_many(requests)
        except ENGINE_REFUSALS as exc:
            raise engine_refusal(exc) from None

    async def first_events(self) -> None:
        """Wait for the first event of every choice that takes a slot at once: a slot (or the 429 of a busy
        server, past --queue-wait) and the prefill."""
        try:
            at_once = self._streams[: self.engine.config.parallel]
            firsts = await asyncio.gather(*(anext(s) for s in at_once), return_exceptions=True)
        except ENGINE_REFUSALS as exc:
            raise engine_refusal(exc) from None
        failure = next((f for f in firsts if isinstance(f, BaseException)), None)
        if failure is not None:
            await self.close()
            if isinstance(failure, StopAsyncIteration):
                raise ApiError(500, "the engine ended the request without an event") from None
            raise engine_refusal(failure) from None
        self._firsts = [*firsts, *[None] * (self.n - len(firsts))]
        if self._on_first is not None:
            self._on_first()

    async def events(self) -> AsyncIterator[tuple[int, CompletionDelta]]:
        """Every choice's events, merged as they come; each choice's last one carries its finish_reason."""
        async with contextlib.aclosing(self._merged()) as events:
            async for index, delta in events:
                if self.stop_error is not None and delta.finish_reason == "abort":
                    raise self.stop_error
                yield index, delta
        if self.stop_error is not None and any(last is None or last.finish_reason is None for last in self.last):
            raise self.stop_error

    async def _merged(self) -> AsyncIterator[tuple[int, CompletionDelta]]:
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
        except ENGINE_REFUSALS as exc:
            raise engine_refusal(exc) from None

    def abort(self) -> None:
        if not self.aborted:
            self.aborted = True
            for request in self.requests:
                self.engine.abort(request.request_id)

    def stop(self, error: ApiError) -> None:
        """A shutdown ends this request with `error` (a 503, or an error frame once streaming)."""
        self.stop_error = error
        self.abort()

    async def close(self) -> None:
        for stream in self._streams:
            await stream.aclose()


async def output_events(
    stream: EngineStream, outputs: list[ChatOutput]
) -> AsyncIterator[tuple[int, CompletionDelta, list[OutputEvent]]]:
    """Each engine event with the output events it releases for its choice; an aborted choice releases nothing.
    An answer that is not what the request demanded is a 422 (lexi.http.errors.unfit_answer)."""
    async for index, delta in stream.events():
        if delta.finish_reason == "abort":
            yield index, delta, []
            continue
        try:
            events = outputs[index].feed(delta.text, len(delta.token_ids), delta.finish_reason)
        except OutputError as exc:
            raise unfit_answer(exc) from None
        yield index, delta, events
