"""response_format (chat) and text.format (Responses): plain text, any JSON object, or JSON of a schema.

The HTTP layer reads each route's shape and hands the pieces here; the rules are the same as for
tool schemas (a valid JSON Schema with local references only; strict means closed everywhere).
A json_schema without a name is taken (vLLM and llama.cpp take it; OpenAI asks for one) and named
DEFAULT_NAME; a json_object that carries a schema (llama.cpp's form) is that schema's format.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lexi.chat.schema_check import check_schema
from lexi.chat.tools import NAME, ToolSpecError, check_closed
from lexi.structured.schema_refs import SchemaRefError

DEFAULT_NAME = "response"


@dataclass(frozen=True, slots=True)
class ResponseFormat:
    kind: str  # "text" | "json_object" | "json_schema"
    schema: Any = None  # json_schema only: as the client wrote it
    name: str | None = None
    description: str | None = None
    strict: bool = False
    param: str = "response_format"  # the request field that asked for it, named in errors

    @property
    def is_json(self) -> bool:
        return self.kind != "text"


def make_format(
    kind: Any, json_schema: dict[str, Any] | None, where: str, schema_at: str, object_schema: Any = None
) -> ResponseFormat:
    """`json_schema` holds name/description/schema/strict (chat nests them, Responses does not);
    `object_schema` is a json_object's own schema (at `where`.schema), None when it has none."""
    if kind == "json_object" and object_schema is not None:
        kind, json_schema, schema_at = "json_schema", {"schema": object_schema}, f"{where}.schema"
    if kind in ("text", "json_object"):
        return ResponseFormat(kind)
    if kind != "json_schema":
        kinds = '"text", "json_object" or "json_schema"'
        raise ToolSpecError(f"{where}.type must be {kinds}, got {kind!r}", f"{where}.type")
    if json_schema is None:
        raise ToolSpecError(f"{where} of type json_schema needs its schema", where)
    name, description = json_schema.get("name", DEFAULT_NAME), json_schema.get("description")
    schema, strict = json_schema.get("schema", {}), json_schema.get("strict")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ToolSpecError(f"{where}.name must be 1-64 characters of letters, digits, '_' or '-'", f"{where}.name")
    if description is not None and not isinstance(description, str):
        raise ToolSpecError(f"{where}.description must be a string", f"{where}.description")
    if strict is not None and not isinstance(strict, bool):
        raise ToolSpecError(f"{where}.strict must be a boolean", f"{where}.strict")
    if not isinstance(schema, dict | bool):
        raise ToolSpecError(f"{schema_at} must be a JSON Schema", schema_at)
    if isinstance(schema, dict):
        try:
            check_schema(schema)
        except SchemaRefError as exc:
            raise ToolSpecError(f"{schema_at} is not a valid JSON Schema: {exc}", schema_at) from None
        if strict:
            check_closed(schema, f"response format {name!r}", schema_at)
    return ResponseFormat("json_schema", schema, name, description, bool(strict))
