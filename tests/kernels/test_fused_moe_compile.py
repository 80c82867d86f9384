"""The fused-MoE kernel compiles for an H200 (sm_90) and an MI300X (gfx942), no GPU needed, and fits.

`fused_moe_triton` runs on CPU tensors with the kernel's `run` recorded (tests/kernels/launch_compile.py), so each
compile is exactly a launch the dispatch sends: the gated gate/up projection and the weighted down projection, in
the GEMV form (1, 4 and 16 tokens: broadcast and tl.dot paths) and the grouped GEMM (256 tokens), with bf16
activations and fp32 ones (--dtype float32 on a GPU: "ieee" FMA products), for a Qwen3-30B-A3B-like Q4_K_M layer
(Q4_K gate/up, Q6_K down), a gpt-oss-like MXFP4 layer (biases, clamped SwiGLU), and Q8_0 and BF16 layers. Checked:
sm_90 no stack (spilled registers, from cuobjdump) and shared memory within 227 KiB; gfx942 no VGPR spills, no
scratch, LDS within the 64 KiB a workgroup may use. A child process compiles (the session runs the interpreter).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from launch_compile import child_env

SM90_SHARED = 227 * 1024
GFX942_LDS = 64 * 1024
# name: ((gate, up, down types), activation, biases, (D, F))
LAYERS = {
    "qwen3moe-Q4_K_M": (("Q4_K", "Q4_K", "Q6_K"), "silu", False, (2048, 768)),
    "gpt-oss-MXFP4": (("MXFP4", "MXFP4", "MXFP4"), "swiglu_oai", True, (2880, 2880)),
    "Q8_0": (("Q8_0", "Q8_0", "Q8_0"), "silu", False, (1024, 512)),
    "BF16": (("BF16", "BF16", "BF16"), "silu", False, (1024, 512)),
}
FORMS = [("bfloat16", 1), ("bfloat16", 4), ("bfloat16", 16), ("bfloat16", 256), ("float32", 1), ("float32", 16),
         ("float32", 256)]  # fmt: skip


@pytest.mark.parametrize("target", ["sm90", "gfx942"])
def test_fused_moe_compiles(target):
    pytest.importorskip("triton.backends.nvidia" if target == "sm90" else "triton.backends.amd")
    proc = subprocess.run([sys.executable, __file__, target], env=child_env(), capture_output=True, text=True,
                          timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, res in results.items():
        print(f"{target} {name}: {res}")
    assert len(results) == len(LAYERS) * len(FORMS) * 2  # gate/up and down per launch
    for name, res in results.items():
        if target == "sm90":
            assert res["regs"] <= 255 and res["stack"] == 0, f"{name} spills: {res}"
            assert res["shared"] <= SM90_SHARED, f"{name} needs too much shared memory: {res}"
        else:
            assert res["hsaco"] > 0 and res["vgpr_spill"] == res["scratch"] == 0, f"{name} spills: {res}"
            assert res["lds"] <= GFX942_LDS, f"{name} needs too much LDS: {res}"


def _main(target: str) -> None:
    import torch
    from gguf import GGML_QUANT_SIZES
    from gguf import GGMLQuantizationType as Q
    from launch_compile import compile_gfx942, compile_sm90, record, release

    from lexi.kernels import fused_moe_triton as fmt
    from lexi.kernels.moe_types import ExpertFFN, ExpertWeights, GatedActivation

    if target == "gfx942":
        torch.version.hip = "6.4"  # the launchers would choose by the torch build; this CPU torch stands in for ROCm
    compile_one = compile_sm90 if target == "sm90" else compile_gfx942
    n_experts, top_k = 4, 2

    def experts(name: str, n: int, k: int) -> ExpertWeights:
        qtype = Q[name]
        block, size = GGML_QUANT_SIZES[qtype]
        return ExpertWeights(qtype, (n_experts, n, k), torch.zeros(n_experts, n, k // block * size, dtype=torch.uint8))

    results = {}
    for layer, ((gate, up, down), act, biases, (d, f)) in LAYERS.items():
        bias = {"gate_bias": torch.zeros(n_experts, f), "up_bias": torch.zeros(n_experts, f),
                "down_bias": torch.zeros(n_experts, d)} if biases else {}  # fmt: skip
        ffn = ExpertFFN(experts(gate, f, d), experts(up, f, d), experts(down, d, f), GatedActivation(act), **bias)
        for dtype_name, n_tokens in FORMS:
            x = torch.zeros(n_tokens, d, dtype=getattr(torch, dtype_name))
            ids = (torch.arange(n_tokens * top_k) % n_experts).reshape(n_tokens, top_k)
            weights = torch.full((n_tokens, top_k), 0.5)
            variant = "gemv" if n_tokens <= fmt.GEMV_MAX_TOKENS else "gemm"
            calls = record([fmt._moe_matmul_grouped_kernel])
            fmt.fused_moe_triton(x, ffn, ids, weights, variant)
            release(calls)
            (launches,) = calls.values()
            assert len(launches) == 2, launches
            for which, call in zip(("gate_up", "down"), launches, strict=True):
                label = f"{layer} {dtype_name} T={n_tokens} {which}"
                results[label] = compile_one(fmt._moe_matmul_grouped_kernel, call)
    print(json.dumps(results))


if __name__ == "__main__":
    sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2])]
    _main(sys.argv[1])
