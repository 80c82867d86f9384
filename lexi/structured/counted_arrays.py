"""Counting the items of arrays too long to write out, beside a constraint's DFA (the marks: `counted_marks`).

Per DFA state, from the byte-level table that `counted_strings` builds: the bounds of the counted array whose `[`
it follows (ARRAY), whether it follows one of a counted array's commas and the bounds that comma names (ITEM), and
whether it follows a counted array's `]` (ARRAY_END). A walk keeps a stack of the counted arrays open, innermost
last, each with the commas written at its own level (an inner array's commas carry no mark unless it is counted
too, and then they count on its own entry). An array of k commas holds k + 1 items when it holds any (one whose
minimum is 1 or more cannot be empty in the regex), so a comma is allowed while k + 2 <= max, and the `]` once
k + 1 >= min.

Where anyOf branches' arrays share a `[`, every array there is marked (`schema_regex`): the count opens with the
loosest bounds of those branches, and each comma names the loosest of the branches the items so far still fit, so
once the items tell the branches apart, the bounds are the branch's own; where the first item already does (an
integer where the other branch holds strings), its state takes them (`branch_low`) and the budget counts from it.
A token is checked against the bounds before it, never tighter than the true ones. Where the items cannot tell the
branches apart (`anyOf` of two arrays of integers, `minItems: 20` or `maxItems: 5`), the counts allowed are not one
range and the loosest is kept: widened, as nothing beside the automaton knows which branch is meant.

A state's tokens are scanned once: those holding a comma or a bracket are walked byte by byte (no other token can
touch a count), giving what each does to the innermost array open before it (commas added, closed or not). A token
that would go on to the array around that one, or open two arrays, is not allowed (the same text can be written in
more tokens), and one that opens and closes an array checks that array's bounds on the spot.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lexi.structured.counted_marks import ARRAY, ARRAY_END, ITEM
from lexi.structured.counted_state import Items

_STRUCTURE = np.frombuffer(b",[]" + bytes([ARRAY, ITEM, ARRAY_END]), dtype=np.uint8)  # what may touch a count


@dataclass(frozen=True, slots=True)
class ItemScan:
    """What each of a state's tokens (by position in the state's ids) does to the innermost counted array."""

    ok: np.ndarray  # writes no mark, touches at most that array, and keeps any array it opens within its bounds
    commas: np.ndarray  # commas it adds to that array
    closes: np.ndarray  # it closes that array
    touches: bool  # some ok token adds a comma or closes: the count decides this step
    opens: np.ndarray  # the commas still needed by an array it opens and leaves open (-1: it leaves none open)

    def allowed(self, top: Items | None) -> np.ndarray:
        """Which tokens keep the innermost open array (`top`) within its bounds."""
        if top is None or not self.touches:
            return self.ok
        items = top.commas + self.commas + 1
        return self.ok & (items <= top.high) & (~self.closes | (top.low <= 1) | (items >= top.low))

    def key(self, top: Items | None) -> tuple | None:
        """A name for `allowed(top)`'s set among this state's: it leaves the count out where it changes nothing."""
        if top is None or not self.touches:
            return None
        most = int(self.commas[self.ok].max(initial=0))
        closing = self.ok & self.closes
        least = int(self.commas[closing].min()) if closing.any() else None
        if top.commas + most + 1 <= top.high and (least is None or top.low <= 1 or top.commas + least + 1 >= top.low):
            return ("items-within",)
        return (top.low, top.high, top.commas)


class ArrayMarks:
    """Where counted arrays open, take a comma and close, per row of a byte-level DFA table."""

    def __init__(self, table: np.ndarray, read) -> None:
        self._table = table
        self.low, self.high = read(ARRAY)
        self.opens = self.low >= 0
        self.item, self.end = _single(table, ITEM), _single(table, ARRAY_END)
        self.item_low, self.item_high = read(ITEM)  # the bounds a comma names (anyOf branches told apart by then)
        self.present = bool(self.opens.any())
        self.branch_low, self.branch_high = self._branch_bounds() if self.present else (self.low, self.high)
        self._structural: tuple[int, np.ndarray] | None = None

    def _branch_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Per row, the bounds the next comma of the innermost counted array names, where every way to such a comma
        names the same minimum: the items so far have told anyOf branches apart (-1 elsewhere). A way through a
        counted array opened inside the item, or past its `]`, names nothing known."""
        n, big = len(self._table), np.iinfo(np.int64).max // 4
        known = self.item & (self.item_low >= 0)
        least = np.where(known, self.item_low, np.where(self.item | self.opens, 0, big))
        most = np.where(known, self.item_low, np.where(self.item | self.opens, big, -1))
        high = np.where(known, self.item_high, -1)
        fixed = self.item | self.opens | self.end
        src, byte = np.nonzero(self._table >= 0)
        pairs = np.unique(src * n + self._table[src, byte])  # many bytes lead to the same state: each pair once
        keep = ~fixed[pairs // n]
        src, dst = pairs[keep] // n, pairs[keep] % n
        for _ in range(n + 1):
            moved = (least.copy(), most.copy(), high.copy())
            np.minimum.at(moved[0], src, least[dst])
            np.maximum.at(moved[1], src, most[dst])
            np.maximum.at(moved[2], src, high[dst])
            if all(np.array_equal(a, b) for a, b in zip(moved, (least, most, high), strict=True)):
                break
            least, most, high = moved
        else:  # not settled (a very long item): no branch is taken as told apart
            return np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
        told = (least == most) & (least < big)
        return np.where(told, least, -1), np.where(told, high, -1)

    def step(self, nxt: int, items: tuple[Items, ...]) -> tuple[Items, ...]:
        """The stack after arriving at row `nxt`."""
        if self.opens[nxt]:
            return (*items, Items(int(self.low[nxt]), int(self.high[nxt])))
        if self.item[nxt] and items:
            top, low, high = items[-1], int(self.item_low[nxt]), int(self.item_high[nxt])
            if low < 0:  # bounds not read (more anyOf paths than a mark is read along): the ones it opened with
                low, high = top.low, top.high
            return (*items[:-1], Items(low, high, top.commas + 1))
        if self.end[nxt] and items:
            return items[:-1]
        if items and self.branch_low[nxt] > items[-1].low:  # the first item told the branches apart: their bounds
            top, high = items[-1], int(self.branch_high[nxt])
            return (*items[:-1], Items(int(self.branch_low[nxt]), min(top.high, high), top.commas))
        return items

    def scan(self, start: int, ids: np.ndarray, vocab_bytes) -> ItemScan:
        m = len(ids)
        ok, commas, closes = np.ones(m, dtype=bool), np.zeros(m, dtype=np.int64), np.zeros(m, dtype=bool)
        left_open = np.full(m, -1, dtype=np.int64)
        picked = np.nonzero(self._structural_tokens(vocab_bytes)[ids])[0]
        lengths, offsets = vocab_bytes.lengths[ids[picked]], vocab_bytes.offsets[ids[picked]]
        n = len(picked)
        cur = np.full(n, start, dtype=np.int64)
        good, added, closed = np.ones(n, dtype=bool), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
        inner = np.zeros(n, dtype=bool)  # an array opened within the token is open
        inner_low, inner_high, inner_commas = (np.zeros(n, dtype=np.int64) for _ in range(3))
        for p in range(int(lengths.max(initial=0))):
            act = np.nonzero((lengths > p) & good)[0]
            if act.size == 0:
                break
            byte = vocab_bytes.flat[offsets[act] + p].astype(np.int64)
            prev = cur[act]
            nxt = self._table[prev, byte].astype(np.int64)
            bad = nxt < 0
            bad |= (byte == ARRAY) & self.opens[prev] | (byte == ITEM) & self.item[prev]
            bad |= (byte == ARRAY_END) & self.end[prev]  # a mark is never written
            nxt = np.maximum(nxt, 0)
            opens, comma, end, open_inner = self.opens[nxt], self.item[nxt], self.end[nxt], inner[act]
            bad |= opens & open_inner  # a second array opened within one token
            bad |= comma & ~open_inner & closed[act]  # a comma of the array around the one it closed
            bad |= end & ~open_inner & closed[act]  # a second close of arrays open before it
            ok_inner = (inner_low[act] <= 1) | (inner_commas[act] + 1 >= inner_low[act])
            bad |= end & open_inner & ~ok_inner
            bad |= comma & open_inner & (inner_commas[act] + 2 > inner_high[act])
            good[act[bad]] = False
            keep = ~bad
            act, nxt, opens, comma, end, open_inner = (x[keep] for x in (act, nxt, opens, comma, end, open_inner))
            o = act[opens]
            inner[o], inner_commas[o] = True, 0
            inner_low[o], inner_high[o] = self.low[nxt[opens]], self.high[nxt[opens]]
            inner_commas[act[comma & open_inner]] += 1
            added[act[comma & ~open_inner]] += 1
            inner[act[end & open_inner]] = False
            closed[act[end & ~open_inner]] = True
            cur[act] = nxt
        ok[picked], commas[picked], closes[picked] = good, added, closed
        # an array opened in the token counts from its branch's minimum where its first item told anyOf branches apart
        inner_low = np.maximum(inner_low, self.branch_low[cur])
        left_open[picked] = np.where(inner, np.maximum(inner_low - inner_commas - 1, 0), -1)
        touches = bool(((commas > 0) | closes)[ok].any())
        return ItemScan(ok, commas, closes, touches, left_open)

    def _structural_tokens(self, vocab_bytes) -> np.ndarray:
        """Which tokens hold a comma, a bracket or a mark byte (computed once per vocabulary)."""
        if self._structural is None or self._structural[0] != id(vocab_bytes):
            hit = np.isin(vocab_bytes.flat, _STRUCTURE)
            counts = np.concatenate([[0], np.cumsum(hit)])
            ends = vocab_bytes.offsets + vocab_bytes.lengths
            self._structural = (id(vocab_bytes), counts[ends] > counts[vocab_bytes.offsets])
        return self._structural[1]


def _single(table: np.ndarray, mark: int) -> np.ndarray:
    """States that take `mark` once (in raw text, where any byte is text, it is taken again and again)."""
    after = table[:, mark]
    return (after >= 0) & (table[np.maximum(after, 0), mark] < 0)
