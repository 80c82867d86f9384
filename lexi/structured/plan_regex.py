"""A plan written for one vocabulary: each guided phase's pattern as one regex, its JSON values and tool calls
translated with the vocabulary's repeat budget.

A cold compile walks every vocabulary token from every DFA state, so the counted repeats a translation may write out
depend on the model (`regex_cost.repeat_budget`, which `ConstraintVocabulary.repeat_budget` holds): lexi/chat writes
its plans without knowing the model, and the compiler writes them out for its own vocabulary here. Whether a
pattern can match at all does not depend on the budget (a budget only chooses how a bound is written: out, counted
beside the DFA, or widened), so a plan is checked for that when it is written (`satisfiable`).
"""

from __future__ import annotations

from dataclasses import replace

from lexi.structured.call_regex import call_after_opener
from lexi.structured.plan import ConstraintError, ConstraintPlan, Guided, JsonValue, OneOf, Pattern, ToolCallBody
from lexi.structured.regex_cost import REPEAT_STATES
from lexi.structured.regex_text import alt, seq
from lexi.structured.schema_regex import SchemaRegex


def pattern_regex(pattern: Pattern, budget: int) -> str | None:
    """`pattern` as regex text, counted repeats holding at most `budget` DFA states; None when nothing matches it."""
    if isinstance(pattern, str):
        return pattern
    if isinstance(pattern, JsonValue):
        return SchemaRegex(pattern.schema, budget).regex()
    if isinstance(pattern, ToolCallBody):
        return call_after_opener(pattern.tools, pattern.form, budget)
    if isinstance(pattern, OneOf):
        return alt(pattern_regex(branch, budget) for branch in pattern.branches)
    return seq(*(pattern_regex(part, budget) for part in pattern))


def satisfiable(pattern: Pattern) -> bool:
    """Whether any text matches `pattern`, whatever the vocabulary it is written for."""
    return pattern_regex(pattern, REPEAT_STATES) is not None


def written(plan: ConstraintPlan, budget: int) -> ConstraintPlan:
    """`plan` with every guided phase's pattern written as one regex (`budget`: the vocabulary's repeat budget)."""
    phases, regexes = [], {}  # a call's body serves every call of a turn: written once
    for phase in plan.phases:
        if isinstance(phase, Guided) and not isinstance(phase.pattern, str):
            regex = regexes.get(id(phase.pattern))
            if regex is None:
                regex = regexes[id(phase.pattern)] = pattern_regex(phase.pattern, budget)
            if regex is None:
                raise ConstraintError("no output could satisfy the constraint")
            phase = replace(phase, pattern=regex)
        phases.append(phase)
    return replace(plan, phases=tuple(phases))
