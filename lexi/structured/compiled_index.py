"""A compiled regex as a constraint walks it: the outlines-core Index and the figures built beside it once."""

from __future__ import annotations

from outlines_core import Index

from lexi.structured.closing_items import ItemClosing
from lexi.structured.closing_table import ClosingTable
from lexi.structured.counted_state import Items
from lexi.structured.counted_strings import CountedStrings


class CompiledIndex:
    """An outlines-core Index, a serial number that keys its masks, which of its states end the output, and how
    far each state is from the end (its closing table, and with counted arrays, the items they still need)."""

    __slots__ = ("index", "serial", "closing", "counted", "items", "_terminal")

    def __init__(
        self,
        index: Index,
        serial: tuple[int, int],
        closing: ClosingTable,
        counted: CountedStrings | None = None,
        items: ItemClosing | None = None,
    ) -> None:
        self.index = index
        self.serial = serial
        self.closing = closing
        self.counted = counted  # the byte-level view of its counted strings (None: it has none)
        self.items = items  # distances that count the items of counted arrays (None: it has none)
        self._terminal: dict[int, bool] = {}

    def distance(self, state: int, need: int = 0) -> int:
        """Fewest tokens from `state` to the end of the phase, the innermost counted array needing `need` commas."""
        return self.closing.distance(state) if self.items is None else self.items.distance(state, need)

    def free(self, state: int, need: int, limit: int, top: Items | None = None) -> bool:
        """Whether every token allowed at `state` leads at most `limit` tokens from the end (the cheap bound first);
        `top`: the innermost counted array open."""
        if self.items is None:
            return self.closing.worst(state) <= limit
        return self.items.worst_at_most(state, need, top) <= limit or self.items.worst(state, need, top) <= limit

    def terminal(self, state: int, eos_id: int) -> bool:
        """An accepting state from which nothing but the end of output may follow (computed once per state)."""
        found = self._terminal.get(state)
        if found is None:
            found = self.index.is_final_state(state) and set(self.index.get_allowed_tokens(state) or []) <= {eos_id}
            self._terminal[state] = found
        return found
