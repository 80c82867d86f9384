"""Counting the characters of bounded strings beside a constraint's DFA (the regex marks: `counted_marks`).

An index of the same regex over the 255 single bytes has the same DFA state ids as the model's index and
costs microseconds a state, so it gives every state's byte transitions. From them, per state: the bounds
of the counted JSON string it is a character boundary of (the BOUNDARY mark it accepts), the bounds of
the function-form value that starts after it (ENTRY), whether a counted string has just ended there
(EXIT), and how many bytes it is from such an end. A JSON string's character is counted each time the
walk arrives at a boundary from inside it (an escape is several bytes, one character); a raw text value's
at each byte that starts a UTF-8 character. The bytes of a closer that cannot yet be told from text
(`\\n</parameter>`) are counted too, and taken back by the distance to the end: the true count is
(characters since the string opened) + (distance to the end now) - (distance at its start), and +1 while
a JSON character is half written.

A step's mask is the guide's tokens less those that would write a mark or take a counted string past
its bounds. Each state's tokens are walked once, all at once over the vocabulary's bytes (numpy); a step
then only compares those figures with its count.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from outlines_core import Index

from lexi.structured.counted_arrays import ArrayMarks, ItemScan
from lexi.structured.counted_full_walk import full_walk
from lexi.structured.counted_gain_order import GainOrder
from lexi.structured.counted_marks import ARRAY_END, BOUNDARY, DIGIT_BASE, DIGITS, ENTRY, EXIT
from lexi.structured.counted_plain_walk import TokenBytes, plain_walk
from lexi.structured.counted_state import Items, Run
from lexi.structured.regex_cost import byte_vocabulary
from lexi.structured.regex_text import lit

_FAR = 1 << 20  # byte distance of a state from which no counted string ends nearby
_MAX_ROUNDS = 64  # distance relaxation rounds: what a counted string's closer can be away, and more
_MAX_PATHS = 4  # a mark read along more paths than this is not a mark


def has_counted(regex: str) -> bool:
    """Whether `regex` holds counted strings or arrays (every one is followed by the EXIT or ARRAY_END mark)."""
    return lit(chr(EXIT)) in regex or lit(chr(ARRAY_END)) in regex


@dataclass(frozen=True, slots=True)
class StateScan:
    """What each of a state's tokens does to counted strings (all arrays by position in `ids`)."""

    ids: np.ndarray  # the guide's tokens at this state (no end-of-output token)
    ok: np.ndarray  # writes no mark, and every string it opens and closes or leaves open keeps its bounds
    exits: np.ndarray  # closes the string open before it
    gain: np.ndarray  # count after it = run.arrivals - run.start + gain (+ run.last where not `seen`)
    seen: np.ndarray  # it reaches a character boundary of the open string (else its count holds run.last)
    at_boundary: np.ndarray  # it ends on a whole character of the open string, which it has not closed
    narrows: bool  # some token is not ok: outside a string, the guide's own mask is not enough here
    extents: tuple  # (min, max) of `gain` over the ok tokens that stay / close, seen / not (None: no such token)
    items: ItemScan | None = None  # what the tokens do to counted arrays (None: the regex has none)
    order: GainOrder | None = None  # the ok tokens as bits and by gain (None: counted arrays decide too)
    memo: dict = field(default_factory=dict)  # figures a step derives from the scan once (the hole's openers)


class CountedStrings:
    """The byte-level view of one compiled regex that has counted strings."""

    def __init__(self, regex: str) -> None:
        index = Index(regex, byte_vocabulary())
        transitions = index.get_transitions()
        states = sorted(set(transitions) | set(index.get_final_states()) | {index.get_initial_state()})
        self._row = {s: i for i, s in enumerate(states)}
        n = len(states)
        table = np.full((n, 256), -1, dtype=np.int32)
        for state, edges in transitions.items():
            i = self._row[state]
            for byte, target in edges.items():
                if byte < 256:
                    table[i, byte] = self._row[target]
        self._table = table
        self.low, self.high = self._read(BOUNDARY)  # JSON string boundaries
        self.entry_low, self.entry_high = self._read(ENTRY)  # before a raw text value
        self.boundary, self.entry = self.low >= 0, self.entry_low >= 0
        # EXIT is taken once where a string just ended, and again and again inside raw text (where it is text)
        after_exit = table[:, EXIT]
        self.exit = (after_exit >= 0) & (table[np.maximum(after_exit, 0), EXIT] < 0)
        self.distance = self._distances()
        self.arrays = ArrayMarks(table, self._read)
        self._states = np.array(states, dtype=np.int64)
        self._scans: dict[tuple, StateScan] = {}
        self._lock = threading.Lock()

    def row(self, state: int) -> int:
        """The state's row in the byte-level table."""
        return self._row[state]

    def most_needed(self) -> int:
        """The most commas a counted array of this regex needs before its `]` (its minimum less one)."""
        return max(int(self.arrays.low.max(initial=0)) - 1, 0)

    def _read(self, kind: int) -> tuple[np.ndarray, np.ndarray]:
        """Per state, the bounds a `kind` mark it accepts names (-1: none); several (a state of two anyOf
        branches): the loosest, as either may be meant."""
        n = len(self._table)
        low, high = np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
        for i in np.nonzero(self._table[:, kind] >= 0)[0]:
            paths = [(0, int(self._table[i, kind]))]
            for _ in range(2 * DIGITS):
                paths = [
                    (value * 16 + d, int(self._table[at, DIGIT_BASE + d]))
                    for value, at in paths
                    for d in range(16)
                    if self._table[at, DIGIT_BASE + d] >= 0
                ]
                if not paths or len(paths) > _MAX_PATHS:
                    break
            else:
                low[i] = min(v >> (4 * DIGITS) for v, _ in paths)
                high[i] = max(v & ((1 << (4 * DIGITS)) - 1) for v, _ in paths)
        return low, high

    def _distances(self) -> np.ndarray:
        """Bytes from each state to the nearest state where a counted string has just ended."""
        distance = np.where(self.exit, 0, _FAR).astype(np.int64)
        valid = self._table >= 0
        targets = np.where(valid, self._table, 0)
        for _ in range(_MAX_ROUNDS):
            through = np.where(valid, distance[targets], _FAR).min(axis=1) + 1
            relaxed = np.minimum(distance, through)
            if np.array_equal(relaxed, distance):
                break
            distance = relaxed
        return distance

    def walk(
        self, state: int, data: bytes, run: Run | None, items: tuple[Items, ...] = ()
    ) -> tuple[Run | None, tuple[Items, ...]]:
        """The run after writing `data` from `state` (None: outside every counted string), and the counted arrays
        open then (innermost last)."""
        i = self._row[state]
        arrays = self.arrays if self.arrays.present else None
        for byte in data:
            nxt = int(self._table[i, byte])
            if nxt < 0:
                return None, items  # the guide refuses this token anyway
            if arrays is not None:
                items = arrays.step(nxt, items)
            dist = int(self.distance[nxt])
            if self.exit[nxt]:
                run = None
            elif run is None:
                if self.boundary[nxt]:
                    run = Run(int(self.low[nxt]), int(self.high[nxt]), False, 0, dist, dist)
                elif self.entry[i] and byte != ENTRY:
                    run = Run(int(self.entry_low[i]), int(self.entry_high[i]), True, 0, dist, dist)
            elif run.text:
                run.arrivals += (byte & 0xC0) != 0x80
                run.last = min(run.start, dist)
            elif self.boundary[nxt]:
                run.arrivals, run.last, run.mid = run.arrivals + 1, dist, False
            else:
                run.mid = True
            i = nxt
        return run, items

    def scan(self, state: int, run: Run | None, ids: Callable[[], np.ndarray], vocab_bytes: TokenBytes) -> StateScan:
        """Walk all of a state's tokens (`ids()`) at once, cached per state and kind of open run."""
        key = (state, None if run is None else (run.text, run.start))
        with self._lock:
            found = self._scans.get(key)
        if found is None:
            found = self._scan(self._row[state], run, ids(), vocab_bytes)
            with self._lock:
                self._scans[key] = found
        return found

    def insides(self) -> list[tuple[int, Run]]:
        """(row, run) for the states inside counted strings where a step walks most of the vocabulary: each JSON
        string's character boundary, and the states of a raw text value that take ASCII text (the text, and the
        closer's prefixes that could still be text; not those halfway through a character), with a walk's run there."""
        found = []
        for row in np.nonzero(self.boundary)[0]:
            dist = int(self.distance[row])
            found.append((int(row), Run(int(self.low[row]), int(self.high[row]), False, 0, dist, dist)))
        for row in np.nonzero(self.entry)[0]:  # a raw text value starts after the newline
            first = int(self._table[row, 0x0A])
            if first < 0:
                continue
            dist = int(self.distance[first])
            seen, order = {first}, [first]
            for at in order:  # the value's states: all it reaches before its closer ends it
                for target in np.unique(self._table[at]):
                    if target >= 0 and not self.exit[target] and int(target) not in seen:
                        seen.add(int(target))
                        order.append(int(target))
            run = Run(int(self.entry_low[row]), int(self.entry_high[row]), True, 0, dist, dist)
            found += [(at, run) for at in order if (self._table[at, 0x20:0x7F] >= 0).sum() > 48]  # not mid-character
        return found

    def warm(self, ids_of: Callable[[int], np.ndarray], vocab_bytes: TokenBytes) -> None:
        """Scan the inside of every counted string now, on the compiler's thread: a first visit there walks the whole
        vocabulary, which a step should not wait for. `ids_of(state)`: the tokens a step's scan would walk."""
        for row, run in self.insides():
            state = int(self._states[row])
            try:
                ids = ids_of(state)
            except KeyError:  # a state no token reaches
                continue
            self.scan(state, run, lambda ids=ids: ids, vocab_bytes)

    def keep_plain_walks(self, vocab_bytes: TokenBytes) -> None:
        """Walk the whole vocabulary from every inside state (`insides`), so their shapes are kept on `vocab_bytes`
        for every later schema (a server does this at load, on the compiler's thread)."""
        everything = np.arange(len(vocab_bytes.lengths))
        for row, run in self.insides():
            plain_walk(self, row, run, everything, vocab_bytes)

    def _scan(self, start: int, run: Run | None, ids: np.ndarray, vocab_bytes: TokenBytes) -> StateScan:
        """Most tokens (plain text inside a string, or structure outside counted ones) are walked by `plain_walk`;
        the rest (control bytes, a counted string's end or beginning) by `full_walk`."""
        ok, exits, gain, seen, at_boundary, special = plain_walk(self, start, run, ids, vocab_bytes)
        picked = np.nonzero(special)[0]
        if picked.size:
            walked = full_walk(self, start, run, ids[picked], vocab_bytes)
            for whole, part in zip((ok, exits, gain, seen, at_boundary), walked, strict=True):
                whole[picked] = part
        extents = tuple(
            (int(gain[group].min()), int(gain[group].max())) if group.any() else None
            for group in (ok & ~exits & seen, ok & ~exits & ~seen, ok & exits & seen, ok & exits & ~seen)
        )
        items = self.arrays.scan(start, ids, vocab_bytes) if self.arrays.present else None
        narrows = not bool(ok.all()) or (items is not None and not bool(items.ok.all()))
        order = None if items is not None else GainOrder.of(ids, ok, exits, gain, seen, len(vocab_bytes.lengths))
        return StateScan(ids, ok, exits, gain, seen, at_boundary, narrows, extents, items, order)

    @staticmethod
    def within_everywhere(scan: StateScan, run: Run) -> bool:
        """Whether every ok token of `scan` keeps `run` within its bounds: the step's set is then the same at
        any count this holds for, so a mask can be shared across steps (a long string's masks are not
        recomputed each character)."""
        base = run.arrivals - run.start
        groups = zip(scan.extents, (False, False, True, True), (True, False, True, False), strict=True)
        for extent, closes, seen in groups:
            if extent is None:
                continue
            low, high = (base + e + (0 if seen else run.last) for e in extent)
            if high > run.high or (closes and low < run.low):
                return False
        return True

    def allowed(
        self, scan: StateScan, run: Run | None, progress_only: bool = False, top: Items | None = None
    ) -> np.ndarray:
        """Which tokens of `scan` keep every counted string within its bounds, given the open `run`, and the
        innermost counted array open (`top`) within its own; `progress_only`: only those that stay in the string,
        end on a whole character and add one (the tokens left are just enough to reach its minimum and close)."""
        keep = scan.ok if scan.items is None else scan.ok & scan.items.allowed(top)
        if run is None:
            return keep
        count = run.arrivals - run.start + scan.gain + np.where(scan.seen, 0, run.last)
        within = np.where(scan.exits, (count >= run.low) & (count <= run.high), count <= run.high)
        keep = keep & within
        if progress_only:
            keep &= ~scan.exits & scan.at_boundary & (count > run.count)
        return keep
