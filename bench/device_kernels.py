"""The device check's measurements of the kernels and the model, each usable on its own (bench/device_check.py).

Every function takes the device ("cuda", or "cpu" for the dry run under Triton's interpreter) and returns plain
rows (dicts) for the tables. Checks compare against fp32 references on the same device; `ok` applies TOL.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path

TOL = {"bfloat16": 2e-2, "float16": 5e-3, "float32": 1e-3}  # max |err| / max |ref|


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
    """Tiny synthetic models of each family (qwen3moe: the fused MoE kernels in a model): --kernels triton against
    reference, teacher-forced logits."""
    import synth_gguf
    import torch

    from lexi.gguf.reader import read_gguf
    from lexi.model.loader import LoadConfig, load_model
    from lexi.model.single import SingleSequence

    rows = []
    vocab = synth_gguf.load_vocab(str(vocab_file))
    for name in ("tiny-llama", "tiny-qwen3", "tiny-gemma3", "tiny-qwen3moe"):
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
