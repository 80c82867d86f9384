"""Speculative decoding side by side: LexiEngine `serve --spec ngram` and llama.cpp's own prompt lookup
(llama-cpp-python's LlamaPromptLookupDecoding), each with and without, each engine in its own process.

Workloads (greedy, the same prompt token ids for both engines: llama.cpp's tokenizer writes them):
  edit   a ~400-token Python file and the request to write it again with one name changed
  json   a tool result echoed back
  prose  free text, where little repeats
Row: decode tok/s after the first token ((tokens - 1) / (last chunk's time - first chunk's), tokens from the
usage, since a chunk carries every token its step took), streamed,
median of --reps; LexiEngine's two servers (with and without) are up together and their requests alternate.
llama.cpp runs with its defaults except what prompt lookup needs: `logits_all=True`
(else its score buffer overflows past n_batch) and `draft_model=LlamaPromptLookupDecoding(num_pred_tokens=K)`.

    .venv/bin/python bench/spec.py [--model smollm2-135m-instruct] [--reps 5] [--spec-max 8] [--streams 4]
        [--serve-args "--activations int8"] [--no-append]

`--streams N` adds LexiEngine rows for N concurrent copies of each workload, with and without (output tok/s over
the wall time). Prints the table and appends it, with date, commit and machine, to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.client
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from e2e_engines import LexiServer
from run_info import commit, machine

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"
CTX = 2048


def code_file() -> str:
    """A plain Python module of about 400 tokens."""
    parts = []
    for name, op in (
        ("area", "width * height"),
        ("perimeter", "2 * (width + height)"),
        ("diagonal", "(width ** 2 + height ** 2) ** 0.5"),
    ):
        parts.append(
            f"def {name}(width, height):\n"
            f'    """Return the {name} of a rectangle of the given width and height."""\n'
            f"    if width < 0 or height < 0:\n"
            f'        raise ValueError("width and height must not be negative")\n'
            f"    return {op}\n"
        )
    parts.append(
        "class Rectangle:\n"
        "    def __init__(self, width, height):\n"
        "        self.width = width\n"
        "        self.height = height\n\n"
        "    def area(self):\n        return area(self.width, self.height)\n\n"
        "    def perimeter(self):\n        return perimeter(self.width, self.height)\n\n"
        "    def diagonal(self):\n        return diagonal(self.width, self.height)\n\n"
        '    def __repr__(self):\n        return f"Rectangle({self.width}, {self.height})"\n'
    )
    return "\n\n".join(parts)


def workloads() -> dict[str, tuple[str, int]]:
    """name -> (prompt text, tokens to generate)."""
    code = code_file()
    record = {
        "id": "call_7f3a", "status": "ok",
        "items": [
            {"sku": f"A-{i:03d}", "name": f"widget {i}", "price": round(3.5 * i, 2), "stock": 10 * i}
            for i in range(1, 7)
        ],
    }  # fmt: skip
    tool = json.dumps(record)
    return {
        "edit": (
            f"<|im_start|>user\nHere is a file:\n```python\n{code}\n```\nWrite the whole file again, unchanged except "
            f'that the error message says "must be positive".<|im_end|>\n<|im_start|>assistant\n```python\n',
            256,
        ),
        "json": (
            f"<|im_start|>user\nThe tool returned:\n{tool}\nRepeat the tool result exactly.<|im_end|>\n"
            f"<|im_start|>assistant\n",
            160,
        ),
        "prose": (
            "<|im_start|>user\nTell me a story about a lighthouse keeper.<|im_end|>\n<|im_start|>assistant\n",
            160,
        ),
    }


def llama_worker(path: str, lookup: int, threads: int, prompts: dict, reps: int) -> None:
    """In its own process: prints {"ids": {name: ids}, "rates": {name: [tok/s...]}, "tokens": {name: n}}."""
    import llama_cpp
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    extra = dict(logits_all=True, draft_model=LlamaPromptLookupDecoding(num_pred_tokens=lookup)) if lookup else {}
    llm = llama_cpp.Llama(path, n_ctx=CTX, n_threads=threads, n_threads_batch=threads, verbose=False, **extra)
    ids = {name: llm.tokenize(text.encode(), add_bos=True, special=True) for name, (text, _) in prompts.items()}
    rates: dict[str, list[float]] = {}
    tokens: dict[str, int] = {}
    for name, (_, n) in prompts.items():
        for _ in range(reps + 1):  # the first is a warm-up
            llm.reset()
            stamps = []
            for _chunk in llm.create_completion(ids[name], max_tokens=n, temperature=0.0, stream=True):
                stamps.append(time.perf_counter())
            if _ > 0:
                rates.setdefault(name, []).append((len(stamps) - 1) / (stamps[-1] - stamps[0]))
            tokens[name] = len(stamps)
    print(json.dumps({"ids": ids, "rates": rates, "tokens": tokens}), flush=True)


def run_llama(path: str, lookup: int, threads: int, reps: int) -> dict:
    code = (
        f"import sys; sys.path.insert(0, {str(HERE)!r}); import spec; "
        f"spec.llama_worker({path!r}, {lookup}, {threads}, spec.workloads(), {reps})"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ), check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def lexi_rate(server: LexiServer, ids: list[int], n: int) -> tuple[float, int]:
    """(decode tok/s after the first token, tokens) of one streamed greedy completion."""
    body = {"prompt": ids, "max_tokens": n, "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
    stamps: list[float] = []
    count = 0
    try:
        conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200, resp.status
        for raw in resp:
            line = raw.strip()
            if not line.startswith(b"data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices") and chunk["choices"][0].get("text"):
                stamps.append(time.perf_counter())
            if chunk.get("usage"):
                count = chunk["usage"]["completion_tokens"]
    finally:
        conn.close()
    # a chunk carries every token a step took (several when a draft is taken): count tokens, not chunks
    return (count - 1) / (stamps[-1] - stamps[0]), count


SPEC_METRICS = ("lexi_spec_proposed_tokens", "lexi_spec_accepted_tokens", "lexi_spec_verify_rows")


def spec_counters(server: LexiServer) -> dict[str, float]:
    """The speculation counters of the server's /metrics."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in SPEC_METRICS:
            out[name] = float(value)
    return out


def lexi_servers(path: str, spec_max: int, parallel: int, serve_args: tuple = ()) -> dict[bool, LexiServer]:
    """A server without speculation and one with `--spec ngram`, both up at once (the idle one waits on its socket),
    so that their requests can alternate: a machine whose speed drifts over minutes moves both rows alike."""
    servers: dict[bool, LexiServer] = {}
    try:
        for spec in (False, True):
            extra = ("--spec", "ngram", "--spec-max", str(spec_max)) if spec else ("--spec", "off")
            servers[spec] = LexiServer(Path(path), (*extra, *serve_args), ctx=CTX, parallel=parallel)
    except BaseException:
        for server in servers.values():
            server.close()
        raise
    return servers


def run_lexi(path: str, spec_max: int, ids: dict, reps: int, serve_args: tuple = ()) -> tuple[dict, dict, dict]:
    """(workload -> decode rates without, with speculation; workload -> (accepted / proposed, draft tokens taken per
    checking step)); each workload's requests alternate between the two servers after one warm-up each."""
    servers = lexi_servers(path, spec_max, 1, serve_args)
    rates: dict[bool, dict[str, list[float]]] = {False: {}, True: {}}
    acceptance: dict[str, tuple[float, float]] = {}
    try:
        for name, (_, n) in workloads().items():
            before = spec_counters(servers[True])
            for rep in range(reps + 1):
                for spec, server in servers.items():
                    rate, _ = lexi_rate(server, ids[name], n)
                    if rep > 0:
                        rates[spec].setdefault(name, []).append(rate)
            after = spec_counters(servers[True])
            proposed, accepted, rows = (after[m] - before[m] for m in SPEC_METRICS)
            acceptance[name] = (accepted / max(proposed, 1), accepted / max(rows, 1))
    finally:
        for server in servers.values():
            server.close()
    return rates[False], rates[True], acceptance


def streams_rate(server: LexiServer, ids: list[int], n: int, streams: int) -> float:
    """Output tok/s of `streams` copies of one greedy completion run together (every token over the wall time)."""
    import concurrent.futures

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(streams) as pool:
        counts = [c for _, c in pool.map(lambda _: lexi_rate(server, ids, n), range(streams))]
    return sum(counts) / (time.perf_counter() - started)


def run_lexi_streams(
    path: str, spec_max: int, ids: dict, reps: int, streams: int, serve_args: tuple = ()
) -> tuple[dict, dict]:
    """workload -> output tok/s of `streams` concurrent copies (servers with that many slots), without and with
    speculation, alternating as `run_lexi` does."""
    servers = lexi_servers(path, spec_max, streams, serve_args)
    rates: dict[bool, dict[str, list[float]]] = {False: {}, True: {}}
    try:
        for name, (_, n) in workloads().items():
            for rep in range(reps + 1):
                for spec, server in servers.items():
                    rate = streams_rate(server, ids[name], n, streams)
                    if rep > 0:
                        rates[spec].setdefault(name, []).append(rate)
    finally:
        for server in servers.values():
            server.close()
    return rates[False], rates[True]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--spec-max", type=int, default=8)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--streams", type=int, default=4, help="concurrent copies for the batched rows (0: none)")
    parser.add_argument("--no-append", action="store_true")
    parser.add_argument("--serve-args", default="", help="more options for both of our servers ('--activations int8')")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE.parent))
    from lexi.gguf.bundled import resolve_model

    path = str(resolve_model(args.model))
    llama_off = run_llama(path, 0, args.threads, args.reps)
    llama_on = run_llama(path, args.spec_max, args.threads, args.reps)
    ids = llama_off["ids"]
    serve_args = tuple(shlex.split(args.serve_args))
    lexi_off, lexi_on, acceptance = run_lexi(path, args.spec_max, ids, args.reps, serve_args)
    med = statistics.median
    lines = [
        f"### bench/spec.py, {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, commit {commit()}, {machine()}",
        f"Model {args.model}, {args.threads} threads, greedy, decode tok/s after the first token (median of "
        f"{args.reps}), --spec-max / num_pred_tokens {args.spec_max}"
        + (f"; our servers also given `{args.serve_args}`." if args.serve_args else "."),
        "",
        "| workload | prompt tokens | llama.cpp off | llama.cpp lookup | lexi off | lexi --spec ngram | lexi on/off "
        "| lexi on / llama.cpp lookup | lexi accepted / proposed | draft tokens taken per check |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]  # fmt: skip
    for name in workloads():
        lo, ln, xo, xn = (med(r[name]) for r in (llama_off["rates"], llama_on["rates"], lexi_off, lexi_on))
        rate, taken = acceptance[name]
        cells = (
            f"{lo:.1f} | {ln:.1f} | {xo:.1f} | {xn:.1f} | {xn / xo:.2f}x | {xn / ln:.2f}x | {rate:.0%} | {taken:.2f}"
        )
        lines.append(f"| {name} | {len(ids[name])} | {cells} |")
    if args.streams > 0:
        off, on = run_lexi_streams(path, args.spec_max, ids, args.reps, args.streams, serve_args)
        lines += [
            "",
            f"{args.streams} concurrent copies of each workload (`--parallel {args.streams}`), output tok/s over the "
            "wall time, LexiEngine alone (llama-cpp-python serves one stream):",
            "",
            "| workload | lexi off | lexi --spec ngram | on/off |",
            "| --- | ---: | ---: | ---: |",
        ]
        for name in workloads():
            lines.append(
                f"| {name} | {med(off[name]):.1f} | {med(on[name]):.1f} | {med(on[name]) / med(off[name]):.2f}x |"
            )
    table = "\n".join(lines)
    print(table)
    if not args.no_append:
        with RESULTS.open("a") as f:
            f.write("\n" + table + "\n")


if __name__ == "__main__":
    main()
