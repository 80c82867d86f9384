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
  7. serving: a synthetic Llama-3-8B (bench/synth_gguf.py) behind `lexi-engine serve`, 1, 16 and 64 streams.

A deadline (--budget, seconds) trims later sections rather than overrunning the lease. Exit status 1 if any
check failed. `--dry-run` runs the same code on the CPU with tiny shapes under Triton's interpreter (fp16
activations: the interpreter's bf16 tl.dot is wrong), so the script is known to work before a GPU is at hand.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]
TOL = {"bfloat16": 2e-2, "float16": 5e-3, "float32": 1e-3}  # max |err| / max |ref|


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


def timer(device: str):
    """ms per call: triton's do_bench (CUDA events) on a GPU, one wall-clock call under the interpreter."""
    if device == "cuda":
        from triton.testing import do_bench

        return lambda fn: do_bench(fn, warmup=5, rep=30)

    def once(fn) -> float:
        fn()  # the interpreter has nothing to warm, but keep the call pattern of the GPU path
        started = time.perf_counter()
        fn()
        return (time.perf_counter() - started) * 1e3

    return once


def copy_bandwidth(device: str, nbytes: int) -> float:
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = timer(device)(lambda: dst.copy_(src))
    return 2 * nbytes / (ms * 1e-3) / 1e9


def qmatmul_check(qtype_name: str, n: int, k: int, ms: tuple[int, ...], dtype_name: str, device: str) -> list[dict]:
    """Both Triton variants against fp32 dequantize-then-matmul; one row per M. Runs in a worker process."""
    import torch
    from qmatmul import random_weight

    from lexi.kernels.qmatmul import choose_variant, qmatmul
    from lexi.kernels.qmatmul_ref import dequantize_weight

    torch.manual_seed(0)
    w = random_weight(qtype_name, n, k, device)
    dense = dequantize_weight(w)
    rows = []
    for m in ms:
        x = torch.randn(m, k, device=device).to(getattr(torch, dtype_name))
        want = x.float() @ dense.T
        got = qmatmul(x, w, kernels="triton").float()
        err = ((got - want).abs().max() / want.abs().max()).item()
        finite = bool(torch.isfinite(got).all())
        rows.append({"type": qtype_name, "variant": choose_variant(x, w, "triton"), "M": m, "rel_err": err,
                     "ok": finite and err <= TOL[dtype_name]})  # fmt: skip
    return rows


def qmatmul_timing(qtype_name: str, n: int, k: int, big_m: int, dtype_name: str, device: str, copy_gbs: float):
    import torch
    from qmatmul import random_weight

    from lexi.kernels.qmatmul import qmatmul
    from lexi.kernels.qmatmul_ref import dequantize_weight

    bench = timer(device)
    w = random_weight(qtype_name, n, k, device)
    dtype = getattr(torch, dtype_name)
    row = {"type": qtype_name, "MB": w.nbytes / 1e6}
    for m in (1, 4, 16):
        x = torch.randn(m, k, device=device).to(dtype)
        row[f"us_m{m}"] = bench(lambda x=x: qmatmul(x, w, kernels="triton")) * 1e3
        row[f"gbs_m{m}"] = w.nbytes / (row[f"us_m{m}"] * 1e-6) / 1e9
    x = torch.randn(big_m, k, device=device).to(dtype)
    dense = dequantize_weight(w).to(dtype)
    flops = 2 * big_m * n * k
    row["tflops"] = flops / (bench(lambda: qmatmul(x, w, kernels="triton")) * 1e-3) / 1e12
    row["tflops_torch"] = flops / (bench(lambda: torch.matmul(x, dense.T)) * 1e-3) / 1e12
    row["pct_copy_m1"] = 100 * row["gbs_m1"] / copy_gbs
    return row


def attention_checks(device: str, dtypes: list[str]) -> list[dict]:
    """Decode and prefill kernels against paged_attention_ref (fp32) on ragged batches over shuffled blocks."""
    import torch

    from lexi.kernels.paged_attention import AttentionMetadata, paged_attention_ref
    from lexi.kernels.paged_attention_decode import paged_attention_decode
    from lexi.kernels.paged_attention_prefill import paged_attention_prefill

    rows = []
    cases = [  # (heads, kv heads, head_dim, window, softcap, decode splits)
        (32, 8, 128, 0, 0.0, 1), (32, 8, 128, 0, 0.0, 4), (8, 4, 256, 40, 0.0, 1), (9, 3, 64, 0, 50.0, 2),
    ]  # fmt: skip
    gen = torch.Generator(device="cpu").manual_seed(0)
    for dtype_name in dtypes:
        dtype = getattr(torch, dtype_name)
        for h, kvh, d, window, softcap, splits in cases:
            for variant, new in (("decode", [1, 1, 1]), ("prefill", [40, 1, 17])):
                cached = [300, 7, 0] if variant == "decode" else [100, 7, 0]
                block = 16
                perm = torch.randperm(64, generator=gen).tolist()
                tables = [perm[s * 20 : s * 20 + 20] for s in range(3)]
                meta = AttentionMetadata.build(new, cached, tables, block, device=device)
                q = torch.randn(sum(new), h, d, generator=gen).to(device=device, dtype=dtype)
                k_cache = torch.randn(64, block, kvh, d, generator=gen).to(device=device, dtype=dtype)
                v_cache = torch.randn(64, block, kvh, d, generator=gen).to(device=device, dtype=dtype)
                kw = {"scale": d**-0.5, "sliding_window": window, "softcap": softcap}
                want = paged_attention_ref(q.float(), k_cache.float(), v_cache.float(), meta, **kw)
                if variant == "decode":
                    got = paged_attention_decode(q, k_cache, v_cache, meta, num_splits=splits, **kw)
                else:
                    got = paged_attention_prefill(q, k_cache, v_cache, meta, **kw)
                err = ((got.float() - want).abs().max() / want.abs().max()).item()
                rows.append({"variant": variant, "dtype": dtype_name, "shape": f"H{h}/KV{kvh}/D{d}", "window": window,
                             "softcap": softcap, "splits": splits if variant == "decode" else "-", "rel_err": err,
                             "ok": bool(torch.isfinite(got).all()) and err <= TOL[dtype_name]})  # fmt: skip
    return rows


def decode_attention_timing(device: str, dtype_name: str, batches, contexts, heads=(32, 8, 128)) -> list[dict]:
    import torch

    from lexi.kernels.paged_attention import AttentionMetadata
    from lexi.kernels.paged_attention_decode import paged_attention_decode

    bench, dtype = timer(device), getattr(torch, dtype_name)
    h, kvh, d = heads
    rows = []
    for b in batches:
        for ctx in contexts:
            block = 16
            per_seq = ctx // block
            k_cache = torch.randn(b * per_seq, block, kvh, d, device=device).to(dtype)
            v_cache = torch.randn_like(k_cache)
            tables = [list(range(s * per_seq, (s + 1) * per_seq)) for s in range(b)]
            meta = AttentionMetadata.build([1] * b, [ctx - 1] * b, tables, block, device=device)
            q = torch.randn(b, h, d, device=device).to(dtype)
            ms = bench(functools.partial(paged_attention_decode, q, k_cache, v_cache, meta, scale=d**-0.5))
            kv_bytes = 2 * k_cache.numel() * k_cache.element_size()
            rows.append({"batch": b, "context": ctx, "us": ms * 1e3, "kv_MB": kv_bytes / 1e6,
                         "gbs": kv_bytes / (ms * 1e-3) / 1e9})  # fmt: skip
    return rows


def prefill_attention_timing(device: str, dtype_name: str, shapes, heads=(32, 8, 128)) -> list[dict]:
    """Fresh prompts (no cache): `shapes` are (sequences, tokens each). Causal FLOPs: 4 * H * D * sum n(n+1)/2."""
    import torch
    import torch.nn.functional as F

    from lexi.kernels.paged_attention import AttentionMetadata
    from lexi.kernels.paged_attention_prefill import paged_attention_prefill

    bench, dtype = timer(device), getattr(torch, dtype_name)
    h, kvh, d = heads
    rows = []
    for seqs, n in shapes:
        block = 16
        per_seq = -(-n // block)
        k_cache = torch.randn(seqs * per_seq, block, kvh, d, device=device).to(dtype)
        v_cache = torch.randn_like(k_cache)
        tables = [list(range(s * per_seq, (s + 1) * per_seq)) for s in range(seqs)]
        meta = AttentionMetadata.build([n] * seqs, [0] * seqs, tables, block, device=device)
        q = torch.randn(seqs * n, h, d, device=device).to(dtype)
        ms = bench(functools.partial(paged_attention_prefill, q, k_cache, v_cache, meta, scale=d**-0.5))
        qs = q.view(seqs, n, h, d).transpose(1, 2)
        ks = k_cache.view(seqs, -1, kvh, d)[:, :n].transpose(1, 2)
        vs = v_cache.view(seqs, -1, kvh, d)[:, :n].transpose(1, 2)
        ms_sdpa = bench(functools.partial(F.scaled_dot_product_attention, qs, ks, vs, is_causal=True, enable_gqa=True))
        flops = 4 * h * d * seqs * n * (n + 1) / 2
        rows.append({"seqs": seqs, "tokens": n, "us": ms * 1e3, "tflops": flops / (ms * 1e-3) / 1e12,
                     "tflops_sdpa": flops / (ms_sdpa * 1e-3) / 1e12})  # fmt: skip
    return rows


def model_check(device: str, dtype_name: str, vocab_file: Path, workdir: Path, vocab_size: int) -> list[dict]:
    """Tiny synthetic models of each family: --kernels triton against reference, teacher-forced logits."""
    import synth_gguf
    import torch

    from lexi.gguf.reader import read_gguf
    from lexi.model.loader import LoadConfig, load_model
    from lexi.model.single import SingleSequence

    rows = []
    vocab = synth_gguf.load_vocab(str(vocab_file))
    for name in ("tiny-llama", "tiny-qwen3", "tiny-gemma3"):
        path = workdir / f"{name}.gguf"
        shape = synth_gguf.SHAPES[name]
        synth_gguf.write_synthetic(path, synth_gguf.dataclasses.replace(shape, vocab=vocab_size), vocab, seed=1)
        f = read_gguf(path)
        ids = torch.randint(300, vocab_size, (40,), generator=torch.Generator().manual_seed(1)).tolist()
        logits = {}
        for kernels in ("reference", "triton"):
            model = load_model(f, LoadConfig(dtype=dtype_name, device=device, kernels=kernels))
            seq = SingleSequence(model, 48)
            logits[kernels] = torch.cat([seq.extend(ids[:33], all_logits=True), seq.extend(ids[33:], all_logits=True)])
            del model
        ref, tri = logits["reference"], logits["triton"]
        err = ((tri - ref).abs().max() / (ref.max() - ref.min())).item()
        agree = (tri.argmax(-1) == ref.argmax(-1)).float().mean().item()
        # float32: the two paths differ by summation order only. bf16: each rounds its activations and products
        # its own way, through every layer; the bounds catch wiring faults (wrong layout, wrong rows: errors near
        # 100%), not bf16 noise.
        max_err, min_agree = (TOL["float32"], 1.0) if dtype_name == "float32" else (5e-2, 0.8)
        ok = bool(torch.isfinite(tri).all()) and err <= max_err and agree >= min_agree
        rows.append({"model": name, "dtype": dtype_name, "rel_err": err, "top1_agree": agree, "ok": ok})
    return rows


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def _rows(rows: list[dict], keys: list[str]) -> list[list[str]]:
    return [[_fmt(r[k]) for k in keys] for r in rows]


def _config(dry_run: bool) -> dict:
    if dry_run:  # the same code paths on tiny shapes: minutes of interpreter, not hours
        return dict(device="cpu", dtype="float16", check_dtypes=["float32"],
                    types=["F16", "Q4_0", "Q8_0", "Q4_K", "Q6_K"], nk=(64, 256), ms=(1, 4, 16, 40), workers=2,
                    model_dtypes=["float32"], model_vocab=1024,
                    batches=(2,), contexts=(64,), heads=(4, 2, 64), prefill=[(1, 32)], serve_shape="tiny-llama",
                    serve_vocab=1024, streams=(1, 2), prompt_words=8, max_tokens=3, copy_bytes=1 << 24,
                    serve_args=["--kernels", "triton", "--dtype", "float32", "--parallel", "2", "--ctx-size", "64",
                                "--batch-size", "32"], serve_timeout=120.0)  # fmt: skip
    return dict(device="cuda", dtype="bfloat16", check_dtypes=["bfloat16", "float32"], types=TYPES, nk=(14336, 4096),
                ms=(1, 4, 16, 2048), workers=8, model_dtypes=["bfloat16", "float32"], model_vocab=49152,
                batches=(16, 64), contexts=(2048, 8192, 32768), heads=(32, 8, 128),
                prefill=[(1, 4096), (4, 2048), (16, 512)], serve_shape="llama3-8b", serve_vocab=None,
                streams=(1, 16, 64), prompt_words=200, max_tokens=128, copy_bytes=1 << 30,
                serve_args=["--kernels", "auto", "--parallel", "64", "--ctx-size", "1024", "--batch-size", "4096"],
                serve_timeout=240.0)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="where the tables go ($OUT on the device)")
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes, Triton's interpreter")
    parser.add_argument("--budget", type=float, default=None, help="seconds (default 460, dry run 150)")
    parser.add_argument(
        "--vocab",
        type=Path,
        default=HERE.parent / ".whl" / "smollm2-vocab.json.gz",
        help="tokenizer metadata for the synthetic models (bench/synth_gguf.py export-vocab)",
    )
    parser.add_argument("--workdir", type=Path, default=None, help="where synthetic models are written")
    args = parser.parse_args(argv)
    if args.dry_run:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel module is imported
    cfg = _config(args.dry_run)
    args.out.mkdir(parents=True, exist_ok=True)
    report = Report(args.out, args.dry_run, args.budget or (150.0 if args.dry_run else 460.0))

    import torch
    import triton

    device, dtype = cfg["device"], cfg["dtype"]
    if device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: run with --dry-run on a CPU", file=sys.stderr)
        return 2
    gpu = torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu"
    copy_gbs = copy_bandwidth(device, cfg["copy_bytes"])
    env = {"device": gpu, "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
           "copy_GBps": copy_gbs, "commit": os.environ.get("LEXI_COMMIT", "unknown")}  # fmt: skip
    report.section("environment", "Environment", table(list(env), [[_fmt(v) for v in env.values()]]), env)

    n, k = cfg["nk"]
    jobs = [(t, n, k, cfg["ms"], dtype, device) for t in cfg["types"]]
    if cfg["workers"]:
        import concurrent.futures
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(cfg["workers"], mp_context=ctx) as pool:
            checks = [row for rows in pool.map(qmatmul_check, *zip(*jobs, strict=True)) for row in rows]
    else:
        checks = [row for job in jobs for row in qmatmul_check(*job)]
    report.failures += [f"qmatmul {r['type']} M={r['M']}" for r in checks if not r["ok"]]
    text = (
        f"{dtype} activations, weight {n} x {k}, error = max |y - y_fp32| / max |y_fp32| (tolerance {TOL[dtype]})\n\n"
    )
    keys = ["type", "variant", "M", "rel_err", "ok"]
    report.section("qmatmul_check", "qmatmul against the reference", text + table(keys, _rows(checks, keys)), checks)

    attn = attention_checks(device, cfg["check_dtypes"])
    report.failures += [f"attention {r['variant']} {r['dtype']} {r['shape']}" for r in attn if not r["ok"]]
    keys = ["variant", "dtype", "shape", "window", "softcap", "splits", "rel_err", "ok"]
    report.section("attention_check", "Paged attention against the reference", table(keys, _rows(attn, keys)), attn)

    import tempfile

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="lexi-device-"))
    if not args.vocab.exists():
        import synth_gguf

        synth_gguf.export_vocab("smollm2-135m-instruct", workdir / "vocab.json.gz")
        args.vocab = workdir / "vocab.json.gz"
    models = [r for d in cfg["model_dtypes"] for r in model_check(device, d, args.vocab, workdir, cfg["model_vocab"])]
    report.failures += [f"model {r['model']} {r['dtype']}" for r in models if not r["ok"]]
    keys = ["model", "dtype", "rel_err", "top1_agree", "ok"]
    report.section("model_check", "Whole model: --kernels triton against reference (teacher-forced logits)",
                   "rel err = max |logit diff| / logit range, over 40 positions (prefill 33 + 7)\n\n"
                   + table(keys, _rows(models, keys)), models)  # fmt: skip

    timings = []
    for t in cfg["types"]:
        if report.left() < 240 and not args.dry_run:
            break
        timings.append(qmatmul_timing(t, n, k, cfg["ms"][-1], dtype, device, copy_gbs))
    keys = [
        "type",
        "MB",
        "us_m1",
        "gbs_m1",
        "pct_copy_m1",
        "us_m4",
        "gbs_m4",
        "us_m16",
        "gbs_m16",
        "tflops",
        "tflops_torch",
    ]
    heads = ["type", "weight MB", "M=1 us", "M=1 GB/s", "M=1 % of copy", "M=4 us", "M=4 GB/s", "M=16 us", "M=16 GB/s",
             f"M={cfg['ms'][-1]} TFLOP/s", f"torch {dtype} TFLOP/s"]  # fmt: skip
    text = f"weight {n} x {k}, {dtype} activations; GB/s = weight bytes / time; copy bandwidth {copy_gbs:.0f} GB/s\n\n"
    report.section("qmatmul_timing", "qmatmul speed", text + table(heads, _rows(timings, keys)), timings)

    contexts = [c for c in cfg["contexts"] if args.dry_run or report.left() > 200 or c <= 8192]
    dec = decode_attention_timing(device, dtype, cfg["batches"], contexts, cfg["heads"])
    pre = prefill_attention_timing(device, dtype, cfg["prefill"], cfg["heads"])
    h, kvh, d = cfg["heads"]
    dec_table = table(
        ["batch", "context", "us", "KV MB", "GB/s"], _rows(dec, ["batch", "context", "us", "kv_MB", "gbs"])
    )
    pre_keys = ["seqs", "tokens", "us", "tflops", "tflops_sdpa"]
    pre_table = table(["seqs", "tokens each", "us", "TFLOP/s", "SDPA TFLOP/s"], _rows(pre, pre_keys))
    text = (f"{dtype}, {h} query heads, {kvh} KV heads, head_dim {d}, blocks of 16\n\n"
            f"Decode: GB/s = K and V bytes read / time\n\n{dec_table}\n\n"
            "Prefill (fresh prompts, causal): TFLOP/s of 4 H D n(n+1)/2 per sequence; torch SDPA on the same shapes is "
            f"the peer\n\n{pre_table}")  # fmt: skip
    report.section("attention_timing", "Paged attention speed", text, {"decode": dec, "prefill": pre})

    if report.left() < (0 if args.dry_run else 150):
        report.section("serve", "Serving", f"skipped: {report.left():.0f} s of the budget left", None)
    else:
        serve_section(report, cfg, args.vocab, workdir)
    status = "FAILED: " + ", ".join(report.failures) if report.failures else "all checks passed"
    report.section("summary", "Summary", f"{status}; {time.monotonic() - report.started:.0f} s", report.failures)
    return 1 if report.failures else 0


def serve_section(report: Report, cfg: dict, vocab_file: Path, workdir: Path) -> None:
    import dataclasses

    import device_serve
    import synth_gguf

    shape = synth_gguf.SHAPES[cfg["serve_shape"]]
    if cfg["serve_vocab"]:
        shape = dataclasses.replace(shape, vocab=cfg["serve_vocab"])
    # Memory-backed /dev/shm where it has room (a 5 GB write to a slow disk would eat the budget).
    shm = Path("/dev/shm")
    room = shm.is_dir() and shutil.disk_usage(shm).free > 3 * synth_gguf.file_bytes(shape)
    path = (shm if room and not cfg["serve_vocab"] else workdir) / f"lexi-{cfg['serve_shape']}.gguf"
    started = time.monotonic()
    size = synth_gguf.write_synthetic(path, shape, synth_gguf.load_vocab(str(vocab_file)))
    written = time.monotonic() - started
    port = device_serve.free_port()
    log = report.out / "serve.log"
    started = time.monotonic()
    proc = device_serve.start_server(path, port, log, cfg["serve_args"], cfg["serve_timeout"])
    ready = time.monotonic() - started
    rows = []
    try:
        for streams in cfg["streams"]:
            if report.left() < 20:
                break
            row = device_serve.measure(port, streams, cfg["prompt_words"], cfg["max_tokens"], timeout_s=report.left())
            rows.append(row)
            if row["ok"] < streams:
                report.failures.append(f"serve {streams} streams: {row['errors']}")
    finally:
        device_serve.stop_server(proc)
    text = (f"synthetic {cfg['serve_shape']} ({size / 1e9:.2f} GB, written in {written:.0f} s), server ready in "
            f"{ready:.0f} s; `serve {' '.join(cfg['serve_args'])}`; prompts of {cfg['prompt_words']} words, "
            f"{cfg['max_tokens']} tokens each (ignore_eos)\n\n" + device_serve.format_rows(rows))  # fmt: skip
    report.section("serve", "Serving", text, rows)
    path.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.path[:0] = [str(HERE), str(HERE.parent)]
    raise SystemExit(main())
