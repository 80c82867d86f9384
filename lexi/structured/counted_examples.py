"""One counted string of each kind a schema can hold (a JSON string, a function-form raw text value), for walking the
vocabulary through their insides once per model (`ConstraintCompiler.prewarm_counted`). Their length bound is past
any repeat budget: counted whatever the vocabulary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lexi.structured.call_regex import call_after_opener
from lexi.structured.schema_regex import SchemaRegex


@dataclass(frozen=True, slots=True)
class _Example:
    name: str
    parameters: Any


def counted_examples(budget: int) -> list[str]:
    """The regexes, translated with the vocabulary's repeat budget (`ConstraintVocabulary.repeat_budget`)."""
    text = {"type": "object", "properties": {"text": {"type": "string", "maxLength": 256}}, "required": ["text"]}
    return [SchemaRegex(text, budget).regex(), call_after_opener([_Example("example", text)], "function", budget)]
