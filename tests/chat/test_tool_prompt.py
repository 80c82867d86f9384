"""Which way tools reach the model: the template's own terms, or the engine's tool prompt."""

from __future__ import annotations

import json
from pathlib import Path

from lexi.chat.template import CHATML_TEMPLATE, ChatTemplate
from lexi.chat.tool_prompt import with_tools
from lexi.chat.tools import Tool, ToolChoice, ToolSet

HERMES = (Path(__file__).parents[1] / "http" / "templates" / "hermes_tools.jinja").read_text()
CODER = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if tools %}{% for t in tools %}{{ t.function.name }};{% endfor %}"
    "Call as <function=NAME><parameter=KEY>value</parameter></function>{% endif %}"
)
SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "description": "ciudad"}}, "required": ["city"]}
WEATHER = Tool("get_weather", "Weather now", SCHEMA, False)
TIME = Tool("get_time", None, {"type": "object", "properties": {}}, False)
HISTORY = [
    {"role": "user", "content": "Weather in Oslo?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
        ],
    },
    {"role": "tool", "content": "sunny", "tool_call_id": "c1"},
    {"role": "tool", "content": "12 C", "tool_call_id": "c1"},
]


def render(source: str, choice: ToolChoice, messages=HISTORY, parallel: bool = True) -> str:
    template = ChatTemplate(source, "test")
    tools = ToolSet((WEATHER, TIME), choice, parallel)
    messages, variables = with_tools(messages, tools, template.renders_tools, template.call_form)
    return template.render(messages, tools=variables)


def test_detection_from_the_parsed_template():
    assert ChatTemplate(HERMES, "t").renders_tools and not ChatTemplate(CHATML_TEMPLATE, "t").renders_tools
    assert ChatTemplate(CODER, "t").call_form == "function" and ChatTemplate(HERMES, "t").call_form == "json"
    # a template that only mentions the word in text does not read the variable
    assert not ChatTemplate("{{ 'tools' }}{% for m in messages %}{{ m.content }}{% endfor %}", "t").renders_tools


def test_a_tool_template_renders_tools_and_history_in_its_own_terms():
    text = render(HERMES, ToolChoice("auto"))
    assert json.dumps(WEATHER.openai_form()) in text and "These functions are available" not in text
    assert '{"name": "get_weather", "arguments": {"city": "Oslo"}}' in text
    assert "<tool_response>\nsunny\n</tool_response>" in text


def test_chatml_gets_the_engine_prompt_with_schemas_as_written():
    text = render(CHATML_TEMPLATE, ToolChoice("auto"))
    assert text.startswith("<|im_start|>system\n# Tools")
    assert json.dumps(SCHEMA) in text and '"description": "Weather now"' in text and '"name": "get_time"' in text
    assert '<tool_call>\n{"name": "FUNCTION_NAME", "arguments": {"PARAMETER_NAME": VALUE}}\n</tool_call>' in text
    # the history is written as the calls and results the prompt describes; consecutive results share a turn
    assert (
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
        in text
    )
    assert "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\n12 C\n</tool_response>" in text


def test_a_forced_tool_gets_the_engine_prompt_listing_that_tool_alone():
    text = render(HERMES, ToolChoice("function", "get_weather"))
    assert "Answer by calling the function get_weather" in text and '"name": "get_time"' not in text
    text = render(CHATML_TEMPLATE, ToolChoice("required"), parallel=False)
    assert "Answer with at least one function call" in text and "Make at most one call." in text


def test_the_engine_prompt_teaches_the_templates_form():
    text = render(CODER, ToolChoice("function", "get_weather"))
    assert "<function=FUNCTION_NAME>\n<parameter=PARAMETER_NAME>\nVALUE\n</parameter>" in text


def test_choice_none_shows_no_tools_but_keeps_the_history():
    text = render(HERMES, ToolChoice("none"))
    assert "<tools>" not in text and "<tool_response>\nsunny" in text
    system = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert render(CHATML_TEMPLATE, ToolChoice("none"), system).startswith("<|im_start|>system\nBe brief.<|im_end|>")
    assert "Be brief.\n\n# Tools" in render(CHATML_TEMPLATE, ToolChoice("auto"), system)
