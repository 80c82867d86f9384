"""What a turn's output must look like, as a sequence of phases: plain data that lexi/chat writes and this package
compiles (lexi/chat/constraint_plan.py and harmony_plan.py write the plans of tool calls and JSON answers).

A plan is phases walked in order: free text watched for a marker, or text held to a regex. After the last phase
the output ends, or starts again at `loop_from` (another call). A thought budget, where one is asked, holds the
thought the output opens (or the prompt opened) to a number of tokens, whatever the phases.
"""

from __future__ import annotations

from dataclasses import dataclass


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
class Guided:
    """Text matching `regex`, a phase that ends when nothing but the end of output could follow."""

    regex: str
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
        return [p.regex for p in self.phases if isinstance(p, Guided)]
