"""The tools a request declares, checked once: names, JSON Schemas, strictness, tool_choice.

Both routes describe the same things in different shapes (chat nests `function`, the Responses API
does not), so the HTTP layer reads the shape and hands the pieces to `make_tool`; every rule about
what a tool may be lives here. A failure is a `ToolSpecError` naming the offending param, which the
HTTP layer answers with a 400.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from lexi.chat.schema_check import check_schema
from lexi.structured.schema_refs import SchemaRefError

NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
CHOICE_MODES = ("none", "auto", "required")
EMPTY_PARAMETERS: Mapping[str, Any] = {"type": "object", "properties": {}}


class ToolSpecError(ValueError):
    """A malformed tool or tool_choice; `param` is the request path that is wrong."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True, slots=True)
class Tool:
    """One function tool. `parameters` is the schema exactly as the client wrote it (or the empty object)."""

    name: str
    description: str | None
    parameters: Mapping[str, Any]
    strict: bool

    def openai_form(self) -> dict[str, Any]:
        """`{"type": "function", "function": {...}}`: what published chat templates iterate over."""
        function: dict[str, Any] = {"name": self.name}
        if self.description is not None:
            function["description"] = self.description
        function["parameters"] = self.parameters
        return {"type": "function", "function": function}


@dataclass(frozen=True, slots=True)
class ToolChoice:
    mode: str  # "none" | "auto" | "required" | "function"
    name: str | None = None  # the forced tool when mode is "function"

    def wire_form(self, nested: bool) -> str | dict[str, Any]:
        """As a client writes it: chat nests the name under `function`, the Responses API does not."""
        if self.mode != "function":
            return self.mode
        if nested:
            return {"type": "function", "function": {"name": self.name}}
        return {"type": "function", "name": self.name}


@dataclass(frozen=True, slots=True)
class ToolSet:
    """A request's tools with its tool_choice and parallel_tool_calls, all checked."""

    tools: tuple[Tool, ...]
    choice: ToolChoice
    parallel: bool = True
    max_calls: int | None = None  # Responses' max_tool_calls

    @property
    def call_limit(self) -> int | None:
        """Calls one answer may hold: 1 for a named tool_choice (OpenAI returns exactly one call of it) or without
        parallel calls, else max_calls (None: no limit)."""
        return 1 if not self.parallel or self.choice.mode == "function" else self.max_calls

    def get(self, name: str) -> Tool | None:
        return next((t for t in self.tools if t.name == name), None)

    @property
    def forced(self) -> bool:
        """The answer must be a call: tool_choice "required" or a named function."""
        return self.choice.mode in ("required", "function")

    @property
    def callable(self) -> tuple[Tool, ...]:
        """The tools a call may name: the forced one alone, none under "none", else all."""
        if self.choice.mode == "none":
            return ()
        if self.choice.mode == "function":
            return tuple(t for t in self.tools if t.name == self.choice.name)
        return self.tools


def make_tool(name: Any, description: Any, parameters: Any, strict: Any, where: str, params_at: str) -> Tool:
    """One tool from its parts; `where` is the param path of the tool, `params_at` of its parameters."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ToolSpecError(
            f"{where}.name must be 1-64 characters of letters, digits, '_' or '-', got {_short(name)}", f"{where}.name"
        )
    if description is not None and not isinstance(description, str):
        raise ToolSpecError(f"{where}.description must be a string", f"{where}.description")
    if strict is not None and not isinstance(strict, bool):
        raise ToolSpecError(f"{where}.strict must be a boolean", f"{where}.strict")
    if parameters is None:
        parameters = EMPTY_PARAMETERS
    check_parameters(parameters, params_at)
    if strict:
        check_closed(parameters, f"tool {name!r}", params_at)
    return Tool(name, description, parameters, bool(strict))


def check_closed(schema: Any, label: str, where: str) -> None:
    """A strict schema: closed objects with every property required, everywhere (else 400 naming the path)."""
    open_path = first_open_path(schema) if isinstance(schema, dict) else None
    if open_path is not None:
        raise ToolSpecError(
            f"{label} is strict, so its schema must be closed with every property required: "
            f"{where}{open_path[0]} {open_path[1]}",
            where,
        )


def check_parameters(schema: Any, where: str) -> None:
    """A valid JSON Schema (its own metaschema) describing an object, with only local $refs that resolve."""
    if not isinstance(schema, dict):
        raise ToolSpecError(f"{where} must be a JSON Schema object", where)
    kind = schema.get("type", "object")
    if kind != "object":
        raise ToolSpecError(f'{where} must describe an object (type "object"): arguments are a JSON object', where)
    try:
        check_schema(schema)
    except SchemaRefError as exc:
        raise ToolSpecError(f"{where} is not a valid JSON Schema: {exc}", where) from None


def check_tool_names(tools: list[Tool], where: str) -> None:
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        if tool.name in seen:
            raise ToolSpecError(f"{where}[{i}] repeats the tool name {tool.name!r}: names must be unique", where)
        seen.add(tool.name)


def make_choice(value: Any, tools: list[Tool], where: str, nested: bool) -> ToolChoice:
    """tool_choice: a mode string or a named function (chat nests the name under `function`)."""
    if value is None:
        return ToolChoice("auto" if tools else "none")
    if isinstance(value, str):
        if value not in CHOICE_MODES:
            raise ToolSpecError(f"{where} must be none, auto, required or a named function, got {value!r}", where)
        choice = ToolChoice(value)
    elif isinstance(value, dict) and value.get("type") == "function":
        holder = value.get("function") if nested else value
        name = holder.get("name") if isinstance(holder, dict) else None
        if not isinstance(name, str):
            shape = '{"type": "function", "function": {"name": ...}}' if nested else '{"type": "function", "name": ...}'
            raise ToolSpecError(f"{where} naming a function must be {shape}", where)
        if not any(t.name == name for t in tools):
            raise ToolSpecError(f"{where} names the function {name!r}, which is not among the tools", where)
        choice = ToolChoice("function", name)
    else:
        raise ToolSpecError(f"{where} must be none, auto, required or a named function, got {_short(value)}", where)
    if choice.mode != "none" and not tools:
        raise ToolSpecError(f"{where} {_short(value)} needs tools, and the request declares none", where)
    return choice


def first_open_path(schema: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first place a strict schema is open: (path inside the schema, why), else None.

    Walks nested properties, array items, $defs targets and every anyOf/oneOf/allOf branch.
    """
    for path, node in _subschemas(schema, ""):
        if not _is_object_schema(node):
            continue
        if node.get("additionalProperties", True) is not False:
            return path or "", "must set additionalProperties: false"
        properties = node.get("properties") or {}
        missing = [key for key in properties if key not in (node.get("required") or [])]
        if missing:
            return path or "", f"must list every property in required (missing {', '.join(map(repr, missing))})"
    return None


def _is_object_schema(node: Mapping[str, Any]) -> bool:
    kind = node.get("type")
    return kind == "object" or (isinstance(kind, list) and "object" in kind) or "properties" in node


def _subschemas(node: Any, path: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    if not isinstance(node, dict):
        return
    yield path, node
    for key in ("properties", "$defs", "definitions", "patternProperties"):
        children = node.get(key)
        if isinstance(children, dict):
            for name, child in children.items():
                yield from _subschemas(child, f"{path}.{key}.{name}")
    for key in ("items", "additionalProperties", "not", "contains"):
        if isinstance(node.get(key), dict):
            yield from _subschemas(node[key], f"{path}.{key}")
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        branches = node.get(key)
        if isinstance(branches, list):
            for i, child in enumerate(branches):
                yield from _subschemas(child, f"{path}.{key}[{i}]")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
