"""Constrained decoding: mask cost per token, compile time, decode speed constrained vs free, and the
pace of other streams while a cold compile runs. Both bundled vocabularies (49,152 and 262,144 tokens).

- mask: `fill_mask` (outlines-core writes the bits, end-of-output and hole bits fixed up) plus
  `TokenBitmask.apply` on one row of logits, per token, over walks that sample uniformly among the
  allowed tokens (every state a model could reach is visited, long strings included); p50/p99 in us.
- mask, max_tokens 48: the same walks cut at 48 tokens, so each ends in the closing regime (masks narrowed to the
  tokens that still close in time, keyed by the tokens left: more fills).
- compile: cold (a fresh compiler: the index, its closing table, and the scans of counted strings' insides over the
  walks a server keeps at load) and cached, for each schema.
- decode: the engine in this process, tok/s of greedy decoding free (ignore_eos) and under a JSON
  schema whose answer runs long, at 1 and 8 concurrent sequences; the ratio is the target's measure.
- pace: median time between tokens of one free stream, alone and while a cold compile of the
  largest schema runs on the compiler's worker thread.
- bounds: DFA states and cold compile p50 (a fresh `Index` each time) of one bounded value in an object,
  as the server translates it for the model's vocabulary (`ConstraintVocabulary.repeat_budget`; past it, counted beside
  the automaton) and written out exactly; a written-out regex over 2e8 states x tokens (about 10 s a compile) is
  counted, not compiled (bench/constrain_bounds.py).

    .venv/bin/python bench/constrain.py [--models smollm2-135m-instruct gemma3-270m] [--only bounds|masks]
        [--plans TEXT] [--no-append]

Prints a table and appends it to bench/RESULTS.md with the date, commit and machine.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import random
import statistics
import threading
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # LexiEngine's own setting (no peer runs in this process)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from constrain_bounds import FLAG, bound_rows  # noqa: E402
from run_info import commit  # noqa: E402

from lexi.chat.constraint_plan import plan_output  # noqa: E402
from lexi.chat.response_format import ResponseFormat  # noqa: E402
from lexi.chat.tools import Tool, ToolChoice, ToolSet  # noqa: E402
from lexi.engine.bitmask import TokenBitmask  # noqa: E402
from lexi.engine.config import EngineConfig  # noqa: E402
from lexi.engine.engine import Engine  # noqa: E402
from lexi.engine.request import GenerationRequest  # noqa: E402
from lexi.engine.sampling import SamplingParams  # noqa: E402
from lexi.gguf.bundled import resolve_model  # noqa: E402
from lexi.gguf.reader import read_gguf  # noqa: E402
from lexi.gguf.tokenizer import Tokenizer  # noqa: E402
from lexi.model.loader import load_model  # noqa: E402
from lexi.structured.compiler import CompilerConfig, ConstraintCompiler  # noqa: E402
from lexi.structured.counted_examples import counted_examples  # noqa: E402
from lexi.structured.counted_strings import CountedStrings  # noqa: E402
from lexi.structured.plan_regex import written  # noqa: E402
from lexi.structured.vocabulary import ConstraintVocabulary  # noqa: E402

RESULTS = Path(__file__).with_name("RESULTS.md")
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 30}, "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"],
}
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "languages": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 4},
    },
    "required": ["name", "age"],
}
LARGE = {  # an order form: nested objects, arrays of objects, enums, bounds, a $ref, anyOf
    "$defs": {
        "address": {
            "type": "object",
            "properties": {
                "street": {"type": "string", "maxLength": 60},
                "city": {"type": "string", "maxLength": 40},
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                "country": {"enum": ["FR", "DE", "ES", "IT", "PT", "NL", "BE"]},
            },
            "required": ["street", "city", "country"],
        }
    },
    "type": "object",
    "properties": {
        "order_id": {"type": "integer", "minimum": 1, "maximum": 99999999},
        "customer": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 50},
                "email": {"type": "string", "format": "email"},
                "billing": {"$ref": "#/$defs/address"},
                "shipping": {"anyOf": [{"$ref": "#/$defs/address"}, {"type": "null"}]},
            },
            "required": ["name", "billing"],
        },
        "lines": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
                    "quantity": {"type": "integer", "minimum": 1, "maximum": 100},
                    "price": {"type": "number", "minimum": 0},
                    "gift": {"type": "boolean"},
                },
                "required": ["sku", "quantity", "price"],
            },
            "minItems": 1,
            "maxItems": 20,
        },
        "notes": {"type": ["string", "null"], "maxLength": 200},
        "status": {"enum": ["new", "paid", "shipped", "delivered", "cancelled"]},
    },
    "required": ["order_id", "customer", "lines", "status"],
}
LONG = {
    "type": "object",
    "properties": {"items": {"type": "array", "items": {"type": "string"}}},
    "required": ["items"],
}


# strings too long to write out in the DFA: counted beside it (lexi/structured/counted_strings.py)
NOTE = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "minLength": 20, "maxLength": 40},
        "body": {"type": "string", "maxLength": 256},
    },
    "required": ["title", "body"],
}


# arrays too long to write out in the DFA: their items counted beside it (lexi/structured/counted_arrays.py)
ITEMS = {
    "type": "object",
    "properties": {
        "flags": {"type": "array", "items": FLAG, "minItems": 20, "maxItems": 40},
        "digits": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "maxItems": 256},
    },
    "required": ["flags", "digits"],
}


def plans() -> dict[str, object]:
    """The plans whose costs are measured (compiled for a vocabulary, with its repeat budget, as a server does)."""

    def fmt(schema):
        return plan_output(None, "json", ResponseFormat("json_schema", schema, "x"), None)

    tools = ToolSet((Tool("get_weather", None, WEATHER, False),), ToolChoice("required"), parallel=False)
    notes = ToolSet((Tool("note", None, NOTE, False),), ToolChoice("required"), parallel=False)
    return {
        "tool call (weather, required)": plan_output(tools, "json", None, None),
        "tool call (note: counted 20..40 and 0..256 strings)": plan_output(notes, "json", None, None),
        "function-form call (note: counted strings)": plan_output(notes, "function", None, None),
        "json_schema person": fmt(PERSON),
        "json_schema counted items (20..40 objects, 0..256 digits)": fmt(ITEMS),
        "json_object": plan_output(None, "json", ResponseFormat("json_object"), None),
        "json_schema large order form": fmt(LARGE),
    }


def mask_costs(
    compiler: ConstraintCompiler, plan, vocab_size: int, walks: int = 6, steps: int = 200, budget: int | None = None
) -> tuple[list[float], list[float]]:
    """Seconds per token of the engine's mask step (key, compiled mask or fill + compile, apply to a logits
    row) and of the constraint's advance, over uniform random walks under the mask; one mask cache across
    the walks, as in a server. With `budget` (max_tokens), the walks end inside the closing regime, where
    masks narrow to what still closes in the tokens left."""
    masks = TokenBitmask(vocab_size, torch.device("cpu"))
    logits = torch.zeros(vocab_size)
    costs, advances = [], []
    for seed in range(walks):
        constraint = asyncio.run(compiler.constraint(plan, budget))
        rnd = random.Random(seed)
        for _ in range(steps if budget is None else budget):
            if constraint.is_finished():
                break
            start = time.perf_counter()
            key = constraint.mask_key()
            if key is not None:
                masks.apply(logits, masks.compiled(key, constraint.fill_mask))
            costs.append(time.perf_counter() - start)
            allowed = np.flatnonzero(torch.isfinite(logits).numpy())
            logits.zero_()
            token = int(rnd.choice(allowed))
            if token in compiler.vocab.eog_ids:
                break
            start = time.perf_counter()
            constraint.advance(token)
            advances.append(time.perf_counter() - start)
    return costs, advances


def us(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1e6


async def _decode(engine: Engine, requests: list[GenerationRequest]) -> list[list[float]]:
    """The arrival time of every token, per request."""

    async def one(request):
        stamps = []
        async for delta in engine.generate(request):
            stamps += [time.perf_counter()] * len(delta.token_ids)
        return stamps

    return list(await asyncio.gather(*(one(r) for r in requests)))


def decode_rate(engine, compiler, tok, streams: int, constrained: bool, max_tokens: int = 96) -> float:
    """Tokens per second while every stream is decoding: from the step after the last stream's first token to
    the first stream's end (a constrained answer that closes early must not shrink the batch being timed)."""
    prompt = tok.encode("Here is a long list of fruits, as JSON: ")
    requests = []
    for i in range(streams):
        params = SamplingParams(temperature=1.0, seed=i, max_tokens=max_tokens, ignore_eos=not constrained)
        constraint = asyncio.run(compiler.constraint(plans_long(compiler))) if constrained else None
        requests.append(GenerationRequest(list(prompt), params, constraint=constraint))
    stamps = asyncio.run(_decode(engine, requests))
    start = max(s[0] for s in stamps)
    end = min(s[-1] for s in stamps)
    tokens = sum(1 for s in stamps for t in s if start < t <= end)
    return tokens / (end - start) if end > start else float("nan")


def plans_long(compiler):
    return plan_output(None, "json", ResponseFormat("json_schema", LONG, "list"), None)


def pace_during_compile(engine, compiler, tok, regex: str) -> tuple[float, float, float]:
    """(median seconds between tokens alone, during a cold compile, the compile's seconds)."""

    async def gaps(max_tokens: int, during=None) -> list[float]:
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
        stamps = []
        started = False
        async for _ in engine.generate(GenerationRequest(tok.encode("Once upon a time"), params)):
            stamps.append(time.perf_counter())
            if during is not None and not started and len(stamps) == 3:
                started = True
                during.start()
            if during is not None and started and not during.is_alive():
                break
        return list(np.diff(stamps[3:]))

    alone = asyncio.run(gaps(40, None))
    box = {}

    def work():
        start = time.perf_counter()
        compiler.index_now(regex)
        box["seconds"] = time.perf_counter() - start

    thread = threading.Thread(target=work)
    during = asyncio.run(gaps(400, thread))
    thread.join()
    return statistics.median(alone), statistics.median(during), box["seconds"]


def vocabulary(name: str):
    f = read_gguf(resolve_model(name))
    tok = Tokenizer.from_gguf(f)
    return f, tok, ConstraintVocabulary(tok)


def measure(name: str, masks_only: bool = False, only_plans: str = "") -> tuple[list[str], list[str], str | None]:
    f, tok, vocab = vocabulary(name)
    start = time.perf_counter()
    for regex in counted_examples(vocab.repeat_budget):  # what a server does at load (prewarm_counted)
        CountedStrings(regex).keep_plain_walks(vocab.all_token_bytes)
    print(f"{name}: counted strings' insides walked in {time.perf_counter() - start:.2f} s (at load)", flush=True)
    rows = []
    for label, plan in plans().items():
        if only_plans not in label:
            continue
        cold = ConstraintCompiler(vocab, CompilerConfig(timeout=120))  # cold compiles are the measure here
        start = time.perf_counter()
        asyncio.run(cold.constraint(plan))
        cold_s = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(100):
            asyncio.run(cold.constraint(plan))
        cached_s = (time.perf_counter() - start) / 100
        costs, advances = mask_costs(cold, plan, tok.vocab_size)
        timing = (
            f"{cold_s * 1e3:.0f} | {cached_s * 1e6:.0f} | {us(costs, 50):.0f} | {us(costs, 99):.0f} | "
            f"{us(advances, 50):.0f} | {us(advances, 99):.0f}"
        )
        rows.append(f"| {name} | {label} | {timing} |")
        print(rows[-1], flush=True)
        costs, advances = mask_costs(cold, plan, tok.vocab_size, walks=12, budget=48)
        timing = f"| | {us(costs, 50):.0f} | {us(costs, 99):.0f} | {us(advances, 50):.0f} | {us(advances, 99):.0f}"
        rows.append(f"| {name} | {label}, max_tokens 48 | {timing} |")
        cold.shutdown()
        print(rows[-1], flush=True)
    if masks_only:
        return rows, [], None
    model = load_model(f)
    engine = Engine(model, tok, EngineConfig(parallel=8, ctx_size=512, batch_size=256))
    engine.start()
    compiler = ConstraintCompiler(vocab)
    decode = []
    try:
        decode_rate(engine, compiler, tok, 1, True, 8)  # warm-up (and the cached index)
        for streams in (1, 8):
            free = decode_rate(engine, compiler, tok, streams, False)
            constrained = decode_rate(engine, compiler, tok, streams, True)
            decode.append(f"| {name} | {streams} | {free:.1f} | {constrained:.1f} | {constrained / free:.2f} |")
            print(decode[-1], flush=True)
        big = written(plans()["json_schema large order form"], vocab.repeat_budget).regexes[-1]
        alone, during, compile_s = pace_during_compile(engine, ConstraintCompiler(vocab), tok, big)
        pace = f"| {name} | {alone * 1e3:.1f} | {during * 1e3:.1f} | {compile_s:.2f} |"
        print(pace, flush=True)
    finally:
        engine.shutdown()
        compiler.shutdown()
    return rows, decode, pace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["smollm2-135m-instruct", "gemma3-270m"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-append", action="store_true", help="print only; leave bench/RESULTS.md alone")
    parser.add_argument(
        "--only", choices=["bounds", "masks"], help="only the bounds table, or only the compile and mask costs"
    )
    parser.add_argument("--plans", default="", help="only the mask plans whose label holds this text")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    masks = [
        "| model | schema | compile cold ms | cached us | mask p50 us | mask p99 us | advance p50 us | p99 us |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    decode = ["| model | streams | free tok/s | constrained tok/s | ratio |", "| --- | ---: | ---: | ---: | ---: |"]
    pace = ["| model | ms/token alone | ms/token during a cold compile | compile s |", "| --- | ---: | ---: | ---: |"]
    bounds = [
        "| model | one value in an object | regex | DFA states | cold compile p50 ms | ms a state |",
        "| --- | --- | --- | ---: | ---: | ---: |",
    ]
    for name in args.models:
        if args.only != "bounds":
            rows, dec, p = measure(name, masks_only=args.only == "masks", only_plans=args.plans)
            masks += rows
            decode += dec
            pace += [p] if p else []
        if args.only != "masks":
            bounds += bound_rows(name, vocabulary(name)[2])
    import platform

    header = (
        f"### bench/constrain.py, {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, commit {commit()}\n\n"
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, torch {torch.__version__}; {args.threads} threads; load {load_before:.1f} "
        f"before, {os.getloadavg()[0]:.1f} after.\n"
    )
    tables = {"bounds": [bounds], "masks": [masks]}.get(args.only, [masks, decode, pace, bounds])
    text = "\n\n".join([header, *("\n".join(t) for t in tables)]) + "\n"
    print("\n" + text)
    if not args.no_append:
        with RESULTS.open("a") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
