"""One counted string of each kind a schema can hold (a JSON string, a function-form raw text value), for walking the
vocabulary through their insides once per model (`ConstraintCompiler.prewarm_counted`)."""

from __future__ import annotations

from lexi.chat.call_regex import call_after_opener
from lexi.chat.schema_regex import SchemaRegex
from lexi.chat.tools import Tool


def counted_examples() -> list[str]:
    text = {"type": "object", "properties": {"text": {"type": "string", "maxLength": 256}}, "required": ["text"]}
    return [SchemaRegex(text).regex(), call_after_opener([Tool("example", None, text, strict=False)], "function")]
