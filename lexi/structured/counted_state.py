"""Where one request's walk is inside counted strings and arrays: the state its constraint carries from step to step.

A leaf: `counted_strings` and `counted_arrays` update it as tokens are written, `counted_gain_order` and the masks
read it, and a snapshot copies it (a speculative draft walks ahead and comes back).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Run:
    """Where the walk is in a counted string: what a request's constraint carries between steps."""

    low: int
    high: int
    text: bool  # a function-form raw text value (else a JSON string)
    arrivals: int  # characters since the string opened (and closer bytes not yet told apart)
    start: int  # distance to the end where the string opened
    last: int  # distance to the end at the last character boundary
    mid: bool = False  # a JSON character is half written

    @property
    def count(self) -> int:
        """Characters written, a half-written one included."""
        return self.arrivals + self.last - self.start + self.mid

    def pending_min(self) -> int:
        return max(0, self.low - self.count)


@dataclass(frozen=True, slots=True)
class Items:
    """A counted array open in the output: its bounds and the commas written at its level."""

    low: int
    high: int
    commas: int = 0

    def pending(self) -> int:
        """Items still needed before it may close (an open array has at least one once it has a comma)."""
        return max(0, self.low - self.commas - 1)
