"""bench/soak.py for 30 seconds: 64 streams on every generation route, 10% hanging up, against a real server.

The script starts its own server (and stops it with SIGTERM); the targets are the soak's: no 5xx, no
lost stream, RSS growth under 5% after the warm-up, no KV block held once idle, exit 0 after the drain.

The server runs with oneDNN's primitive cache off: that cache keeps one compiled kernel per matmul
shape (up to 1024), and continuous batching meets hundreds of shapes, so with it on RSS climbs by
~150 MB over the first minutes and then levels off (bench/RESULTS.md). Thirty seconds cannot tell
that from a leak; with it off, what is left to grow is the server's own memory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SOAK = Path(__file__).parents[2] / "bench" / "soak.py"


@pytest.mark.parametrize("serve_args", ["--spec off", "--spec ngram"], ids=["plain", "spec-ngram"])
def test_soak_30_seconds_meets_the_targets(tmp_path, serve_args):
    """With --spec ngram too: checks of drafts beside decoding rows, under disconnects, leave no block held."""
    out = tmp_path / "soak.json"
    args = ["--seconds", "30", "--warmup", "5", "--streams", "64", "--max-tokens", "8,16,32"]
    args += ["--serve-args", serve_args]
    proc = subprocess.run(
        [sys.executable, str(SOAK), *args, "--json", str(out), "--no-append"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "0"},
    )
    assert out.exists(), proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    summary = proc.stdout[-3000:]
    assert report["requests_done"] >= 30, summary
    assert report["disconnected"] >= 1 and all(report["by_route"].values()), summary
    assert report["status_5xx"] == 0 and report["status_4xx"] == 0, summary
    assert report["lost_streams"] == 0 and report["failed_connections"] == 0, summary
    assert report["kv_blocks_used_end"] == 0, summary
    assert report["rss_growth_pct"] < 5.0, summary
    assert report["server_exit"] == 0, summary
    assert report["ttft_p50_s"] is not None and report["itl_p99_s"] is not None, summary
    assert proc.returncode == 0, summary
    if serve_args != "--spec off":
        assert report["spec_accepted"] > 0 and report["spec_proposed"] >= report["spec_accepted"], summary
    else:
        assert report["spec_proposed"] == 0, summary
