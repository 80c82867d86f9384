"""End-to-end throughput, fair: llama.cpp and LexiEngine on the same GGUF file, each engine in its own process.

Every engine gets its own process and its own environment, as its users run it:
  - llama.cpp: llama-cpp-python in a worker process with the environment this script was started with (this
    script sets nothing), 2 threads; the build `make venv` installs (this CPU's x86 features but AMX).
  - LexiEngine serve: `lexi-engine serve` as a subprocess, driven over HTTP (token-id prompts to
    /v1/completions, streamed with SSE for the decode rows), so HTTP and the event-loop handoff are in the figure.
  - LexiEngine in-process: the engine API in its own worker process (bench/e2e_workers.py), no HTTP.
Rows (llama-bench's conventions; median of --reps after a warm-up; repetitions of the engines interleaved so a
busy neighbour slows them alike): pp512 (a 512-token prompt to its first token), tg128 (128 tokens one at a
time after a 1-token prompt), decode xN (N concurrent streams, 16-token prompts, 128 tokens each, aggregate
tok/s), ttft128 (a 128-token prompt to its first token, ms). Prompts are random ordinary tokens, new every time
(no prefix-cache hits). The ratio is LexiEngine's speed over llama.cpp's (> 1: LexiEngine faster).

    .venv/bin/python bench/e2e.py [--models smollm2-135m-instruct gemma3-270m] [--reps 5] [--no-append]

Prints the table and appends it, with the date, commit, machine and load averages, to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import statistics
import sys
import time
from pathlib import Path

from e2e_engines import LexiServer, LlamaCpp, Worker
from run_info import commit, machine

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"
PP, TG, TTFT_PROMPT, STREAM_PROMPT = 512, 128, 128, 16
STREAMS = (1, 4, 8, 16)
# Pause before each measurement: the engine measured last may have OpenMP threads still spinning (libgomp spins
# up to ~20 ms before it sleeps), and they would take the cores from the next one.
SETTLE = 0.3


def rows_to_run(only: list[str] | None = None) -> list[tuple[str, str, int, int]]:
    """(label, op, prompt length, streams), all of them or those whose label starts with one of `only`."""
    rows = [("pp512", "pp", PP, 1), ("tg128", "tg", 1, 1)]
    rows += [(f"decode x{n}", "decode", STREAM_PROMPT, n) for n in STREAMS]
    rows += [("ttft128 (ms)", "pp", TTFT_PROMPT, 1)]
    return [r for r in rows if only is None or any(r[0].startswith(o) for o in only)]


def speed(label: str, op: str, length: int, n: int, seconds: float) -> float:
    """tok/s for throughput rows; milliseconds for the ttft row."""
    if label.startswith("ttft"):
        return seconds * 1000
    if op == "pp":
        return length / seconds
    return n * TG / seconds


def measure(
    name: str, path: Path, reps: int, threads: int, deterministic: bool, only: list[str] | None = None
) -> list[dict]:
    rng = random.Random(0)
    flag = ("--deterministic",) if deterministic else ()
    engines = {
        "llama": LlamaCpp(path, threads),
        "serve": LexiServer(path, flag),
        "inproc": Worker(["lexi", str(path), *flag]),
    }
    vocab = min(e.vocab() for e in engines.values())
    table = []
    try:
        for label, op, length, n in rows_to_run(only):
            times: dict[str, list[float]] = {k: [] for k in engines}
            for rep in range(reps + 1):  # rep 0 is the warm-up
                for key, engine in engines.items():
                    prompts = [[rng.randrange(1000, vocab // 2) for _ in range(length)] for _ in range(n)]
                    time.sleep(SETTLE)
                    seconds = engine.run(op, prompts, TG)
                    if rep:
                        times[key].append(seconds)
            row = {"model": name, "test": label}
            for key, values in times.items():
                row[key] = speed(label, op, length, n, statistics.median(values))
            table.append(row)
            print(f"  {name} {label}: " + ", ".join(f"{k} {row[k]:.1f}" for k in engines), flush=True)
    finally:
        for engine in engines.values():
            engine.close()
    return table


def ratio(row: dict, key: str) -> float:
    if row["test"].startswith("ttft"):
        return row["llama"] / row[key]  # time: a shorter one is faster
    return row[key] / row["llama"]


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def render(table: list[dict], loads: dict[str, tuple[str, str]]) -> str:
    lines = [
        "| model | test | llama.cpp | LexiEngine serve | ratio | LexiEngine in-process | ratio |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in table:
        cells = [r["model"], r["test"], f"{r['llama']:.1f}", f"{r['serve']:.1f}", f"{ratio(r, 'serve'):.2f}x"]
        cells += [f"{r['inproc']:.1f}", f"{ratio(r, 'inproc'):.2f}x"]
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
    parser.add_argument("--tests", nargs="+", default=None, help="only these rows (label prefixes: pp512 tg128 ...)")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE.parent))
    from lexi.gguf.bundled import resolve_model  # no torch: the orchestrator stays light

    started = dt.datetime.now(dt.UTC)
    table, loads = [], {}
    for name in args.models:
        before = load()
        table += measure(name, resolve_model(name), args.reps, args.threads, args.deterministic, args.tests)
        loads[name] = (before, load())
    header = (
        f"### bench/e2e.py, {started:%Y-%m-%d %H:%M} UTC, commit {commit()}\n\n"
        f"Machine: {machine()}. llama.cpp: llama-cpp-python in its own process, {args.threads} threads, its default "
        "environment. LexiEngine: `lexi-engine serve` over HTTP, and the engine API in its own process; dtype "
        f"auto{', --deterministic' if args.deterministic else ''}, torch's default threads. tok/s (ttft: ms), "
        f"median of {args.reps} after a warm-up. {args.note}\n"
    )
    text = header + "\n" + render(table, loads)
    print("\n" + text)
    if not args.no_append:
        with RESULTS.open("a") as f:
            f.write("\n\n" + text)


if __name__ == "__main__":
    main()
