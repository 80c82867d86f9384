"""Text completion bodies and stream chunks, for any number of prompts and choices."""

from __future__ import annotations

from typing import Any

from lexi.engine.request import CompletionDelta
from lexi.http.envelope import Envelope, StreamChunks
from lexi.http.generation.sampling import usage


class CompletionChunks(StreamChunks):
    def __init__(self, model: str, fingerprint: str, include_usage: bool = False) -> None:
        super().__init__("cmpl", "text_completion", model, fingerprint, include_usage)

    def chunk(self, index: int, text: str, finish: str | None = None, logprobs=None) -> dict[str, Any]:
        return self.body(choices=[{"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}])

    def usage_chunk(self, groups: list[list[CompletionDelta]]) -> dict[str, Any]:
        return self.body(choices=[], usage=usage(groups))


def completion_body(model: str, fingerprint: str, choices: list[dict[str, Any]], groups: list[list[CompletionDelta]]):
    return Envelope("cmpl", "text_completion", model, fingerprint).body(choices=choices, usage=usage(groups))
