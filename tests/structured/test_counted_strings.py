"""String lengths counted beside the DFA (maxLength / minLength past what the regex writes out), over the real
SmolLM2 vocabulary and real compiled indexes, in both call forms and in a JSON answer.

Walks (`budget_walk`: a fixed number of steps; the constraint gets a budget only where a test says so) sample
uniformly among the allowed tokens: a uniform token writes several characters at once and almost
never closes a string by choice, so a walk meets every bound head on.
"""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from test_turn import allowed_ids
from test_turn_budget import budget_walk

from lexi.chat.constraint_plan import plan_output
from lexi.chat.output import ChatOutput
from lexi.chat.response_format import ResponseFormat
from lexi.chat.tools import Tool, ToolChoice, ToolSet
from lexi.structured.counted_examples import counted_examples
from lexi.structured.counted_full_walk import full_walk
from lexi.structured.counted_marks import BOUNDARY, ENTRY, EXIT
from lexi.structured.counted_strings import CountedStrings, has_counted
from lexi.structured.regex_cost import REPEAT_STATES
from lexi.structured.schema_regex import SchemaRegex


def note_tool(low: int, high: int | None) -> Tool:
    text = {"type": "string", "minLength": low} | ({} if high is None else {"maxLength": high})
    schema = {"type": "object", "properties": {"title": text, "n": {"type": "integer"}}, "required": ["title", "n"]}
    return Tool("note", None, schema, strict=False)


def counted_states(constraint, vocab, size: int, rnd, steps: int = 120):
    """A uniform walk of `constraint` (at most `steps` tokens), stopping at each state where its counted strings
    apply (yielding the compiled index there) before taking the next token."""
    row = np.zeros((size + 31) // 32, dtype=np.int32)
    for _ in range(steps):
        if constraint.is_finished():
            return
        compiled = constraint._walk.compiled
        if compiled is not None and compiled.counted is not None and not constraint._walk.free_rest:
            yield compiled
        token = int(rnd.choice(allowed_ids(constraint, row, size)))
        constraint.advance(token)
        if token in vocab.eog_ids:
            return


def test_long_bounds_are_counted_not_widened():
    regex = SchemaRegex({"type": "string", "maxLength": 40}, REPEAT_STATES).regex()
    assert has_counted(regex)
    assert not has_counted(SchemaRegex({"type": "string", "maxLength": 8}, REPEAT_STATES).regex())  # written out
    assert not has_counted(SchemaRegex({"type": "string"}, REPEAT_STATES).regex())


@pytest.mark.parametrize("form", ["json", "function"])
@pytest.mark.parametrize(("low", "high"), [(0, 40), (0, 256), (30, 60)])
def test_a_forced_call_keeps_long_string_bounds(compiler, smollm2_tokenizer, vocab, form, low, high):
    tool = note_tool(low, high)
    tools = ToolSet((tool,), ToolChoice("required"), parallel=False)
    plan = plan_output(tools, form, None, None)
    lengths = []
    for seed in range(6):
        constraint = asyncio.run(compiler.constraint(plan))
        ids, ended = budget_walk(constraint, vocab, smollm2_tokenizer.vocab_size, 400, seed)
        assert ended == "finished", smollm2_tokenizer.decode(ids)
        output = ChatOutput(None, tools)
        output.feed(smollm2_tokenizer.decode(ids), len(ids), "stop")  # raises for a call outside the schema
        (call,) = output.calls
        title = json.loads(call.arguments)["title"]
        assert low <= len(title) <= high, title
        assert not {chr(BOUNDARY), chr(ENTRY), chr(EXIT)} & set(call.arguments)  # no mark is ever written
        lengths.append(len(title))
    if high <= 60:
        assert max(lengths) == high  # a uniform walk runs into the maximum: it is the bound that stops it


@pytest.mark.parametrize("form", ["json", "function"])
@pytest.mark.parametrize("high", [200, None])
def test_a_long_minimum_still_closes_within_the_budget(compiler, smollm2_tokenizer, vocab, form, high):
    tools = ToolSet((note_tool(30, high),), ToolChoice("required"), parallel=False)
    plan = plan_output(tools, form, None, None)
    for seed in range(6):
        constraint = asyncio.run(compiler.constraint(plan, 70))
        ids, ended = budget_walk(constraint, vocab, smollm2_tokenizer.vocab_size, 70, seed)
        assert ended == "finished", smollm2_tokenizer.decode(ids)
        output = ChatOutput(None, tools)
        output.feed(smollm2_tokenizer.decode(ids), len(ids), "stop")
        assert 30 <= len(json.loads(output.calls[0].arguments)["title"]) <= (high or 10**6)


def test_a_json_answer_keeps_bounds_of_strings_in_an_array(compiler, smollm2_tokenizer, vocab):
    schema = {
        "type": "object",
        "properties": {"tags": {"type": "array", "items": {"type": "string", "minLength": 3, "maxLength": 33}}},
        "required": ["tags"],
    }
    fmt = ResponseFormat("json_schema", schema, "answer")
    plan = plan_output(None, "json", fmt, None)
    for seed in range(6):
        constraint = asyncio.run(compiler.constraint(plan))
        ids, ended = budget_walk(constraint, vocab, smollm2_tokenizer.vocab_size, 600, seed)
        assert ended == "finished", smollm2_tokenizer.decode(ids)
        value = json.loads(smollm2_tokenizer.decode(ids))
        assert all(3 <= len(tag) <= 33 for tag in value["tags"]), value


@pytest.mark.parametrize("form", ["json", "function"])
@pytest.mark.parametrize(("low", "high", "budget"), [(0, 256, None), (30, 200, 70)])
def test_a_mask_key_names_one_set_so_long_strings_share_masks(
    compiler, smollm2_tokenizer, vocab, form, low, high, budget
):
    """The engine keeps one mask per key: a key seen again must name the same tokens. Inside a long string,
    far from its bounds, the key leaves the count out, so its masks are shared across characters."""
    tools = ToolSet((note_tool(low, high),), ToolChoice("required"), parallel=False)
    plan = plan_output(tools, form, None, None)
    size, rnd = smollm2_tokenizer.vocab_size, np.random.default_rng(0)
    row = np.zeros((size + 31) // 32, dtype=np.int32)
    masks, shared = {}, 0
    for _ in range(4):
        constraint = asyncio.run(compiler.constraint(plan, budget))
        for _ in range(budget or 300):
            if constraint.is_finished():
                break
            key = constraint.mask_key()
            allowed = allowed_ids(constraint, row, size)
            if key in masks:
                assert np.array_equal(masks[key], allowed), key
                shared += key[0] == "counted" and key[3] is not None and key[3][0] == "within"
            masks[key] = allowed
            token = int(rnd.choice(allowed))
            constraint.advance(token)
            if token in vocab.eog_ids:
                break
    assert shared > 10


@pytest.mark.parametrize("form", ["json", "function"])
def test_the_plain_walk_gives_what_the_full_walk_gives(compiler, smollm2_tokenizer, vocab, form):
    """A scan walks most tokens the short way (`plain_walk`, its walks over the whole vocabulary kept by shape and
    taken again by the next schema's strings): at every state of uniform walks, over every allowed token, it must
    give what walking each token through opening, counting and closing strings gives."""
    size, skip = smollm2_tokenizer.vocab_size, {*vocab.eog_ids, vocab.hole_id}
    rnd, checked = np.random.default_rng(1), 0
    for low, high in ((20, 40), (3, 250)):  # the second schema's strings have the first's shapes
        plan = plan_output(ToolSet((note_tool(low, high),), ToolChoice("required"), parallel=False), form, None, None)
        constraint = asyncio.run(compiler.constraint(plan))
        for compiled in counted_states(constraint, vocab, size, rnd):
            counted, state = compiled.counted, constraint._walk.guide.get_state()
            tokens = compiled.index.get_allowed_tokens(state) or []
            ids = np.array([t for t in tokens if t < size and t not in skip], dtype=np.int64)
            start, run = counted._row[state], constraint._walk.run
            scan = counted._scan(start, run, ids, vocab.all_token_bytes)
            ok, exits, gain, seen, at_boundary = full_walk(counted, start, run, ids, vocab.all_token_bytes)
            assert np.array_equal(scan.ok, ok)
            for fast, full in (
                (scan.exits, exits),
                (scan.gain, gain),
                (scan.seen, seen),
                (scan.at_boundary, at_boundary),
            ):
                assert np.array_equal(fast[ok], full[ok])  # what a token that is not ok does is never read
            checked += 1
    assert checked > 50 and vocab.all_token_bytes.plain


def test_walks_kept_at_load_serve_every_later_schema(compiler, vocab):
    """What a server walks at load (`counted_examples`) is what every later counted string needs: compiling other
    schemas, in both forms, with other names and bounds, walks the vocabulary for no new shape."""
    for regex in counted_examples(vocab.repeat_budget):
        CountedStrings(regex).keep_plain_walks(vocab.all_token_bytes)
    kept = set(vocab.all_token_bytes.plain)
    memo = {"type": "object", "properties": {"memo": {"type": "string", "minLength": 5, "maxLength": 300},
                                             "subject": {"type": "string", "maxLength": 77}}}  # fmt: skip
    tools = ToolSet((Tool("file_memo", None, memo, strict=False),), ToolChoice("required"), parallel=False)
    for form in ("json", "function"):
        asyncio.run(compiler.constraint(plan_output(tools, form, None, None)))
    assert set(vocab.all_token_bytes.plain) == kept and len(kept) > 10


@pytest.mark.parametrize("form", ["json", "function"])
def test_a_fill_by_gain_order_is_the_token_by_token_set(compiler, smollm2_tokenizer, vocab, form):
    """A step's counted set is filled from the scan's tokens sorted by gain (`GainOrder`: only the runs a count rules
    out are cleared); at every state of uniform walks, for the walk's own run and for random counts around both
    bounds, it must be exactly the tokens `allowed` keeps comparing every token."""
    from lexi.structured.counted_state import Run
    from lexi.structured.mask_bits import set_bits

    size = smollm2_tokenizer.vocab_size
    rnd, checked, cleared = np.random.default_rng(2), 0, 0
    plan = plan_output(ToolSet((note_tool(20, 40),), ToolChoice("required"), parallel=False), form, None, None)
    for _ in range(3):
        constraint = asyncio.run(compiler.constraint(plan))
        for compiled in counted_states(constraint, vocab, size, rnd):
            scan, run = constraint._walk.counted_scan(), constraint._walk.run
            # no counted arrays here: every scan of many tokens has its order (a few are compared one by one)
            assert (scan.order is not None) == (int(scan.ok.sum()) >= 2048), int(scan.ok.sum())
            if scan.order is None:
                continue
            runs = [run]
            if run is not None:
                for _ in range(6):
                    arrivals = int(rnd.integers(0, 60))
                    runs.append(Run(run.low, run.high, run.text, arrivals, run.start, int(rnd.integers(0, 4))))
            for each in runs:
                want, got = np.zeros((size + 31) // 32, dtype=np.int32), np.zeros((size + 31) // 32, dtype=np.int32)
                set_bits(want, scan.ids[compiled.counted.allowed(scan, each)])
                scan.order.fill(got.view(np.uint32), each)
                assert np.array_equal(want, got), (each, np.flatnonzero(want != got)[:5])
                cleared += int(np.unpackbits(want.view(np.uint8)).sum()) < int(scan.ok.sum())
                checked += 1
    assert checked > 100 and cleared > 20, (checked, cleared)


@pytest.mark.parametrize("form", ["json", "function"])
def test_the_ids_a_counted_fill_names_are_the_rows_bits(compiler, smollm2_tokenizer, vocab, form):
    """Inside a counted string a fill also names its set as ids, the tokens it leaves out or those it allows, so the
    engine masks them without reading the row back (lexi.engine.bitmask): at every state of uniform walks they must
    be exactly the row's unset (or set) bits, and the mask the engine compiles from them the one it compiles from
    the row."""
    import torch

    from lexi.engine.bitmask import TokenBitmask

    size = smollm2_tokenizer.vocab_size
    rnd, named = np.random.default_rng(3), 0
    for low, high in ((20, 40), (0, 256)):
        plan = plan_output(ToolSet((note_tool(low, high),), ToolChoice("required"), parallel=False), form, None, None)
        constraint = asyncio.run(compiler.constraint(plan))
        for _ in counted_states(constraint, vocab, size, rnd, steps=160):
            if constraint.mask_key() is None:
                continue
            row = np.zeros((size + 31) // 32, dtype=np.int32)
            named_set = constraint.fill_mask(row)
            if named_set is None:
                continue
            keep, ids = named_set
            bits = np.flatnonzero(np.unpackbits(row.view(np.uint8), bitorder="little") == keep)
            assert np.array_equal(np.sort(ids), bits[bits < size]), keep
            masks = [
                TokenBitmask(size, torch.device("cpu"))._compile(row),
                TokenBitmask(size, torch.device("cpu")).compiled("k", constraint.fill_mask),
            ]
            sets = [np.sort(m.ids.numpy()) if m.keep else np.setdiff1d(np.arange(size), m.ids.numpy()) for m in masks]
            assert np.array_equal(*sets)
            named += 1
    assert named > 30, named
