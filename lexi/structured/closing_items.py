"""Closing distances that count the items a counted array still needs (`counted_arrays`), so it closes in time.

The closing table (`closing_table`) reads distances off the DFA, where a counted array of one item may
already close: for `minItems: 30` it is short by 29 items, and a budget steered by it runs out mid-array. Here
the distance is over (state, k): k is how many more commas the innermost counted array open at the state must
take before its `]`. A token moves k as its byte walk says (`ArrayMarks.scan`): its commas at that array's level
take k down (never below 0), a `]` of that array is allowed only once k commas are in it, and an array it opens
and leaves open starts its own k (its minimum less one, less the commas in the token). So the distance from the
start of a phase counts the items of the arrays still to come, and one from inside an array what it still needs,
with tokens that span an item's end and the next one's start (`","`) counted as the tokenizer writes them.

Layers k = 0..K are computed exactly (K: the largest need of any counted array, at most MAX_LAYERS); past K a
layer is the last one plus `per_item` a comma, the largest step between two layers. That keeps the figure a
length some output reaches: from any state some token leads to a state at most one nearer the end, so while the
tokens left cover the distance, allowing only tokens whose next state is within the tokens left always closes.

Where counted arrays nest, a `]` of the inner one leaves the outer at k = 0 here; the constraint adds the outer
arrays' needs times `per_item` on top (a figure, not a guarantee, for that rare shape). Where anyOf branches'
arrays share a `[`, the need opens as the loosest branch's; a token whose next state tells the branches apart
(`ArrayMarks.branch_low`: every comma ahead names one minimum) needs its branch's items from there on: an array it
opens counts them in the scan, and a token of the array open is raised at query time (`next_distances`, with the
walk's own count). The table's own figures at the shared `[` stay the loosest branch's.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lexi.structured.closing_table import UNREACHABLE, ClosingTable
from lexi.structured.counted_arrays import ItemScan
from lexi.structured.counted_state import Items

MAX_LAYERS = 320  # exact up to minItems 321; past it a layer is extrapolated by `per_item`
_MAX_WORST = 4096  # (state, need) pairs whose worst next distance is kept
_MAX_PASSES = 8  # an array opened inside a loop depends on layers computed after it: passes until nothing moves


class ItemClosing:
    """Per state of a compiled index and commas still needed, the fewest tokens to the end of its phase."""

    def __init__(
        self,
        closing: ClosingTable,
        state_ids: list[int],
        scan: Callable[[int], ItemScan],
        most: int,
        branch_low: Callable[[int], int] = lambda state: -1,
    ) -> None:
        """`state_ids`: every state of the closing table; `scan(state)`: what each of its text tokens (the closing
        table's order, text only: `ConstraintVocabulary.text_among`) does to counted arrays; `most`: the largest
        number of commas any counted array needs; `branch_low(state)`: the minimum of the innermost counted array
        once the items at `state` have told anyOf branches apart (`ArrayMarks.branch_low`; -1: not told)."""
        self._closing = closing
        self._branch = np.full(len(closing.ends), -1, dtype=np.int64)
        for state in state_ids:
            self._branch[closing.row(state)] = branch_low(state)
        self.layers = max(1, min(most, MAX_LAYERS))
        self._edges: dict[int, tuple] = {}  # row -> (text tokens, ok positions, next rows, commas, closes, opens)
        parts = []
        for state in state_ids:
            row = closing.row(state)
            found = scan(state)
            nxt = closing.next_rows(state)
            positions = np.nonzero(found.ok)[0]
            edge = (positions, nxt[positions], found.commas[positions], found.closes[positions], found.opens[positions])
            self._edges[row] = (len(found.ok), *edge)
            parts.append((np.full(len(positions), row, dtype=np.int64), *edge[1:]))
        src, dst, commas, closes, opens = (np.concatenate([p[i] for p in parts]).astype(np.int64) for i in range(5))
        # tokens that do the same collapse: most touch no count (one key a pair of rows), the rest are few
        plain = (commas == 0) & (closes == 0) & (opens < 0)
        n = len(closing.ends)
        pairs = np.unique(src[plain] * n + dst[plain])
        counting = np.unique(np.stack([x[~plain] for x in (src, dst, commas, closes, opens)], axis=1), axis=0).T
        src, dst, commas, closes, opens = (
            np.concatenate([plain_part, counting_part])
            for plain_part, counting_part in zip(
                (pairs // n, pairs % n, np.zeros_like(pairs), np.zeros_like(pairs), np.full_like(pairs, -1)),
                counting,
                strict=True,
            )
        )
        self._all = (src, dst, commas, closes.astype(bool), opens)
        # per row, the largest minimum a next state of the same array names (opening tokens count theirs in `opens`)
        self._branch_most = np.full(n, -1, dtype=np.int64)
        level = (opens < 0) & ~self._all[3]
        np.maximum.at(self._branch_most, src[level], self._branch[dst[level]])
        self.per_item = 0
        self._table = self._solve()
        self._worst: dict[tuple[int, int, Items | None], int] = {}
        # per row, the worst next distance at k = 0: at k it is at most this + k * per_item (a step is free below it)
        layer = self._target(0, commas, closes, opens)
        self._loose = np.zeros(len(closing.ends), dtype=np.int64)
        after = self._value(self._table, layer, dst)
        np.maximum.at(self._loose, src, np.where(after >= UNREACHABLE, 0, after))

    def _value(self, table: np.ndarray, layer: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """table[layer, rows], extrapolated past the last layer; UNREACHABLE where layer < 0 (a move not allowed)."""
        top = self.layers
        got = table[np.minimum(np.maximum(layer, 0), top), rows] + np.maximum(layer - top, 0) * self.per_item
        return np.where((layer < 0) | (got >= UNREACHABLE), UNREACHABLE, got)

    @staticmethod
    def _target(k: int | np.ndarray, commas: np.ndarray, closes: np.ndarray, opens: np.ndarray) -> np.ndarray:
        """The layer each move leads to from layer k (-1: a `]` before the array has its minimum)."""
        after = np.where(opens >= 0, opens, np.where(closes, 0, np.maximum(k - commas, 0)))
        return np.where(closes & (commas < k), -1, after)

    def _solve(self) -> np.ndarray:
        src, dst, commas, closes, opens = self._all
        n = len(self._closing.ends)
        table = np.tile(self._closing.ends, (self.layers + 1, 1))
        for _ in range(_MAX_PASSES):
            before = table.copy()
            for k in range(self.layers + 1):
                layer = self._target(k, commas, closes, opens)
                # moves into other layers read figures that hold during this layer: once; moves within it: relaxed
                other = layer != k
                candidate = np.full(n, UNREACHABLE, dtype=np.int64)
                np.minimum.at(candidate, src[other], self._value(table, layer[other], dst[other]) + 1)
                row = np.minimum(table[k], np.minimum(candidate, UNREACHABLE))
                within_src, within_dst = src[~other], dst[~other]
                while True:
                    candidate = np.full(n, UNREACHABLE, dtype=np.int64)
                    np.minimum.at(candidate, within_src, np.minimum(row[within_dst] + 1, UNREACHABLE))
                    relaxed = np.minimum(row, candidate)
                    if np.array_equal(relaxed, row):
                        break
                    row = relaxed
                table[k] = row
            self.per_item = self._largest_step(table)
            if np.array_equal(before, table):
                break
        return table

    @staticmethod
    def _largest_step(table: np.ndarray) -> int:
        """The most one more comma adds anywhere (0 when no layer above the first is reachable)."""
        reachable = (table[1:] < UNREACHABLE) & (table[:-1] < UNREACHABLE)
        steps = np.where(reachable, table[1:] - table[:-1], 0)
        return int(steps.max(initial=0))

    def distance(self, state: int, need: int) -> int:
        """Fewest tokens from `state` to the end of the phase, the innermost counted array needing `need` commas."""
        row = self._closing.row(state)
        return int(self._value(self._table, np.array([need]), np.array([row]))[0])

    def next_distances(self, state: int, need: int, top: Items | None = None) -> np.ndarray:
        """For each of the state's text tokens (`ArrayMarks.scan`'s order), how far its next state is from the end
        (UNREACHABLE for a token the count does not allow). `top`: the innermost counted array as the walk holds
        it; a token whose next state tells anyOf branches apart needs that branch's items from there on."""
        size, positions, nxt, commas, closes, opens = self._edges[self._closing.row(state)]
        layer = self._target(need, commas, closes, opens)
        if self._raises(state, top):
            branch = self._branch[nxt]
            told = (branch > top.low) & (opens < 0) & ~closes & (layer >= 0)
            layer = np.where(told, np.maximum(branch - top.commas - commas - 1, 0), layer)
        out = np.full(size, UNREACHABLE, dtype=np.int64)
        out[positions] = self._value(self._table, layer, nxt)
        return out

    def _raises(self, state: int, top: Items | None) -> bool:
        """Whether a token at `state` may tell anyOf branches apart and raise the innermost array's minimum."""
        return top is not None and bool(self._branch_most[self._closing.row(state)] > top.low)

    def worst_at_most(self, state: int, need: int, top: Items | None = None) -> int:
        """A bound on `worst` that costs nothing: each comma needed adds at most `per_item` to any next state (where
        a token may raise the need, the exact figure)."""
        if self._raises(state, top):
            return self.worst(state, need, top)
        return int(self._loose[self._closing.row(state)]) + need * self.per_item

    def worst(self, state: int, need: int, top: Items | None = None) -> int:
        """The largest distance an allowed token leads to (with more tokens left than that, a step is free)."""
        top = top if self._raises(state, top) else None  # else the figure is the plain one
        key = (state, need, top)
        found = self._worst.get(key)
        if found is None:
            after = self.next_distances(state, need, top)
            found = int(after[after < UNREACHABLE].max(initial=0))
            if len(self._worst) >= _MAX_WORST:
                self._worst.clear()
            self._worst[key] = found
        return found
