"""The base of every route that runs the engine: one turn per request, the drain, the abort on disconnect.

`generate(turn, sampling, n)` is the whole way from a rendered turn to the engine: sampling params
after defaults, a constraint per choice compiled off the event loop, one engine request per choice,
submitted together. The request's stream holds its end (the client gone, a shutdown's stop) once.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator

from lexi.chat.prompt import ChatTurn
from lexi.engine.request import TokenConstraint
from lexi.engine.sampling import SamplingParams
from lexi.http.errors import ApiError, bad_request, constraint_error, failed_mid_stream
from lexi.http.exchange import Reply
from lexi.http.generation.sampling import choice_requests, sampling_params
from lexi.http.generation.stream import EngineStream
from lexi.http.ops.drain import shutting_down
from lexi.http.parsing.fields import MAX_CHOICES, SamplingRequest
from lexi.http.route import Route
from lexi.http.sse import HEADERS as SSE_HEADERS
from lexi.structured import ConstraintError, ConstraintPlan, compile

log = logging.getLogger(__name__)


class GenerationRoute(Route):
    """A route that runs the engine: a client that goes away aborts its request and frees the slot."""

    stream: EngineStream | None = None  # from prepare() on: it holds the request's end (aborted, stopped)
    sent_any = False  # a streamed frame went out: the status line can no longer change
    _draining = False  # in the drain's set

    def prepare(self) -> None:
        super().prepare()
        if self.request.method == "OPTIONS":
            return
        if self.state.drain.draining:
            raise shutting_down()
        self.stream = EngineStream(self.state.runtime.engine, self._first_token)
        self.state.drain.add(self)
        self._draining = True

    def done(self, status: int | None = None) -> None:
        if self._draining:
            self.state.drain.discard(self)
        super().done(status)

    @property
    def access_tokens(self) -> tuple[int, int] | None:
        """What the choices used, summed; a stopped or failed generation logs what it had used too."""
        seen = [last for last in self.stream.last if last is not None] if self.stream is not None else []
        if not seen:
            return None
        return (sum(x.prompt_tokens for x in seen), sum(x.completion_tokens for x in seen))

    @property
    def access_drafts(self) -> tuple[int, int] | None:
        """Speculation's draft tokens checked and taken over the choices; None when none was checked."""
        seen = [last for last in self.stream.last if last is not None] if self.stream is not None else []
        proposed = sum(x.draft_proposed for x in seen)
        return (proposed, sum(x.draft_taken for x in seen)) if proposed else None

    def stop_for_shutdown(self, error: ApiError) -> None:
        """Past --shutdown-timeout: end this request with `error` (a 503, or an error frame mid-stream)."""
        self.stream.stop(error)

    def client_closed(self) -> None:
        if self.stream is not None:
            self.stream.abort()

    async def generate(
        self, turn: ChatTurn, sampling: SamplingRequest, n: int = 1, wait: bool = True
    ) -> tuple[SamplingParams, EngineStream]:
        """A rendered turn's n choices, submitted to the engine together: the params they run with, and the
        stream of their events (refusals come back as ApiErrors; a stop or abort that came first, too).

        `wait=False` returns once the engine has taken the request, before a slot is free: the caller awaits
        `stream.first_events()` itself (a stream that begins while it waits, as Anthropic's does)."""
        state = self.state
        params = sampling_params(sampling, len(turn.prompt.ids), state.engine_config.ctx_size, state.extra_stop)
        constraints = [await self.compile_constraint(turn, params.max_tokens) for _ in range(n)]
        requests = choice_requests(turn.prompt.ids, params, n, constraints if turn.plan else None)
        if not wait:
            self.stream.submit(requests)
            return params, self.stream
        await self.start_generation(requests)
        return params, self.stream

    async def start_generation(self, requests: list) -> EngineStream:
        """Submit a request's generations (its choices) together; refusals come back as ApiErrors."""
        await self.stream.start(requests)
        return self.stream

    async def compile_constraint(self, turn: ChatTurn, max_tokens: int) -> TokenConstraint | None:
        """The turn's output constraint, closing within `max_tokens`, compiled off the event loop (a 400 saying why
        when it cannot be)."""
        c = turn.conversation
        if c.guided is not None:
            param = c.guided.param
        elif c.response_format is not None and c.response_format.is_json:
            param = c.response_format.param
        else:
            param = "tools"
        return await self.compile_plan(turn.plan, param, max_tokens)

    async def compile_plan(self, plan: ConstraintPlan | None, param: str, max_tokens: int) -> TokenConstraint | None:
        """A plan's constraint, closing within `max_tokens`; one that cannot be compiled is a 400 naming `param`
        (unless the error names one)."""
        if plan is None:
            return None
        try:
            return await compile(plan, self.state.runtime.constraints, max_tokens)
        except ConstraintError as exc:
            raise constraint_error(exc, param) from None

    def _first_token(self) -> None:
        self.state.metrics.ttft.observe(time.monotonic() - self.received)

    def check_choices(self, count: int, param: str = "n") -> None:
        """A request's generations (prompts x n) take every slot they can and queue for the rest, up to
        MAX_CHOICES (OpenAI's limit on n) or the server's slots, whichever is more: past that, a 400."""
        limit = max(MAX_CHOICES, self.state.engine_config.parallel)
        if count > limit:
            raise bad_request(f"{param} asks for {count} generations in one request, more than {limit}", param=param)

    def count_tokens(self) -> None:
        """Add the finished generation's usage to /metrics (the access log reads it from the stream)."""
        for last in self.stream.last:
            if last is not None:
                self.state.metrics.prompt_tokens.inc(last.prompt_tokens)
                self.state.metrics.completion_tokens.inc(last.completion_tokens)

    def sse(self, frames: AsyncIterator[bytes]) -> Reply:
        """A streamed answer; a failure after the first frame ends the stream with an error frame."""
        return Reply(200, dict(SSE_HEADERS), frames=self._guarded(frames))

    async def _guarded(self, frames: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        async with contextlib.aclosing(frames):
            try:
                async for item in frames:
                    self.sent_any = True
                    yield item
            except ApiError as exc:
                if not self.sent_any:
                    raise
                yield self.error_frame(exc)
            except Exception as exc:
                if not self.sent_any:
                    raise
                log.exception("generation failed mid-stream")
                yield self.error_frame(failed_mid_stream(exc))
