"""Compiling constraint regexes into outlines-core indexes: off the event loop and the engine, cached, timed.

outlines-core releases the GIL while it builds an `Index`, so a worker thread compiles while the
engine thread keeps stepping; a request waiting for its compile holds no slot (it is not submitted
yet). Indexes are cached by regex (the vocabulary is fixed for the server's life), least recently
used first out. A compile that outlasts the time limit fails its request with a reason; the worker
finishes it anyway and keeps the result, so the same schema sent again may then be served.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from outlines_core import Index

from lexi.structured.closing_items import ItemClosing
from lexi.structured.closing_table import ClosingTable
from lexi.structured.compiled_index import CompiledIndex
from lexi.structured.counted_examples import counted_examples
from lexi.structured.counted_strings import CountedStrings, has_counted
from lexi.structured.plan import ConstraintError, ConstraintPlan
from lexi.structured.plan_regex import written
from lexi.structured.turn import TurnConstraint
from lexi.structured.vocabulary import ConstraintVocabulary


@dataclass(frozen=True, slots=True)
class CompilerConfig:
    timeout: float = 10.0  # seconds a request waits for its constraint to compile
    cache_size: int = 64  # compiled indexes kept

    def __post_init__(self) -> None:
        if not 0.1 <= self.timeout <= 3600:
            raise ValueError(f"--constraint-timeout must be in [0.1, 3600] seconds, got {self.timeout}")
        if not 1 <= self.cache_size <= 4096:
            raise ValueError(f"constraint cache_size must be in [1, 4096], got {self.cache_size}")


class ConstraintCompiler:
    def __init__(self, vocab: ConstraintVocabulary, config: CompilerConfig | None = None) -> None:
        self.vocab = vocab
        self.config = config or CompilerConfig()
        self._cache: OrderedDict[str, CompiledIndex] = OrderedDict()
        self._namespace = secrets.randbits(64)  # with the serial below, keys the engine's compiled masks
        self._serial = 0
        self._running: dict[str, Future] = {}
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lexi-compile")
        self.compile_seconds: list[float] = []  # cold compile times, newest last (bench and metrics read them)

    async def constraint(self, plan: ConstraintPlan, budget: int | None = None) -> TurnConstraint:
        """A fresh per-request constraint that closes within `budget` tokens (max_tokens) where it can;
        ConstraintError when a regex cannot be compiled in time or at all."""
        plan = written(plan, self.vocab.repeat_budget)
        indexes = {regex: await self.index(regex) for regex in dict.fromkeys(plan.regexes)}
        return TurnConstraint(plan, indexes, self.vocab, budget)

    async def index(self, regex: str) -> CompiledIndex:
        future = self._cached_or_submit(regex)
        if isinstance(future, CompiledIndex):
            return future
        wrapped = asyncio.wrap_future(future)
        done, _ = await asyncio.wait({wrapped}, timeout=self.config.timeout)
        if not done:  # left running: its result still lands in the cache
            raise ConstraintError(
                f"the output constraint did not compile within {self.config.timeout:g} s "
                "(the schema is too large or too deeply nested for this server's limit)"
            )
        return wrapped.result()

    def prewarm(self, plan: ConstraintPlan) -> None:
        """Start compiling a plan's regexes now, without waiting (the server warms json_object at load)."""
        for regex in written(plan, self.vocab.repeat_budget).regexes:
            self._cached_or_submit(regex)

    def prewarm_counted(self) -> None:
        """Walk the vocabulary through a counted string of each kind now (`counted_examples`), without waiting (the
        server does it at load): later schemas' counted strings of the same kinds then compile without those walks."""

        def keep() -> None:
            for regex in counted_examples(self.vocab.repeat_budget):
                CountedStrings(regex).keep_plain_walks(self.vocab.all_token_bytes)

        self._executor.submit(keep)

    def index_now(self, regex: str) -> CompiledIndex:
        """Blocking form, for benchmarks and tests."""
        found = self._cached_or_submit(regex)
        return found if isinstance(found, CompiledIndex) else found.result()

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _cached_or_submit(self, regex: str) -> CompiledIndex | Future:
        with self._lock:
            if regex in self._cache:
                self._cache.move_to_end(regex)
                return self._cache[regex]
            future = self._running.get(regex)
            if future is None:
                future = self._executor.submit(self._compile, regex)
                self._running[regex] = future
            return future

    def _scanned(self, closing: ClosingTable, state: int):
        tokens = closing.tokens(state)
        return tokens[self.vocab.text_among(tokens)].astype("int64")

    def _item_closing(self, built: Index, closing: ClosingTable, counted: CountedStrings) -> ItemClosing:
        """Closing distances that count the items counted arrays still need (every state's tokens walked once)."""
        states = sorted(set(built.get_transitions()) | set(built.get_final_states()) | {built.get_initial_state()})
        bytes_ = self.vocab.all_token_bytes

        def scan(state: int):
            return counted.arrays.scan(counted.row(state), self._scanned(closing, state), bytes_)

        branch = counted.arrays.branch_low
        return ItemClosing(closing, states, scan, counted.most_needed(), lambda state: int(branch[counted.row(state)]))

    def _compile(self, regex: str) -> CompiledIndex:
        started = time.perf_counter()
        try:
            built = Index(regex, self.vocab.outlines)
            closing = ClosingTable(built, self.vocab.eos_id)
            counted = CountedStrings(regex) if has_counted(regex) else None
            items = None
            if counted is not None:
                if counted.arrays.present:
                    items = self._item_closing(built, closing, counted)
                counted.warm(lambda state: self._scanned(closing, state), self.vocab.all_token_bytes)
        except Exception as exc:  # outlines-core raises plain errors for regexes it cannot take
            with self._lock:
                self._running.pop(regex, None)
            raise ConstraintError(f"the output constraint cannot be compiled: {exc}") from None
        with self._lock:
            self.compile_seconds.append(time.perf_counter() - started)
            del self.compile_seconds[:-256]
            self._running.pop(regex, None)
            self._serial += 1  # never reused, even after eviction
            index = self._cache[regex] = CompiledIndex(built, (self._namespace, self._serial), closing, counted, items)
            while len(self._cache) > self.config.cache_size:
                self._cache.popitem(last=False)
        return index
