"""What a turn's output must look like, as a sequence of phases: plain data that lexi/chat writes and this package
compiles (lexi/chat/constraint_plan.py and harmony_plan.py write the plans of tool calls and JSON answers).

A plan is phases walked in order: free text watched for a marker, or text held to a pattern. After the last phase
the output ends, or starts again at `loop_from` (another call). A thought budget, where one is asked, holds the
thought the output opens (or the prompt opened) to a number of tokens, whatever the phases.

A pattern is regex text, or the pieces it is made of where one depends on the model: a JSON value of a schema, the
body of a tool call. Those are written out when the plan is compiled for a vocabulary (`plan_regex`), with the
repeat budget that vocabulary's size allows, so a plan is written once, without knowing the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class ConstraintError(ValueError):
    """The requested output cannot be enforced (no value fits the schema, or it does not compile)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True, slots=True)
class FreeText:
    """Unconstrained text, watched for `marker`."""

    marker: str
    enter: bool  # True: the marker ends this phase; False: the marker may not be written at all
    may_end: bool = True  # the output may end during this phase


@dataclass(frozen=True, slots=True)
class JsonValue:
    """The JSON text of a value `schema` accepts."""

    schema: Any  # a JSON Schema (a mapping, or a boolean) as the client wrote it


@dataclass(frozen=True, slots=True)
class ToolCallBody:
    """What follows `<tool_call>` in a block calling any of `tools`, through `</tool_call>` (`call_regex`)."""

    tools: tuple[Any, ...]  # each with its `name` and the JSON Schema of its `parameters` (lexi.chat.tools.Tool)
    form: str  # "json" or "function": the call form the template teaches


@dataclass(frozen=True, slots=True)
class OneOf:
    """Any one of `branches`; a branch holding a piece nothing can match is left out."""

    branches: tuple[Pattern, ...]


# regex text as it is, a piece written for the vocabulary, or a tuple of patterns written one after another
Pattern = str | JsonValue | ToolCallBody | OneOf | tuple


@dataclass(frozen=True, slots=True)
class Guided:
    """Text matching `pattern`, a phase that ends when nothing but the end of output could follow."""

    pattern: Pattern  # one regex once the plan is written for a vocabulary (`plan_regex.written`)
    may_end_first: bool = False  # the output may also end instead of starting this phase


@dataclass(frozen=True, slots=True)
class ThoughtBudget:
    """At most `tokens` tokens of thought. `opened`: the pair the prompt opened (the output starts inside the
    thought); None: the output may open a thought itself, with any of `pairs` (opener, closer)."""

    tokens: int
    opened: tuple[str, str] | None
    pairs: tuple[tuple[str, str], ...]  # what may open a thought at the start (`<think>` forms; harmony: its analysis)


@dataclass(frozen=True, slots=True)
class ConstraintPlan:
    phases: tuple[FreeText | Guided, ...]  # none: the output is free (a thought budget may still hold it)
    loop_from: int | None = None  # after the last phase, start again here (another call); None: the end
    thought: ThoughtBudget | None = None  # the thought closes within this many tokens

    @property
    def regexes(self) -> list[str]:
        """The guided phases' regexes, of a plan written for a vocabulary (`plan_regex.written`)."""
        found = [p.pattern for p in self.phases if isinstance(p, Guided)]
        if not all(isinstance(regex, str) for regex in found):
            raise TypeError("the plan is not written for a vocabulary yet (plan_regex.written)")
        return found
