"""gpt-oss's harmony output: the channel parser and the output pipeline over it, at every way of cutting an output.

Outputs are written as gpt-oss writes them after the prompt's `<|start|>assistant`; `<|return|>` and `<|call|>`
end generation and are not text (some cases write them as text, which ends a message all the same).
"""

from __future__ import annotations

import json

import pytest

from lexi.chat.harmony import HarmonyParser, opened_message, route_of
from lexi.chat.output import ChatOutput, ToolCallError
from lexi.chat.tools import Tool, ToolChoice, ToolSet

WEATHER = Tool(
    "get_weather",
    "Current weather in a city",
    {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]},
    strict=False,
)
TOOLS = ToolSet((WEATHER,), ToolChoice("auto"))
FORCED = ToolSet((WEATHER,), ToolChoice("function", "get_weather"))

ANALYSIS = "<|channel|>analysis<|message|>"
FINAL = "<|start|>assistant<|channel|>final<|message|>"
CALL_IN_CHANNEL = "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"

# output -> (reasoning, content, [(recipient, body)])
CASES = {
    "analysis then final": (
        f"{ANALYSIS}The user greets me.<|end|>{FINAL}Hello! How can I help?",
        ("The user greets me.", "Hello! How can I help?", []),
    ),
    "final alone": ("<|channel|>final<|message|>Just the answer.", ("", "Just the answer.", [])),
    "two thoughts, set apart": (
        f"{ANALYSIS}one<|end|><|start|>assistant{ANALYSIS}two<|end|>{FINAL}done",
        ("one\ntwo", "done", []),
    ),
    "call in the channel header": (
        f'{ANALYSIS}Need weather.<|end|>{CALL_IN_CHANNEL}{{"city":"Paris"}}',
        ("Need weather.", "", [("functions.get_weather", '{"city":"Paris"}')]),
    ),
    "call with the recipient in the role header": (
        ' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Oslo"}<|call|>',
        ("", "", [("functions.get_weather", '{"city": "Oslo"}')]),
    ),
    "a preamble is content": (
        f"{ANALYSIS}plan<|end|><|start|>assistant<|channel|>commentary<|message|>Checking the weather.<|end|>"
        f'{CALL_IN_CHANNEL}{{"city":"Rome"}}',
        ("plan", "Checking the weather.", [("functions.get_weather", '{"city":"Rome"}')]),
    ),
    "a stray commentary before analysis stays reasoning": (
        "<|channel|>commentary to=assistant<|channel|>analysis<|message|>secret<|end|>" + FINAL + "shown",
        ("secret", "shown", []),
    ),
    "an unknown channel is never content": (
        "<|channel|>scratch<|message|>hidden<|end|>" + FINAL + "shown<|return|>",
        ("hidden", "shown", []),
    ),
    "a made-up tool result is not content": (
        f"{ANALYSIS}x<|end|><|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>sunny<|end|>"
        f"{FINAL}ok",
        ("x\nsunny", "ok", []),
    ),
    "a thought cut short by max_tokens": (f"{ANALYSIS}half a thou", ("half a thou", "", [])),
    "a header cut short is dropped": (f"{ANALYSIS}x<|end|><|start|>assistant<|channel|>fin", ("x", "", [])),
    "markers inside a body are its text": (
        f"{ANALYSIS}a <|start|> or <|message|> or <|en is text<|end|>{FINAL}<|channel|> too",
        ("a <|start|> or <|message|> or <|en is text", "<|channel|> too", []),
    ),
    "plain text without harmony is content": ("Hello there.", ("", "Hello there.", [])),
    "empty": ("", ("", "", [])),
}


def parse(chunks: list[str], keep_frame: bool = False, opened: str | None = None):
    parser = HarmonyParser(opened, keep_frame)
    pieces = []
    for chunk in chunks:
        pieces += parser.feed(chunk)
    pieces += parser.finish()
    for piece in pieces:
        assert piece.kind == "call" or piece.text, "no empty pieces"
    reasoning = "".join(p.text for p in pieces if p.kind == "reasoning")
    content = "".join(p.text for p in pieces if p.kind == "content")
    return reasoning, content, [(p.call.recipient, p.call.body) for p in pieces if p.kind == "call"]


def every_cut(text: str):
    """The whole text, every two-piece cut, every three-piece cut around each marker, one character a piece."""
    yield [text]
    for i in range(1, len(text)):
        yield [text[:i], text[i:]]
    for i in range(1, len(text)):
        for j in range(i + 1, min(len(text), i + 12)):
            yield [text[:i], text[i:j], text[j:]]
    yield list(text)


@pytest.mark.parametrize("name", CASES)
def test_every_cut_gives_the_same_channels(name):
    text, expected = CASES[name]
    for chunks in every_cut(text):
        assert parse(chunks) == expected, chunks


@pytest.mark.parametrize("name", CASES)
def test_unsplit_content_is_the_text_as_written_less_calls(name):
    """--reasoning-format none: every message but a call is content, framing included."""
    text, (_, _, calls) = CASES[name]
    for chunks in every_cut(text):
        reasoning, content, found = parse(chunks, keep_frame=True)
        assert reasoning == "" and found == calls, chunks
        if not calls:
            assert content == text, chunks


def test_analysis_never_reaches_content_however_cut():
    thought = "SECRET plan: the user is testing <|end"  # a terminator's prefix in the thought itself
    text = f"{ANALYSIS}{thought}<|end|>{FINAL}visible"
    for chunks in every_cut(text):
        reasoning, content, _ = parse(chunks)
        assert reasoning == thought and content == "visible" and "SECRET" not in content, chunks


def test_routes_and_opened_messages():
    assert route_of("<|channel|>analysis") == "reasoning"
    assert route_of("<|start|>assistant<|channel|>final") == "content"
    assert route_of("<|channel|>commentary") == "content"
    assert route_of("<|channel|>commentary to=functions.f <|constrain|>json") == "call"
    assert route_of(" to=browser.search<|channel|>commentary") == "call"
    assert route_of("") == "reasoning"
    assert route_of("<|start|>user<|channel|>final") == "reasoning"
    assert route_of("<|start|>assistant to=functions.f<|channel|>commentary") == "call"
    prompt = "<|start|>user<|message|>hi<|end|><|start|>assistant"
    assert opened_message(prompt) is None
    assert opened_message(prompt + "<|channel|>final<|message|>Hel") == "assistant<|channel|>final"
    assert opened_message(prompt + "<|channel|>final<|message|>Hello<|end|>") is None
    assert parse(["lo there"], opened="assistant<|channel|>final") == ("", "lo there", [])


def run(text: str, tools: ToolSet | None = TOOLS, finish: str = "stop", cut: int | None = None):
    """The output pipeline over `text` fed in two pieces: (reasoning, content, [(name, arguments)])."""
    output = ChatOutput(None, tools, harmony=HarmonyParser())
    pieces = [text] if cut is None else [text[:cut], text[cut:]]
    events = []
    for i, piece in enumerate(pieces):
        events += output.feed(piece, 1, finish if i == len(pieces) - 1 else None)
    reasoning = "".join(e.text for e in events if e.kind == "reasoning")
    content = "".join(e.text for e in events if e.kind == "content")
    calls = [(e.call.name, json.loads(e.call.arguments)) for e in events if e.kind == "tool_call"]
    return reasoning, content, calls


def test_calls_are_verified_against_the_tool_schema_at_every_cut():
    text = f'{ANALYSIS}Weather for Paris.<|end|>{CALL_IN_CHANNEL}{{"city": "Paris", "days": 2}}'
    for cut in range(1, len(text)):
        assert run(text, cut=cut) == ("Weather for Paris.", "", [("get_weather", {"city": "Paris", "days": 2})])


def test_a_terminator_inside_a_string_does_not_end_the_call():
    """The constraint lets a JSON string hold `<|call|>`, `<|end|>`, `<|return|>` as text: the call ends after it."""
    city = 'a <|call|> <|end|> <|return|> \\" b'
    text = f'{CALL_IN_CHANNEL}{{"city": "{city}"}}<|end|>{FINAL}after'
    for cut in range(1, len(text)):
        assert run(text, cut=cut) == ("", "after", [("get_weather", {"city": 'a <|call|> <|end|> <|return|> " b'})])


@pytest.mark.parametrize(
    "call",
    [
        CALL_IN_CHANNEL + '{"days": 2}',  # city is required
        CALL_IN_CHANNEL + "{not json",
        "<|start|>assistant<|channel|>commentary to=functions.delete_all <|constrain|>json<|message|>{}",
        "<|start|>assistant to=browser.search<|channel|>commentary<|message|>{}",
    ],
)
def test_an_invalid_call_is_text_under_auto_and_an_error_when_forced(call):
    text = f"{ANALYSIS}think<|end|>{call}"
    reasoning, content, calls = run(text)
    assert (reasoning, content, calls) == ("think", call, [])  # the look-alike as written; never the thought
    with pytest.raises(ToolCallError):
        run(text, FORCED)


def test_forced_call_must_be_there_unless_max_tokens_cut_it():
    with pytest.raises(ToolCallError, match="holds none"):
        run(f"{ANALYSIS}no call<|end|>{FINAL}sorry", FORCED)
    assert run(f"{ANALYSIS}cut sh", FORCED, finish="length") == ("cut sh", "", [])
    # a call cut short by max_tokens is not a call, nor text
    assert run(f'{ANALYSIS}x<|end|>{CALL_IN_CHANNEL}{{"city": "Pa', FORCED, finish="length") == ("x", "", [])


def test_reasoning_tokens_count_the_analysis_body():
    output = ChatOutput(None, None, harmony=HarmonyParser())
    for piece in [ANALYSIS, "a", "b", "<|end|>", FINAL, "c"]:
        output.feed(piece, 1)
    output.feed("", 0, "stop")
    assert output.reasoning_tokens == 4  # as with <think>: the tokens that open and close the thought count


def test_without_tools_a_call_is_the_assistants_text():
    call = f'{CALL_IN_CHANNEL}{{"city": "Paris"}}'
    assert run(call, None) == ("", call, [])
