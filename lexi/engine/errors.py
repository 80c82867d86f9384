"""The two ways the engine refuses a request before it runs (re-exported by `lexi.engine.engine`)."""

from __future__ import annotations


class EngineBusy(Exception):
    """No slot came free within queue_wait; HTTP answers 429 inference_busy."""


class ContextOverflow(ValueError):
    """prompt + max_tokens cannot fit the slot's ctx_size; refused before the request takes a slot."""
