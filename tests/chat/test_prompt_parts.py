"""Text parts: joined with a newline for a template that reads strings, handed over as parts to one that reads them."""

from __future__ import annotations

import pytest

from lexi.chat.prompt import Conversation, build_chat_prompt
from lexi.chat.template import CHATML_TEMPLATE, ChatTemplate, TemplateRenderError

PARTS = [{"role": "user", "content": [{"type": "text", "text": "What is"}, {"type": "text", "text": "the best book"}]}]
READS_PARTS = (
    "{% for m in messages %}{% if m.content is string %}{{ m.content }}"
    "{% else %}{% for p in m.content %}[{{ p.text }}]{% endfor %}{% endif %}{% endfor %}"
)


def test_parts_are_joined_with_a_newline_unless_the_template_reads_them(smollm2_tokenizer):
    chatml = build_chat_prompt(ChatTemplate(CHATML_TEMPLATE, "t"), smollm2_tokenizer, Conversation(PARTS)).text
    assert "What is\nthe best book" in chatml and "What isthe best book" not in chatml
    parts = build_chat_prompt(ChatTemplate(READS_PARTS, "t"), smollm2_tokenizer, Conversation(PARTS)).text
    assert parts == "[What is][the best book]"


def test_continuing_the_final_message(smollm2_tokenizer):
    history = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello, my name"}]
    chatml = ChatTemplate(CHATML_TEMPLATE, "t")
    prompt = build_chat_prompt(
        chatml, smollm2_tokenizer, Conversation(history, add_generation_prompt=False, continue_final_message=True)
    )
    assert prompt.text.endswith("<|im_start|>assistant\nHello, my name")
    odd = ChatTemplate("{% for m in messages %}{{ m.content | upper }}{% endfor %}", "t")
    with pytest.raises(TemplateRenderError, match="continue"):
        build_chat_prompt(odd, smollm2_tokenizer, Conversation(history, continue_final_message=True))
