"""vLLM's structured-output request fields, on the chat and completions routes.

`structured_outputs` ({"regex": ...} | {"choice": [...]} | {"json": schema} | {"json_object": true}), and the
fields it replaced in vLLM 0.12 (`guided_regex`, `guided_choice`, `guided_json`), which clients still send.
Each asks for one constraint on the answer; so does a JSON `response_format`. Two of them in one request
would have to be reconciled by guessing which one the client meant, so that is a 400 naming the second,
as is a structured_outputs object holding two kinds (vLLM refuses that too). The JSON forms become a
response format (the prompt is told the schema, the answer is verified), the others a guided regex.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from lexi.chat.guided import GuidedSpecError, GuidedText
from lexi.chat.response_format import ResponseFormat, make_format
from lexi.chat.tools import ToolSpecError
from lexi.http.errors import bad_request
from lexi.http.parsing.fields import UNSUPPORTED_PARAMETER, Fields, refuse_unknown

GUIDED_FIELDS = ("structured_outputs", "guided_regex", "guided_choice", "guided_json")
STRUCTURED_KINDS = ("regex", "choice", "json", "json_object")
# vLLM's other structured_outputs keys: known, and not something this server does
STRUCTURED_UNSUPPORTED = (
    "grammar", "structural_tag", "whitespace_pattern", "disable_fallback", "disable_any_whitespace",
    "disable_additional_properties",
)  # fmt: skip


def parse_guided(f: Fields, response_format: ResponseFormat | None) -> tuple[ResponseFormat | None, GuidedText | None]:
    """(the response format after these fields, the guided regex), one of them at most; 400s name the field."""
    asked = _forms(f)
    if len(asked) > 1:
        first, second = asked[0][0], asked[1][0]
        raise bad_request(f"{second} and {first} each constrain the answer: send one of them", param=second)
    if not asked:
        return response_format, None
    param, kind, value = asked[0]
    if response_format is not None and response_format.is_json:
        raise bad_request(
            f"{param} and response_format ({response_format.kind}) each constrain the answer: send one of them",
            param=param,
        )
    try:
        if kind == "regex":
            return response_format, GuidedText(value, param)
        if kind == "choice":
            return response_format, GuidedText.choice(value, param)
        if kind == "json_object":
            return ResponseFormat("json_object", param=param), None
        fmt = make_format("json_schema", {"schema": _schema(value, param)}, param, param)
        return dataclasses.replace(fmt, param=param), None
    except (GuidedSpecError, ToolSpecError) as exc:
        raise bad_request(str(exc), param=exc.param) from None


def _forms(f: Fields) -> list[tuple[str, str, Any]]:
    """Every constraint the request asks for, as (field, kind, value), in the order of GUIDED_FIELDS."""
    forms = []
    structured = f.obj("structured_outputs")
    if structured is not None:
        for key in structured:
            if key in STRUCTURED_UNSUPPORTED:
                f.fail(f"structured_outputs.{key}", "is not supported by this server", code=UNSUPPORTED_PARAMETER)
        refuse_unknown(structured, STRUCTURED_KINDS, "structured_outputs.")
        s = Fields(structured, "structured_outputs.")
        if s.boolean("json_object"):
            forms.append(("structured_outputs.json_object", "json_object", True))
        kinds = [key for key in ("regex", "choice", "json") if structured.get(key) is not None]
        forms += [(f"structured_outputs.{key}", key, structured[key]) for key in kinds]
        if len(forms) > 1:
            f.fail("structured_outputs", f"holds {' and '.join(k for _, k, _ in forms)}: it takes one kind")
        if not forms and structured.get("json_object") is None:  # json_object: false alone asks for nothing
            f.fail("structured_outputs", f"must hold one of {', '.join(STRUCTURED_KINDS)}")
    for param, kind in (("guided_regex", "regex"), ("guided_choice", "choice"), ("guided_json", "json")):
        if f.present(param):
            forms.append((param, kind, f.data[param]))
    return forms


def _schema(value: Any, param: str) -> dict[str, Any] | bool:
    """A JSON Schema as an object, or as its JSON text (vLLM takes both)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise bad_request(f"{param} must be a JSON Schema (an object, or its JSON text)", param=param) from None
    if not isinstance(value, dict | bool):
        raise bad_request(f"{param} must be a JSON Schema (an object, or its JSON text)", param=param)
    return value


def parse_response_format(f: Fields) -> ResponseFormat | None:
    """response_format: {"type": "text" | "json_object"}, {"type": "json_schema", "json_schema": {...}}, or
    llama.cpp's {"type": "json_object", "schema": {...}} (that schema's JSON)."""
    raw = f.obj("response_format")
    if raw is None:
        return None
    refuse_unknown(raw, ("type", "json_schema", "schema"), "response_format.")
    nested = raw.get("json_schema")
    try:
        if raw.get("schema") is not None and raw.get("type") != "json_object":
            raise ToolSpecError(
                'response_format.schema goes with type "json_object"; a json_schema format nests it in json_schema',
                "response_format.schema",
            )
        if nested is not None and not isinstance(nested, dict):
            raise ToolSpecError("response_format.json_schema must be an object", "response_format.json_schema")
        if isinstance(nested, dict):
            refuse_unknown(nested, ("name", "description", "schema", "strict"), "response_format.json_schema.")
        return make_format(
            raw.get("type"), nested, "response_format.json_schema" if nested else "response_format",
            "response_format.json_schema.schema", raw.get("schema"),
        )  # fmt: skip
    except ToolSpecError as exc:
        raise bad_request(str(exc), param=exc.param) from None
