"""Start `lexi-engine serve` as a real subprocess on a free port, and talk to it over raw HTTP."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

LEXI = str(Path(sys.executable).with_name("lexi-engine"))
API_KEY = "sk-test-key"  # the main test server's key
LOAD_TIMEOUT = 300.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def http(method: str, url: str, body=None, headers=None, timeout: float = 120.0):
    """(status, parsed JSON or text, headers) for one request; never raises on an HTTP status."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None and "Content-Type" not in request.headers:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            status, raw, got = resp.status, resp.read(), resp.headers
    except urllib.error.HTTPError as exc:
        status, raw, got = exc.code, exc.read(), exc.headers
    text = raw.decode("utf-8")
    try:
        return status, json.loads(text), got
    except ValueError:
        return status, text, got


class Server:
    """One server process. `start()` waits for /health 200 and records what it saw while loading."""

    def __init__(self, *args: str, api_key: str | None = None) -> None:
        self.port = free_port()
        self.args = [LEXI, "serve", "--port", str(self.port), "--ctx-size", "2048", *args]
        self.api_key = api_key
        self.log = tempfile.NamedTemporaryFile("w+", prefix="lexi-serve-", suffix=".log", delete=False)
        self.proc: subprocess.Popen | None = None
        self.loading_health: tuple[int, object] | None = None  # the first /health answer before ready
        self.loading_chat: tuple[int, object] | None = None  # a chat request sent while loading
        self.stopped = False  # stop() was called: an exit after it is ours, not the server's
        self.reported = False  # whether a failed test's report already carries this server's exit

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def launch(self) -> Server:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        return self

    def wait_ready(self) -> Server:
        deadline = time.monotonic() + LOAD_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.output()}")
            if port_open(self.port):
                status, body, _ = http("GET", self.url + "/health", timeout=5)
                if status == 200:
                    return self
                if self.loading_chat is None:
                    msg = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
                    s, b, _ = http("POST", self.url + "/v1/chat/completions", msg, self.auth(), timeout=5)
                    after, _, _ = http("GET", self.url + "/health", timeout=5)
                    if after != 200:  # still loading after the chat answered: both were seen while loading
                        self.loading_health, self.loading_chat = (status, body), (s, b)
            time.sleep(0.2)
        raise RuntimeError(f"server not ready within {LOAD_TIMEOUT} s:\n{self.output()}")

    def output(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")[-5000:]

    @property
    def died(self) -> bool:
        """The process exited without being stopped (a crash, the OOM killer, a failed bind)."""
        return not self.stopped and self.proc is not None and self.proc.poll() is not None

    def stop(self) -> None:
        self.stopped = True
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        Path(self.log.name).unlink(missing_ok=True)

    def get(self, path: str, headers=None):
        return http("GET", self.url + path, headers=self.auth() if headers is None else headers)

    def post(self, path: str, body, headers=None, timeout: float = 120.0):
        return http("POST", self.url + path, body, self.auth() if headers is None else headers, timeout=timeout)

    def metric(self, name: str) -> float:
        _, text, _ = self.get("/metrics")
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
        return total


def run_refused(*args: str, timeout: float = 120.0, env: dict[str, str] | None = None) -> tuple[int, str, bool]:
    """Run a serve command expected to refuse: (exit code, output, whether its port was ever open)."""
    port = free_port()
    proc = subprocess.Popen(
        [LEXI, "serve", "--port", str(port), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    opened = False
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        opened = opened or port_open(port)
        time.sleep(0.05)
    if proc.poll() is None:
        proc.kill()
    out, _ = proc.communicate()
    return proc.returncode, out, opened
