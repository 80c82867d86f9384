"""Prompt-lookup proposals for speculative decoding: text that repeats (an edited file, echoed JSON, a quote)
is proposed from where it appeared before, and one batched step checks every proposed token at once.

The proposal is the continuation of the longest recent match of the sequence's last n tokens (n from
`longest` down to `min_match`) anywhere earlier in its prompt + output; nothing when no n-gram recurs.
Plain lists, no torch: it runs on the engine thread before each step.
"""

from __future__ import annotations

from dataclasses import dataclass

LONGEST_MATCH = 8  # longer suffixes rarely decide more than an 8-token one does, and each costs a scan


SPEC_METHODS = ("off", "ngram", "draft")
DEFAULT_P_MIN = 0.8  # llama.cpp's --draft-p-min


@dataclass(frozen=True, slots=True)
class SpecConfig:
    """`--spec`, `--spec-max`, `--spec-min-match`, `--model-draft`, `--spec-p-min`: what speculation proposes, at
    most how many tokens a step."""

    method: str = "off"  # "off" | "ngram" (prompt lookup) | "draft" (a smaller model, lexi.engine.draft_model)
    max_tokens: int = 8  # tokens proposed at most per sequence and step
    min_match: int = 2  # the shortest suffix whose earlier occurrence is trusted (ngram)
    model_draft: str | None = None  # the draft model's GGUF (a path or a bundled name), with method "draft"
    p_min: float = DEFAULT_P_MIN  # a draft model's draft stops before a token it gives less probability than this

    def __post_init__(self) -> None:
        if self.method not in SPEC_METHODS:
            raise ValueError(f"spec must be one of {', '.join(SPEC_METHODS)}, got {self.method!r}")
        if not 1 <= self.max_tokens <= 64:
            raise ValueError(f"spec_max must be in [1, 64], got {self.max_tokens}")
        if not 1 <= self.min_match <= LONGEST_MATCH:
            raise ValueError(f"spec_min_match must be in [1, {LONGEST_MATCH}], got {self.min_match}")
        if not 0.0 <= self.p_min <= 1.0:
            raise ValueError(f"spec_p_min must be in [0, 1], got {self.p_min}")
        if (self.method == "draft") != (self.model_draft is not None):
            raise ValueError("--spec draft and --model-draft go together: the draft model proposes the drafts")
        if self.method != "draft" and self.p_min != DEFAULT_P_MIN:
            raise ValueError("--spec-p-min is for --spec draft: prompt lookup has no probabilities to stop at")

    @property
    def enabled(self) -> bool:
        return self.method != "off"


class DraftPace:
    """How one sequence's drafts have fared: the chance that a draft's first token is taken, the chance that each
    later one is given the ones before it were, and when a sequence whose drafts are not worth their rows proposes
    one token anyway to see whether that changed.

    The two differ: a lookup's first token is a guess at which earlier occurrence the text follows, the rest a copy
    that holds once the guess was right (an edit on SmolLM2: 0.72 of first tokens taken, 0.82-1.0 of later ones). A
    check of `proposed` tokens that took `taken` tried the first and min(taken + 1, proposed) - 1 later ones; each
    estimate is its ratio over the sequence's checks, each older one weighing `DECAY` less, beside a prior of one
    token tried: half of it taken for a first token, 0.9 for a later one. The later prior is hopeful on purpose:
    only drafts longer than a token can show how later tokens fare, and a draft whose first token is taken is mostly
    a copy that holds; where it does not, a few checks bring the estimate down. What a token is worth, and so which
    drafts a step checks, is lexi.engine.draft_budget's. A probe that takes nothing doubles the wait before the next
    (1, 3, 7 .. 63 chances), one that takes something halves it. Only speed depends on it: a check's outcome is the
    output's either way."""

    DECAY = 0.9
    PRIOR_FIRST, PRIOR_LATER = 0.5, 0.9  # tokens taken of one tried
    MOST_MISSES = 6  # a probe waits at most 2^6 - 1 = 63 chances

    __slots__ = ("_first", "_later", "_misses", "_wait")

    def __init__(self) -> None:
        self._first = [0.0, 0.0]  # decayed first tokens taken, tried
        self._later = [0.0, 0.0]  # decayed later tokens taken, tried
        self._misses = 0
        self._wait = 0

    @property
    def acceptance(self) -> tuple[float, float]:
        """(the chance a draft's first token is taken, the chance each later one is, given those before it were)."""
        (taken, tried), (later_taken, later_tried) = self._first, self._later
        return (taken + self.PRIOR_FIRST) / (tried + 1.0), (later_taken + self.PRIOR_LATER) / (later_tried + 1.0)

    def probe_due(self) -> bool:
        """Whether a draft that is not worth its rows is checked anyway (one token); called once for each such
        step."""
        if self._wait > 0:
            self._wait -= 1
            return False
        return True

    def checked(self, proposed: int, taken: int) -> None:
        if proposed < 1:
            return
        later_tried = min(taken + 1, proposed) - 1
        for counts, got, tried in ((self._first, min(taken, 1), 1), (self._later, max(taken - 1, 0), later_tried)):
            counts[0] = counts[0] * self.DECAY + got
            counts[1] = counts[1] * self.DECAY + tried
        # a miss doubles the wait before the next probe (up to 63 steps), a take halves it: a probe costs about a
        # step (what any check adds once, lexi.engine.step_cost), and prose's common words are taken now and then
        self._misses = min(self._misses + 1, self.MOST_MISSES) if taken == 0 else max(self._misses - 1, 0)
        self._wait = (1 << self._misses) - 1


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
