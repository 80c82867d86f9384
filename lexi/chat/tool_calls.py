"""Reading one `<tool_call>` block and verifying it: which tool, which arguments, valid or why not.

Two forms are read, whatever the template teaches:
- JSON: `{"name": "get_weather", "arguments": {"city": "Paris"}}`
- function: `<function=get_weather><parameter=city>Paris</parameter></function>`, a value being text
  when the tool's schema says the parameter is a string, and JSON when it parses as JSON otherwise.
Harmony's calls (gpt-oss) name the function in their header: only their JSON arguments are read here.
A call is returned only when the tool may be called and its arguments validate against the
schema the client wrote; anything else is a reason, and the block stays the assistant's text.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from lexi.chat.call_end import PARAMETER_END, JsonValued, JsonWalk
from lexi.chat.schema_check import schema_validator, validation_error
from lexi.chat.tools import Tool, ToolSet
from lexi.structured.schema_refs import says_string

_FUNCTION = re.compile(r"\s*<function=([^>\n]*)>")
_PARAMETER = re.compile(r"\s*<parameter=([^>\n]*)>")


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str  # call_<hex>: how a later tool message or function_call_output refers to this call
    name: str
    arguments: str  # a JSON object, as text (OpenAI sends arguments as a string)


class ToolCallReader:
    """Verifies blocks against one request's tools; schema validators are built once per tool."""

    def __init__(self, tools: ToolSet) -> None:
        self.tools = tools
        self._validators = {t.name: schema_validator(t.parameters) for t in tools.callable}

    def read(self, body: str) -> ToolCall | str:
        """The verified call in a block's body, or the reason it is not one."""
        parsed = _read_function_form(body, self.tools) if "<function=" in body else _read_json_form(body)
        if isinstance(parsed, str):
            return parsed
        return self._verified(*parsed)

    def read_arguments(self, name: str, body: str) -> ToolCall | str:
        """The verified call of `name` whose arguments are the JSON object `body` (harmony's form), or why not."""
        try:
            arguments = json.loads(body)
        except ValueError as exc:
            return f"the arguments of {name!r} are not valid JSON ({exc})"
        if not isinstance(arguments, dict):
            return f"the arguments of {name!r} are not a JSON object"
        return self._verified(name, arguments)

    def _verified(self, name: str, arguments: dict[str, Any]) -> ToolCall | str:
        validator = self._validators.get(name)
        if validator is None:
            if self.tools.get(name) is None:
                return f"the model called {name!r}, which is not a declared tool"
            return f"the model called {name!r}, but tool_choice does not allow it"
        problem = validation_error(validator, arguments)
        if problem is not None:
            return f"the arguments of {name!r} do not match its schema: {problem}"
        text = json.dumps(arguments, ensure_ascii=False)
        return ToolCall(f"call_{uuid.uuid4().hex[:24]}", name, text)


def _read_json_form(body: str) -> tuple[str, dict[str, Any]] | str:
    try:
        value = json.loads(body)
    except ValueError as exc:
        return f"the call is not valid JSON ({exc})"
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return 'the call is not {"name": ..., "arguments": {...}}'
    extra = set(value) - {"name", "arguments"}
    if extra:
        return f"the call has fields other than name and arguments: {', '.join(sorted(extra))}"
    arguments = value.get("arguments", {})
    if isinstance(arguments, str):  # some models write the arguments as a JSON string, as OpenAI returns them
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return "the call's arguments are a string that is not JSON"
    if not isinstance(arguments, dict):
        return "the call's arguments are not a JSON object"
    return value["name"], arguments


def _read_function_form(body: str, tools: ToolSet) -> tuple[str, dict[str, Any]] | str:
    """Parameters are cut where the constraint ends them (`call_end`): a text value at its first `</parameter>`,
    a JSON value at the first `</parameter>` outside its strings."""
    match = _FUNCTION.match(body)
    if match is None:
        return "the call is not <function=NAME>...</function>"
    name, at, valued = match.group(1).strip(), match.end(), json_valued(tools)
    tool = tools.get(name)
    arguments: dict[str, Any] = {}
    while (opened := _PARAMETER.match(body, at)) is not None:
        key, start = opened.group(1).strip(), opened.end()
        end = JsonWalk(start).find(body, (PARAMETER_END,))[0] if valued(name, key) else body.find(PARAMETER_END, start)
        if end < 0:
            return f"the parameter {key!r} is not closed with </parameter>"
        if key in arguments:
            return f"the call repeats the parameter {key!r}"
        arguments[key] = _parameter_value(_strip_one_newline(body[start:end]), tool, key)
        at = end + len(PARAMETER_END)
    rest = body[at:].strip()
    if not rest.startswith("</function>"):
        return "the call has text outside its <parameter=...> elements"
    if rest != "</function>":
        return "the call is not <function=NAME>...</function>"
    return name, arguments


def json_valued(tools: ToolSet) -> JsonValued:
    """Whether a function-form parameter's value is JSON text: a property of the tool's schema that is not a string
    (what the call constraint writes as JSON); text otherwise, unknown keys included."""

    def valued(name: str, key: str) -> bool:
        tool = tools.get(name)
        properties = tool.parameters.get("properties") if tool and isinstance(tool.parameters, dict) else None
        return isinstance(properties, dict) and key in properties and not says_string(tool.parameters, key)

    return valued


def _strip_one_newline(raw: str) -> str:
    """Templates write `<parameter=k>\\nvalue\\n</parameter>`: that framing newline is not the value."""
    if raw.startswith("\n"):
        raw = raw[1:]
    if raw.endswith("\n"):
        raw = raw[:-1]
    return raw


def _parameter_value(raw: str, tool: Tool | None, key: str) -> Any:
    if tool is not None and says_string(tool.parameters, key):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw
