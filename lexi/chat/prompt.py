"""A conversation turned into prompt token ids, and the output pipeline that reads the model's answer.

The HTTP layer checks a request into a `Conversation`; `start_turn` renders it (tools in the
template's terms or the engine's tool prompt), tokenizes with special tokens parsed, and returns the
`ChatTurn` a handler needs: the prompt, and a fresh `ChatOutput` for the answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lexi.chat.output import ChatOutput
from lexi.chat.reasoning import ReasoningSplitter, opened_in_prompt
from lexi.chat.template import ChatTemplate
from lexi.chat.tool_prompt import with_tools
from lexi.chat.tools import ToolSet


@dataclass(frozen=True, slots=True)
class Conversation:
    """What a chat-shaped request asks of the template, already checked by the HTTP layer."""

    messages: list[dict[str, Any]]  # template form: content a string, tool_calls' arguments as mappings
    tools: ToolSet | None = None
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    reasoning_effort: str | None = None
    add_generation_prompt: bool = True


@dataclass(frozen=True, slots=True)
class ChatPrompt:
    text: str
    ids: list[int]
    opened: tuple[str, str] | None  # the thought delimiters the prompt opened: the output starts as reasoning


@dataclass(frozen=True, slots=True)
class ChatTurn:
    prompt: ChatPrompt
    tools: ToolSet | None
    split_reasoning: bool  # --reasoning-format auto

    def output(self) -> ChatOutput:
        """A fresh pipeline for one answer to this prompt."""
        splitter = ReasoningSplitter(opened=self.prompt.opened) if self.split_reasoning else None
        return ChatOutput(splitter, self.tools)


def build_chat_prompt(template: ChatTemplate, tokenizer, conversation: Conversation) -> ChatPrompt:
    """Render and tokenize. BOS is added only when the model wants one and the template did not write it."""
    messages, tools = with_tools(conversation.messages, conversation.tools, template.renders_tools, template.call_form)
    text = template.render(
        messages,
        tools=tools,
        kwargs=conversation.template_kwargs,
        reasoning_effort=conversation.reasoning_effort,
        add_generation_prompt=conversation.add_generation_prompt,
    )
    add_bos = bool(tokenizer.add_bos) and not (template.bos_token and text.startswith(template.bos_token))
    ids = tokenizer.encode(text, add_bos=add_bos, special=True)
    return ChatPrompt(text, ids, opened_in_prompt(text))


def start_turn(template: ChatTemplate, tokenizer, conversation: Conversation, split_reasoning: bool) -> ChatTurn:
    return ChatTurn(build_chat_prompt(template, tokenizer, conversation), conversation.tools, split_reasoning)
