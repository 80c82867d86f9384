"""A chat turned into prompt token ids: rendered by the template, tokenized with special tokens parsed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lexi.chat.reasoning import opened_in_prompt
from lexi.chat.template import ChatTemplate


@dataclass(frozen=True, slots=True)
class ChatPrompt:
    text: str
    ids: list[int]
    opened: tuple[str, str] | None  # the thought delimiters the prompt opened: the output starts as reasoning


def build_chat_prompt(
    template: ChatTemplate,
    tokenizer,
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    kwargs: Mapping[str, Any] | None = None,
    reasoning_effort: str | None = None,
    add_generation_prompt: bool = True,
) -> ChatPrompt:
    """Render and tokenize. BOS is added only when the model wants one and the template did not write it."""
    text = template.render(
        messages,
        tools=tools,
        kwargs=kwargs,
        reasoning_effort=reasoning_effort,
        add_generation_prompt=add_generation_prompt,
    )
    add_bos = bool(tokenizer.add_bos) and not (template.bos_token and text.startswith(template.bos_token))
    ids = tokenizer.encode(text, add_bos=add_bos, special=True)
    return ChatPrompt(text, ids, opened_in_prompt(text))
