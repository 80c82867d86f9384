"""Compiling what a launcher would launch, for a GPU that is not here (sm_90 and gfx942), from CPU tensors.

The launcher runs for real with each kernel's `run` replaced by a recorder (`record`), so what is compiled is
exactly the signature, constants, strides and launch options it would send. `signature` follows Triton's
launch-time specialisation: 16-byte aligned pointers and integers divisible by 16 carry `tt.divisibility`,
integers equal to 1 become constants. Must run without TRITON_INTERPRET (interpreted kernels cannot be
compiled): the tests call it in a child process. The paged-attention and gfx942 tests hold older copies of
these helpers.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

_KINDS = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "int32": "i32", "int64": "i64", "uint8": "u8"}


def record(kernels: list) -> dict:
    """Replace each kernel's `run` by a recorder; returns kernel -> list of (args, kwargs). Undo with `release`."""
    calls: dict = {}
    for kernel in kernels:
        calls[kernel] = []
        kernel.run = lambda *a, _calls=calls[kernel], grid, warmup, **kw: _calls.append((a, kw))
    return calls


def release(calls: dict) -> None:
    for kernel in calls:
        del kernel.run


def signature(kernel, args: tuple, kwargs: dict):
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
            signature[name] = "*" + _KINDS[str(value.dtype).removeprefix("torch.")]
            if value.data_ptr() % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(value, float):
            signature[name] = "fp32"
        else:
            signature[name] = "i32" if -(2**31) <= value < 2**31 else "i64"
            if value % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
    return signature, constexprs, attrs


def _compile(kernel, call, target):
    import triton
    from triton.compiler import ASTSource

    args, kwargs = call
    sig, constexprs, attrs = signature(kernel, args, kwargs)
    options = {k: kwargs[k] for k in ("num_warps", "num_stages") if k in kwargs}
    return triton.compile(ASTSource(kernel, sig, constexprs, attrs), target=target, options=options)


def compile_sm90(kernel, call) -> dict:
    """Registers, stack bytes (spills) and shared memory of the cubin for an H100/H200, from cuobjdump."""
    import triton
    from triton.backends.compiler import GPUTarget

    compiled = _compile(kernel, call, GPUTarget("cuda", 90, 32))
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / f"{kernel.__name__}.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        cuobjdump = Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump"
        usage = subprocess.run([str(cuobjdump), "--dump-resource-usage", str(cubin)], capture_output=True, text=True)
    found = re.search(r"REG:(\d+) STACK:(\d+)", usage.stdout)
    assert found, usage.stdout + usage.stderr
    return {"regs": int(found[1]), "stack": int(found[2]), "shared": compiled.metadata.shared}


def compile_gfx942(kernel, call) -> dict:
    """VGPRs, spills, scratch and LDS of the code object for an MI300X, from the AMDGCN assembly's metadata."""
    from triton.backends.compiler import GPUTarget

    compiled = _compile(kernel, call, GPUTarget("hip", "gfx942", 64))
    asm = compiled.asm["amdgcn"]

    def field(name: str) -> int:
        found = re.findall(rf"\.{name}:\s+(\d+)", asm)
        assert found, f"no .{name} in the assembly of {kernel.__name__}"
        return max(int(v) for v in found)

    return {"vgpr": field("vgpr_count"), "vgpr_spill": field("vgpr_spill_count"),
            "sgpr_spill": field("sgpr_spill_count"), "scratch": field("private_segment_fixed_size"),
            "lds": compiled.metadata.shared, "hsaco": len(compiled.asm["hsaco"])}  # fmt: skip


def child_env() -> dict:
    """The environment for a compiling child: this one without the interpreter, with the GPU default fp fusion."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    return env
