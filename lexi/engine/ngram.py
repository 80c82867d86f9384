"""Prompt-lookup proposals for speculative decoding: text that repeats (an edited file, echoed JSON, a quote)
is proposed from where it appeared before, and one batched step checks every proposed token at once.

The proposal is the continuation of the longest recent match of the sequence's last n tokens (n from
`longest` down to `min_match`) anywhere earlier in its prompt + output; nothing when no n-gram recurs.
Plain lists, no torch: it runs on the engine thread before each step.
"""

from __future__ import annotations

from dataclasses import dataclass

LONGEST_MATCH = 8  # longer suffixes rarely decide more than an 8-token one does, and each costs a scan


@dataclass(frozen=True, slots=True)
class SpecConfig:
    """`--spec`, `--spec-max`, `--spec-min-match`: what speculation proposes, at most how many tokens a step."""

    method: str = "off"  # "off" | "ngram"
    max_tokens: int = 8  # tokens proposed at most per sequence and step
    min_match: int = 2  # the shortest suffix whose earlier occurrence is trusted

    def __post_init__(self) -> None:
        if self.method not in ("off", "ngram"):
            raise ValueError(f"spec must be 'off' or 'ngram', got {self.method!r}")
        if not 1 <= self.max_tokens <= 64:
            raise ValueError(f"spec_max must be in [1, 64], got {self.max_tokens}")
        if not 1 <= self.min_match <= LONGEST_MATCH:
            raise ValueError(f"spec_min_match must be in [1, {LONGEST_MATCH}], got {self.min_match}")

    @property
    def enabled(self) -> bool:
        return self.method != "off"


class NgramIndex:
    """Where each token occurs in one sequence, kept as the sequence grows, so a proposal costs a look at the
    last token's most recent occurrences rather than a scan of the whole context."""

    __slots__ = ("_tokens", "_at")

    def __init__(self) -> None:
        self._tokens: list[int] = []
        self._at: dict[int, list[int]] = {}

    def sync(self, tokens: list[int]) -> None:
        """Take in what `tokens` (the sequence's prompt + output, only ever appended to) has gained."""
        if len(tokens) < len(self._tokens):
            raise ValueError("a sequence's tokens only grow")
        for i in range(len(self._tokens), len(tokens)):
            self._at.setdefault(tokens[i], []).append(i)
        self._tokens = tokens

    def propose(self, limit: int, min_match: int, longest: int = LONGEST_MATCH, looks: int = 64) -> list[int]:
        """Up to `limit` tokens that followed the earlier occurrence whose preceding tokens match the sequence's
        end longest (at least `min_match`, at most `longest`; the most recent among equals), looking at the
        last token's `looks` latest occurrences; [] when none matches."""
        tokens, size = self._tokens, len(self._tokens)
        if limit < 1 or size < 2:
            return []
        best, best_at = 0, -1
        for i in reversed(self._at.get(tokens[-1], [])[-looks - 1 :]):
            if i >= size - 1:
                continue  # the end itself
            n = 1
            while n < longest and n <= i and tokens[i - n] == tokens[size - 1 - n]:
                n += 1
            if n > best:
                best, best_at = n, i
                if n == longest:
                    break
        if best < min_match:
            return []
        return tokens[best_at + 1 : best_at + 1 + limit]
