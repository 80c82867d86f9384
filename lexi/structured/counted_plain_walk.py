"""The short way through a counted scan (`counted_strings`): tokens of plain bytes, walked once per vocabulary.

Inside a string almost every token of the vocabulary is allowed, and almost all of them are plain text: no control
byte (a mark, a newline), no end of the counted string, no start of one. `plain_walk` gives their figures with a few
numpy operations a byte. What it reads of the DFA is only the part reachable from the start state over the bytes
0x20..0xFF, up to where it stops (a counted string ends, or, outside one, begins): for one JSON string body or one raw
text value, a dozen states whatever the schema around it. So its result over the whole vocabulary is kept on the
vocabulary's `TokenBytes`, keyed by that part's shape (states numbered in the order a walk meets them, their plain
transitions, boundary flags and distances, and what kind of string is open): every counted string of the same kind
in any later schema takes its figures from there (a first visit at Gemma's 262k tokens: from ~100 ms to a few).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

_PLAIN = 0x20  # bytes from here up are plain; below are control bytes, marks included
_MAX_SHAPE = 512  # states of a shape worth keeping (a JSON string body is ~13, a raw text value ~110)
_LEAVE = -2  # in a shape: the walk stops here (the token is left to the full walk)


@dataclass(slots=True)
class TokenBytes:
    """Every token's bytes in one flat array, for walking many tokens at once, and the plain walks over all of them
    (keyed by shape, see the module docstring)."""

    flat: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray
    plain: dict = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def of(cls, token_bytes: list[bytes]) -> TokenBytes:
        lengths = np.fromiter((len(b) for b in token_bytes), dtype=np.int64, count=len(token_bytes))
        offsets = np.zeros(len(token_bytes), dtype=np.int64)
        np.cumsum(lengths[:-1], out=offsets[1:])
        flat = np.frombuffer(b"".join(token_bytes) + b"\x00", dtype=np.uint8)
        return cls(flat, offsets, lengths)


def plain_walk(view, start: int, run, ids: np.ndarray, vocab_bytes: TokenBytes) -> tuple:
    """`walk_plain` for `ids`, from the vocabulary's kept walks where the start state's shape was walked before (and
    kept when most of the vocabulary is walked: a string's inside)."""
    if len(ids) * 4 < len(vocab_bytes.lengths):
        return walk_plain(view, start, run, ids, vocab_bytes)
    shape = _shape(view, start, run)
    if shape is None:
        return walk_plain(view, start, run, ids, vocab_bytes)
    with vocab_bytes.lock:
        whole = vocab_bytes.plain.get(shape)
    if whole is None:
        whole = walk_plain(view, start, run, np.arange(len(vocab_bytes.lengths)), vocab_bytes)
        with vocab_bytes.lock:
            vocab_bytes.plain[shape] = whole
    return tuple(figures[ids] for figures in whole)


def _shape(view, start: int, run) -> bytes | None:
    """What `walk_plain` reads from `start`, as bytes (None: too large to be a string's inside)."""
    table, dist = view._table, view.distance
    stops = view.exit | (view.boundary if run is None else np.zeros_like(view.exit))
    canon = np.full(len(table), -1, dtype=np.int64)  # a state's number in the order the walk meets it
    canon[start] = 0
    order = [start]
    rows = []
    for state in order:
        targets = table[state, _PLAIN:].astype(np.int64)
        valid = targets >= 0
        stop = valid & stops[np.maximum(targets, 0)]
        inner = valid & ~stop
        met = targets[inner][canon[targets[inner]] < 0]
        fresh, first = np.unique(met, return_index=True)
        fresh = fresh[np.argsort(first)]  # numbered by the first byte that reaches them: the same in any schema
        if len(order) + len(fresh) > _MAX_SHAPE:
            return None
        canon[fresh] = np.arange(len(order), len(order) + len(fresh))
        order += fresh.tolist()
        rows.append(np.where(inner, canon[np.maximum(targets, 0)], np.where(stop, _LEAVE, -1)))
    states = np.array(order)
    kind = b"n" if run is None else b"t%d" % run.start if run.text else b"j"
    return kind + np.stack(rows).tobytes() + view.boundary[states].tobytes() + dist[states].tobytes()


def walk_plain(view, start: int, run, ids: np.ndarray, vocab_bytes: TokenBytes) -> tuple:
    """The figures of the full walk (ok, exits, gain, seen, at_boundary) for the tokens that write no control byte,
    end no counted string and (with none open) begin none, and `special`: the tokens it left to the full walk."""
    m, dist, table = len(ids), view.distance, view._table
    lengths, offsets = vocab_bytes.lengths[ids], vocab_bytes.offsets[ids]
    text = run is not None and run.text
    cur = np.full(m, start, dtype=np.int64)
    special = np.zeros(m, dtype=bool)
    arrivals = np.zeros(m, dtype=np.int64)
    last = np.full(m, dist[start] if view.boundary[start] else 0, dtype=np.int64)
    seen = np.full(m, bool(view.boundary[start]))
    active = np.arange(m)
    for p in range(int(lengths.max(initial=0))):
        active = active[lengths[active] > p]
        if active.size == 0:
            break
        byte = vocab_bytes.flat[offsets[active] + p]
        nxt = table[cur[active], byte]
        leave = (byte < 0x20) | (nxt < 0)
        stay = ~leave
        leave[stay] = view.exit[nxt[stay]] | (run is None) & view.boundary[nxt[stay]]
        special[active[leave]] = True
        stay = ~leave
        active, nxt, byte = active[stay], nxt[stay], byte[stay]
        cur[active] = nxt
        if run is None:
            continue
        if text:
            arrivals[active] += (byte & 0xC0) != 0x80
        else:
            hit = view.boundary[nxt]
            h = active[hit]
            arrivals[h] += 1
            last[h] = dist[nxt[hit]]
            seen[h] = True
    ok, exits = ~special, np.zeros(m, dtype=bool)
    if run is None:
        gain, at_boundary = np.where(seen, last, 0), np.zeros(m, dtype=bool)
    elif text:
        seen[:] = True
        gain = arrivals + np.minimum(run.start, dist[cur])
        at_boundary = dist[cur] <= run.start
    else:
        at_boundary = view.boundary[cur]
        gain = arrivals + np.where(seen, last, 0) + ~at_boundary
    return ok, exits, gain, seen, at_boundary, special
