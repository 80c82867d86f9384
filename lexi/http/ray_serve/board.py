"""What the ingress knows of the replicas: the Board actor they report to, and the slots they offer.

A replica reports its /metrics exposition to the `Board` every `REPORT_S` seconds once its model is
loaded; one silent for `STALE_S` is taken for gone (killed, or being replaced). `Cluster` turns the
reports into /health's answer and the merged /metrics; `Admission` keeps --queue-wait and the 429 of one
server over the deployment's --parallel x live replicas slots.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import ray

from lexi.http.ops.metrics import merge_expositions

REPORT_S = 1.0  # how often a loaded replica reports its metrics to the board
STALE_S = 5.0  # a replica silent this long is taken for gone (killed, or restarting)
INGRESS = "ingress"  # the `replica` label of the ingress's own series


@ray.remote(num_cpus=0)
class Board:
    """The replicas' latest metrics (a replica reports once loaded), and load failures, by replica id."""

    def __init__(self) -> None:
        self._reports: dict[str, tuple[float, bytes]] = {}
        self._failures: dict[str, str] = {}

    def report(self, replica: str, exposition: bytes) -> None:
        self._reports[replica] = (time.monotonic(), exposition)

    def failed(self, replica: str, error: str) -> None:
        self._failures[replica] = error

    def failures(self) -> dict[str, str]:
        return dict(self._failures)

    def live(self) -> dict[str, bytes]:
        """The loaded replicas heard from within STALE_S, and their expositions."""
        now = time.monotonic()
        self._reports = {k: v for k, v in self._reports.items() if now - v[0] <= STALE_S}
        return {k: v[1] for k, v in self._reports.items()}


class Cluster:
    """What /health and /metrics ask of the deployment (ServerState.cluster on the ingress)."""

    def __init__(self, wanted: int, board) -> None:
        self.wanted = wanted
        self.board = board
        self._live: tuple[float, dict[str, bytes]] = (0.0, {})

    async def live(self, max_age: float = 0.0) -> dict[str, bytes]:
        if time.monotonic() - self._live[0] > max_age:
            self._live = (time.monotonic(), await self.board.live.remote())
        return self._live[1]

    async def unready(self) -> str | None:
        """Why not every replica is ready, or None."""
        ready = len(await self.live())
        return None if ready >= self.wanted else f"{ready} of {self.wanted} replicas are ready"

    async def exposition(self, own: bytes) -> bytes:
        reports = {k: v.decode("utf-8") for k, v in sorted((await self.live()).items())}
        return merge_expositions({**reports, INGRESS: own.decode("utf-8")})


class Admission:
    """The deployment's slots (--parallel on each live replica): a generation request takes one, or waits
    up to --queue-wait for one (woken in arrival order), then is answered 429, as on one server."""

    def __init__(self, wait: float) -> None:
        self.wait = wait
        self.busy = 0
        self._changed = asyncio.Event()

    async def acquire(self, capacity) -> bool:
        """`await capacity()` says how many slots there are now (replicas come and go)."""
        deadline = time.monotonic() + self.wait
        while True:
            slots = await capacity()
            if self.busy < slots:  # no await between this check and the increment
                self.busy += 1
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._changed.clear()
            with contextlib.suppress(TimeoutError):  # also every REPORT_S: a replica that came back adds slots
                await asyncio.wait_for(self._changed.wait(), min(left, REPORT_S))

    def release(self) -> None:
        self.busy -= 1
        self._changed.set()
