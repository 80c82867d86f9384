"""The three engines bench/e2e.py drives, each in a process of its own: `run(op, prompts, n) -> seconds`.

This module imports neither torch nor llama_cpp, so the driving process leaves every engine its own environment.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CTX, MAX_STREAMS = 512 + 128 + 16, 16


class WorkerDied(RuntimeError):
    pass


class Worker:
    """bench/e2e_workers.py in a subprocess, one JSON command a line."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        started = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "e2e_workers.py"), *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self._read()  # {"ready": true} once the model is loaded
        self.ready_s = time.perf_counter() - started
        self._info = self.call({"op": "info"})

    def peak_rss(self) -> int:
        return self.call({"op": "memory"})["peak_rss"]

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            raise WorkerDied(f"worker exited with status {code}")
        return json.loads(line)

    def call(self, cmd: dict) -> dict:
        try:
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise WorkerDied(f"worker exited with status {self.proc.wait()}") from None
        return self._read()

    def vocab(self) -> int:
        return self._info["vocab"]

    def run(self, op: str, prompts: list[list[int]], n: int) -> float:
        if op == "pp":
            return self.call({"op": "pp", "prompt": prompts[0]})["s"]
        if op == "tg":
            return self.call({"op": "tg", "prompt": prompts[0], "n": n})["s"]
        return self.call({"op": "decode", "prompts": prompts, "n": n})["s"]

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.call({"op": "quit"})
            except (WorkerDied, ValueError):
                pass
            self.proc.wait(timeout=30)


class LlamaCpp:
    """llama.cpp (the build `make venv` installs) in its own worker; a row it crashes on reads nan."""

    def __init__(self, path: Path, threads: int) -> None:
        self.argv = ["llama", str(path), "--threads", str(threads)]
        self.worker: Worker | None = None

    def _worker(self) -> Worker:
        if self.worker is None:
            self.worker = Worker(self.argv, dict(os.environ))
        return self.worker

    def vocab(self) -> int:
        return self._worker().vocab()

    @property
    def ready_s(self) -> float:
        return self._worker().ready_s

    def peak_rss(self) -> int:
        return self._worker().peak_rss()

    def run(self, op: str, prompts: list[list[int]], n: int) -> float:
        try:
            return self._worker().run(op, prompts, n)
        except WorkerDied as exc:
            print(f"    llama.cpp died on {op}: {exc}", flush=True)
            self.worker = None
            return float("nan")

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()


class LexiServer:
    """`lexi-engine serve` in a subprocess with its own environment, driven over HTTP."""

    def __init__(self, path: Path, extra: tuple[str, ...] = (), ctx: int = CTX, parallel: int = MAX_STREAMS) -> None:
        started = time.perf_counter()
        exe = Path(sys.executable).with_name("lexi-engine")
        argv = [str(exe), "serve", "-m", str(path), "--port", "0", "--parallel", str(parallel)]
        argv += ["--ctx-size", str(ctx), "--batch-size", "512", *extra]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for line in self.proc.stdout:
            if "listening on http://" in line:
                self.port = int(line.split("http://", 1)[1].split()[0].rsplit(":", 1)[1])
                break
        else:
            raise RuntimeError("lexi-engine serve exited before listening")
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()  # keep its pipe drained
        deadline = time.monotonic() + 300
        while self._get("/health") != 200:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("lexi-engine serve did not become ready")
            time.sleep(0.05)
        self.ready_s = time.perf_counter() - started  # to /health 200, as a client sees it

    def peak_rss(self) -> int:
        """The server process's peak resident set (VmHWM), bytes."""
        for line in open(f"/proc/{self.proc.pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        return 0

    def _get(self, route: str) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        try:
            conn.request("GET", route)
            return conn.getresponse().status
        except OSError:
            return 0
        finally:
            conn.close()

    def _post(self, fields: dict, stream: bool = False) -> tuple[int, dict]:
        """POST /v1/completions greedily; returns (status, usage). A stream is read frame by frame to its end."""
        body = {"temperature": 0, "ignore_eos": True, "stream": stream, **fields}
        if stream:
            body["stream_options"] = {"include_usage": True}
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        try:
            conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            if not stream:
                data = json.loads(resp.read())
                return resp.status, data.get("usage", {})
            usage = {}
            for raw in resp:
                line = raw.strip()
                if line.startswith(b"data: {") and b'"usage"' in line:
                    chunk = json.loads(line[6:])
                    usage = chunk.get("usage") or usage
            return resp.status, usage
        finally:
            conn.close()

    def vocab(self) -> int:
        return 1 << 30  # the workers, which read the model, bound the prompt ids

    def run(self, op: str, prompts: list[list[int]], n: int) -> float:
        start = time.perf_counter()
        if op == "pp":
            status, _ = self._post({"prompt": prompts[0], "max_tokens": 1})
            if status != 200:
                raise RuntimeError(f"pp request failed with {status}")
            return time.perf_counter() - start
        results: list[tuple[int, dict]] = [(0, {})] * len(prompts)

        def one(i: int) -> None:
            results[i] = self._post({"prompt": prompts[i], "max_tokens": n}, stream=True)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - start
        for status, usage in results:
            if status != 200 or usage.get("completion_tokens") != n:
                raise RuntimeError(f"a stream ended with {status}, usage {usage}")
        return seconds

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
