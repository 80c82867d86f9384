"""Every tool result answers a call made before it, and every call is answered before the conversation goes on.

OpenAI refuses a history where a tool message (a Responses `function_call_output`) names no earlier call,
or where an assistant's calls are followed by anything but their results; a template would otherwise render
a result beside nothing, or a turn that never got its results, and the model would answer nonsense. Both
routes describe their history as a list of steps and get a 400 naming the item at fault. An earlier call itself
is read into the form templates take by `history_tool_call`, whichever API sent it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from lexi.http.errors import bad_request


@dataclass(frozen=True, slots=True)
class Step:
    kind: str  # "call" (an assistant's tool call), "result" (a tool's answer) or "other" (any other message)
    param: str  # where it is in the request, for the error: messages[3].tool_call_id, input[2].call_id, ...
    call_id: str | None = None  # a call's id (None: the client gave none) or the call a result answers


def check_tool_pairing(steps: list[Step]) -> None:
    """400 for the first result that answers no open call, or call left without a result."""
    open_calls: dict[str, str] = {}  # id -> where the call is
    anonymous: list[str] = []  # calls sent without an id: any result may answer them, in order
    for step in steps:
        if step.kind == "call":
            if step.call_id is None:
                anonymous.append(step.param)
            elif step.call_id in open_calls:
                raise bad_request(f"{step.param} repeats the id of the open call at {open_calls[step.call_id]}",
                                  param=step.param)  # fmt: skip
            else:
                open_calls[step.call_id] = step.param
        elif step.kind == "result":
            if step.call_id in open_calls:
                del open_calls[step.call_id]
            elif anonymous:
                anonymous.pop(0)
            else:
                raise bad_request(
                    f"{step.param} is {step.call_id!r}, which answers no tool call made before it (every tool "
                    "result must follow the assistant's call with that id)",
                    param=step.param,
                )
        else:
            _refuse_unanswered(open_calls, anonymous, f"before {step.param}")
    _refuse_unanswered(open_calls, anonymous, "by the end of the conversation")


def _refuse_unanswered(open_calls: dict[str, str], anonymous: list[str], when: str) -> None:
    if open_calls or anonymous:
        param = next(iter(open_calls.values())) if open_calls else anonymous[0]
        raise bad_request(
            f"the tool call at {param} has no result {when}: an assistant's tool calls must be followed by a "
            "tool result for each of them",
            param=param,
        )


def history_tool_call(call_id: str | None, name: str, arguments: Any, param: str) -> dict[str, Any]:
    """One earlier call in the form templates read; arguments (at `param`) must be a JSON object or its text."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            arguments = None
    if not isinstance(arguments, dict):
        raise bad_request(f"{param} must be a JSON object (or its JSON text)", param=param)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
