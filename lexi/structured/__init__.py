"""Structured output: the constraint compiler behind constrained decoding.

lexi/chat writes a `ConstraintPlan` (what a turn's output must look like: free text watched for markers, text held
to a pattern, JSON values of a schema, tool calls); `compile` turns it into one request's `TokenConstraint` for the
engine, as vLLM's structured output has an engine-level backend and a per-request grammar. The backend here is a
`ConstraintCompiler` over one model's `ConstraintVocabulary` (built once at load): it translates the plan's JSON
values and calls for that vocabulary's repeat budget, compiles each regex into an outlines-core index off the event
loop, and caches it. Inside, by concern: the plan and its regexes (`plan`, `plan_regex`, `*_regex`, `regex_*`),
strings and arrays counted beside the automaton (`counted_*`), distances to the end (`closing_*`), and the
per-request walk (`turn*`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lexi.structured.compiler import CompilerConfig, ConstraintCompiler
from lexi.structured.plan import (
    ConstraintError,
    ConstraintPlan,
    FreeText,
    Guided,
    JsonValue,
    OneOf,
    ThoughtBudget,
    ToolCallBody,
)
from lexi.structured.vocabulary import ConstraintVocabulary

if TYPE_CHECKING:
    from lexi.engine.request import TokenConstraint

__all__ = [
    "CompilerConfig",
    "ConstraintCompiler",
    "ConstraintError",
    "ConstraintPlan",
    "ConstraintVocabulary",
    "FreeText",
    "Guided",
    "JsonValue",
    "OneOf",
    "ThoughtBudget",
    "ToolCallBody",
    "compile",
]


async def compile(plan: ConstraintPlan, compiler: ConstraintCompiler, max_tokens: int | None = None) -> TokenConstraint:
    """One request's constraint for `plan`, compiled for `compiler`'s vocabulary (its indexes cached there), closing
    within `max_tokens` where it can; ConstraintError when a regex cannot be compiled in time or at all."""
    return await compiler.constraint(plan, max_tokens)
