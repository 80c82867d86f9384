"""Quantized matmul on CUDA: decode bandwidth and prefill throughput of lexi.kernels.qmatmul, per GGUF type.

For each type and weight shape N x K it measures, with bf16 activations:
  - M=1: time and achieved GB/s (weight bytes / time) against the device copy bandwidth measured in this run;
  - M=4 and M=16: time (the GEMV kernel, split-K);
  - M=2048: TFLOP/s of the GEMM kernel, against torch.matmul in bf16 on the already-dequantized weight
    (the dense ceiling) and against dequantize-then-matmul (lexi.gguf.dequant + bf16 matmul every call);
  - max rel err: max |y - y_ref| / max |y_ref| of qmatmul for M in {1, 16, 300} against an fp32 matmul on
    the dequantized weight (bf16 output rounding alone is ~4e-3), so a first GPU run is also a check.
Prints one table and appends it to bench/RESULTS.md with the date, the commit and the GPU name.

    python bench/qmatmul.py [--types Q4_K,Q8_0] [--shapes 4096x4096,151936x1024] [--no-append]
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
from pathlib import Path

import torch

SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336), (151936, 1024)]
TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
         "IQ4_NL", "IQ4_XS", "MXFP4"]  # fmt: skip
F16_FIELDS = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0], "Q2_K": [80, 82],
              "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208], "IQ4_NL": [0], "IQ4_XS": [0],
              "MXFP4": []}  # fmt: skip
MXFP4_SCALE_BYTES = (110, 119)  # E8M0 block scales 2^-18 to 2^-10: weights of ~1e-3, like the fp16 scales above
RESULTS = Path(__file__).with_name("RESULTS.md")


def random_weight(qtype_name: str, n: int, k: int, device: str):
    """Random valid GGUF blocks on the device: uniform bytes, fp16 scale fields small and finite."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    from lexi.kernels.qmatmul import QuantWeight

    qtype = GGMLQuantizationType[qtype_name]
    if qtype_name in ("F32", "F16", "BF16"):
        return QuantWeight.from_float(torch.randn(n, k, device=device) * 0.02, qtype)
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    blocks = torch.randint(0, 256, (n * k // block_size, type_size), dtype=torch.uint8, device=device)
    for off in F16_FIELDS[qtype_name]:
        d = ((torch.rand(blocks.shape[0], device=device) * 2 - 1) * 1e-3).to(torch.float16)
        blocks[:, off : off + 2] = d.view(torch.uint8).reshape(-1, 2)
    if qtype_name == "MXFP4":
        blocks[:, 0] = torch.randint(*MXFP4_SCALE_BYTES, (blocks.shape[0],), dtype=torch.uint8, device=device)
    return QuantWeight(qtype, (n, k), blocks.reshape(n, -1))


def copy_bandwidth(do_bench) -> float:
    """Device-to-device copy of 1 GiB: bytes read plus bytes written, per second (GB/s)."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=10, rep=100)
    return 2 * src.numel() / (ms * 1e-3) / 1e9


def bench_one(qtype_name: str, n: int, k: int, do_bench, copy_gbs: float, device: str = "cuda") -> dict:
    from lexi.kernels.qmatmul import qmatmul
    from lexi.kernels.qmatmul_ref import dequantize_weight

    w = random_weight(qtype_name, n, k, device)
    row = {"type": qtype_name, "shape": f"{n}x{k}", "MB": w.nbytes / 1e6}
    # Correctness on the real GPU first: both kernels against fp32 dequantize-then-matmul.
    dense32 = dequantize_weight(w)
    errs = []
    for m in (1, 16, 300):
        x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
        want = x.float() @ dense32.T
        errs.append(((qmatmul(x, w).float() - want).abs().max() / want.abs().max()).item())
    row["rel_err"] = max(errs)
    del dense32
    for m in (1, 4, 16):
        x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
        row[f"us_m{m}"] = do_bench(lambda x=x: qmatmul(x, w)) * 1e3
    row["gbs_m1"] = w.nbytes / (row["us_m1"] * 1e-6) / 1e9
    row["pct_copy"] = 100 * row["gbs_m1"] / copy_gbs
    m = 2048
    x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
    flops = 2 * m * n * k
    dense = dequantize_weight(w).to(torch.bfloat16)
    t_q = do_bench(lambda: qmatmul(x, w))
    t_dense = do_bench(lambda d=dense: torch.matmul(x, d.T))
    del dense
    t_deq = do_bench(lambda: torch.matmul(x, dequantize_weight(w).to(torch.bfloat16).T))
    row["tflops"] = flops / (t_q * 1e-3) / 1e12
    row["tflops_dense"] = flops / (t_dense * 1e-3) / 1e12
    row["tflops_deq"] = flops / (t_deq * 1e-3) / 1e12
    if device == "cuda":
        torch.cuda.empty_cache()
    return row


COLUMNS = [("type", "{}"), ("shape", "{}"), ("MB", "{:.1f}"), ("us_m1", "{:.1f}"), ("gbs_m1", "{:.0f}"),
           ("pct_copy", "{:.0f}%"), ("us_m4", "{:.1f}"), ("us_m16", "{:.1f}"), ("tflops", "{:.1f}"),
           ("tflops_dense", "{:.1f}"), ("tflops_deq", "{:.1f}"), ("rel_err", "{:.1e}")]  # fmt: skip
HEADERS = ["type", "N x K", "weight MB", "M=1 us", "M=1 GB/s", "of copy", "M=4 us", "M=16 us",
           "M=2048 TFLOP/s", "bf16 dense TFLOP/s", "dequant+mm TFLOP/s", "max rel err"]  # fmt: skip


def format_table(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    for r in rows:
        lines.append("| " + " | ".join(fmt.format(r[key]) for key, fmt in COLUMNS) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", default=",".join(TYPES))
    parser.add_argument("--shapes", default=",".join(f"{n}x{k}" for n, k in SHAPES))
    parser.add_argument("--no-append", action="store_true", help="print only, do not append to bench/RESULTS.md")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench/qmatmul.py needs a CUDA GPU (torch.cuda.is_available() is False); nothing measured.")
        return 2
    from triton.testing import do_bench

    types = [t.strip() for t in args.types.split(",") if t.strip()]
    unknown = sorted(set(types) - set(TYPES))
    if unknown:
        parser.error(f"--types: unknown {unknown}; choose from {TYPES}")
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",") if s.strip()]
    gpu = torch.cuda.get_device_name()
    copy_gbs = copy_bandwidth(do_bench)
    print(f"{gpu}: device copy bandwidth {copy_gbs:.0f} GB/s (read + write)", flush=True)
    rows = []
    for qtype_name in types:
        for n, k in shapes:
            rows.append(bench_one(qtype_name, n, k, do_bench, copy_gbs))
            print(format_table(rows[-1:]).splitlines()[-1], flush=True)
    table = format_table(rows)
    print(table)
    if not args.no_append:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent).stdout.strip() or "unknown"  # fmt: skip
        date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        with RESULTS.open("a") as f:
            f.write(f"\n## qmatmul, {date}, commit {commit}, {gpu}\n\n")
            f.write(f"bf16 activations; device copy bandwidth {copy_gbs:.0f} GB/s; "
                    "GB/s = weight bytes / M=1 time.\n\n")  # fmt: skip
            f.write(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
