"""The long way through a counted scan (`counted_strings`): each token walked byte by byte through opening, counting
and closing strings, for the tokens `counted_plain_walk` leaves (control bytes, a counted string's end or beginning).

All tokens walk at once (numpy, one step a byte), each an entry of the arrays below: the string open before the
token (what the step's count is about: its characters, whether the token closes it, at what count), and a string
the token itself opens within its bytes, which must keep its own bounds if the token also closes it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lexi.structured.counted_marks import BOUNDARY, ENTRY, EXIT
from lexi.structured.counted_plain_walk import TokenBytes
from lexi.structured.counted_state import Run


@dataclass(slots=True)
class _Opened:
    """Per token: the counted string it opened within its bytes, while that string is open."""

    open: np.ndarray  # bool: it opened one and has not closed it
    text: np.ndarray  # bool: a function-form raw text value (else a JSON string)
    mid: np.ndarray  # bool: a JSON character of it is half written
    arrivals: np.ndarray  # int64: its characters so far
    start: np.ndarray  # int64: distance to the end where it opened
    last: np.ndarray  # int64: distance to the end at its last character boundary
    low: np.ndarray  # int64: its bounds
    high: np.ndarray

    @classmethod
    def none(cls, m: int) -> _Opened:
        flags = [np.zeros(m, dtype=bool) for _ in range(3)]
        return cls(*flags, *(np.zeros(m, dtype=np.int64) for _ in range(5)))


@dataclass(slots=True)
class _Tokens:
    """Per token of the walk: where it is, and what it did to the string open before it (the step's run)."""

    cur: np.ndarray  # int64: its state (a row of the byte-level table)
    ok: np.ndarray  # bool: no mark written, and every string it opened and closed kept its bounds
    open_before: np.ndarray  # bool: the string open before the token is still open
    exits: np.ndarray  # bool: it closed that string
    exit_gain: np.ndarray  # int64: that string's count gained when it closed it
    arrivals: np.ndarray  # int64: characters it added to that string
    last: np.ndarray  # int64: distance to the end at that string's last character boundary
    seen: np.ndarray  # bool: it reached a character boundary of that string
    opened: _Opened

    @classmethod
    def at(cls, view, start: int, run: Run | None, m: int) -> _Tokens:
        dist = view.distance
        if run is not None and run.text:
            last = np.full(m, min(run.start, dist[start]), dtype=np.int64)
            seen = np.ones(m, dtype=bool)
        else:
            last = np.full(m, dist[start] if view.boundary[start] else 0, dtype=np.int64)
            seen = np.full(m, bool(view.boundary[start]))
        return cls(
            cur=np.full(m, start, dtype=np.int64),
            ok=np.ones(m, dtype=bool),
            open_before=np.full(m, run is not None),
            exits=np.zeros(m, dtype=bool),
            exit_gain=np.zeros(m, dtype=np.int64),
            arrivals=np.zeros(m, dtype=np.int64),
            last=last,
            seen=seen,
            opened=_Opened.none(m),
        )


@dataclass(slots=True)
class _Byte:
    """One byte of the tokens still walking (`act`: their positions), the tokens it breaks already left out."""

    act: np.ndarray
    prev: np.ndarray  # their states before the byte
    nxt: np.ndarray  # and after it
    byte: np.ndarray
    to_exit: np.ndarray  # the byte ends a counted string
    to_boundary: np.ndarray  # the byte ends on a JSON string's character boundary
    starts_char: np.ndarray  # the byte starts a UTF-8 character
    before: np.ndarray  # the string open before the token is still open
    opened: np.ndarray  # a string the token opened is open (and the one before it is not)


def full_walk(view, start: int, run: Run | None, ids: np.ndarray, vocab_bytes: TokenBytes) -> tuple:
    """Every token's walk through opening, counting and closing strings: (ok, exits, gain, seen, at_boundary);
    `view`: the CountedStrings of the regex."""
    text = run is not None and run.text
    text_start = run.start if text else 0
    tokens = _Tokens.at(view, start, run, len(ids))
    lengths, offsets = vocab_bytes.lengths[ids], vocab_bytes.offsets[ids]
    for p in range(int(lengths.max(initial=0))):
        act = np.nonzero((lengths > p) & tokens.ok)[0]
        if act.size == 0:
            break
        step = _byte(view, tokens, act, vocab_bytes.flat[offsets[act] + p].astype(np.int64))
        _count_before(view, tokens, step, text, text_start)
        _count_opened(view, tokens, step)
        _open(view, tokens, step)
        tokens.cur[step.act] = step.nxt
    return _figures(view, tokens, text, text_start)


def _byte(view, tokens: _Tokens, act: np.ndarray, byte: np.ndarray) -> _Byte:
    """The byte's moves; a token whose byte the DFA refuses, or that writes a mark, is no longer ok."""
    prev = tokens.cur[act]
    nxt = view._table[prev, byte].astype(np.int64)
    bad = (nxt < 0) | (byte == BOUNDARY) & view.boundary[prev] | (byte == ENTRY) & view.entry[prev]
    bad |= (byte == EXIT) & view.exit[prev]
    tokens.ok[act[bad]] = False
    keep = ~bad
    act, prev, nxt, byte = act[keep], prev[keep], nxt[keep], byte[keep]
    before = tokens.open_before[act]
    opened = tokens.opened.open[act] & ~before
    to_exit, to_boundary = view.exit[nxt], view.boundary[nxt]
    return _Byte(act, prev, nxt, byte, to_exit, to_boundary, (byte & 0xC0) != 0x80, before, opened)


def _count_before(view, tokens: _Tokens, s: _Byte, text: bool, text_start: int) -> None:
    """The string open before the token: closed here, or one more character."""
    dist = view.distance
    closing = s.before & s.to_exit
    c = s.act[closing]
    tokens.exits[c] = True
    tokens.exit_gain[c] = tokens.arrivals[c] + dist[s.prev[closing]]
    tokens.open_before[c] = False
    if text:
        counted = s.before & ~s.to_exit
        a = s.act[counted]
        tokens.arrivals[a] += s.starts_char[counted]
        tokens.last[a] = np.minimum(text_start, dist[s.nxt[counted]])
    else:
        counted = s.before & s.to_boundary
        a = s.act[counted]
        tokens.arrivals[a] += 1
        tokens.last[a] = dist[s.nxt[counted]]
        tokens.seen[a] = True


def _count_opened(view, tokens: _Tokens, s: _Byte) -> None:
    """A string the token opened: closed here (within its bounds, or the token is not ok), or one more character."""
    dist, o = view.distance, tokens.opened
    ended = s.opened & s.to_exit
    e = s.act[ended]
    true = o.arrivals[e] + dist[s.prev[ended]] - o.start[e]
    tokens.ok[e[(true < o.low[e]) | (true > o.high[e])]] = False
    o.open[e] = False
    going = s.opened & ~s.to_exit
    in_text = going & o.text[s.act]
    t = s.act[in_text]
    o.arrivals[t] += s.starts_char[in_text]
    o.last[t] = np.minimum(o.start[t], dist[s.nxt[in_text]])
    in_json = going & ~o.text[s.act]
    j = s.act[in_json & s.to_boundary]
    o.arrivals[j] += 1
    o.last[j] = dist[s.nxt[in_json & s.to_boundary]]
    o.mid[j] = False
    o.mid[s.act[in_json & ~s.to_boundary]] = True


def _open(view, tokens: _Tokens, s: _Byte) -> None:
    """A string opening at this byte, outside any: a JSON string's first boundary, or a raw text value's entry."""
    dist, o = view.distance, tokens.opened
    outside = ~s.before & ~s.opened & ~s.to_exit
    entry = outside & ~s.to_boundary & view.entry[s.prev] & (s.byte != ENTRY)
    for opened, is_text, bounds in (
        (outside & s.to_boundary, False, (view.low[s.nxt], view.high[s.nxt])),
        (entry, True, (view.entry_low[s.prev], view.entry_high[s.prev])),
    ):
        at = s.act[opened]
        o.open[at], o.text[at], o.mid[at], o.arrivals[at] = True, is_text, False, 0
        o.start[at] = o.last[at] = dist[s.nxt[opened]]
        o.low[at], o.high[at] = bounds[0][opened], bounds[1][opened]


def _figures(view, tokens: _Tokens, text: bool, text_start: int) -> tuple:
    """(ok, exits, gain, seen, at_boundary) once every token is walked (a string it opened and left open must not
    already be past its maximum)."""
    dist, cur, o = view.distance, tokens.cur, tokens.opened
    end_boundary = view.boundary[cur]
    half = (not text) & tokens.open_before & ~end_boundary & ~view.exit[cur]
    true = o.arrivals + o.last - o.start + (o.mid & ~o.text)
    tokens.ok[o.open & (true > o.high)] = False
    gain = np.where(tokens.exits, tokens.exit_gain, tokens.arrivals + np.where(tokens.seen, tokens.last, 0) + half)
    if text:
        at_boundary = tokens.open_before & (dist[cur] <= text_start)
    else:
        at_boundary = tokens.open_before & end_boundary
    return tokens.ok, tokens.exits, gain, tokens.seen, at_boundary
