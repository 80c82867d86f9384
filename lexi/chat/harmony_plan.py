"""What a harmony turn's output must look like (gpt-oss), as constraint phases: plain data, compiled elsewhere.

The prompt ends with `<|start|>assistant`, so the output starts with a message header (lexi/chat/harmony.py).
- tool_choice "required" or a named function: one analysis message, free up to its `<|end|>`, then a call in the
  form gpt-oss writes, `<|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>`
  and arguments valid against the tool's schema; then the output ends (`<|call|>`). gpt-oss writes its thought
  before a call, so the plan asks for one; a harmony turn holds at most one call (generation stops at `<|call|>`).
- "auto": free output; once the model addresses a function (` to=functions.`), the rest of the header is one of
  the forms the template and the model write, and the arguments follow the tool's schema.
- "none": free output that never addresses a function.
- response_format JSON, or a client regex: an analysis message, then the final message is that answer.
"""

from __future__ import annotations

from collections.abc import Callable

from lexi.chat.harmony import END
from lexi.chat.response_format import ResponseFormat
from lexi.chat.tools import Tool, ToolSet
from lexi.structured import ConstraintError, ConstraintPlan, FreeText, Guided, JsonValue, OneOf
from lexi.structured.plan_regex import satisfiable
from lexi.structured.regex_text import literal

ANALYSIS = "<|channel|>analysis<|message|>"
ADDRESS = " to=functions."
CALL_OPEN = "<|start|>assistant<|channel|>commentary" + ADDRESS
FINAL_OPEN = "<|start|>assistant<|channel|>final<|message|>"
THOUGHT_PAIR = (ANALYSIS, END)  # what a thought budget watches for (thinking.budget_tokens)
# after the name: the channel when the recipient came first, then the content type, with or without <|constrain|>
_HEADER_REST = (
    "(?:" + literal("<|channel|>commentary") + ")?"
    "(?:" + literal(" <|constrain|>json") + "|" + literal("<|constrain|>json") + "|" + literal(" json") + ")?"
    + literal("<|message|>")
)  # fmt: skip


def harmony_plan(
    tools: ToolSet | None,
    response_format: ResponseFormat | None,
    answer_regex: str | None,
    opened: str | None,
) -> ConstraintPlan | None:
    """The plan for one harmony turn, or None when the output is free. `answer_regex`: a client's regex (guided
    output); `opened`: the header of a message the prompt left open (continue_final_message)."""
    answer = _answer(response_format, answer_regex)
    demanded = answer is not None or (tools is not None and tools.choice.mode != "none")
    if opened is not None and demanded:
        raise ConstraintError("continue_final_message cannot be combined with a constrained answer in a harmony turn")
    if answer is not None:
        return ConstraintPlan((*_thought(), Guided((literal(FINAL_OPEN), "(?:", answer, ")"))))
    if tools is None:
        return None
    if tools.choice.mode == "none":
        return ConstraintPlan((FreeText(ADDRESS, enter=False),))
    if tools.forced:
        header = " <|constrain|>json<|message|>"
        calls = _arguments_after(tools.callable, lambda t: literal(t.name + header))
        return ConstraintPlan((*_thought(), Guided((literal(CALL_OPEN), calls))))
    calls = _arguments_after(tools.callable, lambda t: literal(t.name) + _HEADER_REST)
    return ConstraintPlan((FreeText(ADDRESS, enter=True), Guided(calls)))


def _thought() -> tuple[Guided, FreeText]:
    """One analysis message: its header, then free text up to its `<|end|>` (the output may not end inside it)."""
    return Guided(literal(ANALYSIS)), FreeText(END, enter=True, may_end=False)


def _arguments_after(tools: tuple[Tool, ...], header: Callable[[Tool], str]) -> OneOf:
    """A call of any of `tools`: its header, then its JSON arguments (a tool whose schema accepts none is left out)."""
    calls = OneOf(tuple((header(t), JsonValue(t.parameters)) for t in tools))
    if not satisfiable(calls):
        raise ConstraintError("no declared tool can be called: every tool's schema accepts no arguments", "tools")
    return calls


def _answer(response_format: ResponseFormat | None, answer_regex: str | None) -> str | JsonValue | None:
    if answer_regex is not None:
        return answer_regex
    if response_format is None or response_format.kind == "text":
        return None
    schema = {"type": "object"} if response_format.kind == "json_object" else response_format.schema
    answer = JsonValue(schema)
    if not satisfiable(answer):
        raise ConstraintError("the schema accepts no value, so no output could satisfy it", response_format.param)
    return answer
