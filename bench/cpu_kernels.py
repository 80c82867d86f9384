"""The CPU kernels alone, each ISA variant against the others in the same process: Llama-3-8B's matmul shapes.

For every (type, shape, rows of x) the variants run interleaved, rep after rep (a busy neighbour slows them alike),
each on its own repacked copy of the same random weight, as a model load makes it; the figure is the median.
Rows of x: 1 and 4 (decode steps), 256 (a prefill chunk). GB/s counts the weight bytes read once per call (the
interleaved layout's size), so decode rows read as bandwidth and prefill rows mostly as compute; CPU ms is the
process's CPU time a call, the steadier figure on a shared machine. The ratios are the last variant's speed over
the first's (avx512vnni over avx2 on a CPU that has both), in wall and in CPU time.

    .venv/bin/python bench/cpu_kernels.py [--reps 7] [--threads 2] [--activations int16] [--no-append]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from run_info import commit, machine  # noqa: E402

from lexi.kernels.cpu_qmatmul import CpuKernels, CpuWeight, available_isas, cpu_qmatmul  # noqa: E402

Q = GGMLQuantizationType
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
SHAPES = ((4096, 4096), (14336, 4096), (4096, 14336))  # (N, K): q/o, gate/up, down
TYPES = (Q.Q4_K, Q.Q6_K)
ROWS = (1, 4, 256)
# Byte offsets of each type's fp16 fields (d, and m or dmin) in its block.
F16_FIELDS = {Q.Q4_0: (0,), Q.Q4_1: (0, 2), Q.Q5_0: (0,), Q.Q5_1: (0, 2), Q.Q8_0: (0,), Q.Q4_K: (0, 2), Q.Q6_K: (208,)}


def random_rows(qtype: GGMLQuantizationType, n: int, k: int) -> np.ndarray:
    """(n, row_bytes) random blocks with small finite fp16 scales (the speed does not depend on the values)."""
    block, size = GGML_QUANT_SIZES[qtype]
    raw = np.random.default_rng(0).integers(0, 256, size=(n, k // block, size), dtype=np.uint8)
    for off in F16_FIELDS[qtype]:
        raw[:, :, off : off + 2] = np.frombuffer(np.float16(0.01).tobytes(), np.uint8)
    return raw.reshape(n, -1)


def time_call(fn, reps_inner: int) -> tuple[float, float]:
    """(wall, process CPU) seconds a call. CPU time is what a busy neighbour does not inflate (with more than one
    thread it counts a worker's spin while it waits for the other)."""
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(reps_inner):
        fn()
    return (time.perf_counter() - start) / reps_inner, (time.process_time() - cpu) / reps_inner


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--activations", default="int16", choices=("int16", "int8"))
    p.add_argument("--isas", nargs="+", default=[i for i in available_isas() if i != "scalar"])
    p.add_argument("--types", nargs="+", default=[t.name for t in TYPES])
    p.add_argument("--no-append", action="store_true")
    args = p.parse_args()
    kernels = {isa: CpuKernels(args.threads, isa, args.activations) for isa in args.isas}
    cols = " | ".join(f"{i} ms | {i} GB/s | {i} CPU ms" for i in args.isas)
    header = f"| type | N x K | rows | {cols} | ratio | CPU ratio |"
    lines = [header, "|" + " --- |" * 3 + " ---: |" * (3 * len(args.isas) + 2)]
    print(header, flush=True)
    for name in args.types:
        qtype = Q[name]
        for n, k in SHAPES:
            rows = random_rows(qtype, n, k)
            weights = {i: CpuWeight.repacked(kern, rows, qtype, (n, k), release=False) for i, kern in kernels.items()}
            nbytes = next(iter(weights.values())).nbytes
            for m in ROWS:
                x = torch.randn(m, k)
                calls = {i: (lambda x=x, w=weights[i], kern=kernels[i]: cpu_qmatmul(x, [w], kern)) for i in args.isas}
                inner = {isa: 1 for isa in args.isas}
                for isa, fn in calls.items():  # warm-up, and enough calls per sample for ~50 ms
                    t = time_call(fn, 1)[0]
                    inner[isa] = max(1, int(0.05 / max(t, 1e-6)))
                samples = {isa: [] for isa in args.isas}
                for _ in range(args.reps):
                    for isa, fn in calls.items():
                        samples[isa].append(time_call(fn, inner[isa]))
                med = {isa: [statistics.median(c) for c in zip(*s, strict=True)] for isa, s in samples.items()}
                cells = " | ".join(
                    f"{med[i][0] * 1e3:.2f} | {nbytes / med[i][0] / 1e9:.1f} | {med[i][1] * 1e3:.2f}" for i in args.isas
                )
                first, last = med[args.isas[0]], med[args.isas[-1]]
                line = f"| {name} | {n} x {k} | {m} | {cells} | {first[0] / last[0]:.2f}x | {first[1] / last[1]:.2f}x |"
                lines.append(line)
                print(line, flush=True)
    if args.no_append:
        return
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    with RESULTS.open("a") as f:
        f.write(f"\n\n### bench/cpu_kernels.py, {now}, commit {commit()}\n\n")
        f.write(
            f"Machine: {machine()}. {args.threads} threads, --activations {args.activations} (rows of x count "
            f"once; int16 runs two int8 terms each), median of {args.reps} interleaved reps; GB/s of the "
            f"interleaved weight's bytes per call; ratios {args.isas[-1]} over {args.isas[0]}. Load average after: "
            f"{load}.\n\n"
        )
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
