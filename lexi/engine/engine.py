"""The async engine: a step loop on its own thread, and `generate` streams that the event loop consumes.

The two threads meet only in the command queue (submissions, aborts, shutdown) and in
``loop.call_soon_threadsafe`` back into each request's asyncio.Queue. The step loop owns the
scheduler, the runner and every sequence's state; nothing else touches them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from lexi.engine.config import EngineConfig
from lexi.engine.draft_model import DraftCursor
from lexi.engine.errors import ContextOverflow, EngineBusy
from lexi.engine.ngram import DraftPace, NgramIndex
from lexi.engine.output import OutputProcessor
from lexi.engine.request import CompletionDelta, GenerationRequest
from lexi.engine.runner import ModelRunner
from lexi.engine.sampler import SampleResult, SamplerState
from lexi.engine.scheduler import ScheduledSeq, Scheduler
from lexi.engine.sequence import Sequence
from lexi.engine.speculation import Speculator
from lexi.engine.stats import EngineStats

__all__ = ["ContextOverflow", "Engine", "EngineBusy"]

log = logging.getLogger(__name__)
_STOP = object()


@dataclass(slots=True)
class _Stream:
    """One request as the step loop sees it: where its events go and its per-request state."""

    request: GenerationRequest
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue
    submitted: float
    sampler: SamplerState | None = None
    output: OutputProcessor | None = None
    first_token: float | None = None
    prompt_logprobs: list = field(default_factory=list)  # gathered chunk by chunk, sent with the first token
    ngram: NgramIndex | None = None  # where its tokens occur, for speculation's proposals (made on first use)
    draft_cursor: DraftCursor | None = None  # what the draft model has computed of it (--spec draft)
    pace: DraftPace = field(default_factory=DraftPace)  # how its drafts fared: what its next ones are worth
    held_logprobs: list = field(default_factory=list)  # (where its text starts, logprob) of tokens not yet shown

    def push(self, item: CompletionDelta | BaseException) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, item)
        except RuntimeError:  # the consumer's loop is closed: nobody is listening any more
            pass


class Engine:
    """Serves GenerationRequests with continuous batching over one model and its paged KV cache."""

    def __init__(self, model, tokenizer, config: EngineConfig, draft_model=None) -> None:
        """`draft_model`: the model that proposes drafts, with --spec draft (and only then): its vocabulary must be
        the target's (the caller checks the files' tokens)."""
        if (config.spec.method == "draft") != (draft_model is not None):
            raise ValueError("a draft model is given exactly when spec.method is 'draft'")
        self.model = model
        self.tokenizer = tokenizer
        self.config = config
        self.scheduler = Scheduler(config)
        self.runner = ModelRunner(model, config)
        self.stats = EngineStats(
            slots_total=config.parallel, kv_blocks_total=config.num_blocks, kv_blocks_free=config.num_blocks
        )
        self._eog = frozenset(tokenizer.eog_ids) | {tokenizer.eos_id}
        self._vocab_size = min(tokenizer.vocab_size, model.args.vocab_size)
        self.speculator = Speculator(config, self.runner, self.scheduler, self._vocab_size, draft_model)
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    # ---- the caller's side (any thread / the event loop) ----

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("engine already started")
        self._thread = threading.Thread(target=self._run, name="lexi-engine", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        """Stop the step loop; requests still queued or running get a RuntimeError."""
        if self._thread is None:
            return
        self._commands.put(_STOP)
        self._thread.join()
        self._thread = None

    @property
    def alive(self) -> bool:
        """The step loop is running (False before start(), after shutdown(), or once it broke)."""
        return self._thread is not None and self._thread.is_alive()

    def abort(self, request_id: str) -> None:
        """Thread-safe; the request ends with finish_reason "abort" at the next step."""
        self._commands.put(("abort", request_id))

    async def generate(self, request: GenerationRequest) -> AsyncIterator[CompletionDelta]:
        """Stream the request's events; the last carries finish_reason. Closing the stream aborts it.

        Raises ContextOverflow (before taking a slot), EngineBusy (no slot within queue_wait) or
        ValueError for a logit_bias naming a token outside the vocabulary.
        """
        (stream,) = self.generate_many([request])
        async for delta in stream:
            yield delta

    def generate_many(self, requests: list[GenerationRequest]) -> list[AsyncIterator[CompletionDelta]]:
        """One stream per request, the requests taking their slots together (the n choices of one call).

        More requests than slots: they take every slot at once, and the rest follow as slots free up
        (scheduler.py). A prompt several of them share is computed once, by the first that has it; the
        others reuse its KV blocks (still cached when a queued one starts, unless the pool needed them
        back). Raises as `generate` does, for any of them, before anything is queued. Call from the event loop.
        """
        if self._thread is None:
            raise RuntimeError("engine not started")
        for request in requests:
            self._check(request)
        loop, now = asyncio.get_running_loop(), time.monotonic()
        streams = [_Stream(r, loop, asyncio.Queue(), now) for r in requests]
        self._commands.put(("add", streams))
        return [self._events(stream) for stream in streams]

    def _check(self, request: GenerationRequest) -> None:
        self.scheduler.check_fits(len(request.prompt_ids), request.params.max_tokens)
        vocab = self._vocab_size
        bad = [t for t in request.params.logit_bias if t >= vocab]
        if bad:
            raise ValueError(f"logit_bias names token ids outside the vocabulary of {vocab}: {bad[:5]}")
        if min(request.prompt_ids) < 0 or max(request.prompt_ids) >= vocab:
            # Caught here, an out-of-range id fails its own request instead of the whole batch's forward.
            raise ValueError(f"prompt_ids must be token ids in [0, {vocab})")

    async def _events(self, stream: _Stream) -> AsyncIterator[CompletionDelta]:
        finished = False
        try:
            while True:
                item = await stream.events.get()
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                if item.finish_reason is not None:
                    finished = True
                yield item
                if finished:
                    return
        finally:
            if not finished:
                self.abort(stream.request.request_id)

    # ---- the step loop's side ----

    def _run(self) -> None:
        try:
            while self._drain(block=not self.scheduler.has_work):
                self.step()
        except BaseException as exc:  # the loop itself broke: fail everyone rather than hang them
            log.exception("engine step loop failed")
            self._fail_all(exc)
            raise
        self._fail_all(RuntimeError("engine shut down"))

    def _drain(self, block: bool) -> bool:
        """Apply pending commands; False once shutdown is requested."""
        try:
            command = self._commands.get() if block else self._commands.get_nowait()
        except queue.Empty:
            return True
        while True:
            if command is _STOP:
                return False
            kind, arg = command
            if kind == "add":
                self._admit(arg)
            else:
                self.scheduler.abort(arg)
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return True

    def _admit(self, streams: list[_Stream]) -> None:
        seqs: list[Sequence] = []
        leaders: dict[tuple[int, ...], Sequence] = {}
        try:
            for stream in streams:
                req, params = stream.request, stream.request.params
                seq = Sequence(req.request_id, req.prompt_ids, params.max_tokens, payload=stream)
                seq.prompt_logprobs_top = req.prompt_logprobs
                seq.leader = leaders.setdefault(tuple(req.prompt_ids), seq)
                if seq.leader is seq:
                    seq.leader = None
                seqs.append(seq)
                banned = tuple(sorted(self._eog)) if params.ignore_eos else ()
                stream.sampler = SamplerState(params, req.constraint, banned)
                eog = frozenset() if params.ignore_eos else self._eog
                stream.output = OutputProcessor(self.tokenizer.detokenizer(), params.stop, eog, params.max_tokens)
            self.scheduler.add_group(seqs, streams[0].submitted)
        except Exception as exc:  # these requests alone are refused; the loop goes on
            for stream in streams:
                stream.push(exc)
            return
        self.stats.requests_total += len(streams)
        self._update_gauges()

    def step(self) -> None:
        """One scheduling decision and, if anything runs, one batched forward."""
        started = time.perf_counter()
        if self.config.spec.enabled:
            self.speculator.propose(self.scheduler.running, self.stats)
        out = self.scheduler.schedule(time.monotonic())
        self._update_gauges()
        for seq in out.rejected:
            self.stats.requests_rejected += 1
            seq.payload.push(EngineBusy(f"no free slot within {self.config.queue_wait:g} s"))
        for seq in out.aborted:
            self.stats.requests_aborted += 1
            self._emit(seq, CompletionDelta("", (), finish_reason="abort"))
        for seq in out.admitted:
            self.stats.prompt_tokens_total += seq.num_prompt
        for seq in dict.fromkeys((*out.admitted, *out.matched)):  # a queued choice can be both in one step
            self.stats.cached_tokens_total += seq.num_cached
        if out.scheduled:
            shape = None
            if self.config.spec.enabled:
                self.speculator.count_rows(out.scheduled, self.stats)
                shape = self.speculator.decode_shape(out.scheduled)
            self._run_batch(out.scheduled)
            if shape is not None:  # what this decode step cost teaches the next steps' drafts (step_cost.py)
                self.speculator.cost.observe(*shape, time.perf_counter() - started)
            self.stats.steps_total += 1
        self._update_gauges()

    def _run_batch(self, scheduled: list[ScheduledSeq]) -> None:
        try:
            results, prompt_logprobs = self.runner.execute(scheduled, [s.seq.payload.sampler for s in scheduled])
        except Exception as exc:  # nothing is known about which row broke it: fail this batch only
            log.exception("step failed")
            for item in scheduled:
                self._fail(item.seq, exc)
            return
        self.stats.prefill_tokens_total += sum(s.num_new for s in scheduled if s.seq.prefilling)
        for i, logprobs in prompt_logprobs.items():
            scheduled[i].seq.payload.prompt_logprobs.extend(logprobs)
        ok = [[r.token_id for r in result] if isinstance(result, list) else None for result in results]
        self.scheduler.advance(scheduled, ok)
        now = time.monotonic()
        for item, result in zip(scheduled, results, strict=True):
            if result is None:
                continue
            if isinstance(result, Exception):
                self._fail(item.seq, result)
                continue
            if item.draft:
                self.speculator.checked(item.seq, len(item.draft), len(result) - 1, self.stats)
            self._deliver(item.seq, result, now)

    def _deliver(self, seq: Sequence, results: list[SampleResult], now: float) -> None:
        stream: _Stream = seq.payload
        prompt_logprobs = ()
        if stream.first_token is None:
            stream.first_token = now
            if seq.wants_prompt_logits:
                prompt_logprobs = (None, *stream.prompt_logprobs)
            self.stats.ttft_count += 1
            self.stats.ttft_last_s = now - stream.submitted
            self.stats.ttft_sum_s += self.stats.ttft_last_s
        text, reason, delivered, starts = "", None, 0, []
        for result in results:  # one token, or a draft's accepted tokens and the next: each until the output ends
            starts.append(stream.output.decoded)
            constraint_done = False
            if stream.request.constraint is not None:
                try:
                    stream.request.constraint.advance(result.token_id)
                    constraint_done = stream.request.constraint.is_finished()
                except Exception as exc:
                    self._fail(seq, exc)
                    return
            text += stream.output.feed(result.token_id, constraint_done)
            delivered += 1
            reason = stream.output.finish_reason
            if reason is not None:
                break
        self.stats.generated_tokens_total += delivered
        if delivered < len(results):  # the output ended inside an accepted draft: the rest was never generated
            del seq.token_ids[len(seq.token_ids) - (len(results) - delivered) :]
        results = results[:delivered]
        token_ids = tuple(r.token_id for r in results)
        logprobs = self._shown_logprobs(stream, results, starts)
        if reason is not None:  # slot and blocks are back before the caller sees the last event
            self.stats.requests_finished += 1
            self._release(seq)
        stop_string = stream.output.stop_string if reason is not None else None
        delta = CompletionDelta(
            text, token_ids, logprobs, reason, prompt_logprobs=prompt_logprobs, stop_string=stop_string
        )
        self._emit(seq, delta)

    @staticmethod
    def _shown_logprobs(stream: _Stream, results: list[SampleResult], starts: list[int]) -> tuple:
        """The logprobs of the tokens whose text is now visible, held like the text itself: a token whose text
        is held back (a possible stop string) waits, and the end-of-turn token and a cut stop string's tokens,
        which show nothing, are never sent; so the entries spell the text, with or without speculation."""
        held = stream.held_logprobs
        held += [(start, r.logprob) for r, start in zip(results, starts, strict=True) if r.logprob is not None]
        visible = stream.output.visible
        shown = 0
        while shown < len(held) and held[shown][0] < visible:
            shown += 1
        logprobs = tuple(lp for _, lp in held[:shown])
        stream.held_logprobs = [] if stream.output.finish_reason is not None else held[shown:]
        return logprobs

    def _release(self, seq: Sequence) -> None:
        self.scheduler.finish(seq)
        self._update_gauges()

    def _update_gauges(self) -> None:
        self.stats.slots_busy = len(self.scheduler.running)
        self.stats.queue_depth = len(self.scheduler.waiting)
        self.stats.kv_blocks_free = self.scheduler.blocks.num_free

    def _emit(self, seq: Sequence, delta: CompletionDelta) -> None:
        """Stamp the running usage counts on the event and send it."""
        stream: _Stream = seq.payload
        counts = {
            "prompt_tokens": seq.num_prompt,
            "completion_tokens": seq.num_output,
            "cached_tokens": seq.num_cached,
            "draft_proposed": seq.draft_proposed,
            "draft_taken": seq.draft_taken,
        }
        stream.push(dataclasses.replace(delta, **counts))

    def _fail(self, seq: Sequence, exc: BaseException) -> None:
        self.stats.requests_failed += 1
        self._release(seq)
        seq.payload.push(exc)

    def _fail_all(self, exc: BaseException) -> None:
        for seq in [*self.scheduler.running, *self.scheduler.waiting]:
            self._fail(seq, exc)
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return
            if command is not _STOP and command[0] == "add":
                for stream in command[1]:
                    stream.push(exc)
