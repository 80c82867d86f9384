"""The device check: every kernel against its reference on the GPU, their speed, and the server under load.

Run through bench/device_check.sh (it installs the carried wheels first). Sections, in order, each appended to
OUT/device_check.md (tables) and OUT/device_check.json (raw figures) as soon as it ends:

  1. environment: GPU, versions, device copy bandwidth (bytes read + written per second, 1 GiB buffers);
  2. qmatmul vs reference, every GGUF type, bf16 activations, M = 1, 4, 16 (GEMV) and 2048 (GEMM), against an
     fp32 matmul on the dequantized weight; the checks run in worker processes, so Triton's compiles (one per
     type and variant) proceed in parallel and land in its on-disk cache for the timings;
  3. paged attention vs reference: decode (split-K too) and prefill kernels, GQA, sliding window, softcap;
  4. the whole model: tiny synthetic llama/qwen3/gemma3 files, --kernels triton vs reference logits;
  5. qmatmul timings on a 14336 x 4096 weight: GB/s of weight bytes at M = 1, 4, 16 (vs the copy bandwidth),
     TFLOP/s at M = 2048 (vs torch.matmul in bf16 on the dequantized weight);
  6. paged decode attention: GB/s of K/V read, batch 16 and 64, context 2k to 32k (Llama-3-8B's heads);
     prefill attention: TFLOP/s of the causal work, vs torch's scaled_dot_product_attention on the same shapes;
  7. fused MoE (bench/device_moe.py): a Qwen3-30B-A3B-like layer (128 experts, top-8, Q4_K/Q6_K) and a
     gpt-oss-20b-like one (32 experts, top-4, MXFP4, biases): against the reference, decode GB/s of the chosen
     experts' bytes (T = 1, 4, 16) and prefill TFLOP/s (T = 2048) against dense bf16 torch.matmul;
  8. serving: a synthetic Llama-3-8B (bench/synth_gguf.py) behind `lexi-engine serve`, 1, 16 and 64 streams.

A deadline (--budget, seconds) trims later sections rather than overrunning the lease. Exit status 1 if any
check failed. `--dry-run` runs the same code on the CPU with tiny shapes under Triton's interpreter (fp16
activations: the interpreter's bf16 tl.dot is wrong), so the script is known to work before a GPU is at hand.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

import device_moe
from device_kernels import (
    TOL,
    attention_checks,
    copy_bandwidth,
    decode_attention_timing,
    model_check,
    prefill_attention_timing,
    qmatmul_check,
    qmatmul_timing,
)

HERE = Path(__file__).resolve().parent
TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
         "IQ4_NL", "IQ4_XS", "MXFP4"]  # fmt: skip


class Report:
    """device_check.md (tables) and device_check.json (figures), rewritten after every section."""

    def __init__(self, out: Path, dry_run: bool, budget_s: float) -> None:
        self.out, self.started, self.budget_s = out, time.monotonic(), budget_s
        self.md: list[str] = [f"# LexiEngine device check{' (dry run: CPU, interpreter)' if dry_run else ''}\n"]
        self.data: dict = {}
        self.failures: list[str] = []

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)

    def section(self, key: str, title: str, text: str, data) -> None:
        elapsed = time.monotonic() - self.started
        self.md.append(f"## {title}\n\n{text}\n\n_(done at {elapsed:.0f} s)_\n")
        self.data[key] = data
        (self.out / "device_check.md").write_text("\n".join(self.md))
        (self.out / "device_check.json").write_text(json.dumps(self.data, indent=1, default=str))
        print(f"\n## {title} ({elapsed:.0f} s)\n{text}", flush=True)


def table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def _rows(rows: list[dict], keys: list[str]) -> list[list[str]]:
    return [[_fmt(r[k]) for k in keys] for r in rows]


def _config(dry_run: bool) -> dict:
    if dry_run:  # the same code paths on tiny shapes: minutes of interpreter, not hours
        return dict(device="cpu", dtype="float16", check_dtypes=["float32"],
                    types=["F16", "Q4_0", "Q8_0", "Q4_K", "Q6_K", "MXFP4"], nk=(64, 256), ms=(1, 4, 16, 40), workers=2,
                    model_dtypes=["float32"], model_vocab=1024,
                    batches=(2,), contexts=(64,), heads=(4, 2, 64), prefill=[(1, 32)], serve_shape="tiny-llama",
                    serve_vocab=1024, streams=(1, 2), prompt_words=8, max_tokens=3, copy_bytes=1 << 24,
                    serve_args=["--kernels", "triton", "--dtype", "float32", "--parallel", "2", "--ctx-size", "64",
                                "--batch-size", "32"], serve_timeout=120.0, moe_layers=device_moe.DRY_LAYERS,
                    moe_tokens=(1, 4, 40))  # fmt: skip
    return dict(device="cuda", dtype="bfloat16", check_dtypes=["bfloat16", "float32"], types=TYPES, nk=(14336, 4096),
                ms=(1, 4, 16, 2048), workers=8, model_dtypes=["bfloat16", "float32"], model_vocab=49152,
                batches=(16, 64), contexts=(2048, 8192, 32768), heads=(32, 8, 128),
                prefill=[(1, 4096), (4, 2048), (16, 512)], serve_shape="llama3-8b", serve_vocab=None,
                streams=(1, 16, 64), prompt_words=200, max_tokens=128, copy_bytes=1 << 30,
                serve_args=["--kernels", "auto", "--parallel", "64", "--ctx-size", "1024", "--batch-size", "4096"],
                serve_timeout=240.0, moe_layers=device_moe.LAYERS, moe_tokens=(1, 4, 16, 2048))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="where the tables go ($OUT on the device)")
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes, Triton's interpreter")
    parser.add_argument("--budget", type=float, default=None, help="seconds (default 460, dry run 900)")
    parser.add_argument(
        "--vocab",
        type=Path,
        default=HERE.parent / ".whl" / "smollm2-vocab.json.gz",
        help="tokenizer metadata for the synthetic models (bench/synth_gguf.py export-vocab)",
    )
    parser.add_argument("--workdir", type=Path, default=None, help="where synthetic models are written")
    args = parser.parse_args(argv)  # fmt: skip
    if args.dry_run:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel module is imported
    cfg = _config(args.dry_run)
    args.out.mkdir(parents=True, exist_ok=True)
    # The dry run's budget trims nothing on a busy CPU: it exists to run every section.
    report = Report(args.out, args.dry_run, args.budget or (900.0 if args.dry_run else 460.0))

    import torch

    if cfg["device"] == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: run with --dry-run on a CPU", file=sys.stderr)
        return 2
    import tempfile

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="lexi-device-"))
    if not args.vocab.exists():
        import synth_gguf

        synth_gguf.export_vocab("smollm2-135m-instruct", workdir / "vocab.json.gz")
        args.vocab = workdir / "vocab.json.gz"
    state = {"vocab": args.vocab, "workdir": workdir, "dry_run": args.dry_run}
    sections = [
        ("environment", "Environment", environment_section),
        ("qmatmul_check", "qmatmul against the reference", qmatmul_check_section),
        ("attention_check", "Paged attention against the reference", attention_check_section),
        ("model_check", "Whole model: --kernels triton against reference (teacher-forced logits)", model_section),
        ("qmatmul_timing", "qmatmul speed", qmatmul_timing_section),
        ("attention_timing", "Paged attention speed", attention_timing_section),
        ("moe", "Fused MoE", moe_section),
        ("serve", "Serving", serve_section),
    ]
    for key, title, fn in sections:
        try:
            text, data = fn(report, cfg, state)
        except Exception as exc:  # one broken section must not cost the others' tables on a short lease
            import traceback

            report.failures.append(f"{key}: {type(exc).__name__}")
            text = f"FAILED: {type(exc).__name__}: {exc}\n\n```\n{traceback.format_exc()[-3000:]}\n```"
            data = {"error": f"{type(exc).__name__}: {exc}"}
        report.section(key, title, text, data)
    status = "FAILED: " + ", ".join(report.failures) if report.failures else "all checks passed"
    report.section("summary", "Summary", f"{status}; {time.monotonic() - report.started:.0f} s", report.failures)
    return 1 if report.failures else 0


def environment_section(report: Report, cfg: dict, state: dict):
    import torch
    import triton

    device = cfg["device"]
    gpu = torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu"
    state["copy_gbs"] = copy_bandwidth(device, cfg["copy_bytes"])
    env = {"device": gpu, "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
           "copy_GBps": state["copy_gbs"], "commit": os.environ.get("LEXI_COMMIT", "unknown")}  # fmt: skip
    return table(list(env), [[_fmt(v) for v in env.values()]]), env


def qmatmul_check_section(report: Report, cfg: dict, state: dict):
    (n, k), dtype = cfg["nk"], cfg["dtype"]
    jobs = [(t, n, k, cfg["ms"], dtype, cfg["device"]) for t in cfg["types"]]
    if cfg["workers"]:  # Triton compiles in parallel; the timings later load the kernels from its disk cache
        import concurrent.futures
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(cfg["workers"], mp_context=ctx) as pool:
            checks = [row for rows in pool.map(qmatmul_check, *zip(*jobs, strict=True)) for row in rows]
    else:
        checks = [row for job in jobs for row in qmatmul_check(*job)]
    report.failures += [f"qmatmul {r['type']} M={r['M']}" for r in checks if not r["ok"]]
    keys = ["type", "variant", "M", "rel_err", "ok"]
    text = f"{dtype} activations, weight {n} x {k}, error = max |y - y_fp32| / max |y_fp32| (tolerance {TOL[dtype]})"
    return f"{text}\n\n{table(keys, _rows(checks, keys))}", checks


def attention_check_section(report: Report, cfg: dict, state: dict):
    attn = attention_checks(cfg["device"], cfg["check_dtypes"])
    report.failures += [f"attention {r['variant']} {r['dtype']} {r['shape']}" for r in attn if not r["ok"]]
    keys = ["variant", "dtype", "shape", "window", "softcap", "splits", "rel_err", "ok"]
    return table(keys, _rows(attn, keys)), attn


def model_section(report: Report, cfg: dict, state: dict):
    models = [
        row
        for dtype in cfg["model_dtypes"]
        for row in model_check(cfg["device"], dtype, state["vocab"], state["workdir"], cfg["model_vocab"])
    ]
    report.failures += [f"model {r['model']} {r['dtype']}" for r in models if not r["ok"]]
    keys = ["model", "dtype", "rel_err", "top1_agree", "ok"]
    text = "rel err = max |logit diff| / logit range, over 40 positions (prefill 33 + 7)"
    return f"{text}\n\n{table(keys, _rows(models, keys))}", models


def qmatmul_timing_section(report: Report, cfg: dict, state: dict):
    (n, k), dtype, copy_gbs = cfg["nk"], cfg["dtype"], state["copy_gbs"]
    timings = []
    for t in cfg["types"]:
        if report.left() < 240 and not state["dry_run"]:
            break
        timings.append(qmatmul_timing(t, n, k, cfg["ms"][-1], dtype, cfg["device"], copy_gbs))
    keys = ["type", "MB", "us_m1", "gbs_m1", "pct_copy_m1", "us_m4", "gbs_m4", "us_m16", "gbs_m16", "tflops",
            "tflops_torch"]  # fmt: skip
    heads = ["type", "weight MB", "M=1 us", "M=1 GB/s", "M=1 % of copy", "M=4 us", "M=4 GB/s", "M=16 us", "M=16 GB/s",
             f"M={cfg['ms'][-1]} TFLOP/s", f"torch {dtype} TFLOP/s"]  # fmt: skip
    text = f"weight {n} x {k}, {dtype} activations; GB/s = weight bytes / time; copy bandwidth {copy_gbs:.0f} GB/s"
    return f"{text}\n\n{table(heads, _rows(timings, keys))}", timings


def attention_timing_section(report: Report, cfg: dict, state: dict):
    device, dtype = cfg["device"], cfg["dtype"]
    contexts = [c for c in cfg["contexts"] if state["dry_run"] or report.left() > 200 or c <= 8192]
    dec = decode_attention_timing(device, dtype, cfg["batches"], contexts, cfg["heads"])
    pre = prefill_attention_timing(device, dtype, cfg["prefill"], cfg["heads"])
    h, kvh, d = cfg["heads"]
    dec_keys = ["batch", "context", "us", "kv_MB", "gbs"]
    dec_table = table(["batch", "context", "us", "KV MB", "GB/s"], _rows(dec, dec_keys))
    pre_keys = ["seqs", "tokens", "us", "tflops", "tflops_sdpa"]
    pre_table = table(["seqs", "tokens each", "us", "TFLOP/s", "SDPA TFLOP/s"], _rows(pre, pre_keys))
    text = (f"{dtype}, {h} query heads, {kvh} KV heads, head_dim {d}, blocks of 16\n\n"
            f"Decode: GB/s = K and V bytes read / time\n\n{dec_table}\n\n"
            "Prefill (fresh prompts, causal): TFLOP/s of 4 H D n(n+1)/2 per sequence; torch SDPA on the same shapes is "
            f"the peer\n\n{pre_table}")  # fmt: skip
    return text, {"decode": dec, "prefill": pre}


def moe_section(report: Report, cfg: dict, state: dict):
    # Its compiles and runs take about a minute; the serving section after it needs 150 s.
    if report.left() < (0 if state["dry_run"] else 240):
        return f"skipped: {report.left():.0f} s of the budget left", None
    dtype = cfg["dtype"]
    rows = device_moe.moe_rows(cfg["device"], dtype, cfg["moe_layers"], cfg["moe_tokens"], state["copy_gbs"],
                               TOL[dtype])  # fmt: skip
    report.failures += [f"moe {r['layer']} T={r['T']}" for r in rows if not r["ok"]]
    for r in rows:  # GB/s is the decode figure, TFLOP/s the prefill one
        if r["variant"] == "gemm":
            r["gbs"] = r["pct_copy"] = "-"
        else:
            r["tflops"] = r["tflops_dense"] = "-"
    keys = ["layer", "T", "variant", "experts", "MB", "us", "gbs", "pct_copy", "tflops", "tflops_dense", "rel_err",
            "ok"]  # fmt: skip
    heads = ["layer", "tokens", "variant", "experts used", "their MB", "us", "GB/s", "% of copy", "TFLOP/s",
             f"torch {dtype} dense TFLOP/s", "rel err", "ok"]  # fmt: skip
    layers = "; ".join(f"{m.name}: {m.experts} experts, top-{m.top_k}, dim {m.dim}, ffn {m.ffn}, {'/'.join(m.types)}, "
                       f"{m.activation}{', biases' if m.biases else ''}" for m in cfg["moe_layers"])  # fmt: skip
    text = (f"{dtype} activations; {layers}. GB/s = bytes of the chosen experts' gate, up and down weights / time; "
            f"TFLOP/s of 2 T k 3 D F; rel err against the fp32 reference (tolerance {TOL[dtype]})")  # fmt: skip
    return f"{text}\n\n{table(heads, _rows(rows, keys))}", rows


def serve_section(report: Report, cfg: dict, state: dict):
    import dataclasses

    import device_serve
    import synth_gguf

    if report.left() < (0 if state["dry_run"] else 150):
        return f"skipped: {report.left():.0f} s of the budget left", None
    vocab_file, workdir = state["vocab"], state["workdir"]
    shape = synth_gguf.SHAPES[cfg["serve_shape"]]
    if cfg["serve_vocab"]:
        shape = dataclasses.replace(shape, vocab=cfg["serve_vocab"])
    # Memory-backed /dev/shm where it has room (a 5 GB write to a slow disk would eat the budget).
    shm = Path("/dev/shm")
    room = shm.is_dir() and shutil.disk_usage(shm).free > 3 * synth_gguf.file_bytes(shape)
    path = (shm if room and not cfg["serve_vocab"] else workdir) / f"lexi-{cfg['serve_shape']}.gguf"
    started = time.monotonic()
    rows = []
    try:
        size = synth_gguf.write_synthetic(path, shape, synth_gguf.load_vocab(str(vocab_file)))
        written = time.monotonic() - started
        port = device_serve.free_port()
        started = time.monotonic()
        load_timeout = max(60.0, min(cfg["serve_timeout"], report.left() - 60))  # leave time for the rounds
        proc = device_serve.start_server(path, port, report.out / "serve.log", cfg["serve_args"], load_timeout)
        ready = time.monotonic() - started
        peak_gpu = device_serve.gpu_memory(proc.pid)
        try:
            for streams in cfg["streams"]:
                if report.left() < 20:
                    break
                timeout = max(30.0, report.left())
                row = device_serve.measure(port, streams, cfg["prompt_words"], cfg["max_tokens"], timeout_s=timeout)
                rows.append(row)
                if row["ok"] < streams:
                    report.failures.append(f"serve {streams} streams: {row['errors']}")
                used = device_serve.gpu_memory(proc.pid)
                peak_gpu = max(peak_gpu or 0, used or 0) or None
        finally:
            device_serve.stop_server(proc)
        accounted = device_serve.memory_line(report.out / "serve.log")
    finally:
        path.unlink(missing_ok=True)
    gpu = "n/a (no nvidia-smi)" if peak_gpu is None else f"{peak_gpu / 1e9:.2f} GB"
    text = (f"peak GPU memory of the server {gpu} against the file's {size / 1e9:.2f} GB (the CUDA context and the KV "
            f"cache included); the server's own account: {accounted or 'not logged'}.\n\n"
            f"synthetic {cfg['serve_shape']} ({size / 1e9:.2f} GB, written in {written:.0f} s), server ready in "
            f"{ready:.0f} s; `serve {' '.join(cfg['serve_args'])}`; prompts of {cfg['prompt_words']} words, "
            f"{cfg['max_tokens']} tokens each (ignore_eos)\n\n" + device_serve.format_rows(rows))  # fmt: skip
    return text, rows


if __name__ == "__main__":
    sys.path[:0] = [str(HERE), str(HERE.parent)]
    raise SystemExit(main())
