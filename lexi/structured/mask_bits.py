"""Packed allowed-token rows (token t = bit t%32 of int32 word t//32): setting, clearing and reading bits."""

from __future__ import annotations

import numpy as np


def _packed(words: int, ids: np.ndarray) -> np.ndarray:
    """A packed uint32 row of `words` words with the bits of `ids` set (ids past the row left out)."""
    flags = np.zeros(words * 32, dtype=bool)
    flags[ids[ids < flags.size]] = True
    return np.packbits(flags, bitorder="little").view(np.uint32)


def set_bits(row: np.ndarray, ids: np.ndarray) -> None:
    """Set the bits of `ids` in a packed int32 row (token t = bit t%32 of word t//32)."""
    row |= _packed(row.size, ids).view(np.int32)


def bit(row: np.ndarray, token_id: int) -> bool:
    return bool((int(row[token_id >> 5]) >> (token_id & 31)) & 1)


def or_bits(row: np.ndarray, ids) -> None:
    words = row.view(np.uint32)
    for token_id in ids:
        if token_id >> 5 < words.size:
            words[token_id >> 5] |= np.uint32(1 << (token_id & 31))


def clear_bits(row: np.ndarray, ids) -> None:
    words = row.view(np.uint32)
    for token_id in ids:
        if token_id >> 5 < words.size:
            words[token_id >> 5] &= np.uint32(~(1 << (token_id & 31)) & 0xFFFFFFFF)


def set_many(words: np.ndarray, ids: np.ndarray) -> None:
    """Set the bits of `ids` (each below words.size * 32) in a packed uint32 row: one at a time for a few, through
    a packed row of them for many."""
    if ids.size <= _FEW:
        np.bitwise_or.at(words, ids >> 5, np.uint32(1) << (ids & 31).astype(np.uint32))
    else:
        words |= _packed(words.size, ids)


def clear_many(words: np.ndarray, ids: np.ndarray) -> None:
    """Clear the bits of `ids` (each below words.size * 32) in a packed uint32 row, as `set_many` sets them."""
    if ids.size <= _FEW:
        np.bitwise_and.at(words, ids >> 5, ~(np.uint32(1) << (ids & 31).astype(np.uint32)))
    else:
        words &= ~_packed(words.size, ids)


_FEW = 2048  # ids set one at a time (numpy's ufunc.at) rather than through a packed row of the whole vocabulary


def among(ids: np.ndarray, members: np.ndarray) -> np.ndarray:
    """Which of `ids` are in `members` (both token ids): a lookup table, not numpy's set operations, whose
    hashing costs milliseconds a step over a large vocabulary's allowed set."""
    ids, members = np.asarray(ids, dtype=np.int64), np.asarray(members, dtype=np.int64)
    if ids.size == 0 or members.size == 0:
        return np.zeros(ids.size, dtype=bool)
    table = np.zeros(int(max(ids.max(), members.max())) + 1, dtype=bool)
    table[members] = True
    return table[ids]
