"""The text a streaming parser holds back: what may still turn out to be the start of a marker it watches for.

One helper for every stream that watches for markers (stop strings in the engine, thought and tool-call tags
in lexi/chat, a constraint's phase markers): it imports nothing, so any layer may use it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

Text = TypeVar("Text", str, bytes)


def held_back_length(text: Text, markers: Iterable[Text]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of one of `markers` (str or bytes)."""
    best = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), best, -1):
            if text.endswith(marker[:n]):
                best = n
                break
    return best
