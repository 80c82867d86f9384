"""A conversation rendered into the turn every chat-shaped route generates from: lexi/chat is asked once.

`chat_turn` is the prompt (template, tools, thinking switch, tokens) and the output pipeline that reads
the answer; its faults come back in HTTP terms, named in chat's fields (a route for another API renames
them with lexi.http.errors.renamed).
"""

from __future__ import annotations

from lexi.chat.prompt import ChatTurn, Conversation, start_turn
from lexi.chat.template import REASONING_EFFORTS, check_template_kwargs
from lexi.http.errors import TURN_FAULTS, TemplateVariablesError, turn_error


def chat_turn(state, conversation: Conversation) -> ChatTurn:
    """The prompt and output pipeline for a conversation; template faults in HTTP terms."""
    try:
        _check_variables(conversation)
        split = state.config.reasoning_format == "auto"
        return start_turn(state.template, state.runtime.tokenizer, conversation, split)
    except TURN_FAULTS as exc:
        raise turn_error(exc) from None


def _check_variables(conversation: Conversation) -> None:
    """The request's template variables, refused as TemplateVariablesError naming the field. The template checks
    them again as it renders, with a plain ValueError, which TURN_FAULTS leaves alone: a stray bug raises one too.
    The request parsers check them first, so this guards a conversation built some other way."""
    kwargs = conversation.template_kwargs
    try:
        if kwargs:  # as ChatTemplate.variables reads them
            check_template_kwargs(kwargs, "chat_template_kwargs")
    except ValueError as exc:  # this call only validates: its ValueError is the request's fault
        raise TemplateVariablesError(str(exc), "chat_template_kwargs") from None
    effort = conversation.reasoning_effort
    if effort is not None and effort not in REASONING_EFFORTS:
        message = f"reasoning_effort must be one of {', '.join(REASONING_EFFORTS)}"
        raise TemplateVariablesError(message, "reasoning_effort")
