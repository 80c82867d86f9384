"""One model, the CPU kernels' ISA variants swapped under it: decode tok/s and prefill time, same process, interleaved.

The model loads once (the interleaved layouts are the same bytes for every x86 variant); before each measurement
the model's `CpuKernels` gets a fresh `_cpu.Kernels` of the variant measured, so nothing else differs: same
weights in the same pages, same KV cache, same Python. Rows: a 128-token prefill chunk (ms), and `--steps`
decode steps of one sequence after a 128-token context (tok/s), in wall time and in the process's CPU time,
median of `--reps` rounds, the variants alternating within a round. The ratio is the last variant's speed over
the first's.

    .venv/bin/python bench/synth_gguf.py write llama3-1b /tmp/llama3-1b.gguf
    .venv/bin/python bench/cpu_isa_e2e.py /tmp/llama3-1b.gguf [--reps 5] [--steps 16] [--no-append]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from run_info import commit, machine  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
CTX, BLOCK = 128, 16


def load(path: str):
    """As `lexi-engine serve` loads: its process defaults, the model built on a thread that then exits."""
    from lexi.gguf.reader import read_gguf
    from lexi.model.loader import LoadConfig, load_model
    from lexi.runtime import apply_process_defaults

    apply_process_defaults()
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("m", load_model(read_gguf(path), LoadConfig())))
    t.start()
    t.join()
    return out["m"]


def measure(model, steps: int, seed: int) -> tuple[float, float, float, float]:
    """Prefill of a CTX-token chunk, then `steps` one-token decode steps: (prefill ms, prefill CPU ms, decode tok/s,
    decode CPU ms a token). CPU time is the process's (every thread's), which a busy neighbour does not inflate
    as it does wall time (with more than one thread, a worker's spin while it waits for another counts)."""
    import torch

    from lexi.kernels.paged_attention import AttentionMetadata

    per_seq = (CTX + steps + BLOCK) // BLOCK + 1
    cache = model.new_kv_cache(per_seq, BLOCK)
    table = [list(range(per_seq))]
    gen = torch.Generator().manual_seed(seed)
    with torch.inference_mode():
        prompt = torch.randint(1000, 20000, (CTX,), generator=gen)
        t0, c0 = time.perf_counter(), time.process_time()
        logits = model(prompt, AttentionMetadata.build([CTX], [0], table, BLOCK), cache)
        prefill, prefill_cpu = time.perf_counter() - t0, time.process_time() - c0
        token = logits.argmax(-1)
        t0, c0 = time.perf_counter(), time.process_time()
        for done in range(CTX, CTX + steps):
            token = model(token, AttentionMetadata.build([1], [done], table, BLOCK), cache).argmax(-1)
        decode, decode_cpu = time.perf_counter() - t0, time.process_time() - c0
    return prefill * 1e3, prefill_cpu * 1e3, steps / decode, decode_cpu / steps * 1e3


def main() -> None:
    from lexi.kernels import _cpu
    from lexi.kernels.cpu_qmatmul import available_isas

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="a GGUF path (bench/synth_gguf.py writes synthetic ones)")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--isas", nargs="+", default=[i for i in available_isas() if i != "scalar"])
    p.add_argument("--threads", type=int, default=None, help="the kernels' threads (default: the model's)")
    p.add_argument("--no-append", action="store_true")
    args = p.parse_args()
    model = load(args.model)
    kernels = model.cpu_kernels
    threads = args.threads or kernels.threads
    variants = {isa: _cpu.Kernels(threads, isa) for isa in args.isas}
    samples = {isa: [] for isa in args.isas}
    for rep in range(args.reps + 1):  # round 0 warms up
        for isa in args.isas:
            kernels.impl = variants[isa]
            figures = measure(model, args.steps, rep)
            if rep:
                samples[isa].append(figures)
    med = {isa: [statistics.median(col) for col in zip(*rows, strict=True)] for isa, rows in samples.items()}
    first, last = args.isas[0], args.isas[-1]
    lines = [f"| test | {' | '.join(args.isas)} | ratio |", "| --- |" + " ---: |" * (len(args.isas) + 1)]
    labels = (f"prefill {CTX} (ms)", f"prefill {CTX} (CPU ms)", "decode (tok/s)", "decode (CPU ms a token)")
    for col, label in enumerate(labels):
        cells = " | ".join(f"{med[i][col]:.2f}" if col == 2 else f"{med[i][col]:.0f}" for i in args.isas)
        faster = med[last][col] / med[first][col] if col == 2 else med[first][col] / med[last][col]
        lines.append(f"| {label} | {cells} | {faster:.2f}x |")
    print("\n".join(lines))
    if args.no_append:
        return
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load_avg = " ".join(f"{v:.2f}" for v in os.getloadavg())
    with RESULTS.open("a") as f:
        f.write(f"\n\n### bench/cpu_isa_e2e.py, {now}, commit {commit()}\n\n")
        f.write(
            f"Machine: {machine()}. Model {Path(args.model).name}, {threads} kernel thread(s), --activations "
            f"{kernels.activations}; the same loaded model with each ISA variant's kernels swapped in, interleaved, "
            f"median of {args.reps} rounds ({args.steps} decode steps after a {CTX}-token prefill each); "
            f"ratio {last} over {first}. Load average after: {load_avg}.\n\n"
        )
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
