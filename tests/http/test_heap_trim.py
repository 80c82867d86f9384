"""The servers' periodic heap trim (a thread, in Tornado's server and in every Ray replica) gives freed memory
back (glibc), measured in a fresh process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lexi.http.ops.heap_trim import heap_trimmer

_PROBE = """
import time

from lexi.http.ops.heap_trim import HeapTrimming

def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024

chunks = [bytearray(100_000) for _ in range(2000)]  # 200 MB under malloc's mmap threshold: heap memory
keep = bytearray(100_000)  # above them, so freeing them cannot shrink the heap by itself
del chunks
before = rss_mb()
trimming = HeapTrimming(interval_s=0.05)
started = trimming.start()
deadline = time.monotonic() + 30
while trimming.trims == 0 and time.monotonic() < deadline:
    time.sleep(0.01)
trimming.stop()
print(before, rss_mb(), started and trimming.trims > 0)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_trim_returns_freed_heap_memory():
    assert heap_trimmer() is not None
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, timeout=60)
    before, after, trimmed = out.stdout.split()
    assert trimmed == "True"
    assert int(before) - int(after) > 150, out.stdout  # the 200 MB freed is resident until the trim
