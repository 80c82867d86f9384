"""The compiler: off the event loop, cached by regex, refused with a reason past its time limit or on a bad regex."""

from __future__ import annotations

import asyncio
import time

import pytest
from test_schema_regex import schema_regex

from lexi.chat.constraint_plan import plan_output
from lexi.chat.response_format import ResponseFormat
from lexi.structured.compiler import CompilerConfig, ConstraintCompiler
from lexi.structured.plan import ConstraintError


def test_cached_compiles_are_reused_and_fast(vocab):
    compiler = ConstraintCompiler(vocab)
    plan = plan_output(None, "json", ResponseFormat("json_schema", {"type": "object", "properties": {"a": {}}}), None)
    first = asyncio.run(compiler.constraint(plan))
    start = time.perf_counter()
    second = asyncio.run(compiler.constraint(plan))
    assert time.perf_counter() - start < 0.05 and first is not second  # a fresh constraint on the cached index
    assert len(compiler.compile_seconds) == 1
    compiler.shutdown()


def test_a_compile_past_the_time_limit_is_refused_and_still_cached_later(vocab):
    compiler = ConstraintCompiler(vocab, CompilerConfig(timeout=0.1))
    regex = schema_regex({"type": "object"})  # ~0.4 s on this vocabulary
    with pytest.raises(ConstraintError, match="did not compile within 0.1 s"):
        asyncio.run(compiler.index(regex))
    deadline = time.monotonic() + 30
    while not compiler.compile_seconds and time.monotonic() < deadline:
        time.sleep(0.05)
    assert compiler.compile_seconds  # the worker finished it anyway
    assert asyncio.run(compiler.index(regex)) is compiler.index_now(regex)
    compiler.shutdown()


def test_a_regex_outlines_cannot_take_is_refused_with_the_reason(vocab):
    compiler = ConstraintCompiler(vocab)
    with pytest.raises(ConstraintError, match="cannot be compiled"):
        asyncio.run(compiler.index("(?=lookahead)x"))
    compiler.shutdown()


@pytest.mark.parametrize("bad", [{"timeout": 0.0}, {"timeout": 4000}, {"cache_size": 0}])
def test_config_ranges(bad):
    with pytest.raises(ValueError):
        CompilerConfig(**bad)
