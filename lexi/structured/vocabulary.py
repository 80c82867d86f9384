"""The model's vocabulary as constrained decoding sees it: built once per loaded model, shared by all requests.

outlines-core gets every token that is text (its raw bytes, from the GGUF vocabulary), without
control tokens and without the end-of-generation tokens, which the constraint allows itself, and
only when the output may end. One control token that is never sampled under a constraint is lent
to the regex "hole" (a NUL byte, see `schema_regex`): the guide reports it allowed where a container
nested past the depth limit may open, and the constraint then offers the container openers instead.
The per-request constraint also watches free text for a marker (`<tool_call>`, `</think>`); `banned`
lists the tokens that would complete a marker in a way the constraint cannot follow, computed once
per marker state and kept for the model's lifetime. The vocabulary's size also sets how many DFA states the
counted repeats of a translated schema may add (`repeat_budget`): every state costs a pass over the vocabulary.
"""

from __future__ import annotations

import threading

import numpy as np
from outlines_core import Vocabulary

from lexi.structured.closing_table import fewest_tokens
from lexi.structured.counted_plain_walk import TokenBytes
from lexi.structured.regex_cost import repeat_budget

_SPACE = b" \t\r\n"


class ConstraintVocabulary:
    """Token bytes, end-of-generation ids and the outlines-core Vocabulary of one tokenizer."""

    def __init__(self, tokenizer) -> None:
        self.size = tokenizer.vocab_size
        self.repeat_budget = repeat_budget(self.size)  # DFA states a translation's counted repeats may add
        self.eos_id = tokenizer.eos_id
        self.eog_ids = tuple(sorted({*tokenizer.eog_ids, tokenizer.eos_id}))
        self.token_bytes = [tokenizer.token_bytes(i) for i in range(self.size)]
        eog = set(self.eog_ids)
        table: dict[bytes, list[int]] = {}
        self._text_ids: list[int] = []
        self.hole_id: int | None = None
        for token_id, raw in enumerate(self.token_bytes):
            if token_id in eog or not raw or tokenizer.is_special(token_id):
                if self.hole_id is None and token_id not in eog and tokenizer.is_special(token_id):
                    self.hole_id = token_id
                continue
            self._text_ids.append(token_id)
            if b"\x00" not in raw:  # JSON text never holds a raw NUL: that byte is the hole's alone
                table.setdefault(raw, []).append(token_id)
        self.ids_of_bytes = dict(table)  # text tokens by their bytes: what spells a marker, and how briefly
        if self.hole_id is not None:
            table[b"\x00"] = [self.hole_id]
        for byte in range(1, 32):  # outlines-core takes a regex only if every state it reaches can be left:
            # a counted string's marks (counted_marks) are control bytes some vocabularies cannot spell, so
            # each gets an id past the vocabulary, which no mask row holds (the model never writes a mark)
            table.setdefault(bytes([byte]), [self.size + byte])
        self.outlines = Vocabulary(self.eos_id, table)
        # tokens that open a JSON container: what a hole lets the model write
        self.container_openers = tuple(i for i in self._text_ids if self.token_bytes[i][:1] in (b"[", b"{"))
        self._all_bytes: TokenBytes | None = None
        self._banned: dict[tuple[bytes, int, bool], tuple[int, ...]] = {}
        self._spelled: dict[bytes, tuple[int, ...]] = {}
        self._lock = threading.Lock()

    @property
    def all_token_bytes(self) -> TokenBytes:
        """Every token's bytes in one array (built on first use: only counted strings walk them)."""
        with self._lock:
            if self._all_bytes is None:
                self._all_bytes = TokenBytes.of(self.token_bytes)
            return self._all_bytes

    def text_among(self, tokens: np.ndarray) -> np.ndarray:
        """Which of `tokens` are text: not an end of output, not the hole, not a mark byte no token spells."""
        keep = tokens < self.size
        for token in {*self.eog_ids, self.hole_id}:
            keep &= tokens != (-1 if token is None else token)
        return keep

    def banned(self, marker: bytes, held: int, enter: bool) -> tuple[int, ...]:
        """Tokens that, after text ending in marker[:held], would complete `marker` badly.

        `enter`: the marker starts constrained output, so a token may complete it only if whatever
        it carries past the marker is whitespace (the constraint starts fresh right after it).
        Otherwise the marker is forbidden outright, and every token completing it is banned.
        """
        key = (marker, held, enter)
        with self._lock:
            found = self._banned.get(key)
        if found is not None:
            return found
        prefix = marker[:held]
        out = []
        for token_id in self._text_ids:
            text = prefix + self.token_bytes[token_id]
            at = text.find(marker)
            if at >= 0 and (not enter or text[at + len(marker) :].strip(_SPACE)):
                out.append(token_id)
        found = tuple(out)
        with self._lock:
            self._banned[key] = found
        return found

    def marker_cost(self, marker: bytes) -> tuple[int, ...]:
        """For each length `held` already written, the fewest tokens that write the rest of `marker`."""
        with self._lock:
            found = self._spelled.get(marker)
        if found is None:
            found = tuple(fewest_tokens(marker[held:], self.ids_of_bytes) for held in range(len(marker)))
            with self._lock:
                self._spelled[marker] = found
        return found

    def marker_steps(self, marker: bytes, held: int, limit: int) -> list[int]:
        """Tokens that write the next part of `marker` after marker[:held], leaving at most `limit` tokens to go."""
        cost = self.marker_cost(marker)
        out = []
        for end in range(held + 1, len(marker) + 1):
            left = cost[end] if end < len(marker) else 0
            if left <= limit:
                out += self.ids_of_bytes.get(marker[held:end], [])
        return out
