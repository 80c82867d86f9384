"""The paged-attention kernels compile for an H200 (sm_90) and fit its registers and shared memory.

No GPU is needed: Triton lowers a kernel to PTX, its bundled ptxas assembles the cubin, and cuobjdump
reports registers, stack (spilled registers) and the shared memory Triton asked for. The interpreter,
which the correctness tests use, checks none of that (it accepted a plain module-level float inside a
kernel, which the compiler refuses). The launchers run for real on CPU tensors, with the kernel's
`run` replaced by a recorder, so what is compiled is exactly the signature, constants, strides and launch
options the launcher would send to a GPU. Argument specialisation follows what Triton does at a launch:
16-byte aligned pointers and integers divisible by 16 carry `tt.divisibility`, integers equal to 1 become
constants. This runs in a subprocess: the kernel tests' conftest selects the interpreter, whose kernels
cannot be compiled. Triton here is 3.9; the target machine's 3.6 is not checked.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

SM90_SHARED_LIMIT = 227 * 1024  # bytes one block may use on sm_90
MAX_STACK = 128  # bytes of spill tolerated (the fp32 configurations spill up to ~120)
# (variant, dtype, GQA group, KV heads, head_dim, window, softcap, splits): the engine's shapes (SmolLM2:
# 9 heads / 3 KV heads, D 64; gemma3: 4 / 1, D 256, windowed) in bf16 and fp16, plus the fp32 tiles.
CASES = [
    ("decode", "bfloat16", 3, 3, 64, 0, 0.0, 1),
    ("decode", "bfloat16", 4, 1, 256, 512, 0.0, 1),
    ("decode", "float16", 4, 1, 256, 0, 30.0, 4),
    ("decode", "float32", 4, 1, 256, 0, 0.0, 4),
    ("prefill", "bfloat16", 3, 3, 64, 0, 0.0, 1),
    ("prefill", "bfloat16", 4, 1, 256, 512, 30.0, 1),
    ("prefill", "float32", 4, 2, 128, 0, 0.0, 1),
    ("prefill", "float32", 4, 1, 256, 0, 0.0, 1),
]


def test_kernels_compile_for_sm90():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == len(CASES) + sum(case[-1] > 1 for case in CASES)  # split-K cases add the merge kernel
    for name, res in results.items():
        print(f"{name}: {res}")
    for name, res in results.items():
        assert res["regs"] <= 255 and res["stack"] <= MAX_STACK, f"{name} spills: {res}"
        assert res["shared"] <= SM90_SHARED_LIMIT, f"{name} needs too much shared memory: {res}"


def _signature(kernel, args: tuple, kwargs: dict):
    """Triton's launch-time specialisation of these arguments, as (signature, constexprs, attrs)."""
    import torch

    names = kernel.arg_names
    values = dict(zip(names, args, strict=False)) | {k: v for k, v in kwargs.items() if k in names}
    constexpr_names = {names[i] for i in kernel.constexprs}
    signature, constexprs, attrs = {}, {}, {}
    for i, name in enumerate(names):
        value = values[name]
        if name in constexpr_names or (isinstance(value, int) and not isinstance(value, bool) and value == 1):
            signature[name], constexprs[name] = "constexpr", value
        elif isinstance(value, torch.Tensor):
            signature[name] = "*" + {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32",
                                     torch.int32: "i32", torch.int64: "i64"}[value.dtype]  # fmt: skip
            if value.data_ptr() % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(value, float):
            signature[name] = "fp32"
        else:
            signature[name] = "i32" if -(2**31) <= value < 2**31 else "i64"
            if value % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
    return signature, constexprs, attrs


def _compile_recorded(kernel, calls: list) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    (args, kwargs), *_ = calls
    signature, constexprs, attrs = _signature(kernel, args, kwargs)
    options = {k: kwargs[k] for k in ("num_warps", "num_stages") if k in kwargs}
    compiled = triton.compile(ASTSource(kernel, signature, constexprs, attrs), target=GPUTarget("cuda", 90, 32),
                              options=options)  # fmt: skip
    cubin = Path(os.environ["SM90_TMP"]) / f"{kernel.__name__}.cubin"
    cubin.write_bytes(compiled.asm["cubin"])
    cuobjdump = Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump"
    usage = subprocess.run([str(cuobjdump), "--dump-resource-usage", str(cubin)], capture_output=True, text=True)
    found = re.search(r"REG:(\d+) STACK:(\d+)", usage.stdout)
    assert found, usage.stdout + usage.stderr
    return {"regs": int(found[1]), "stack": int(found[2]), "shared": compiled.metadata.shared}


def _main() -> None:
    import tempfile

    import torch

    from lexi.kernels import paged_attention_decode as dec
    from lexi.kernels import paged_attention_prefill as pre
    from lexi.kernels.paged_attention import AttentionMetadata

    os.environ["SM90_TMP"] = tempfile.mkdtemp()
    results = {}
    for variant, dtype_name, group, n_kv, head_dim, window, softcap, splits in CASES:
        dtype = getattr(torch, dtype_name)
        new = [1, 1, 1] if variant == "decode" else [40, 1, 17]
        cached = [100, 7, 0]
        tables = [list(range(s * 10, s * 10 + 10)) for s in range(3)]
        meta = AttentionMetadata.build(new, cached, tables, 16)
        q = torch.zeros(sum(new), group * n_kv, head_dim, dtype=dtype)
        cache = torch.zeros(30, 16, n_kv, head_dim, dtype=dtype)
        label = f"{variant} {dtype_name} g{group} kv{n_kv} d{head_dim} w{window} cap{softcap} splits{splits}"
        recorded = {}
        kernels = [dec._paged_attention_decode_kernel, dec._paged_attention_reduce_kernel] if variant == "decode" else [
            pre._paged_attention_prefill_kernel]  # fmt: skip
        for kernel in kernels:
            recorded[kernel] = []
            kernel.run = lambda *a, _calls=recorded[kernel], grid, warmup, **kw: _calls.append((a, kw))
        kwargs = {"scale": head_dim**-0.5, "sliding_window": window, "softcap": softcap}
        if variant == "decode":
            dec.paged_attention_decode(q, cache, cache, meta, num_splits=splits, **kwargs)
        else:
            pre.paged_attention_prefill(q, cache, cache, meta, **kwargs)
        for kernel, calls in recorded.items():
            if calls:
                results[label + (" merge" if "reduce" in kernel.__name__ else "")] = _compile_recorded(kernel, calls)
            del kernel.run
    print(json.dumps(results))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    _main()
