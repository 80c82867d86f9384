"""What a constraint regex costs to compile, and which counted repeats are worth writing out.

outlines-core builds an index by walking every vocabulary token from every DFA state that a token can end
in, and with byte tokens in the vocabulary (Gemma's `<0xNN>`, GPT-2 BPE's pieces of characters) a token can
end in every state. So a cold compile costs about (DFA states) x (one pass over the vocabulary), whatever
the regex says: measured 2026-12-04 on a busy 2-core EPYC, 11-20 ms a state at Gemma's 262,144 tokens and
1-2 ms at SmolLM2's 49,152 (a tool call with one unbounded string is 25 states). A counted repeat `x{0,n}`
holds n copies of x's states: one JSON string character is 13 (the character itself, the continuation
bytes of 2-, 3- and 4-byte UTF-8 characters, with the ranges that exclude surrogates and overlongs, and
the steps of `\\uXXXX`), a digit 1. The states are counted exactly by building the index over a vocabulary
of the 255 non-NUL single bytes, which reaches every state and costs microseconds a state.
"""

from __future__ import annotations

import functools

from outlines_core import Index, Vocabulary

from lexi.structured.regex_text import repeat

# DFA states a counted repeat may add before its bound is widened. 224 keeps what was written out before
# (16 JSON string characters, about 3 s of cold compile at 262k tokens and 0.3 s at 49k) while letting cheap
# parts (digits, ASCII classes, small array items) count further. A JSON string of 40 characters would be
# ~520 states (6-10 s at 262k): beyond what a regex index can hold within the compile budget.
REPEAT_STATES = 224
ALWAYS_ESCAPED, ALWAYS_PLAIN = 16, 64  # counts written out whatever they cost (the rule before the budget)
REFERENCE_VOCAB = 49_152  # SmolLM2's tokens, the vocabulary REPEAT_STATES holds to ~0.3 s of cold compile
MIN_REPEAT_STATES = 32
_BYTE_EOS = 256  # an id no byte token has


def repeat_budget(vocab_size: int) -> int:
    """DFA states the counted characters of a JSON string may add for a model of `vocab_size` tokens.

    A cold compile walks every token from every state, so REPEAT_STATES is cut in proportion past SmolLM2's
    vocabulary: Gemma 3's 262,144 tokens get 42 states, where 224 (and the 16 characters always written out) had
    cost 4.8-5.7 s here (`string maxLength 16`: 221 states). What no longer fits is counted beside the automaton,
    as exact as written out. Patterns keep REPEAT_STATES (they are not counted: cutting would widen them), and so do
    array items (`SchemaRegex.items_budget`: counted arrays cost more a token to mask than they save)."""
    if vocab_size <= REFERENCE_VOCAB:
        return REPEAT_STATES
    return max(MIN_REPEAT_STATES, REPEAT_STATES * REFERENCE_VOCAB // vocab_size)


def _always(part: str, budget: int, always: int | None) -> int:
    if always is not None:
        return always
    if budget < REPEAT_STATES:  # cut for a large vocabulary: only what fits the budget is written out
        return 0
    return ALWAYS_ESCAPED if "\\u005C" in part else ALWAYS_PLAIN


@functools.cache
def byte_vocabulary() -> Vocabulary:
    """Each non-NUL byte a token: an index over it reaches every DFA state, with the model index's state ids."""
    return Vocabulary(_BYTE_EOS, {bytes([b]): [b] for b in range(1, 256)})


def dfa_states(regex: str) -> int:
    """States of the index outlines-core builds for `regex` (each costs a pass over the model's vocabulary)."""
    index = Index(regex, byte_vocabulary())
    return len(set(index.get_transitions()) | set(index.get_final_states()))


@functools.lru_cache(maxsize=1024)
def copy_states(part: str) -> int:
    """DFA states one more copy of `part` adds to a counted repeat of it."""
    return max(dfa_states(repeat(part, 2, 2)) - dfa_states(part), 1)


def bounded_repeat(part: str, low: int, high: int | None, budget: int, always: int | None = None) -> str:
    """`part` low..high times, written out while the counted copies cost at most `budget` DFA states (or the
    count is within `always`, what was written out before the budget: 16 copies of JSON text, 64 of an
    unescaped pattern atom);
    past that, widened to "at least as many copies as the budget holds (or `low`)" with no upper bound."""
    if writes_out(part, low, high, budget, always):
        return repeat(part, low, high)
    return repeat(part, min(low, max(budget // copy_states(part), _always(part, budget, always))), None)


def writes_out(part: str, low: int, high: int | None, budget: int, always: int | None = None) -> bool:
    """Whether `part` low..high times fits the DFA budget (`bounded_repeat` writes it out exactly)."""
    count = low if high is None else high
    return count <= _always(part, budget, always) or count * copy_states(part) <= budget
