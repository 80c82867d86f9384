"""The one compiled part of LexiEngine: the CPU kernels (lexi/kernels/cpu, plain C, no torch headers).

Everything else is configured in pyproject.toml; setuptools reads the extension from here.
"""

from pathlib import Path

from setuptools import Extension, setup

CPU = Path("lexi/kernels/cpu")

setup(
    ext_modules=[
        Extension(
            "lexi.kernels._cpu",
            sources=[
                str(CPU / f)
                for f in (
                    "module.c",
                    "qgemm.c",
                    "pool.c",
                    "gemm_scalar.c",
                    "gemm_avx2.c",
                    "gemv_avx2.c",
                    "gemm_x8_avx2.c",
                    "gemm_x8_vnni.c",
                    "repack.c",
                    "moe.c",
                    "decode.c",
                    "decode_attn.c",
                    "decode_math.c",
                    "attn_avx2.c",
                    "act_avx2.c",
                )
            ],
            depends=[str(p) for p in CPU.glob("*.h")],
            # No -march: the AVX2 and AVX-512 VNNI kernels are compiled for their ISA by their own file's pragma and
            # chosen at run time (module.c), so the package builds and runs on any x86-64 CPU.
            # -ffp-contract=off: a*b+c stays two roundings unless written as fma, in the portable and AVX2 files alike
            # (gcc would contract it only where FMA is enabled, and the ISAs would no longer agree bit for bit).
            extra_compile_args=[
                "-O3",
                "-std=gnu11",
                "-fno-strict-aliasing",
                "-ffp-contract=off",
                "-Wall",
                "-Wno-unknown-pragmas",
            ],
            libraries=["pthread", "m"],
        )
    ]
)
