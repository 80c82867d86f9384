"""bench/device_check.sh --dry-run: the device check's own code, end to end on the CPU, before any GPU run.

Tiny shapes and Triton's interpreter; the figures mean nothing, the point is that every section (kernel checks
in worker processes, timings, the whole-model check, a synthetic model served with --kernels triton under
load) runs through and writes its tables.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = ["environment", "qmatmul_check", "attention_check", "model_check", "qmatmul_timing", "attention_timing",
            "moe", "serve", "summary"]  # fmt: skip


def test_device_check_dry_run(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path)}
    started = time.monotonic()
    run = subprocess.run(["bash", str(ROOT / "bench" / "device_check.sh"), "--dry-run"], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    took = time.monotonic() - started
    print(f"dry run: {took:.0f} s")  # ~35 s on 2 quiet cores; the subprocess timeout bounds it on a busy machine
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    data = json.loads((tmp_path / "device_check.json").read_text())
    assert list(data) == SECTIONS and data["summary"] == []
    checks = data["qmatmul_check"]
    assert {r["type"] for r in checks} >= {"Q4_K", "Q6_K"} and all(r["ok"] for r in checks)
    assert {r["variant"] for r in checks} == {"gemv", "gemm"}
    assert all(r["ok"] for r in data["attention_check"] + data["model_check"])
    moe = data["moe"]
    assert {r["layer"] for r in moe} == {"tiny-qwen3moe", "tiny-gpt-oss"} and all(r["ok"] for r in moe)
    assert {r["variant"] for r in moe} == {"gemv", "gemm"}
    served = data["serve"]
    assert [r["streams"] for r in served] == [1, 2] and all(r["ok"] == r["streams"] for r in served)
    assert all(r["tokens"] == 3 * r["streams"] and r["ttft_p50_s"] > 0 for r in served)
    tables = (tmp_path / "device_check.md").read_text()
    assert "| streams | ok | output tok/s |" in tables and "all checks passed" in tables
    assert (tmp_path / "device_check.log").stat().st_size > 0 and (tmp_path / "serve.log").exists()
