"""A conversation turned into prompt token ids, and the output pipeline that reads the model's answer.

The HTTP layer checks a request into a `Conversation`; `start_turn` renders it (tools in the
template's terms or the engine's tool prompt), tokenizes with special tokens parsed, and returns the
`ChatTurn` a handler needs: the prompt, and a fresh `ChatOutput` for the answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lexi.chat.constraint_plan import plan_output, with_thought_budget
from lexi.chat.guided import GuidedText, guided_plan
from lexi.chat.harmony import MESSAGE, HarmonyParser, opened_message
from lexi.chat.harmony_plan import THOUGHT_PAIR, harmony_plan
from lexi.chat.output import ChatOutput
from lexi.chat.reasoning import ReasoningSplitter, opened_in_prompt
from lexi.chat.response_format import ResponseFormat
from lexi.chat.template import ChatTemplate, TemplateRenderError
from lexi.chat.tool_prompt import text_of, with_tools
from lexi.chat.tools import ToolSet
from lexi.structured import ConstraintError, ConstraintPlan


@dataclass(frozen=True, slots=True)
class Conversation:
    """What a chat-shaped request asks of the template, already checked by the HTTP layer."""

    messages: list[dict[str, Any]]  # template form: content a string, tool_calls' arguments as mappings
    tools: ToolSet | None = None
    response_format: ResponseFormat | None = None
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    reasoning_effort: str | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False  # the prompt ends inside the last (assistant) message: the answer continues it
    guided: GuidedText | None = None  # the answer matches this regex (vLLM's structured_outputs regex / choice)
    thinking_budget: int | None = None  # a thought closes within this many tokens (Anthropic's budget_tokens)


@dataclass(frozen=True, slots=True)
class ChatPrompt:
    text: str
    ids: list[int]
    opened: tuple[str, str] | None  # the thought delimiters the prompt opened: the output starts as reasoning
    harmony: bool = False  # the template writes gpt-oss's harmony frame: the output is read by channel
    opened_message: str | None = None  # harmony: the header of the message the prompt left open


@dataclass(frozen=True, slots=True)
class ChatTurn:
    prompt: ChatPrompt
    conversation: Conversation
    split_reasoning: bool  # --reasoning-format auto
    plan: ConstraintPlan | None  # what constrained decoding enforces; None: free output

    def output(self) -> ChatOutput:
        """A fresh pipeline for one answer to this prompt."""
        if self.prompt.harmony:
            parser = HarmonyParser(self.prompt.opened_message, keep_frame=not self.split_reasoning)
            unsplit = None if self.split_reasoning else ("", MESSAGE)  # a JSON answer follows the last <|message|>
            c = self.conversation
            return ChatOutput(None, c.tools, c.response_format, unsplit, harmony=parser)
        splitter = ReasoningSplitter(opened=self.prompt.opened) if self.split_reasoning else None
        c = self.conversation
        return ChatOutput(splitter, c.tools, c.response_format, None if splitter else self.prompt.opened)


def build_chat_prompt(template: ChatTemplate, tokenizer, conversation: Conversation) -> ChatPrompt:
    """Render and tokenize. BOS is added only when the model wants one and the template did not write it."""
    c = conversation
    parts = [m if template.takes_parts else {**m, "content": text_of(m.get("content"))} for m in c.messages]
    messages, tools = with_tools(parts, c.tools, template.renders_tools, template.call_form, c.response_format)
    text = template.render(
        messages,
        tools=tools,
        kwargs=conversation.template_kwargs,
        reasoning_effort=conversation.reasoning_effort,
        add_generation_prompt=conversation.add_generation_prompt,
    )
    if c.continue_final_message:
        text = _cut_after_final(text, text_of(c.messages[-1].get("content")))
    add_bos = bool(tokenizer.add_bos) and not (template.bos_token and text.startswith(template.bos_token))
    ids = tokenizer.encode(text, add_bos=add_bos, special=True)
    if template.harmony:
        return ChatPrompt(text, ids, None, harmony=True, opened_message=opened_message(text))
    return ChatPrompt(text, ids, opened_in_prompt(text))


def _cut_after_final(text: str, final: str) -> str:
    """The prompt up to the end of the final message's text, so that the model continues that message."""
    at = text.rfind(final) if final else -1
    if at < 0:
        raise TemplateRenderError(
            "continue_final_message: the chat template does not write the final message's text as given, "
            "so there is no place to continue it from"
        )
    return text[: at + len(final)]


def start_turn(template: ChatTemplate, tokenizer, conversation: Conversation, split_reasoning: bool) -> ChatTurn:
    """Render, tokenize and plan the constraint; ConstraintError when no output could satisfy the request."""
    c = conversation
    if c.response_format is not None and c.response_format.is_json and c.tools and c.tools.callable:
        param = c.response_format.param
        raise ConstraintError(
            f'{param} asks for a JSON answer while tools may be called; send one of them, or tool_choice "none"', param
        )
    if c.guided is not None and c.tools and c.tools.callable:
        param = c.guided.param
        raise ConstraintError(f"{param} constrains the answer while tools may be called; send one of them", param)
    prompt = build_chat_prompt(template, tokenizer, c)
    if prompt.harmony:
        regex = c.guided.regex if c.guided is not None else None
        plan = harmony_plan(c.tools, c.response_format, regex, prompt.opened_message)
    elif c.guided is not None:
        plan = guided_plan(c.guided, prompt.opened)
    else:
        plan = plan_output(c.tools, template.call_form, c.response_format, prompt.opened)
    if c.thinking_budget is not None:
        pairs = (THOUGHT_PAIR,) if prompt.harmony else None
        plan = with_thought_budget(plan, c.thinking_budget, prompt.opened, pairs)
    return ChatTurn(prompt, c, split_reasoning, plan)
