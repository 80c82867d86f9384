"""What every bench record names: the commit it measured and the machine it ran on."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path


def commit() -> str:
    """The short commit, `+dirty` when lexi/ or bench/ differ from it (what the figures measure)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "lexi", "bench"], capture_output=True, text=True)
        return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine() -> str:
    """CPU model, core count and Python version."""
    cpu = platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"
