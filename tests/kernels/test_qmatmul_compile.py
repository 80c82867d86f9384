"""The qmatmul kernels compile for a real GPU (sm_90, no device needed), with their default tiles.

The interpreter runs the kernels' Python, not Triton's code generator, so constructs the compiler refuses
(chained `or` of constexprs, say) or tiles that spill would pass every interpreter test. This compiles each
kernel specialisation the launchers use with bf16 and fp32 activations through to a cubin, in a child process
without TRITON_INTERPRET (this session's conftest sets it), and checks ptxas reports no register spills (with fp32
activations, whose "ieee" products are FMA loops, a few bytes: measured 16-32 with the fp32 GEMM tiles).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent(
    """
    import os, re, subprocess, tempfile
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from gguf import GGMLQuantizationType as Q
    import torch
    from lexi.kernels.qmatmul_gemm import _qmatmul_gemm_kernel, gemm_tiles
    from lexi.kernels.qmatmul_gemv import _qmatmul_gemv_kernel, qmatmul_gemv

    defaults = lambda f: {k: v.default for k, v in __import__("inspect").signature(f).parameters.items()}
    gemv_d = defaults(qmatmul_gemv)
    target = GPUTarget("cuda", 90, 32)
    bin_dir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    # Triton 3.9 emits PTX newer than its plain ptxas reads; the Blackwell ptxas reads both.
    ptxas = next(p for p in (os.path.join(bin_dir, n) for n in ("ptxas-blackwell", "ptxas")) if os.path.exists(p))
    wptr = {Q.F32: "*fp32", Q.F16: "*fp16", Q.BF16: "*bf16"}
    ints = lambda *names: {n: "i32" for n in names}
    consts = lambda *names: {n: "constexpr" for n in names}
    # bf16 activations (the layers on CUDA) and fp32 ones (the output layer on CUDA: "ieee" FMA products)
    for qt, act in [(Q[n], a) for n in os.environ["QTYPES"].split(",") for a in ("bf16", "fp32")]:
        gemv_sig = {"x_ptr": f"*{act}", "w_ptr": wptr.get(qt, "*u8"), "y_ptr": "*fp32",
                    **ints("M", "N", "K", "k_per_split", "stride_xm", "stride_wn", "stride_ys", "stride_ym"),
                    **consts("QTYPE", "BLOCK_M", "BLOCK_N", "BLOCK_K", "USE_DOT", "DOT_FP32")}
        gemm_sig = {"x_ptr": f"*{act}", "w_ptr": wptr.get(qt, "*u8"), "y_ptr": f"*{act}",
                    **ints("M", "N", "K", "stride_xm", "stride_wn", "stride_ym"),
                    **consts("QTYPE", "BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "DOT_FP32")}
        gemm_d = gemm_tiles(torch.float32 if act == "fp32" else torch.bfloat16)
        kernels = [
            (_qmatmul_gemv_kernel, gemv_sig, dict(BLOCK_M=block_m, BLOCK_N=gemv_d["block_n"],
             BLOCK_K=gemv_d["block_k"], USE_DOT=block_m == 16), dict(num_warps=gemv_d["num_warps"]))
            for block_m in (4, 16)
        ] + [(_qmatmul_gemm_kernel, gemm_sig, dict(BLOCK_M=gemm_d["block_m"], BLOCK_N=gemm_d["block_n"],
              BLOCK_K=gemm_d["block_k"], GROUP_M=gemm_d["group_m"]),
              dict(num_warps=gemm_d["num_warps"], num_stages=gemm_d["num_stages"]))]
        for fn, sig, cx, opts in kernels:
            k = triton.compile(ASTSource(fn, sig, {"QTYPE": int(qt), "DOT_FP32": act == "fp32", **cx}),
                               target=target, options=opts)
            with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
                f.write(k.asm["ptx"])
            r = subprocess.run([ptxas, "-v", "-arch=sm_90a", f.name, "-o", os.devnull], capture_output=True,
                               text=True)
            os.unlink(f.name)
            spills = [int(s) for s in re.findall(r"(\\d+) bytes spill stores", r.stderr)]
            regs = re.findall(r"Used (\\d+) registers", r.stderr)
            print(qt.name, act, fn.__name__, cx["BLOCK_M"], "regs", regs, "spills", spills, flush=True)
            assert r.returncode == 0 and "cubin" in k.asm, r.stderr[-2000:]
            # fp32 FMA tiles may spill a little (as the fp32 attention tiles do), bf16 ones not at all.
            allowed = FP32_SPILL_BYTES if act == "fp32" else 0
            what = f"{qt.name} {act} {fn.__name__} {cx}"
            assert len(spills) == 1 and spills[0] <= allowed, f"{what}: {spills} bytes spilled"
    print("ALL OK")
    """
).replace("FP32_SPILL_BYTES", "64")
TYPE_GROUPS = ["F32,F16,BF16,Q4_0,Q4_1", "Q5_0,Q5_1,Q8_0,Q2_K", "Q3_K,Q4_K,Q5_K,Q6_K", "IQ4_NL,IQ4_XS,MXFP4"]


@pytest.mark.parametrize("qtypes", TYPE_GROUPS)
def test_kernels_compile_for_sm90_without_spills(qtypes):
    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["QTYPES"] = qtypes
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "ALL OK" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
