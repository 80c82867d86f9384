"""What a counted-string step adds to its scan's set, and the set named as ids for the engine (lexi/engine/bitmask.py
masks with ids, allowed or left out, whichever are fewer, without reading the packed row back). Per scan figures
are kept in the scan's memo: a scan is shared by every request of its compiled index."""

from __future__ import annotations

import numpy as np

from lexi.structured.counted_strings import StateScan
from lexi.structured.mask_bits import among
from lexi.structured.vocabulary import ConstraintVocabulary


def openers_outside(scan: StateScan, vocab: ConstraintVocabulary) -> np.ndarray:
    """The container openers that are not among the scan's tokens (allowed where the guide takes the hole)."""
    found = scan.memo.get("openers")
    if found is None:
        openers = np.asarray(vocab.container_openers, dtype=np.int64)
        found = scan.memo["openers"] = openers[~among(openers, scan.ids)]
    return found


def named_set(
    scan: StateScan, vocab: ConstraintVocabulary, openers: bool, ends: bool, cut: np.ndarray, kept: np.ndarray | None
) -> tuple[bool, np.ndarray]:
    """(False, the row's tokens left out) or (True, those allowed), the fewer, for a step whose gain-order fill ruled
    out `cut` and kept `kept` (None: every ok token), adding the openers and the end-of-output tokens it allows."""
    added = _added(scan, vocab, openers, ends)
    key = ("left out", openers, ends)
    left_out = scan.memo.get(key)
    if left_out is None:  # the row's tokens outside the scan's ok ones, less those the step adds (once per scan)
        outside = scan.order.outside
        left_out = scan.memo[key] = outside[~np.isin(outside, added)]
    if kept is None or left_out.size + cut.size <= kept.size:
        return False, np.concatenate((left_out, cut))
    return True, np.concatenate((kept, added.astype(np.int32)))


def _added(scan: StateScan, vocab: ConstraintVocabulary, openers: bool, ends: bool) -> np.ndarray:
    """The tokens outside the scan that the step allows: the hole's openers, the end of output (once per scan)."""
    key = ("added", openers, ends)
    found = scan.memo.get(key)
    if found is None:
        parts = [openers_outside(scan, vocab)] if openers else []
        found = scan.memo[key] = np.concatenate([*parts, np.asarray(sorted(vocab.eog_ids) if ends else [], np.int64)])
    return found
