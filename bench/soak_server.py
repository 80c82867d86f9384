"""The soak's server side: start and stop a real `lexi-engine serve`, read its /metrics, name the machine."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import run_info

LEXI = str(Path(sys.executable).with_name("lexi-engine"))
_LISTENING = re.compile(r"listening on (http://\S+)")
_SETTINGS = ("ONEDNN_", "DNNL_", "OMP_", "MALLOC_")  # environment that changes the server's memory or speed


@dataclass(slots=True)
class StartedServer:
    proc: subprocess.Popen
    url: str
    log: Path
    description: str


def start_server(
    model: str | None, parallel: int, api_key: str | None, load_timeout: float = 300.0, extra: tuple[str, ...] = ()
) -> StartedServer:
    """`lexi-engine serve` on a free port with room for the soak's queue (no 429s: clients wait for a slot);
    `extra`: more serve options (`--spec ngram`, say)."""
    args = [LEXI, "serve", "--port", "0", "--parallel", str(parallel), "--queue-wait", "3600", "--ctx-size", "1024"]
    args += list(extra)
    if model:
        args += ["-m", model]
    if api_key:
        args += ["--api-key", api_key]
    log = Path(tempfile.mkstemp(prefix="lexi-soak-", suffix=".log")[1])
    with log.open("w") as fh:
        proc = subprocess.Popen(args, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    settings = [f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith(_SETTINGS)]
    description = " ".join([*settings, *args[1:]])
    deadline = time.monotonic() + load_timeout
    url = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        if url is None and (found := _LISTENING.search(log.read_text())):
            url = found.group(1)
        if url is not None and _status(url + "/health") == 200:
            return StartedServer(proc, url, log, description)
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"the server was not ready within {load_timeout:g} s:\n{log.read_text()[-3000:]}")


def stop_server(server: StartedServer, timeout: float = 60.0) -> int:
    """SIGTERM (the drain), then the exit status; killed (and -9) if it does not stop in time."""
    server.proc.send_signal(signal.SIGTERM)
    try:
        return server.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()
        return -9
    finally:
        server.log.unlink(missing_ok=True)


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def metrics(url: str, api_key: str | None) -> dict[str, float]:
    """The unlabelled samples of /metrics (gauges such as lexi_kv_blocks_used, process_resident_memory_bytes)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    request = urllib.request.Request(url + "/metrics", headers=headers)
    with urllib.request.urlopen(request, timeout=30) as resp:
        text = resp.read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, _, value = line.partition(" ")
            values[name] = float(value)
    return values


def machine() -> str:
    """commit, CPU and Python, as bench/RESULTS.md records them."""
    return f"commit {run_info.commit()}; {run_info.machine()}"
