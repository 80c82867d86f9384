"""How a request's tools reach the model: in the template's own terms, or in the engine's tool prompt.

A template that reads `tools` renders them (and earlier calls and results) the way its model was
trained to see them. The engine writes its own system-prompt section instead when the template has
no tool support, and when the request forces one named tool (so the model is told which one), except
in harmony (gpt-oss), where the template is given that tool alone, in its own namespace. A
template without tool support also gets the history in text: earlier calls as `<tool_call>` blocks
in the assistant's turn, results as `<tool_response>` blocks in a user turn.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from lexi.chat.response_format import ResponseFormat
from lexi.chat.tools import Tool, ToolSet

JSON_FORM = "json"
FUNCTION_FORM = "function"
HARMONY_FORM = "harmony"  # gpt-oss: its template renders tools, calls and results itself


def example_call(form: str) -> str:
    if form == FUNCTION_FORM:
        return (
            "<tool_call>\n<function=FUNCTION_NAME>\n<parameter=PARAMETER_NAME>\nVALUE\n</parameter>\n"
            "</function>\n</tool_call>"
        )
    return '<tool_call>\n{"name": "FUNCTION_NAME", "arguments": {"PARAMETER_NAME": VALUE}}\n</tool_call>'


def render_call(name: str, arguments: Mapping[str, Any] | str, form: str) -> str:
    """An earlier call as the model would have written it."""
    if form == FUNCTION_FORM and isinstance(arguments, Mapping):
        params = "".join(
            f"<parameter={key}>\n{value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)}\n"
            "</parameter>\n"
            for key, value in arguments.items()
        )
        return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>"


def tool_section(tools: Sequence[Tool], tool_set: ToolSet, form: str) -> str:
    """The engine's system-prompt section: each tool as declared, the call form, what this request asks."""
    listed = "\n".join(
        json.dumps({"name": t.name, "description": t.description or "", "parameters": t.parameters}, ensure_ascii=False)
        for t in tools
    )
    if tool_set.choice.mode == "function":
        ask = f"Answer by calling the function {tool_set.choice.name}; do not answer in plain text."
    elif tool_set.choice.mode == "required":
        ask = "Answer with at least one function call; do not answer in plain text."
    else:
        ask = "Call a function when it helps you answer; otherwise answer in plain text."
    if not tool_set.parallel:
        ask += " Make at most one call."
    return (
        "# Tools\n\n"
        "These functions are available, each given as its name, what it does, and the JSON Schema of its "
        f"arguments:\n<tools>\n{listed}\n</tools>\n\n"
        f"To call a function, write a block in exactly this form for each call:\n{example_call(form)}\n"
        f"{ask} Results come back to you inside <tool_response></tool_response> blocks."
    )


def format_section(response_format: ResponseFormat) -> str:
    """What the model is told about a JSON answer: the schema as the client wrote it."""
    if response_format.kind == "json_object":
        return "# Answer format\n\nAnswer with one JSON object and nothing else."
    about = f" ({response_format.description})" if response_format.description else ""
    schema = json.dumps(response_format.schema, ensure_ascii=False)
    return (
        f"# Answer format\n\nAnswer with JSON only: one value named {response_format.name}{about}, "
        f"valid against this JSON Schema:\n{schema}"
    )


def with_tools(
    messages: Sequence[Mapping[str, Any]],
    tool_set: ToolSet | None,
    renders_tools: bool,
    form: str,
    response_format: ResponseFormat | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """(messages for the template, the `tools` variable for it or None)."""
    history = [dict(m) for m in messages] if renders_tools else history_astext_of(messages, form)
    if response_format is not None and response_format.is_json:
        history = _add_system(history, format_section(response_format))
    if tool_set is None or tool_set.choice.mode == "none":
        return history, None  # under "none" the model is not shown tools it may not call
    if renders_tools and form == HARMONY_FORM:  # a forced function: the template lists that one alone
        return history, [_described(t) for t in tool_set.callable]
    if renders_tools and tool_set.choice.mode != "function":
        return history, [t.openai_form() for t in tool_set.tools]
    return _add_system(history, tool_section(tool_set.callable, tool_set, form)), None


def _described(tool: Tool) -> dict[str, Any]:
    """gpt-oss's template writes `"// " + tool.description`, which fails on a tool without one: it gets ""."""
    form = tool.openai_form()
    form["function"].setdefault("description", "")
    return form


def history_astext_of(messages: Sequence[Mapping[str, Any]], form: str) -> list[dict[str, Any]]:
    """Earlier calls and results written into plain turns, for a template that renders no tools."""
    out: list[dict[str, Any]] = []
    results_open = False  # the last turn written holds tool results: the next result joins it
    for message in messages:
        if message["role"] == "tool":
            block = f"<tool_response>\n{text_of(message.get('content'))}\n</tool_response>"
            if results_open:
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block})
            results_open = True
            continue
        results_open = False
        turn = {k: v for k, v in message.items() if k not in ("tool_calls", "tool_call_id")}
        calls = [
            render_call(c["function"]["name"], c["function"]["arguments"], form)
            for c in message.get("tool_calls") or []
        ]
        if calls:
            turn["content"] = "\n".join(filter(None, [text_of(turn.get("content")), *calls]))
        out.append(turn)
    return out


def _add_system(messages: list[dict[str, Any]], section: str) -> list[dict[str, Any]]:
    if messages and messages[0]["role"] == "system":
        first = dict(messages[0])
        content = first.get("content")
        if isinstance(content, list):  # a template that reads parts gets one more part
            first["content"] = [*content, {"type": "text", "text": section}]
        else:
            first["content"] = f"{content or ''}\n\n{section}".lstrip("\n")
        return [first, *messages[1:]]
    return [{"role": "system", "content": section}, *messages]


def text_of(content) -> str:
    """A message's content as one string: text parts joined with a newline (as vLLM does), so they stay apart."""
    if isinstance(content, list):
        return "\n".join(part["text"] for part in content)
    return content or ""
