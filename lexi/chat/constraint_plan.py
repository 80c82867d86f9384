"""What a chat turn's output must look like, as a sequence of phases: plain data, compiled by lexi/structured.

- tool_choice "required" or a named function: valid call block(s) in the template's form, from the
  first token (or right after the thought, when the template opened one: reasoning stays free).
- "auto": free text; once the model opens `<tool_call>`, the call is held to a declared tool and its
  schema; after `</tool_call>` the output is free text again, in which it may open another call (if
  parallel calls are allowed: else `<tool_call>` cannot be written again) or end.
- "none": free text in which `<tool_call>` cannot be written.
- response_format json_object / json_schema: the answer is that JSON (after a thought the template opened).
"""

from __future__ import annotations

from dataclasses import replace

from lexi.chat.reasoning import DELIMITERS
from lexi.chat.response_format import ResponseFormat
from lexi.chat.tools import ToolSet
from lexi.structured import (
    ConstraintError,
    ConstraintPlan,
    FreeText,
    Guided,
    JsonValue,
    ThoughtBudget,
    ToolCallBody,
)
from lexi.structured.call_regex import NEWLINE, OPEN
from lexi.structured.plan_regex import satisfiable
from lexi.structured.regex_text import literal


def plan_output(
    tools: ToolSet | None,
    form: str,
    response_format: ResponseFormat | None,
    opened: tuple[str, str] | None,
) -> ConstraintPlan | None:
    """The plan for one turn, or None when the output is free (its JSON values and calls are written out for the
    model's vocabulary when it is compiled)."""

    def thought(may_end: bool) -> tuple[FreeText, ...]:
        return (FreeText(opened[1], enter=True, may_end=may_end),) if opened else ()

    if response_format is not None and response_format.kind != "text":
        schema = {"type": "object"} if response_format.kind == "json_object" else response_format.schema
        answer = JsonValue(schema)
        if not satisfiable(answer):
            raise ConstraintError("the schema accepts no value, so no output could satisfy it", response_format.param)
        return ConstraintPlan((*thought(False), Guided(answer)))
    if tools is None:
        return None
    if tools.choice.mode == "none":
        return ConstraintPlan((FreeText(OPEN, enter=False),))
    body = ToolCallBody(tools.callable, form)
    if not satisfiable(body):
        raise ConstraintError("no declared tool can be called: every tool's schema accepts no arguments", "tools")
    # One large regex (a call's body) serves every call of the turn; the opener is a tiny one. Without a
    # call limit a finished call loops back; with one, the phases are written out that many times.
    limit = tools.call_limit
    if not tools.forced:  # auto: free text around calls; a finished call returns the output to free text
        call = (FreeText(OPEN, enter=True), Guided(body))
        if limit is None:
            phases = (*thought(True), *call)
            return ConstraintPlan(phases, loop_from=len(phases) - 2)
        return ConstraintPlan((*thought(True), *call * limit, FreeText(OPEN, enter=False)))
    first = (Guided(NEWLINE + literal(OPEN)), Guided(body))
    more = (Guided(NEWLINE + literal(OPEN), may_end_first=True), Guided(body))
    if limit is None:
        phases = (*thought(False), *first, *more)
        return ConstraintPlan(phases, loop_from=len(phases) - 2)
    return ConstraintPlan((*thought(False), *first, *more * (limit - 1)))


def with_thought_budget(
    plan: ConstraintPlan | None,
    tokens: int,
    opened: tuple[str, str] | None,
    pairs: tuple[tuple[str, str], ...] | None = None,
) -> ConstraintPlan:
    """`plan` (None: free output) with its thought held to `tokens` tokens; `pairs`: the (opener, closer) pairs a
    thought may open with (None: the `<think>` forms)."""
    budget = ThoughtBudget(tokens, opened, DELIMITERS if pairs is None else pairs)
    return ConstraintPlan((), thought=budget) if plan is None else replace(plan, thought=budget)
