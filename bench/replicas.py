"""Scale-out: throughput of `serve --replicas 2` (Ray Serve) against one server, measured in the same run.

Three services get the same load: C clients send non-streamed chat requests back to back (the same
prompt, `max_tokens` tokens each with ignore_eos, so every request costs the same) until R requests are
done, after a warm-up request per slot. One server with --parallel P and all the cores; one server with
--parallel 2P (as many slots as the two replicas together); and two replicas with --parallel P each and
their share of the cores (Ray gives each replica cores / replicas CPUs and torch threads). Reported:
completion tokens per second over the wall time, requests per second, p50 latency, and the replicas'
throughput as a ratio of each single server's. On a machine with one GPU per replica or
more cores than one engine can use, the ratio is what scaling out buys; on a small CPU machine the
replicas split the same cores, and the ratio mostly shows the price of the split and of Ray's proxy.

    .venv/bin/python bench/replicas.py                       # P=2, C=4, R=24, max_tokens 32
    .venv/bin/python bench/replicas.py --parallel 4 --clients 8 --requests 48 --no-append

Prints a table and appends it to bench/RESULTS.md with the date, commit, machine and load average.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

from soak_server import machine

LEXI = str(Path(sys.executable).with_name("lexi-engine"))
RESULTS = Path(__file__).with_name("RESULTS.md")
PROMPT = [{"role": "user", "content": "Write a short story about a lighthouse keeper and the sea."}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, body: dict, timeout: float = 600.0) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        return json.loads(resp.read())


def start(replicas: int, parallel: int, load_timeout: float = 600.0) -> tuple[subprocess.Popen, str, Path]:
    port = free_port()
    args = [LEXI, "serve", "--port", str(port), "--parallel", str(parallel), "--queue-wait", "3600"]
    args += ["--ctx-size", "1024", "--replicas", str(replicas)]
    log = Path(tempfile.mkstemp(prefix="lexi-replicas-", suffix=".log")[1])
    with log.open("w") as fh:
        proc = subprocess.Popen(args, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + load_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as resp:
                if resp.status == 200:
                    return proc, url, log
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    proc.kill()
    raise RuntimeError(f"not ready within {load_timeout:g} s:\n{log.read_text()[-3000:]}")


def stop(proc: subprocess.Popen, log: Path) -> None:
    proc.terminate()
    try:
        proc.wait(120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.unlink(missing_ok=True)


def load(url: str, clients: int, requests: int, max_tokens: int) -> dict:
    body = {"messages": PROMPT, "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0}
    left = iter(range(requests))
    lock = threading.Lock()
    latencies: list[float] = []
    tokens = [0]
    errors: list[str] = []

    def client() -> None:
        while True:
            with lock:
                if next(left, None) is None:
                    return
            began = time.monotonic()
            try:
                reply = post(url + "/v1/chat/completions", body)
            except Exception as exc:
                errors.append(repr(exc))
                continue
            with lock:
                latencies.append(time.monotonic() - began)
                tokens[0] += reply["usage"]["completion_tokens"]

    began = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - began
    return {
        "requests": len(latencies),
        "errors": len(errors),
        "wall_s": wall,
        "tok_s": tokens[0] / wall,
        "req_s": len(latencies) / wall,
        "p50_s": statistics.median(latencies) if latencies else float("nan"),
    }


def measure(replicas: int, parallel: int, args) -> dict:
    proc, url, log = start(replicas, parallel)
    try:
        for _ in range(parallel * replicas):  # warm-up: every slot has run once
            post(url + "/v1/chat/completions", {"messages": PROMPT, "max_tokens": 4})
        return load(url, args.clients, args.requests, args.max_tokens)
    finally:
        stop(proc, log)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parallel", type=int, default=2, help="slots per server or replica")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--no-append", action="store_true", help="do not append to bench/RESULTS.md")
    args = ap.parse_args()
    load_before = os.getloadavg()[0]
    p = args.parallel
    services = {
        f"1 server, --parallel {p}": (1, p),
        f"1 server, --parallel {2 * p}": (1, 2 * p),
        f"2 replicas (Ray Serve), --parallel {p} each": (2, p),
    }
    rows = {name: measure(n, slots, args) for name, (n, slots) in services.items()}
    load_after = os.getloadavg()[0]
    lines = [
        "| service | requests | errors | wall s | completion tok/s | req/s | p50 latency s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, r in rows.items():
        lines.append(
            f"| {name} | {r['requests']} | {r['errors']} | {r['wall_s']:.1f} | {r['tok_s']:.1f} | "
            f"{r['req_s']:.2f} | {r['p50_s']:.2f} |"
        )
    names = list(rows)
    ratios = [rows[names[2]]["tok_s"] / rows[n]["tok_s"] if rows[n]["tok_s"] else float("nan") for n in names[:2]]
    table = "\n".join(lines) + (
        f"\n\n2 replicas / 1 server throughput: {ratios[0]:.2f}x against --parallel {p}, "
        f"{ratios[1]:.2f}x against --parallel {2 * p} (the same slots)"
    )
    print(table)
    if args.no_append:
        return
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    settings = (
        f"{args.clients} clients, {args.requests} requests of "
        f"{args.max_tokens} tokens (ignore_eos), smollm2-135m-instruct, --ctx-size 1024"
    )
    with RESULTS.open("a") as fh:
        fh.write(
            f"\n\n### bench/replicas.py, {stamp}, {machine()}\n\n{settings}; load average {load_before:.1f} before, "
            f"{load_after:.1f} after.\n\n{table}\n"
        )


if __name__ == "__main__":
    main()
