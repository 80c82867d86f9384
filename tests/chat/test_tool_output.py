"""The output pipeline (reasoning split -> tool-call parser -> verification) over every way of cutting an output."""

from __future__ import annotations

import json

import pytest

from lexi.chat.output import ChatOutput, ToolCallError
from lexi.chat.reasoning import ReasoningSplitter
from lexi.chat.tools import Tool, ToolChoice, ToolSet

WEATHER = Tool(
    "get_weather",
    "Current weather in a city",
    {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
        "required": ["city"],
    },
    strict=False,
)
TIME = Tool("get_time", None, {"type": "object", "properties": {"zone": {"type": "string"}}}, strict=False)
TOOLS = ToolSet((WEATHER, TIME), ToolChoice("auto"))


def run(pieces: list[str], tools: ToolSet | None = TOOLS, think: bool = True, finish: str = "stop"):
    """Feed the pieces as engine events; (reasoning, content, [(name, arguments)], reasoning_tokens)."""
    output = ChatOutput(ReasoningSplitter() if think else None, tools)
    events = []
    for i, piece in enumerate(pieces):
        events += output.feed(piece, 1, finish if i == len(pieces) - 1 else None)
    reasoning = "".join(e.text for e in events if e.kind == "reasoning")
    content = "".join(e.text for e in events if e.kind == "content")
    calls = [(e.call.name, json.loads(e.call.arguments)) for e in events if e.kind == "tool_call"]
    assert [c.name for c in output.calls] == [name for name, _ in calls]
    return reasoning, content, calls, output.reasoning_tokens


def cuts(text: str):
    """The whole text, every two-piece cut, and one character per piece."""
    yield [text]
    for i in range(1, len(text)):
        yield [text[:i], text[i:]]
    yield list(text)


OUTPUTS = {
    "json form after text": (
        'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
        ("", "Let me check.", [("get_weather", {"city": "Paris"})]),
    ),
    "function form, two calls": (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nSão Paulo\n</parameter>\n<parameter=days>\n3\n"
        "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n<parameter=zone>\n42\n"
        "</parameter>\n</function>\n</tool_call>",
        ("", "", [("get_weather", {"city": "São Paulo", "days": 3}), ("get_time", {"zone": "42"})]),
    ),
    "think block before calls": (
        '<think>\nThe user wants weather.\n</think>\n\n<tool_call>{"name": "get_time", "arguments": {}}</tool_call>',
        ("The user wants weather.", "", [("get_time", {})]),
    ),
    "look-alike is text": (
        "Use <tool_call>not json</tool_call> like this.",
        ("", "Use <tool_call>not json</tool_call> like this.", []),
    ),
    "unknown tool is text": (
        '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>',
        ("", '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>', []),
    ),
    "invalid arguments are text": (
        'A <tool_call>{"name": "get_weather", "arguments": {"days": 0}}</tool_call>',
        ("", 'A <tool_call>{"name": "get_weather", "arguments": {"days": 0}}</tool_call>', []),
    ),
    "a lone < and partial openers stay text": (
        "a < b and <tool_ca is not <tool_call",
        ("", "a < b and <tool_ca is not <tool_call", []),
    ),
    "text between calls": (
        '<tool_call>{"name": "get_time", "arguments": {"zone": "UTC"}}</tool_call>\nand then\n'
        '<tool_call>{"name": "get_time", "arguments": {"zone": "CET"}}</tool_call>\n',
        ("", "and then", [("get_time", {"zone": "UTC"}), ("get_time", {"zone": "CET"})]),
    ),
}


@pytest.mark.parametrize("name", OUTPUTS)
def test_events_do_not_depend_on_chunking(name):
    text, (reasoning, content, calls) = OUTPUTS[name]
    for pieces in cuts(text):
        got = run(pieces)
        assert got[:3] == (reasoning, content, calls), pieces


NOTE = Tool(
    "note",
    None,
    {"type": "object", "properties": {"text": {"type": "string"}, "data": {"type": "object"}}, "required": ["text"]},
    strict=False,
)
MARKERS = "</tool_call> </parameter> </function> <tool_call> <|im_end|> <|eot_id|>"
MARKED_CALLS = {  # a closing marker written inside a value, as the call constraint lets a model write it
    "json form, in a string": (
        '<tool_call>\n{"name": "note", "arguments": {"text": "a ' + MARKERS + ' \\" b"}}\n</tool_call> after',
        {"text": "a " + MARKERS + ' " b'},
    ),
    "json form, in a nested string": (
        '<tool_call>{"name": "note", "arguments": {"text": "x", "data": {"k": ["' + MARKERS + '"]}}}</tool_call> after',
        {"text": "x", "data": {"k": [MARKERS]}},
    ),
    "function form, a text value": (
        "<tool_call>\n<function=note>\n<parameter=text>\n" + MARKERS.replace("</parameter> ", "") + "\n"
        "</parameter>\n</function>\n</tool_call> after",
        {"text": MARKERS.replace("</parameter> ", "")},
    ),
    "function form, a JSON value": (
        "<tool_call>\n<function=note>\n<parameter=text>\nx\n</parameter>\n<parameter=data>\n"
        '{"k": "' + MARKERS + '"}\n</parameter>\n</function>\n</tool_call> after',
        {"text": "x", "data": {"k": MARKERS}},
    ),
}


@pytest.mark.parametrize("name", MARKED_CALLS)
def test_a_closing_marker_inside_a_value_does_not_end_the_call(name):
    """The reader ends a call where the constraint does: never inside a JSON string or a parameter's value."""
    text, arguments = MARKED_CALLS[name]
    for pieces in cuts(text):
        for choice in (ToolChoice("auto"), ToolChoice("function", "note")):
            assert run(pieces, ToolSet((NOTE,), choice))[1:3] == ("after", [("note", arguments)]), pieces


def test_a_function_form_value_that_never_closes_is_not_a_call():
    text = "<tool_call><function=note><parameter=text>\nx\n</function></tool_call>"
    assert run([text], ToolSet((NOTE,), ToolChoice("auto")))[1:3] == ("", text, [])[1:3]
    with pytest.raises(ToolCallError, match="not closed"):
        run([text], ToolSet((NOTE,), ToolChoice("required")))


def test_unclosed_call_at_eos_is_read_but_not_when_cut_by_the_length_limit():
    text = '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n'
    assert run([text])[2] == [("get_time", {"zone": "UTC"})]
    assert run([text], finish="length")[:3] == ("", text, [])


def test_string_parameters_stay_text_and_others_are_json():
    tool = Tool(
        "f", None, {"type": "object", "properties": {"s": {"type": "string"}, "n": {}, "o": {"type": "object"}}}, False
    )
    text = (
        "<tool_call><function=f><parameter=s>\n007\n</parameter><parameter=n>\n007\n</parameter>"
        '<parameter=o>\n{"a": [1]}\n</parameter></function></tool_call>'
    )
    calls = run([text], ToolSet((tool,), ToolChoice("auto")))[2]
    assert calls == [("f", {"s": "007", "n": "007", "o": {"a": [1]}})]  # "007" is not JSON, so it stays text


def test_forced_choice_fails_instead_of_returning_text():
    forced = ToolSet((WEATHER, TIME), ToolChoice("function", "get_weather"))
    with pytest.raises(ToolCallError, match="get_time"):
        run(['<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'], forced)
    with pytest.raises(ToolCallError, match="holds none"):
        run(["I would rather not."], ToolSet((WEATHER,), ToolChoice("required")))
    with pytest.raises(ToolCallError, match="schema"):
        run(['<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>'], forced)
    assert run(['<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'], forced)[2]


@pytest.mark.parametrize("rest", ["\n<", "\n<tool_c", '\n<tool_call>\n{"name": "get_weather", "argu'])
def test_a_later_call_cut_by_the_length_limit_is_dropped_under_a_forced_choice(rest):
    """Forced, the output can only go on with calls: a fragment of the next one is neither text nor a call."""
    call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
    forced = ToolSet((WEATHER,), ToolChoice("required"))
    for pieces in cuts(call + rest):
        assert run(pieces, forced, finish="length")[1:3] == ("", [("get_weather", {"city": "Oslo"})])
    auto = run([call + rest], ToolSet((WEATHER,), ToolChoice("auto")), finish="length")
    assert auto[1].strip() == rest.strip()  # unforced, what only looks like a call stays the assistant's text


def test_choice_none_reads_no_calls():
    text = '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    assert run([text], ToolSet((TIME,), ToolChoice("none")))[:3] == ("", text, [])


def test_parallel_false_keeps_the_first_call_and_the_rest_as_text():
    one = '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    serial = ToolSet((TIME,), ToolChoice("auto"), parallel=False)
    assert run([one + one], serial)[1:3] == (one, [("get_time", {})])


def test_reasoning_tokens_count_the_thought():
    pieces = ["<think>", "a", "b", "</think>", "x", "y"]
    assert run(pieces, None)[3] == 4
    assert run(["x", "y"], None)[3] == 0
    assert run(["<think>", "a"], None, finish="length")[:2] == ("a", "")


def test_final_delimiter_split_across_the_last_events():
    """The Responses route once finished before feeding the last piece: never again, by construction."""
    assert run(["<think>plan</thi", "nk>answer"], None)[:2] == ("plan", "answer")
