"""Soak: many concurrent streams for minutes against a real server, some clients hanging up mid-stream.

Each of N clients (default 64) sends streamed requests back to back for M minutes (default 10), mixing
/v1/chat/completions, /v1/completions and /v1/responses, short to long prompts and output lengths;
10% of requests hang up after a few tokens. A warm-up round of the same load (default a tenth of the
run) comes first and runs to idle, so that the allocator's and oneDNN's per-shape caches have filled
before the "start" RSS sample; "end" is sampled at idle after the run, so both are taken in the same
state. It reports requests done, 5xx answers, lost streams (a stream the server accepted that ended
without its finish_reason / response.completed, an error frame included), p50/p99 time to first
token and between tokens, the server's RSS (from /metrics) and `lexi_kv_blocks_used` once the load
stops. Every figure but RSS covers the warm-up too. Targets: 0 5xx, 0 lost, RSS growth (start ->
end) under 5%, 0 KV blocks in use when idle. A server it starts itself is stopped with SIGTERM at the
end (the drain) and must exit 0.

    .venv/bin/python bench/soak.py                       # starts a server: --parallel 16, long --queue-wait
    .venv/bin/python bench/soak.py --url http://127.0.0.1:8080 --api-key KEY --minutes 2
    .venv/bin/python bench/soak.py --seconds 30 --warmup 10 --max-tokens 8,16,32 --json out.json --no-append

Prints a table and appends it to bench/RESULTS.md with the date, commit, machine and load average.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shlex
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from soak_client import Result, stream_request
from soak_server import machine, metrics, start_server, stop_server

RESULTS = Path(__file__).with_name("RESULTS.md")
ROUTES = (  # (name, path, share of requests)
    ("chat", "/v1/chat/completions", 0.4),
    ("completions", "/v1/completions", 0.3),
    ("responses", "/v1/responses", 0.3),
)
STORY = (
    "The lighthouse keeper kept a log of every ship that passed, the weather at each watch, and the small "
    "repairs the lamp needed. One winter the supply boat did not come, and the keeper began to write down "
    "everything else as well: the birds, the colour of the sea, the sounds the tower made at night. "
)
PROMPTS = (  # short, medium and long (about 10, 60 and 250 tokens); a nonce keeps each tail distinct
    "Say hello.",
    "Write two sentences about the sea. " + STORY,
    "Summarise this log in one paragraph. " + STORY * 4,
)


@dataclass(frozen=True, slots=True)
class SoakConfig:
    streams: int = 64  # concurrent clients
    seconds: float = 600.0  # how long clients keep starting requests
    disconnect: float = 0.1  # share of requests that hang up mid-stream
    max_tokens: tuple[int, ...] = (16, 32, 64, 128)
    warmup: float | None = None  # seconds of warm-up load before the run; None = a tenth of the run
    request_timeout: float = 900.0  # one request, queueing included
    seed: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.streams <= 4096:
            raise ValueError(f"--streams must be in [1, 4096], got {self.streams}")
        if not 1 <= self.seconds <= 86400:
            raise ValueError(f"the run must last 1 s to 24 h, got {self.seconds} s")
        if not 0 <= self.disconnect <= 1:
            raise ValueError(f"--disconnect must be in [0, 1], got {self.disconnect}")
        if self.warmup is not None and not 0 <= self.warmup <= 86400:
            raise ValueError(f"--warmup must be in [0, 86400] seconds, got {self.warmup}")
        if not self.max_tokens or any(not 1 <= n <= 4096 for n in self.max_tokens):
            raise ValueError(f"--max-tokens must be 1-4096 each, got {self.max_tokens}")


def request_body(route: str, prompt: str, max_tokens: int, seed: int) -> dict:
    common = {"stream": True, "seed": seed}
    if route == "chat":
        return {**common, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens}
    if route == "completions":
        return {**common, "prompt": prompt, "max_tokens": max_tokens}
    return {**common, "input": prompt, "max_output_tokens": max_tokens}


async def client(cfg: SoakConfig, url: str, key: str | None, rng: random.Random, deadline: float, out: list) -> None:
    """One client: requests back to back until the deadline."""
    names, paths, weights = zip(*ROUTES, strict=True)
    while time.monotonic() < deadline:
        index = rng.choices(range(len(ROUTES)), weights)[0]
        prompt = f"{rng.choice(PROMPTS)} (#{rng.randrange(1 << 30)})"
        body = request_body(names[index], prompt, rng.choice(cfg.max_tokens), rng.randrange(1 << 31))
        hang_up = rng.randint(1, 4) if rng.random() < cfg.disconnect else None
        out.append(await stream_request(url, names[index], paths[index], body, key, hang_up, cfg.request_timeout))


async def load(cfg: SoakConfig, url: str, key: str | None, seconds: float, round_: int, out: list) -> None:
    """`cfg.streams` clients for `seconds`; returns once every request they started has ended."""
    deadline = time.monotonic() + seconds
    rngs = [random.Random((cfg.seed * 2 + round_) * 100003 + i) for i in range(cfg.streams)]
    await asyncio.gather(*(client(cfg, url, key, rng, deadline, out) for rng in rngs))


def percentile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


async def idle_blocks(url: str, key: str | None, wait_s: float = 30.0) -> float:
    """lexi_kv_blocks_used once it reaches 0 (aborts land at the engine's next step), or its last value."""
    deadline = time.monotonic() + wait_s
    while True:
        used = (await asyncio.to_thread(metrics, url, key)).get("lexi_kv_blocks_used", -1.0)
        if used == 0 or time.monotonic() > deadline:
            return used
        await asyncio.sleep(0.2)


async def soak(cfg: SoakConfig, url: str, key: str | None) -> dict:
    rss = lambda m: m.get("process_resident_memory_bytes", 0.0) / 2**20  # noqa: E731
    loaded = await asyncio.to_thread(metrics, url, key)
    results: list[Result] = []
    await load(cfg, url, key, cfg.seconds / 10 if cfg.warmup is None else cfg.warmup, 0, results)
    await idle_blocks(url, key)
    warm = await asyncio.to_thread(metrics, url, key)
    started = time.monotonic()
    run = asyncio.create_task(load(cfg, url, key, cfg.seconds, 1, results))
    timeline = []  # RSS every tenth of the run: growth that levels off is warm-up, a steady climb a leak
    for tenth in range(1, 11):
        await asyncio.sleep(max(0.0, started + tenth * cfg.seconds / 10 - time.monotonic()))
        timeline.append(round(rss(await asyncio.to_thread(metrics, url, key)), 1))
    await run
    elapsed = time.monotonic() - started
    blocks = await idle_blocks(url, key)
    end = await asyncio.to_thread(metrics, url, key)
    ttft = [r.ttft for r in results if r.ttft is not None]
    gaps = [g for r in results for g in r.gaps()]
    rss_start, rss_end = rss(warm), rss(end)
    lost = [r for r in results if r.lost]
    return {
        "config": {**asdict(cfg), "max_tokens": list(cfg.max_tokens)},
        "elapsed_s": round(elapsed, 1),
        "warmup_s": cfg.seconds / 10 if cfg.warmup is None else cfg.warmup,
        "requests_done": sum(1 for r in results if r.finished),
        "requests_sent": len(results),
        "by_route": {name: sum(1 for r in results if r.route == name) for name, _, _ in ROUTES},
        "disconnected": sum(1 for r in results if r.disconnected),
        "status_5xx": sum(1 for r in results if r.status >= 500),
        "status_4xx": sum(1 for r in results if 400 <= r.status < 500),
        "failed_connections": sum(1 for r in results if r.status == 0),
        "lost_streams": len(lost),
        "lost_examples": [r.error for r in lost[:5]],
        "tokens_streamed": sum(len(r.token_times) for r in results),
        "ttft_p50_s": percentile(ttft, 50),
        "ttft_p99_s": percentile(ttft, 99),
        "itl_p50_s": percentile(gaps, 50),
        "itl_p99_s": percentile(gaps, 99),
        "rss_loaded_mib": round(rss(loaded), 1),
        "rss_start_mib": round(rss_start, 1),
        "rss_end_mib": round(rss_end, 1),
        "rss_timeline_mib": timeline,
        "rss_growth_pct": round(100 * (rss_end - rss_start) / rss_start, 2) if rss_start else None,
        "kv_blocks_used_end": blocks,
        "kv_blocks_total": end.get("lexi_kv_blocks_total"),
        # speculation's draft tokens checked and taken during the run (0 without --spec)
        "spec_proposed": end.get("lexi_spec_proposed_tokens", 0.0) - warm.get("lexi_spec_proposed_tokens", 0.0),
        "spec_accepted": end.get("lexi_spec_accepted_tokens", 0.0) - warm.get("lexi_spec_accepted_tokens", 0.0),
    }


def targets_met(report: dict) -> dict[str, bool]:
    growth = report["rss_growth_pct"]
    return {
        "no 5xx": report["status_5xx"] == 0,
        "no lost stream": report["lost_streams"] == 0 and report["failed_connections"] == 0,
        "RSS growth < 5%": growth is not None and growth < 5.0,
        "0 KV blocks in use when idle": report["kv_blocks_used_end"] == 0,
        "server exit 0 after SIGTERM": report.get("server_exit", 0) == 0,
    }


def table(report: dict) -> str:
    ms = lambda s: "-" if s is None else f"{1000 * s:.0f} ms"  # noqa: E731
    rows = [
        ("requests done / sent", f"{report['requests_done']} / {report['requests_sent']} {report['by_route']}"),
        ("hung up on purpose", report["disconnected"]),
        ("5xx / 4xx / failed connections", f"{report['status_5xx']} / {report['status_4xx']} / "
         f"{report['failed_connections']}"),
        ("lost streams", report["lost_streams"]),
        ("tokens streamed", report["tokens_streamed"]),
        ("TTFT p50 / p99", f"{ms(report['ttft_p50_s'])} / {ms(report['ttft_p99_s'])}"),
        ("inter-token p50 / p99", f"{ms(report['itl_p50_s'])} / {ms(report['itl_p99_s'])}"),
        ("RSS loaded / after warm-up / end", f"{report['rss_loaded_mib']} / {report['rss_start_mib']} / "
         f"{report['rss_end_mib']} MiB ({report['rss_growth_pct']}%)"),
        ("RSS every tenth of the run", " ".join(f"{v:g}" for v in report["rss_timeline_mib"]) + " MiB"),
        ("KV blocks in use when idle", f"{report['kv_blocks_used_end']:g} of {report['kv_blocks_total']:g}"),
    ]  # fmt: skip
    if "server_exit" in report:
        rows.append(("server exit after SIGTERM", report["server_exit"]))
    lines = ["| measure | value |", "| --- | --- |", *(f"| {k} | {v} |" for k, v in rows)]
    met = targets_met(report)
    lines.append("\nTargets: " + ", ".join(f"{name} {'met' if ok else 'MISSED'}" for name, ok in met.items()))
    return "\n".join(lines)


def append_results(report: dict, text: str, load_before, load_after) -> None:
    cfg = report["config"]
    head = (
        f"\n\n### bench/soak.py, {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, {machine()}\n\n"
        f"{cfg['streams']} streams for {cfg['seconds']:g} s ({report['elapsed_s']} s with the tail) after a "
        f"{report['warmup_s']:g} s warm-up, "
        f"{cfg['disconnect']:.0%} hanging up, max_tokens {cfg['max_tokens']}; server: {report.get('server', 'given')}. "
        f"Load average (1 min) {load_before[0]:.2f} before, {load_after[0]:.2f} after.\n\n"
    )
    with RESULTS.open("a") as fh:
        fh.write(head + text + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="a running server (default: start one)")
    ap.add_argument("--api-key", default=os.environ.get("LEXI_API_KEY"))
    ap.add_argument("--model", default=None, help="the model of a server this script starts")
    ap.add_argument("--parallel", type=int, default=16, help="slots of a server this script starts")
    ap.add_argument("--serve-args", default="", help="more options for a server this script starts ('--spec ngram')")
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--seconds", type=float, default=None, help="overrides --minutes")
    ap.add_argument("--disconnect", type=float, default=0.1)
    ap.add_argument("--warmup", type=float, default=None, help="seconds of warm-up load (default: a tenth of the run)")
    ap.add_argument("--max-tokens", default="16,32,64,128", help="comma list; each request picks one")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write the report to this file")
    ap.add_argument("--no-append", action="store_true", help="do not append to bench/RESULTS.md")
    args = ap.parse_args()
    try:
        cfg = SoakConfig(
            streams=args.streams,
            seconds=args.seconds if args.seconds is not None else 60 * args.minutes,
            disconnect=args.disconnect,
            warmup=args.warmup,
            max_tokens=tuple(int(n) for n in args.max_tokens.split(",")),
            seed=args.seed,
        )
    except ValueError as exc:
        ap.error(str(exc))
    load_before = os.getloadavg()
    extra = tuple(shlex.split(args.serve_args))
    server = None if args.url else start_server(args.model, args.parallel, args.api_key, extra=extra)
    try:
        url = args.url or server.url
        report = asyncio.run(soak(cfg, url, args.api_key))
        if server is not None:
            report["server"] = server.description
    finally:
        if server is not None:
            code = stop_server(server)
    if server is not None:
        report["server_exit"] = code
    load_after = os.getloadavg()
    report["load_before"], report["load_after"] = load_before[0], load_after[0]
    text = table(report)
    print(text)
    if report["lost_examples"]:
        print("lost:", *report["lost_examples"], sep="\n  ")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    if not args.no_append:
        append_results(report, text, load_before, load_after)
    return 0 if all(targets_met(report).values()) else 1


if __name__ == "__main__":
    sys.exit(main())
