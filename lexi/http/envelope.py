"""The envelope of OpenAI's chat and text completion replies: id, object, created, model, system_fingerprint.

Every body and chunk carries `system_fingerprint`, a stable digest of the server build and the model file,
so a client can tell when the backend that answered it changed. (The Responses API's objects are built in
lexi.http.responses.reply.)
"""

from __future__ import annotations

import time
import uuid
from typing import Any


class Envelope:
    """id, object, created, model and system_fingerprint, shared by a reply's body or all its chunks."""

    def __init__(self, prefix: str, kind: str, model: str, fingerprint: str) -> None:
        self.head = {
            "id": f"{prefix}-{uuid.uuid4().hex}",
            "object": kind,
            "created": int(time.time()),
            "model": model,
            "system_fingerprint": fingerprint,
        }

    def body(self, **fields: Any) -> dict[str, Any]:
        return {**self.head, **fields}


class StreamChunks(Envelope):
    """With stream_options.include_usage every chunk carries `usage`: null until the last, as OpenAI's do."""

    def __init__(self, prefix: str, kind: str, model: str, fingerprint: str, include_usage: bool) -> None:
        super().__init__(prefix, kind, model, fingerprint)
        if include_usage:
            self.head["usage"] = None
