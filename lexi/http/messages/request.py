"""POST /v1/messages and /v1/messages/count_tokens bodies (Anthropic's Messages API), checked and turned into
what the chat pipeline takes: a `Conversation` and a `SamplingRequest`.

The route shares chat's template, sampling defaults, tool rules and names; only the shape differs. Tools
are Anthropic's custom tools (`name`, `description`, `input_schema`, `strict`); `tool_choice` `auto`, `any`,
`tool` and `none` are chat's `auto`, `required`, a named function and `none`, and
`disable_parallel_tool_use` is `parallel_tool_calls: false`. `thinking` works the template's thinking
switch as `reasoning_effort` does: `disabled` is effort `none`, `enabled` / `adaptive` turn the switch on
(`enable_thinking: true`) and leave the effort variable at the server's default; `budget_tokens` holds the
thought to that many tokens (the constraint forces its closer, lexi/structured/thought_watch). Every other field is a
400 naming it, as Anthropic answers ("Extra inputs are not permitted").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lexi.chat.prompt import Conversation
from lexi.chat.template import ChatTemplate
from lexi.chat.tools import Tool, ToolChoice, ToolSet, ToolSpecError, check_tool_names, make_tool
from lexi.http.errors import ApiError, bad_request
from lexi.http.messages.history import check_cache_control, history, system_message
from lexi.http.ops.config import SamplingDefaults
from lexi.http.parsing.fields import (
    MAX_STOP_STRINGS,
    UNSUPPORTED_VALUE,
    Fields,
    SamplingRequest,
    parse_sampling,
    refuse_unknown,
)

# what count_tokens reads: what shapes the prompt
PROMPT_FIELDS = ("model", "messages", "system", "tools", "tool_choice", "thinking", "cache_control")
MESSAGES_FIELDS = (
    *PROMPT_FIELDS, "max_tokens", "stop_sequences", "stream", "temperature", "top_p", "top_k", "metadata",
)  # fmt: skip
TOOL_FIELDS = ("type", "name", "description", "input_schema", "strict", "cache_control")
CHOICE_FIELDS = {
    "auto": ("type", "disable_parallel_tool_use"),
    "any": ("type", "disable_parallel_tool_use"),
    "tool": ("type", "name", "disable_parallel_tool_use"),
    "none": ("type",),
}
THINKING_FIELDS = {
    "enabled": ("type", "budget_tokens", "display"),
    "adaptive": ("type", "display"),
    "disabled": ("type",),
}
DISPLAYS = ("summarized", "omitted")


@dataclass(frozen=True, slots=True)
class MessagesRequest:
    model: str | None
    conversation: Conversation
    sampling: SamplingRequest | None  # None on count_tokens, which generates nothing
    stream: bool
    stop_sequences: tuple[str, ...]  # the client's own: a match is stop_reason "stop_sequence"
    thinking: str | None  # "enabled", "adaptive", "disabled", or None (the template's default)
    show_thinking: bool  # thinking.display is not "omitted": thinking blocks carry the thought's text


def parse_messages_request(body: dict[str, Any], defaults: SamplingDefaults, counting: bool = False) -> MessagesRequest:
    """`counting`: a count_tokens body, which takes only what shapes the prompt (no max_tokens, sampling, stream)."""
    refuse_unknown(body, PROMPT_FIELDS if counting else MESSAGES_FIELDS)
    f = Fields(body)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        f.fail("model", "must be a string")
    check_cache_control(body.get("cache_control"), "cache_control")
    turns = history(body.get("messages"))
    system = system_message(body.get("system"))
    max_tokens = None if counting else f.integer("max_tokens", 1, 1 << 20)
    if max_tokens is None and not counting:
        f.fail("max_tokens", "is required")
    thinking, budget, show = _thinking(f)
    if budget is not None and max_tokens is not None and budget >= max_tokens:
        f.fail("thinking", f"budget_tokens ({budget}) must be less than max_tokens ({max_tokens})")
    conversation = Conversation(
        messages=([system] if system else []) + turns.messages,
        tools=_tools(f),
        template_kwargs={"enable_thinking": True} if thinking in ("enabled", "adaptive") else {},
        reasoning_effort="none" if thinking == "disabled" else None,
        add_generation_prompt=not turns.prefill,
        continue_final_message=turns.prefill,
        thinking_budget=budget,
    )
    stops = () if counting else _stop_sequences(f)
    return MessagesRequest(
        model=model,
        conversation=conversation,
        sampling=None if counting else _sampling(f, defaults, max_tokens, stops),
        stream=False if counting else f.boolean("stream"),
        stop_sequences=stops,
        thinking=thinking,
        show_thinking=show,
    )


def check_thinking(req: MessagesRequest, template: ChatTemplate) -> None:
    """Thinking asked of a template without a thinking switch is a 501, as chat's reasoning_effort is: the
    engine does not invent reasoning."""
    if req.thinking in ("enabled", "adaptive") and not template.has_thinking_switch:
        message = f"thinking {req.thinking!r} needs a chat template with a thinking switch; the template from " \
                  f"{template.origin} has none"  # fmt: skip
        raise ApiError(501, message, param="thinking", code="thinking_not_supported")


def _sampling(f: Fields, defaults: SamplingDefaults, max_tokens: int | None, stops: tuple[str, ...]):
    """Anthropic's ranges (temperature 0-1), then chat's sampling rules and the server's defaults."""
    body: dict[str, Any] = {"max_tokens": max_tokens, "stop": list(stops) or None}
    body["temperature"] = f.number("temperature", 0.0, 1.0)
    body["top_p"] = f.number("top_p", 0.0, 1.0)
    body["top_k"] = f.integer("top_k", 0, 1 << 20)
    metadata = f.obj("metadata")
    if metadata is not None:  # user_id identifies the end user: taken without effect, as chat's `user`
        refuse_unknown(metadata, ("user_id",), "metadata.")
        Fields(metadata, "metadata.").string("user_id")
    return parse_sampling(Fields({k: v for k, v in body.items() if v is not None}), defaults, chat=True)


def _stop_sequences(f: Fields) -> tuple[str, ...]:
    raw = f.array("stop_sequences") or []
    if any(not isinstance(s, str) or not s for s in raw):
        f.fail("stop_sequences", "must be an array of non-empty strings")
    if len(raw) > MAX_STOP_STRINGS:
        f.fail("stop_sequences", f"may hold at most {MAX_STOP_STRINGS} strings")
    return tuple(dict.fromkeys(raw))


def _thinking(f: Fields) -> tuple[str | None, int | None, bool]:
    """(type, budget_tokens, whether the thought's text is shown)."""
    raw = f.obj("thinking")
    if raw is None:
        return None, None, True
    t = Fields(raw, "thinking.")
    kind = t.string("type", choices=tuple(THINKING_FIELDS))
    if kind is None:
        t.fail("type", f"is required: one of {', '.join(THINKING_FIELDS)}")
    refuse_unknown(raw, THINKING_FIELDS[kind], "thinking.")
    budget = None
    if kind == "enabled":
        budget = t.integer("budget_tokens", 1, 1 << 20)
        if budget is None:
            t.fail("budget_tokens", 'is required with type "enabled"')
    display = t.string("display", choices=DISPLAYS)
    return kind, budget, display != "omitted"


def _tools(f: Fields) -> ToolSet | None:
    """Custom tools and tool_choice, checked by chat's rules; None when nothing may be called or shown."""
    raw = f.array("tools") or []
    tools: list[Tool] = []
    try:
        for i, entry in enumerate(raw):
            where = f"tools[{i}]"
            if not isinstance(entry, dict):
                raise ToolSpecError(f'{where} must be a tool {{"name", "description", "input_schema"}}', where)
            if entry.get("type") not in (None, "custom"):
                message = f"{where}.type {entry['type']!r} is not supported: only custom tools (name, description, " \
                          "input_schema) are; this server runs no tools of its own"  # fmt: skip
                raise bad_request(message, param=f"{where}.type", code=UNSUPPORTED_VALUE)
            refuse_unknown(entry, TOOL_FIELDS, f"{where}.")
            check_cache_control(entry.get("cache_control"), f"{where}.cache_control")
            if entry.get("input_schema") is None:
                raise ToolSpecError(f"{where}.input_schema is required", f"{where}.input_schema")
            tools.append(
                make_tool(
                    entry.get("name"), entry.get("description"), entry["input_schema"], entry.get("strict"), where,
                    f"{where}.input_schema",
                )
            )  # fmt: skip
        check_tool_names(tools, "tools")
    except ToolSpecError as exc:
        raise bad_request(str(exc), param=exc.param) from None
    choice, parallel = _tool_choice(f, tools)
    return ToolSet(tuple(tools), choice, parallel) if tools else None


def _tool_choice(f: Fields, tools: list[Tool]) -> tuple[ToolChoice, bool]:
    raw = f.obj("tool_choice")
    if raw is None:
        return ToolChoice("auto" if tools else "none"), True
    c = Fields(raw, "tool_choice.")
    kind = c.string("type", choices=tuple(CHOICE_FIELDS))
    if kind is None:
        c.fail("type", f"is required: one of {', '.join(CHOICE_FIELDS)}")
    refuse_unknown(raw, CHOICE_FIELDS[kind], "tool_choice.")
    parallel = not c.boolean("disable_parallel_tool_use")
    if kind == "none":
        return ToolChoice("none"), parallel
    if not tools:
        f.fail("tool_choice", f'of type "{kind}" needs tools, and the request declares none')
    if kind == "tool":
        name = c.string("name")
        if name is None:
            c.fail("name", 'is required with type "tool"')
        if not any(t.name == name for t in tools):
            c.fail("name", f"{name!r} is not among the tools")
        return ToolChoice("function", name), parallel
    return ToolChoice("required" if kind == "any" else "auto"), parallel
