"""A counted string's scan in the shape a step near a bound wants: its ok tokens as a packed row, and sorted by how
many characters each adds, so the tokens a count rules out are runs at the ends (`counted_strings` makes the scans;
`turn` fills masks from them)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lexi.structured.counted_state import Run
from lexi.structured.mask_bits import clear_many, set_many


@dataclass(frozen=True, slots=True)
class GainOrder:
    """A scan's ok tokens as a packed row, and each group of them (closes the open string or not, reaches a boundary
    of it or not) sorted by gain: a count rules out a run at the top of each group (past the maximum) and, for the
    closing ones, at the bottom (short of the minimum), so a step near a bound clears those few bits from the row
    instead of comparing every token of the vocabulary (Gemma 3: ~2 ms of numpy a step)."""

    words: np.ndarray  # uint32, bit t of the packed row set for each ok token t
    groups: tuple  # (closes, seen, gains ascending (int32), their token ids (int32)) per non-empty group
    outside: np.ndarray  # int32, every other token of the row (few inside a string: the closer's, control ones)

    @classmethod
    def of(cls, ids, ok, exits, gain, seen, vocab_size: int) -> GainOrder | None:
        """None for a state with few tokens (comparing them all is as quick) or gains too wide for one int16 key."""
        picked = np.flatnonzero(ok)
        if picked.size < _FEW_TOKENS:
            return None
        low, span = int(gain[picked].min()), int(gain[picked].max()) - int(gain[picked].min()) + 1
        if 4 * span >= 1 << 15:
            return None
        # one stable sort of (group, gain) as an int16 key (numpy sorts 16-bit keys by radix)
        group = exits[picked].astype(np.int16) * 2 + seen[picked]
        key = (group * span + (gain[picked] - low)).astype(np.int16)
        by = np.argsort(key, kind="stable")
        key, order_ids = key[by], ids[picked[by]].astype(np.int32)
        groups = []
        for code in range(4):
            first, last = np.searchsorted(key, [code * span, (code + 1) * span])
            if last > first:
                gains = (key[first:last] - code * span + low).astype(np.int32)
                groups.append((code >= 2, bool(code & 1), gains, order_ids[first:last]))
        flags = np.zeros(-(-vocab_size // 32) * 32, dtype=bool)
        flags[order_ids] = True
        outside = np.flatnonzero(~flags).astype(np.int32)
        return cls(np.packbits(flags, bitorder="little").view(np.uint32), tuple(groups), outside)

    def fill(self, words: np.ndarray, run: Run | None) -> tuple[np.ndarray, np.ndarray | None]:
        """Set the bits of the ok tokens that keep `run` within its bounds in `words` (a packed uint32 row); returns
        the ok tokens the count rules out, and those it keeps (None: all of them)."""
        if run is None:
            words[: self.words.size] |= self.words
            return np.zeros(0, dtype=np.int32), None
        base, cut, kept = run.arrivals - run.start, [], []
        for closes, reached, gains, ids in self.groups:
            shift = base + (0 if reached else run.last)  # count = shift + gain
            high = np.searchsorted(gains, run.high - shift, side="right")
            low = np.searchsorted(gains, run.low - shift, side="left") if closes else 0
            cut += [ids[:low], ids[high:]]
            kept.append(ids[low:high])
        cut, kept = np.concatenate(cut), np.concatenate(kept)
        if kept.size < cut.size:  # at a bound few are left: set those
            set_many(words, kept)
        else:
            words[: self.words.size] |= self.words
            clear_many(words, cut)
        return cut, kept


_FEW_TOKENS = 2048  # a scan of fewer ok tokens is filled by comparing them all
