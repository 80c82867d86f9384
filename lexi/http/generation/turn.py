"""A conversation rendered into the turn every chat-shaped route generates from: lexi/chat is asked once.

`chat_turn` is the prompt (template, tools, thinking switch, tokens) and the output pipeline that reads
the answer; its faults come back in HTTP terms, named in chat's fields (a route for another API renames
them with lexi.http.errors.renamed).
"""

from __future__ import annotations

from lexi.chat.prompt import ChatTurn, Conversation, start_turn
from lexi.http.errors import TURN_FAULTS, turn_error


def chat_turn(state, conversation: Conversation) -> ChatTurn:
    """The prompt and output pipeline for a conversation; template faults in HTTP terms."""
    try:
        split = state.config.reasoning_format == "auto"
        return start_turn(state.template, state.runtime.tokenizer, conversation, split)
    except TURN_FAULTS as exc:
        raise turn_error(exc) from None
