"""`serve --replicas N` as a real subprocess: a local Ray instance with its own temp dir, stopped with it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "http"))  # server_process: the launcher tests/http use

pytest.importorskip("ray.serve", reason="the ray extra is not installed (pip install '.[ray]')")
