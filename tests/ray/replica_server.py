"""`serve --replicas N` as a real subprocess, with the launcher tests/http use."""

from __future__ import annotations

import subprocess
import time

from server_process import LOAD_TIMEOUT, Server


class RayServer(Server):
    """Waits for the command's `listening on` line first: Ray Serve's proxy opens the port before the
    replicas exist, and holds requests until one does."""

    def wait_ready(self) -> RayServer:
        deadline = time.monotonic() + LOAD_TIMEOUT
        while "lexi-engine: listening on" not in self.output():
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve --replicas exited with {self.proc.returncode}:\n{self.output()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the replicas were not deployed within {LOAD_TIMEOUT} s:\n{self.output()}")
            time.sleep(0.5)
        super().wait_ready()
        return self

    def stop_cleanly(self, timeout: float = 120.0) -> tuple[int | None, str]:
        """SIGTERM, then (exit status, output): Ray's processes are stopped before the command exits."""
        output = ""
        try:
            self.proc.terminate()
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        finally:
            output = self.output()
            self.stop()  # kills it if it is still running, and removes the log
        return self.proc.returncode, output
