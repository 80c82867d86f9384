"""Shutting down without dropping answers: stop taking work, let running requests finish, then end the rest.

On SIGTERM or SIGINT the server keeps listening but refuses new generation requests (503
`server_shutting_down`) and says 503 on /health, so a load balancer moves traffic away while the
requests already running finish. Past `--shutdown-timeout` seconds (or at a second signal) the rest
are stopped: the engine aborts them at its next step and each client gets an answer it can read,
a 503 body or, for a stream that has begun, an error frame, instead of a cut connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Protocol

from lexi.http.errors import ApiError

ABORT_GRACE_S = 10.0  # after the timeout: time for stopped requests to write their error and finish


def shutting_down() -> ApiError:
    return ApiError(503, "the server is shutting down and takes no new requests", code="server_shutting_down")


def stopped_by_shutdown() -> ApiError:
    return ApiError(
        503, "the server shut down before this request finished (--shutdown-timeout)", code="server_shutting_down"
    )


class Stoppable(Protocol):
    """A running request (lexi.http.generation.route.GenerationRoute): its stream holds the stop."""

    def stop_for_shutdown(self, error: ApiError) -> None: ...


class Drain:
    """The requests the server still owes an answer, and whether it is shutting down.

    Handlers `add` themselves when they start and `discard` themselves when they finish; the server
    awaits `wait(timeout)` and then `stop_all()`. Event-loop thread only.
    """

    def __init__(self) -> None:
        self.draining = False
        self._active: set[Stoppable] = set()
        self._changed: asyncio.Event | None = None
        self._hurry = False

    def __len__(self) -> int:
        return len(self._active)

    def begin(self) -> None:
        self.draining = True

    def hurry(self) -> None:
        """A second signal: stop waiting for running requests."""
        self._hurry = True
        self._notify()

    def add(self, handler: Stoppable) -> None:
        self._active.add(handler)

    def discard(self, handler: Stoppable) -> None:
        self._active.discard(handler)
        self._notify()

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()

    async def wait(self, timeout: float) -> bool:
        """True once nothing is running; False at the timeout or a `hurry()`."""
        deadline = time.monotonic() + timeout
        while self._active and not self._hurry:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._changed = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(left, 1.0))
        return not self._active

    async def stop_all(self) -> int:
        """Stop every request still running; wait (a bounded while) for them to answer. Returns how many."""
        stopped = list(self._active)
        for handler in stopped:
            handler.stop_for_shutdown(stopped_by_shutdown())
        self._hurry = False
        await self.wait(ABORT_GRACE_S)
        return len(stopped)
