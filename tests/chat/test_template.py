"""Chat templates: refused when unusable, rendered in the sandbox with the helpers real templates call."""

from __future__ import annotations

import pytest

from lexi.chat.template import (
    CHATML_TEMPLATE,
    MAX_TEMPLATE_BYTES,
    ChatTemplate,
    ChatTemplateError,
    TemplateRenderError,
    ThinkingUnsupported,
    read_template_file,
)

THINKING = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% if enable_thinking %}<think>{% endif %}"
    "[{{ reasoning_effort | default('unset') }}]{% endif %}"
)


def test_read_template_file_refusals(tmp_path):
    with pytest.raises(ChatTemplateError, match="unreadable"):
        read_template_file(tmp_path / "missing.jinja")
    with pytest.raises(ChatTemplateError, match="unreadable"):
        read_template_file(tmp_path)  # a directory
    big = tmp_path / "big.jinja"
    big.write_text("x" * (MAX_TEMPLATE_BYTES + 1))
    with pytest.raises(ChatTemplateError, match="256 KiB"):
        read_template_file(big)
    exact = tmp_path / "exact.jinja"
    exact.write_text("y" * MAX_TEMPLATE_BYTES)
    assert ChatTemplate(read_template_file(exact), "exact").render([]) == "y" * MAX_TEMPLATE_BYTES
    latin = tmp_path / "latin1.jinja"
    latin.write_bytes("caf\xe9 {{ messages }}".encode("latin-1"))
    with pytest.raises(ChatTemplateError, match="UTF-8"):
        read_template_file(latin)


@pytest.mark.parametrize("source", ["", "   \n\t"])
def test_empty_template_refused(source):
    with pytest.raises(ChatTemplateError, match="empty"):
        ChatTemplate(source, "test")


@pytest.mark.parametrize("source", ["{% for m in messages %}", "{{ 1 + }}", "{% endif %}", "{% unknown_tag %}"])
def test_unparseable_template_refused(source):
    with pytest.raises(ChatTemplateError, match="does not parse"):
        ChatTemplate(source, "test")


def test_oversized_source_refused_even_when_embedded():
    with pytest.raises(ChatTemplateError, match="256 KiB"):
        ChatTemplate("é" * (MAX_TEMPLATE_BYTES // 2 + 1), "GGUF tokenizer.chat_template")


def test_chatml_default_and_bos_eos():
    tpl = ChatTemplate(CHATML_TEMPLATE, "ChatML default")
    prompt = tpl.render([{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}])
    assert prompt == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert not tpl.has_thinking_switch
    tpl = ChatTemplate(
        "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}", "t", bos_token="<s>", eos_token="</s>"
    )
    assert tpl.render([{"role": "user", "content": "x"}], add_generation_prompt=False) == "<s>x</s>"


def test_helpers_published_templates_call():
    tpl = ChatTemplate(
        "{{ tools | tojson }}|{{ tools | tojson(indent=2, sort_keys=True) }}|{{ 'é' | tojson(ensure_ascii=True) }}|"
        "{{ strftime_now('%Y') | length }}",
        "t",
    )
    tools = [{"b": 1, "a": "é"}]
    assert tpl.render([], tools=tools) == '[{"b": 1, "a": "é"}]|[\n  {\n    "a": "é",\n    "b": 1\n  }\n]|"\\u00e9"|4'
    with pytest.raises(TemplateRenderError, match="roles must alternate"):
        ChatTemplate("{{ raise_exception('roles must alternate') }}", "t").render([])


@pytest.mark.parametrize(
    "source",
    [
        "{{ messages.__class__.__mro__ }}",
        "{{ ''.__class__.__base__.__subclasses__() }}",
        "{{ raise_exception.__globals__ }}",
        "{{ messages.append(1) }}",
        "{% set x = messages.pop() %}",
        "{{ cycler.__init__.__globals__.os }}",
    ],
)
def test_sandbox_blocks_python_internals(source):
    tpl = ChatTemplate(source, "t")
    messages = [{"role": "user", "content": "x"}]
    try:
        out = tpl.render(messages)
    except TemplateRenderError:
        return
    assert "class" not in out and "module" not in out and out.strip() == ""
    assert messages == [{"role": "user", "content": "x"}]


@pytest.mark.parametrize("source", ["{% include '/etc/passwd' %}", "{% import '/etc/hostname' as h %}"])
def test_sandbox_cannot_read_files(source):
    with pytest.raises(TemplateRenderError):
        ChatTemplate(source, "t").render([])


def test_kwargs_merge_over_defaults():
    tpl = ChatTemplate("{{ a }}-{{ b }}-{{ c | default('none') }}", "t", default_kwargs={"a": 1, "b": "x"})
    assert tpl.render([]) == "1-x-none"
    assert tpl.render([], kwargs={"b": "y", "c": True}) == "1-y-True"
    assert tpl.render([], kwargs={"a": 0}) == "0-x-none"


@pytest.mark.parametrize("key", ["messages", "tools", "add_generation_prompt", "bos_token", "eos_token"])
def test_reserved_kwargs_refused(key):
    tpl = ChatTemplate("x", "t")
    with pytest.raises(ValueError, match="reserved"):
        tpl.render([], kwargs={key: "x"})
    with pytest.raises(ValueError, match="reserved"):
        ChatTemplate("x", "t", default_kwargs={key: 1})


@pytest.mark.parametrize(
    "kwargs",
    [{"a": [1]}, {"a": {"b": 1}}, {"a": float("nan")}, {"enable_thinking": "yes"}, {"reasoning_effort": "max"}],
)
def test_kwargs_value_types_refused(kwargs):
    with pytest.raises(ValueError):
        ChatTemplate("x", "t").render([], kwargs=kwargs)


def test_reasoning_effort_drives_the_thinking_switch():
    tpl = ChatTemplate(THINKING, "t", default_kwargs={"reasoning_effort": "xhigh", "enable_thinking": True})
    assert tpl.has_thinking_switch
    msgs = [{"role": "user", "content": "q"}]
    assert tpl.render(msgs) == "<user>q<assistant><think>[xhigh]"
    assert tpl.render(msgs, reasoning_effort="none") == "<user>q<assistant>[none]"
    assert tpl.render(msgs, reasoning_effort="low") == "<user>q<assistant><think>[low]"
    assert tpl.render(msgs, kwargs={"enable_thinking": False}) == "<user>q<assistant>[xhigh]"


def test_reasoning_effort_without_switch():
    tpl = ChatTemplate(CHATML_TEMPLATE, "ChatML default")
    assert tpl.render([], reasoning_effort="none") == "<|im_start|>assistant\n"
    for level in ("minimal", "low", "medium", "high", "xhigh"):
        with pytest.raises(ThinkingUnsupported):
            tpl.render([], reasoning_effort=level)


@pytest.mark.peer
def test_embedded_smollm2_template_renders_like_transformers(smollm2_gguf):
    """The bundled model's own template, rendered by us and by transformers' renderer."""
    from transformers.utils.chat_template_utils import render_jinja_template

    source = smollm2_gguf.metadata["tokenizer.chat_template"]
    tpl = ChatTemplate(source, "GGUF tokenizer.chat_template")
    for messages in (
        [{"role": "user", "content": "Hi there"}],
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4"},
            {"role": "user", "content": "and 3+3?"},
        ],
    ):
        for add in (True, False):
            ours = tpl.render(messages, add_generation_prompt=add)
            rendered, _ = render_jinja_template([messages], chat_template=source, add_generation_prompt=add)
            assert ours == rendered[0]
