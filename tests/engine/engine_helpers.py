"""Helpers to drive a started engine from synchronous tests."""

from __future__ import annotations

import asyncio
import contextlib

from lexi.engine.config import EngineConfig
from lexi.engine.engine import Engine
from lexi.engine.request import GenerationRequest


@contextlib.contextmanager
def running_engine(model, tokenizer, **config):
    engine = Engine(model, tokenizer, EngineConfig(**config))
    engine.start()
    try:
        yield engine
    finally:
        engine.shutdown()


async def collect(engine: Engine, request: GenerationRequest):
    """Every delta of one request, in order."""
    return [delta async for delta in engine.generate(request)]


def run(coro):
    return asyncio.run(coro)


def text_of(deltas) -> str:
    return "".join(d.text for d in deltas)


def tokens_of(deltas) -> list[int]:
    return [t for d in deltas for t in d.token_ids]
