"""Logprobs in OpenAI's shapes: chat `logprobs.content`, Responses `logprobs` entries, legacy completions.

Chat and Responses logprobs belong to the visible text: the tokens of a thought, of a tool call,
of the end-of-turn token and of a stop string cut from the text are left out, so the entries'
bytes spell `content`. `ContentLogprobs` follows one choice's output events to attach each
token's logprob to the content text it released (text can be released tokens later, when a stop
string or a call opener turned out not to be one).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lexi.chat.output import OutputEvent
from lexi.engine.request import TokenLogprob


def token_entry(tokenizer, token_id: int, logprob: float | None) -> dict[str, Any]:
    raw = tokenizer.token_bytes(token_id)
    return {"token": raw.decode("utf-8", "replace"), "logprob": logprob, "bytes": list(raw)}


def chat_entries(tokenizer, logprobs: Sequence[TokenLogprob]) -> list[dict[str, Any]]:
    """`logprobs.content` (chat) / `logprobs` (Responses output_text): each token with its top alternatives."""
    entries = []
    for lp in logprobs:
        top = [token_entry(tokenizer, t, v) for t, v in lp.top]
        entries.append({**token_entry(tokenizer, lp.token_id, lp.logprob), "top_logprobs": top})
    return entries


class ContentLogprobs:
    """One choice's token logprobs, handed out with the content events that their tokens' text became."""

    def __init__(self, tokenizer) -> None:
        self._tokenizer = tokenizer
        self._pending: list[TokenLogprob] = []
        self._content_started = False

    def feed(
        self, logprobs: Sequence[TokenLogprob], events: list[OutputEvent], reasoning: bool
    ) -> list[list[TokenLogprob]]:
        """The tokens behind each event (empty for reasoning and tool calls); `reasoning`: these tokens were thought."""
        if not reasoning:
            self._pending.extend(logprobs)
        out: list[list[TokenLogprob]] = []
        for event in events:
            if event.kind != "content":
                self._pending = []  # a call's or the thought's tokens: not content
                out.append([])
                continue
            taken, self._pending = self._pending, []
            if not self._content_started:  # whitespace the splitter dropped before the content began
                while taken and not self._tokenizer.token_bytes(taken[0].token_id).strip():
                    taken.pop(0)
                self._content_started = True
            out.append(taken)
        return out


def completion_logprobs(
    tokenizer, logprobs: Sequence[TokenLogprob | None], offset: int = 0, token_ids: Sequence[int] | None = None
) -> dict[str, Any]:
    """Legacy completions logprobs. The sampled token is always among its `top_logprobs` (so up to logprobs + 1
    entries); a prompt position without a logprob (the first) is null, and `token_ids` then names its token."""
    tokens, values, tops, offsets = [], [], [], []
    for i, lp in enumerate(logprobs):
        token_id = lp.token_id if lp is not None else token_ids[i]
        text = tokenizer.token_bytes(token_id).decode("utf-8", "replace")
        tokens.append(text)
        offsets.append(offset)
        offset += len(text)
        if lp is None:
            values.append(None)
            tops.append(None)
            continue
        values.append(lp.logprob)
        top = {tokenizer.token_bytes(t).decode("utf-8", "replace"): v for t, v in lp.top}
        top.setdefault(text, lp.logprob)
        tops.append(top)
    return {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops, "text_offset": offsets}
