"""Where a decode step's time goes: torch.profiler over the model's forward, one new token per sequence.

    .venv/bin/python bench/profile_decode.py [--models smollm2-135m-instruct gemma3-270m] [--rows 1 8] [--steps 32]

Loads each model as `lexi-engine serve` does (its own OpenMP defaults, loaded on a thread that exits), fills a
128-token context per sequence, then times `--steps` decode steps at each row count: the step's wall time, and
the profiler's self CPU time by op, grouped into buckets (linear kernels, head, attention, the rest). Wall time
minus the ops' self time is Python and dispatch. Runs against whatever `lexi` is first on sys.path, so the code
of another commit is profiled with `PYTHONPATH=/path/to/its/checkout`.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

CTX = 128
# aten op name fragments -> bucket, first match wins (the profiler's self time is exclusive, so buckets add up).
BUCKETS = (
    ("int4 linear", ("_weight_int4pack_mm", "_convert_weight_to_int4pack")),
    ("int8 matmul", ("_int_mm", "_weight_int8pack_mm")),
    ("dense matmul", ("aten::mm", "aten::addmm", "aten::matmul", "aten::bmm", "aten::linear")),
    ("attention", ("scaled_dot_product", "softmax", "_flash", "baddbmm")),
    ("topk / gather / scatter", ("topk", "gather", "scatter", "index_select", "index", "embedding")),
    ("copies / casts", ("copy_", "to", "_to_copy", "cat", "stack", "contiguous", "clone", "empty", "zeros")),
    (
        "elementwise / norms / rope",
        ("mul", "add", "sub", "div", "rsqrt", "pow", "mean", "silu", "gelu", "tanh", "neg", "sum"),
    ),
)


def bucket_of(name: str) -> str:
    for label, keys in BUCKETS:
        if any(k in name for k in keys):
            return label
    return "other ops"


def load(name: str):
    try:
        from lexi.runtime import apply_process_defaults
    except ImportError:  # commits before lexi/runtime.py: what their `lexi-engine` set
        import os

        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    else:
        apply_process_defaults()
    from lexi.gguf.bundled import resolve_model
    from lexi.gguf.reader import read_gguf
    from lexi.model.loader import LoadConfig, load_model

    out = {}
    t = threading.Thread(target=lambda: out.setdefault("m", load_model(read_gguf(resolve_model(name)), LoadConfig())))
    t.start()
    t.join()
    return out["m"]


def profile(model, rows: int, steps: int) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from lexi.kernels.paged_attention import AttentionMetadata

    block = 16
    per_seq = (CTX + steps + 8 + block - 1) // block
    cache = model.new_kv_cache(per_seq * rows, block)
    tables = [list(range(i * per_seq, (i + 1) * per_seq)) for i in range(rows)]
    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for i in range(rows):  # fill each sequence's context
            prompt = torch.randint(1000, 20000, (CTX,), generator=gen)
            meta = AttentionMetadata.build([CTX], [0], [tables[i]], block, device=model.device)
            model(prompt, meta, cache)
        tokens = torch.randint(1000, 20000, (rows,), generator=gen)
        done = CTX

        def step() -> None:
            nonlocal tokens, done
            meta = AttentionMetadata.build([1] * rows, [done] * rows, tables, block, device=model.device)
            logits = model(tokens, meta, cache)
            tokens = logits.argmax(-1)
            done += 1

        for _ in range(4):  # warm-up
            step()
        walls = []
        for _ in range(steps // 2):
            t0 = time.perf_counter()
            step()
            walls.append(time.perf_counter() - t0)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps // 2):
                step()
    per_step = {}
    calls = 0
    for ev in prof.key_averages():
        b = bucket_of(ev.key)
        per_step[b] = per_step.get(b, 0.0) + ev.self_cpu_time_total / 1000 / (steps // 2)
        calls += ev.count
    wall_ms = statistics.median(walls) * 1000
    return {"wall_ms": wall_ms, "buckets": per_step, "ops_per_step": calls / (steps // 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["smollm2-135m-instruct", "gemma3-270m"])
    parser.add_argument("--rows", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--steps", type=int, default=32)
    args = parser.parse_args()
    import lexi

    print(f"lexi from {lexi.__file__}")
    for name in args.models:
        model = load(name)
        for rows in args.rows:
            r = profile(model, rows, args.steps)
            ops = sum(r["buckets"].values())
            print(
                f"\n{name}, {rows} row(s): step {r['wall_ms']:.1f} ms wall (unprofiled median), "
                f"{r['ops_per_step']:.0f} ops a step, profiled self time {ops:.1f} ms"
            )
            for label, ms in sorted(r["buckets"].items(), key=lambda kv: -kv[1]):
                print(f"  {label:28s} {ms:7.2f} ms  {100 * ms / ops:5.1f}%")
        del model


if __name__ == "__main__":
    main()
