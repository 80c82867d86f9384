"""Every kernel compiles for AMD's MI300X (gfx942, ROCm), no GPU needed, and fits its registers and LDS.

Triton's AMD backend ships in the triton wheel with its own LLVM and linker (lld), so it lowers a kernel to AMDGCN
assembly and a code object (hsaco) on any x86 machine. The launchers run for real on CPU tensors with each
kernel's `run` replaced by a recorder (as in test_paged_attention_sm90.py), so what is compiled is exactly the
signature, constants and launch options the launcher would send: the quantized matmul for every GGUF type (GEMV
at 1, 4 and 16 rows and the GEMM, bf16 activations, plus fp32 activations as the output layer on CUDA reads
them) and the paged attention kernels on the engine's shapes. Checked from the assembly's metadata: no VGPR
spills, no scratch memory, and the LDS Triton asks for within the 64 KiB a gfx942 workgroup may use. A subprocess
runs it: the test session runs Triton in its interpreter, whose kernels cannot be compiled. SGPR spills (to VGPR
lanes, not memory) are printed, not refused. Nothing here runs a kernel on AMD hardware: that needs a ROCm
machine (README, "AMD").
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

GFX942_LDS = 64 * 1024
GROUPS = ["F32,F16,BF16,Q4_0,Q4_1,Q5_0,Q5_1,Q8_0", "Q2_K,Q3_K,Q4_K,Q5_K,Q6_K,IQ4_NL,IQ4_XS,MXFP4,attention"]


def test_kernels_compile_for_gfx942():
    pytest.importorskip("triton.backends.amd")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"

    def child(group: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, __file__, group], env=env, capture_output=True, text=True, timeout=900)

    with ThreadPoolExecutor(len(GROUPS)) as pool:  # two compilers at once: each is single-threaded
        procs = list(pool.map(child, GROUPS))
    results = {}
    for proc in procs:
        assert proc.returncode == 0, proc.stderr[-4000:]
        results.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    for name, res in results.items():
        print(f"{name}: {res}")
    assert len(results) >= 16 * 6 + 8
    for name, res in results.items():
        assert res["hsaco"] > 0, name
        assert res["vgpr_spill"] == res["scratch"] == 0, f"{name} spills registers to memory: {res}"
        assert res["lds"] <= GFX942_LDS, f"{name} needs too much LDS: {res}"


def _signature(kernel, args: tuple, kwargs: dict):
    """Triton's launch-time specialisation of these arguments, as (signature, constexprs, attrs)."""
    import torch

    names = kernel.arg_names
    values = dict(zip(names, args, strict=False)) | {k: v for k, v in kwargs.items() if k in names}
    constexpr_names = {names[i] for i in kernel.constexprs}
    kinds = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32", torch.int32: "i32",
             torch.int64: "i64", torch.uint8: "u8"}  # fmt: skip
    signature, constexprs, attrs = {}, {}, {}
    for i, name in enumerate(names):
        value = values[name]
        if name in constexpr_names or (isinstance(value, int) and not isinstance(value, bool) and value == 1):
            signature[name], constexprs[name] = "constexpr", value
        elif isinstance(value, torch.Tensor):
            signature[name] = "*" + kinds[value.dtype]
            if value.data_ptr() % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(value, float):
            signature[name] = "fp32"
        else:
            signature[name] = "i32" if -(2**31) <= value < 2**31 else "i64"
            if value % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
    return signature, constexprs, attrs


def _compile(kernel, call) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    args, kwargs = call
    signature, constexprs, attrs = _signature(kernel, args, kwargs)
    options = {k: kwargs[k] for k in ("num_warps", "num_stages") if k in kwargs}
    compiled = triton.compile(ASTSource(kernel, signature, constexprs, attrs), target=GPUTarget("hip", "gfx942", 64),
                              options=options)  # fmt: skip
    asm = compiled.asm["amdgcn"]

    def field(name: str) -> int:
        found = re.findall(rf"\.{name}:\s+(\d+)", asm)
        assert found, f"no .{name} in the assembly of {kernel.__name__}"
        return max(int(v) for v in found)

    return {"vgpr": field("vgpr_count"), "vgpr_spill": field("vgpr_spill_count"),
            "sgpr_spill": field("sgpr_spill_count"), "scratch": field("private_segment_fixed_size"),
            "lds": compiled.metadata.shared, "hsaco": len(compiled.asm["hsaco"])}  # fmt: skip


def _record(kernels: list) -> dict:
    calls: dict = {}
    for kernel in kernels:
        calls[kernel] = []
        kernel.run = lambda *a, _calls=calls[kernel], grid, warmup, **kw: _calls.append((a, kw))
    return calls


def _qmatmul_cases(qtypes: list[str]) -> dict:
    import torch
    from gguf import GGML_QUANT_SIZES
    from gguf import GGMLQuantizationType as Q

    from lexi.kernels import qmatmul_gemm as gemm
    from lexi.kernels import qmatmul_gemv as gemv
    from lexi.kernels.qmatmul import QuantWeight

    results = {}
    n, k = 4096, 4096
    for name in qtypes:
        qtype = Q[name]
        if name in ("F32", "F16", "BF16"):
            w = QuantWeight.from_float(torch.zeros(n, k), qtype)
        else:
            block, size = GGML_QUANT_SIZES[qtype]
            w = QuantWeight(qtype, (n, k), torch.zeros(n, k // block * size, dtype=torch.uint8))
        for dtype, rows in ((torch.bfloat16, (1, 4, 16, 64)), (torch.float32, (1, 64))):
            for m in rows:
                calls = _record([gemv._qmatmul_gemv_kernel, gemm._qmatmul_gemm_kernel])
                x = torch.zeros(m, k, dtype=dtype)
                (gemv.qmatmul_gemv if m <= 16 else gemm.qmatmul_gemm)(x, w)
                for kernel, recorded in calls.items():
                    if recorded:
                        label = f"{name} {kernel.__name__.strip('_')} {str(dtype)[6:]} M={m}"
                        results[label] = _compile(kernel, recorded[0])
                    del kernel.run
    return results


def _attention_cases() -> dict:
    import torch

    from lexi.kernels import paged_attention_decode as dec
    from lexi.kernels import paged_attention_prefill as pre
    from lexi.kernels.paged_attention import AttentionMetadata

    # (variant, dtype, GQA group, KV heads, head_dim, window, softcap, splits): SmolLM2, Gemma 3, Llama-3-8B.
    cases = [
        ("decode", "bfloat16", 3, 3, 64, 0, 0.0, 1), ("decode", "bfloat16", 4, 1, 256, 512, 0.0, 1),
        ("decode", "bfloat16", 4, 8, 128, 0, 0.0, 4), ("decode", "float32", 4, 1, 256, 0, 0.0, 4),
        ("prefill", "bfloat16", 3, 3, 64, 0, 0.0, 1), ("prefill", "bfloat16", 4, 1, 256, 512, 30.0, 1),
        ("prefill", "bfloat16", 4, 8, 128, 0, 0.0, 1), ("prefill", "float32", 4, 1, 256, 0, 0.0, 1),
    ]  # fmt: skip
    results = {}
    for variant, dtype_name, group, n_kv, head_dim, window, softcap, splits in cases:
        dtype = getattr(torch, dtype_name)
        new = [1, 1, 1] if variant == "decode" else [40, 1, 17]
        meta = AttentionMetadata.build(new, [100, 7, 0], [list(range(s * 10, s * 10 + 10)) for s in range(3)], 16)
        q = torch.zeros(sum(new), group * n_kv, head_dim, dtype=dtype)
        cache = torch.zeros(30, 16, n_kv, head_dim, dtype=dtype)
        kernels = [dec._paged_attention_decode_kernel, dec._paged_attention_reduce_kernel] if variant == "decode" else [
            pre._paged_attention_prefill_kernel]  # fmt: skip
        calls = _record(kernels)
        kwargs = {"scale": head_dim**-0.5, "sliding_window": window, "softcap": softcap}
        if variant == "decode":
            dec.paged_attention_decode(q, cache, cache, meta, num_splits=splits, **kwargs)
        else:
            pre.paged_attention_prefill(q, cache, cache, meta, **kwargs)
        label = f"{variant} {dtype_name} g{group} kv{n_kv} d{head_dim} w{window} cap{softcap} splits{splits}"
        for kernel, recorded in calls.items():
            if recorded:
                results[label + (" merge" if "reduce" in kernel.__name__ else "")] = _compile(kernel, recorded[0])
            del kernel.run
    return results


def _main(group: str) -> None:
    import torch

    # The launchers choose by the torch build (lexi.kernels.paged_attention_common.gpu_backend): this CPU-only
    # torch stands in for a ROCm build, so they send what they would send on an MI300X.
    torch.version.hip = "6.4"
    names = group.split(",")
    results = _qmatmul_cases([n for n in names if n != "attention"])
    if "attention" in names:
        results |= _attention_cases()
    print(json.dumps(results))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    _main(sys.argv[1])
