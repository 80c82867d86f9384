"""`lexi-engine serve` under load: throughput and time to first token at several numbers of concurrent streams.

Used by bench/device_check.py. The server runs as its own process (`python -c "from lexi.cli import main"`, so
no installed entry point is needed); clients are threads speaking plain HTTP to /v1/completions with
`stream: true`, `ignore_eos: true` (every request generates exactly max_tokens) and usage in the last chunk.

Per concurrency level c: a warm-up round of c short requests (so Triton compiles the kernel variants this batch
shape needs before anything is timed), then c requests started together. Reported: TTFT (request sent -> first
chunk with a choice) p50 and max, aggregate output tokens/s (all completion tokens / wall time of the round),
and the decode rate one stream sees (tokens after the first / time after the first).
"""

from __future__ import annotations

import http.client
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

WORDS = ("time person year way day thing man world life hand part child eye woman place work week case point "
         "government company number group problem fact water room mother area money story").split()  # fmt: skip


@dataclass(frozen=True, slots=True)
class StreamResult:
    ttft_s: float
    total_s: float
    tokens: int
    error: str = ""


def gpu_memory(pid: int) -> int | None:
    """Bytes of GPU memory process `pid` holds (nvidia-smi), or None where nvidia-smi cannot say."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20,
        ).stdout  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 2 and fields[0] == str(pid) and fields[1].isdigit():
            return int(fields[1]) * 1024 * 1024
    return None


def memory_line(log: Path) -> str | None:
    """The server's own account of its memory (lexi/model/memory.py), from its log."""
    for line in log.read_text(errors="replace").splitlines():
        if "memory: weights" in line:
            return line[line.index("memory: weights") :]
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model: Path, port: int, log: Path, serve_args: list[str], timeout_s: float) -> subprocess.Popen:
    """Start the server and wait for /health 200; raises with the log's tail if it exits or times out."""
    cmd = [sys.executable, "-c", "from lexi.cli import main; main()", "serve", "-m", str(model), "--port", str(port)]
    fh = log.open("w")
    proc = subprocess.Popen([*cmd, *serve_args], stdout=fh, stderr=subprocess.STDOUT, env=os.environ.copy())
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return proc
        except OSError:
            pass
        time.sleep(0.5)
    proc.terminate()
    raise RuntimeError(f"the server was not ready within {timeout_s:.0f} s:\n{log.read_text()[-3000:]}")


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def prompt_text(words: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(words))


def one_stream(port: int, prompt: str, max_tokens: int, timeout_s: float) -> StreamResult:
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True, "ignore_eos": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    started = time.monotonic()
    ttft, tokens = None, 0
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
        conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            return StreamResult(0.0, 0.0, 0, f"HTTP {resp.status}: {resp.read()[:300]!r}")
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            if ttft is None and chunk.get("choices"):
                ttft = time.monotonic() - started
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    except (OSError, ValueError) as exc:
        return StreamResult(0.0, 0.0, 0, f"{type(exc).__name__}: {exc}")
    total = time.monotonic() - started
    return StreamResult(ttft if ttft is not None else total, total, tokens)


def run_round(port: int, streams: int, prompt_words: int, max_tokens: int, timeout_s: float) -> list[StreamResult]:
    results: list[StreamResult | None] = [None] * streams

    def worker(i: int) -> None:
        results[i] = one_stream(port, prompt_text(prompt_words, seed=i), max_tokens, timeout_s)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [r for r in results if r is not None]


def measure(port: int, streams: int, prompt_words: int, max_tokens: int, timeout_s: float) -> dict:
    run_round(port, streams, prompt_words, min(4, max_tokens), timeout_s)  # warm-up: kernel variants compile
    started = time.monotonic()
    results = run_round(port, streams, prompt_words, max_tokens, timeout_s)
    wall = time.monotonic() - started
    errors = [r.error for r in results if r.error]
    ok = [r for r in results if not r.error]
    ttfts = sorted(r.ttft_s for r in ok) or [float("nan")]
    decode = [(r.tokens - 1) / (r.total_s - r.ttft_s) for r in ok if r.tokens > 1 and r.total_s > r.ttft_s]
    return {
        "streams": streams,
        "ok": len(ok),
        "errors": errors[:3],
        "prompt_words": prompt_words,
        "max_tokens": max_tokens,
        "tokens": sum(r.tokens for r in ok),
        "wall_s": wall,
        "tok_per_s": sum(r.tokens for r in ok) / wall,
        "ttft_p50_s": ttfts[len(ttfts) // 2],
        "ttft_max_s": ttfts[-1],
        "stream_tok_per_s": sorted(decode)[len(decode) // 2] if decode else float("nan"),
    }


def format_rows(rows: list[dict]) -> str:
    head = "| streams | ok | output tok/s | TTFT p50 s | TTFT max s | one stream's tok/s | tokens | wall s |"
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['streams']} | {r['ok']} | {r['tok_per_s']:.1f} | {r['ttft_p50_s']:.3f} | {r['ttft_max_s']:.3f} "
            f"| {r['stream_tok_per_s']:.1f} | {r['tokens']} | {r['wall_s']:.1f} |"
        )
    return "\n".join(lines)
