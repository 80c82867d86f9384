"""End-to-end throughput, fair: llama.cpp and LexiEngine on the same GGUF file, each engine in its own process.

Every engine gets its own process and its own environment, as its users run it:
  - llama.cpp: llama-cpp-python in a worker process with the environment this script was started with (this
    script sets nothing), 2 threads; the build `make venv` installs (this CPU's x86 features but AMX).
  - LexiEngine serve: `lexi-engine serve` as a subprocess, driven over HTTP (token-id prompts to
    /v1/completions, streamed with SSE for the decode rows), so HTTP and the event-loop handoff are in the figure.
  - LexiEngine in-process: the engine API in its own worker process (bench/e2e_workers.py), no HTTP.
Rows (llama-bench's conventions; median of --reps after a warm-up; repetitions of the engines interleaved so a
busy neighbour slows them alike): ppN (an N-token prompt to its first token, --pp), tgN (N tokens one at a
time after a 1-token prompt, --tg), decode xS (S concurrent streams, 16-token prompts, N tokens each, aggregate
tok/s, --streams), ttft128 (a 128-token prompt to its first token, ms); then, once per engine, ready (seconds
from starting the process to a loaded model: /health 200 for serve) and peak RSS (GB, the process's VmHWM after
every row: mapped file pages it touched count). Prompts are random ordinary tokens, new every time (no
prefix-cache hits). The ratio is LexiEngine's over llama.cpp's, oriented so that > 1 means LexiEngine is better.

    .venv/bin/python bench/e2e.py [--models smollm2-135m-instruct gemma3-270m] [--reps 5] [--no-append]
    .venv/bin/python bench/e2e.py --models /tmp/llama3-8b.gguf --pp 256 512 --tg 32 --streams 1 4 \
        --engines llama serve --reps 1   # a synthetic 8B (bench/synth_gguf.py)

`--alone` starts one engine at a time (all its rows, then the next engine), for a model over half the RAM: two
resident copies evict each other's pages and the ratio then measures the disk (gpt-oss-20b on 23 GB: llama.cpp's
tg32 7.3 and 7.9 tok/s alone, 5.7 beside ours).

Prints the table and appends it, with the date, commit, machine and load averages, to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import shlex
import statistics
import sys
import time
from pathlib import Path

from e2e_engines import CTX, LexiServer, LlamaCpp, Worker
from e2e_workers import CTX_ENV, STREAMS_ENV
from run_info import commit, machine

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"
PP, TG, TTFT_PROMPT, STREAM_PROMPT = (512,), 128, 128, 16
STREAMS = (1, 4, 8, 16)
ENGINES = ("llama", "serve", "inproc")
# Pause before each measurement: the engine measured last may have OpenMP threads still spinning (libgomp spins
# up to ~20 ms before it sleeps), and they would take the cores from the next one.
SETTLE = 0.3


def rows_to_run(only: list[str] | None = None, pp=PP, tg: int = TG, streams=STREAMS) -> list[tuple[str, str, int, int]]:
    """(label, op, prompt length, streams), all of them or those whose label starts with one of `only`."""
    rows = [(f"pp{n}", "pp", n, 1) for n in pp] + [(f"tg{tg}", "tg", 1, 1)]
    rows += [(f"decode x{n}", "decode", STREAM_PROMPT, n) for n in streams]
    rows += [("ttft128 (ms)", "pp", TTFT_PROMPT, 1)]
    return [r for r in rows if only is None or any(r[0].startswith(o) for o in only)]


def speed(label: str, op: str, length: int, n: int, seconds: float, tg: int) -> float:
    """tok/s for throughput rows; milliseconds for the ttft row."""
    if label.startswith("ttft"):
        return seconds * 1000
    if op == "pp":
        return length / seconds
    return n * tg / seconds


def measure(name: str, path: Path, reps: int, threads: int, deterministic: bool, args) -> list[dict]:
    rng = random.Random(0)
    # Speculation off unless --serve-args says otherwise: llama.cpp decodes a token a step here too (bench/spec.py
    # compares the two engines' speculation).
    flag = ("--deterministic",) if deterministic else ()
    serve_flags = ("--spec", "off", *flag, *shlex.split(args.serve_args))
    rows = rows_to_run(args.tests, args.pp, args.tg, args.streams)
    # Context for the longest row (each engine gets the same), at least what the default rows need.
    ctx = max([CTX] + [length + args.tg + 16 for _, _, length, _ in rows])
    os.environ[CTX_ENV] = str(ctx)  # read by the workers; the driver itself loads nothing
    os.environ[STREAMS_ENV] = str(max(args.streams))
    builders = {
        "llama": lambda: LlamaCpp(path, threads),
        "serve": lambda: LexiServer(path, serve_flags, ctx, max(args.streams)),
        "inproc": lambda: Worker(["lexi", str(path), *flag]),
    }
    # llama.cpp first: its worker reads the vocabulary that bounds every engine's prompt ids (serve's does not)
    order = sorted(args.engines, key=lambda key: key != "llama")
    groups = [[key] for key in order] if args.alone else [order]
    bound = 1 << 30
    results: dict[str, dict] = {label: {"model": name, "test": label} for label, _, _, _ in rows}
    extra = {test: {"model": name, "test": test} for test in ("ready (s)", "peak RSS (GB)")}
    for group in groups:
        engines = {key: builders[key]() for key in group}
        try:
            bound = min([bound] + [e.vocab() for e in engines.values()])
            run_rows(engines, rows, reps, rng, args.tg, results, bound)
            for key, e in engines.items():
                extra["ready (s)"][key], extra["peak RSS (GB)"][key] = e.ready_s, e.peak_rss() / 1e9
        finally:
            for engine in engines.values():
                engine.close()
    for label, _, _, _ in rows:
        print(f"  {name} {label}: " + ", ".join(f"{k} {results[label][k]:.1f}" for k in args.engines), flush=True)
    return [*results.values(), *extra.values()]


def run_rows(engines: dict, rows: list, reps: int, rng: random.Random, tg: int, results: dict, vocab: int) -> None:
    """Every row on these engines, repetitions interleaved among them, prompt ids below vocab / 2; the medians into
    `results[label][key]`."""
    for label, op, length, n in rows:
        times: dict[str, list[float]] = {k: [] for k in engines}
        for rep in range(reps + 1):  # rep 0 is the warm-up
            for key, engine in engines.items():
                prompts = [[rng.randrange(1000, vocab // 2) for _ in range(length)] for _ in range(n)]
                time.sleep(SETTLE)
                seconds = engine.run(op, prompts, tg)
                if rep:
                    times[key].append(seconds)
        for key, values in times.items():
            results[label][key] = speed(label, op, length, n, statistics.median(values), tg)


def ratio(row: dict, key: str) -> float:
    if row["test"].startswith(("ttft", "ready", "peak")):
        return row["llama"] / row[key]  # time or memory: less is better
    return row[key] / row["llama"]


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def render(table: list[dict], loads: dict[str, tuple[str, str]], engines) -> str:
    ours = [e for e in ("serve", "inproc") if e in engines]
    titles = {"serve": "LexiEngine serve", "inproc": "LexiEngine in-process"}
    head = ["model", "test", "llama.cpp"] + [x for e in ours for x in (titles[e], "ratio")]
    lines = ["| " + " | ".join(head) + " |", "| --- | --- |" + " ---: |" * (len(head) - 2)]
    for r in table:
        cells = [r["model"], r["test"], f"{r['llama']:.2f}"]
        for e in ours:
            cells += [f"{r[e]:.2f}", f"{ratio(r, e):.2f}x"]
        lines.append("| " + " | ".join(cells) + " |")
    load_text = "; ".join(f"{m}: {a} before, {b} after" for m, (a, b) in loads.items())
    return "\n".join(lines) + f"\n\nLoad average (1/5/15 min): {load_text}.\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["smollm2-135m-instruct", "gemma3-270m"])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp threads (LexiEngine: torch's default)")
    parser.add_argument("--no-append", action="store_true", help="print only; leave bench/RESULTS.md alone")
    parser.add_argument("--note", default="", help="a sentence appended to the header")
    parser.add_argument("--deterministic", action="store_true", help="run LexiEngine with --deterministic")
    parser.add_argument("--serve-args", default="", help="more options for `lexi-engine serve` (one string)")
    parser.add_argument("--tests", nargs="+", default=None, help="only these rows (label prefixes: pp512 tg128 ...)")
    parser.add_argument("--pp", nargs="+", type=int, default=list(PP), help="prompt lengths of the pp rows")
    parser.add_argument("--tg", type=int, default=TG, help="tokens of the tg and decode rows")
    parser.add_argument("--streams", nargs="+", type=int, default=list(STREAMS), help="streams of the decode rows")
    parser.add_argument(
        "--alone",
        action="store_true",
        help="one engine alive at a time (a model over half the RAM: two would evict each other's pages)",
    )
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES), help="llama must be one")
    args = parser.parse_args()
    if "llama" not in args.engines:
        parser.error("--engines must include llama: every ratio is against it")
    sys.path.insert(0, str(HERE.parent))
    from lexi.gguf.bundled import resolve_model  # no torch: the orchestrator stays light

    started = dt.datetime.now(dt.UTC)
    table, loads = [], {}
    for name in args.models:
        before = load()
        path = Path(name) if Path(name).exists() else resolve_model(name)
        table += measure(path.name if Path(name).exists() else name, path, args.reps, args.threads,
                         args.deterministic, args)  # fmt: skip
        loads[name] = (before, load())
    header = (
        f"### bench/e2e.py, {started:%Y-%m-%d %H:%M} UTC, commit {commit()}\n\n"
        f"Machine: {machine()}. llama.cpp: llama-cpp-python in its own process, {args.threads} threads, its default "
        "environment. LexiEngine: `lexi-engine serve` over HTTP, and the engine API in its own process; dtype "
        f"auto, --spec off{', --deterministic' if args.deterministic else ''}"
        f"{', ' + args.serve_args if args.serve_args else ''}, torch's default threads. tok/s (ttft: ms), "
        f"median of {args.reps} after a warm-up"
        f"{'; one engine alive at a time (--alone)' if args.alone else ''}. {args.note}\n"
    )
    text = header + "\n" + render(table, loads, args.engines)
    print("\n" + text)
    if not args.no_append:
        with RESULTS.open("a") as f:
            f.write("\n\n" + text)


if __name__ == "__main__":
    main()
