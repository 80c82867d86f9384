"""How many tokens each state of a compiled constraint is from closing, so output can close within max_tokens.

A forced call or a JSON answer that runs out of tokens is worth nothing to the client. Each compiled
index gets a table, built once on the compiler's thread from the index's own token transitions: the
fewest tokens from every state to a state that ends the phase (a terminal state: 0; an accepting state
that could go on: 1, the end-of-output token), the same figure for the state after each allowed
token, and the worst of those per state. While the tokens left cover the worst next state, a step is
free; past that, only tokens whose next state can still close in time are allowed, so output that can
close within the budget always does. Exact over the whole vocabulary (not a byte-level estimate): a
token that opens a long optional part is a jump a per-byte bound would miss.
"""

from __future__ import annotations

import numpy as np
from outlines_core import Index

UNREACHABLE = 1 << 30  # a state from which the phase cannot end


class ClosingTable:
    """Token distances to the end of one compiled regex's phase, per state and per allowed token."""

    __slots__ = ("_row", "_distance", "_worst", "_tokens", "_next", "_rows", "_final", "_edges", "ends")

    def __init__(self, index: Index, eos_id: int) -> None:
        transitions = index.get_transitions()
        final = set(index.get_final_states())
        states = sorted(set(transitions) | final | {index.get_initial_state()})
        known = np.array(states, dtype=np.int64)
        row = {s: i for i, s in enumerate(states)}
        tokens, targets = [], []
        for s in states:
            edges = transitions.get(s, {})
            edges.pop(eos_id, None)  # the end of output is not a move: accepting states say so below
            tokens.append(np.fromiter(edges.keys(), np.int64, len(edges)))
            targets.append(np.searchsorted(known, np.fromiter(edges.values(), np.int64, len(edges))))
        distance = np.full(len(states), UNREACHABLE, dtype=np.int64)
        for s in final:
            distance[row[s]] = 0 if len(tokens[row[s]]) == 0 else 1
        self.ends = distance.copy()  # the distance of the states that end the phase (UNREACHABLE elsewhere)
        src = np.concatenate([np.full(len(t), i, dtype=np.int64) for i, t in enumerate(targets)])
        dst = np.concatenate(targets)
        pairs = _distinct(src * len(states) + dst, len(states) ** 2)  # one edge per pair of states: tokens collapse
        self._edges = (pairs // len(states), pairs % len(states))
        distance = self._relax(distance)
        self._row = row
        self._distance = distance
        self._final = {row[s] for s in final}
        self._tokens, self._next, self._rows, worst = [], [], [], np.zeros(len(states), dtype=np.int64)
        for i, (ids, to) in enumerate(zip(tokens, targets, strict=True)):
            after = distance[to]
            small = len(after) and after.max() < 1 << 15  # numpy sorts 16-bit keys by radix: ~4x quicker
            order = np.argsort(after.astype(np.int16) if small else after, kind="stable")
            self._tokens.append(ids[order].astype(np.int32))
            self._next.append(after[order])
            self._rows.append(to[order].astype(np.int32))
            worst[i] = after.max() if len(after) else 0
        self._worst = worst

    def _relax(self, distance: np.ndarray) -> np.ndarray:
        """Shortest paths in tokens: relax until nothing shortens (at most the longest path's rounds)."""
        src, dst = self._edges
        while True:
            relaxed = distance.copy()
            np.minimum.at(relaxed, src, np.minimum(distance[dst] + 1, UNREACHABLE))
            if np.array_equal(relaxed, distance):
                return distance
            distance = relaxed

    def tokens(self, state: int) -> np.ndarray:
        """Every token allowed at `state` but the end of output (nearest the end first)."""
        return self._tokens[self._row[state]]

    def next_distances(self, state: int) -> np.ndarray:
        """For each of `tokens(state)`, how far its next state is from the end."""
        return self._next[self._row[state]]

    def row(self, state: int) -> int:
        """The state's row in the table's arrays (`ends`, `next_rows`)."""
        return self._row[state]

    def next_rows(self, state: int) -> np.ndarray:
        """For each of `tokens(state)`, the row of its next state."""
        return self._rows[self._row[state]]

    def distance(self, state: int) -> int:
        """Fewest tokens from `state` to the end of the phase."""
        return int(self._distance[self._row[state]])

    def worst(self, state: int) -> int:
        """The largest distance any allowed token leads to: with more tokens left than that, a step is free."""
        return int(self._worst[self._row[state]])

    def is_final(self, state: int) -> bool:
        return self._row[state] in self._final

    def count_within(self, state: int, limit: int) -> int:
        """How many tokens from `state` lead at most `limit` tokens from the end: with the state, it names the set
        (so masks of different limits that allow the same tokens share one key)."""
        i = self._row[state]
        return int(np.searchsorted(self._next[i], limit, side="right"))

    def nearest(self, state: int, count: int) -> np.ndarray:
        """The `count` tokens from `state` whose next states are nearest the end (`count_within` gives it)."""
        return self._tokens[self._row[state]][:count]

    def allowed_within(self, state: int, limit: int) -> np.ndarray:
        """The tokens from `state` whose next state is at most `limit` tokens from the end."""
        return self.nearest(state, self.count_within(state, limit))


def _distinct(codes: np.ndarray, size: int) -> np.ndarray:
    """np.unique of `codes` (each below `size`): by a table of flags where it is small (an 8M-token state set: ~0.5 s
    less of a compile at Gemma's vocabulary), else by sorting."""
    if size > 1 << 24:
        return np.unique(codes)
    seen = np.zeros(size, dtype=bool)
    seen[codes] = True
    return np.flatnonzero(seen)


def fewest_tokens(text: bytes, ids_of: dict[bytes, list[int]]) -> int:
    """The fewest vocabulary tokens that spell `text` exactly (UNREACHABLE when none do)."""
    best = [0] + [UNREACHABLE] * len(text)
    longest = max((len(b) for b in ids_of), default=1)
    for end in range(1, len(text) + 1):
        for start in range(max(0, end - longest), end):
            if best[start] + 1 < best[end] and text[start:end] in ids_of:
                best[end] = best[start] + 1
    return best[len(text)]
