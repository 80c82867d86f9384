"""The CPU kernels (lexi/kernels/cpu): every type's unpacking against gguf-py's dequantizer, the arithmetic against
an exact float64 reference over the same int8 activations, and bit-for-bit agreement between every ISA, kernel
shape and batch size (what --deterministic relies on).

The reference follows lexi_cpu.h's contract: x is quantized to int8 with one scale per 32 values (per 256 for the
K-quants and IQ4_XS), rounding half to even; the product with gguf-py's dequantized weights in float64 is then
the answer up to float32 rounding of the kernels' per-block sums (relative 1e-5 here).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize as gguf_dequantize

from lexi.kernels.cpu_qmatmul import CPU_KERNEL_TYPES, CpuKernels, CpuWeight, available_isas, cpu_qmatmul, release_pages

Q = GGMLQuantizationType
TYPES = sorted(CPU_KERNEL_TYPES, key=int)
# Byte offsets of each type's fp16 fields; MXFP4's scale is an E8M0 byte.
F16_FIELDS = {
    Q.Q4_0: (0,), Q.Q4_1: (0, 2), Q.Q5_0: (0,), Q.Q5_1: (0, 2), Q.Q8_0: (0,), Q.Q2_K: (80, 82), Q.Q3_K: (108,),
    Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,), Q.IQ4_NL: (0,), Q.IQ4_XS: (0,),
}  # fmt: skip


def random_rows(qtype: GGMLQuantizationType, n: int, k: int, seed: int) -> np.ndarray:
    """(n, row_bytes) of random valid blocks: uniform bytes, finite scales of both signs."""
    rng = np.random.default_rng(seed)
    block, size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n, k // block, size), dtype=np.uint8)
    if qtype == Q.MXFP4:
        raw[:, :, 0] = rng.integers(110, 135, size=(n, k // block), dtype=np.uint8)
    else:
        for off in F16_FIELDS[qtype]:
            raw[:, :, off : off + 2] = rng.uniform(-0.2, 0.2, (n, k // block, 1)).astype(np.float16).view(np.uint8)
    return raw.reshape(n, -1)


def shape_for(qtype: GGMLQuantizationType) -> tuple[int, int]:
    """Ragged: N is not a multiple of the 8-row strips, K spans a partial 1024-value chunk."""
    return (29, 1536) if GGML_QUANT_SIZES[qtype][0] == 256 else (29, 1120)


def quantize_one(xb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int8 per block (last axis) with scale amax / 127, half to even: (q float32, d float32)."""
    d = (np.abs(xb).max(-1) / np.float32(127)).astype(np.float32)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0).astype(np.float32)
    return np.rint(xb * inv[..., None]).astype(np.float32), d


def quantize_ref(x: np.ndarray, block: int, terms: int) -> list[np.ndarray]:
    """x as the kernels see it, in float64, one array per term: the int8 values, then (two terms) what they leave."""
    m, k = x.shape
    xb = x.reshape(m, k // block, block)
    q, d = quantize_one(xb)
    first = q * d[..., None]
    out = [first.astype(np.float64).reshape(m, k)]
    if terms == 2:
        q2, d2 = quantize_one((xb - d[..., None] * q).astype(np.float32))
        out.append((q2 * d2[..., None]).astype(np.float64).reshape(m, k))
    return out


def run(kernels: CpuKernels, weights: list[CpuWeight], x: np.ndarray) -> np.ndarray:
    return cpu_qmatmul(torch.from_numpy(x), weights, kernels).numpy()


@pytest.fixture(scope="module", params=["int16", "int8"])
def kernels(request) -> dict[str, CpuKernels]:
    return {isa: CpuKernels(2, isa, request.param) for isa in available_isas()}


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_unpacking_equals_gguf_dequantize(kernels, qtype):
    n, k = shape_for(qtype)
    rows = random_rows(qtype, n, k, seed=int(qtype))
    want = gguf_dequantize(rows, qtype).astype(np.float32).reshape(n, k)
    for isa, kern in kernels.items():
        got = np.zeros((n, k), np.float32)
        kern.impl.dequantize(int(qtype), rows.ctypes.data, n, rows.shape[1], k, got.ctypes.data)
        # D s v + Dm o is the file's formula regrouped: within a float32 rounding of the largest weight.
        err = np.abs(got - want).max() / np.abs(want).max()
        assert err < 1e-6, f"{isa}: {qtype.name} unpacked weights off by {err:.2e} of their range"


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_products_against_float64_reference(kernels, qtype):
    n, k = shape_for(qtype)
    rows = random_rows(qtype, n, k, seed=100 + int(qtype))
    w = gguf_dequantize(rows, qtype).astype(np.float64).reshape(n, k)
    x = np.random.default_rng(1).standard_normal((6, k)).astype(np.float32)
    block = 256 if GGML_QUANT_SIZES[qtype][0] == 256 else 32
    terms = next(iter(kernels.values())).terms
    want = sum(part @ w.T for part in quantize_ref(x, block, terms))
    results = {}
    for isa, kern in kernels.items():
        got = run(kern, [CpuWeight.from_rows(rows, qtype, (n, k))], x)
        err = np.abs(got - want).max() / np.abs(want).max()
        assert err < 1e-5, f"{isa}: {qtype.name} off the float64 reference by {err:.2e}"
        results[isa] = got
    # Exact integer sums and the same float operations per pair: the ISAs agree bit for bit.
    first = results["scalar"]
    for isa, got in results.items():
        assert np.array_equal(got, first), f"{qtype.name}: {isa} differs from the portable kernels"
    # One int8 term: llama.cpp's rounding of the exact product (about 1% of the range here); two: ~1e-4.
    exact = x.astype(np.float64) @ w.T
    assert np.abs(first - exact).max() / np.abs(exact).max() < (0.02 if terms == 1 else 2e-4)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_rows_do_not_depend_on_the_batch(kernels, qtype):
    """Every batch size takes its own path (decode kernels up to 4 rows, strips beyond, the interleaved layout
    where the CPU has one): row i's result is the same bits in all of them."""
    n, k = shape_for(qtype)
    rows = random_rows(qtype, n, k, seed=200 + int(qtype))
    x = np.random.default_rng(2).standard_normal((9, k)).astype(np.float32)
    for isa, kern in kernels.items():
        file = CpuWeight.from_rows(rows, qtype, (n, k))
        packed = CpuWeight.repacked(kern, rows, qtype, (n, k), release=False)
        full = run(kern, [file], x)
        for w in (file, packed):
            for m in (1, 2, 3, 4, 5, 8, 9):
                got = run(kern, [w], x[:m])
                assert np.array_equal(got, full[:m]), f"{isa} {w.layout}: {qtype.name} m={m} differs from m=9"


X8_TYPES = (Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.IQ4_NL, Q.MXFP4, Q.Q4_K, Q.Q6_K)  # repack.c's layouts


@pytest.mark.parametrize("qtype", X8_TYPES, ids=lambda t: t.name)
def test_interleaved_kernels_equal_the_portable_ones(kernels, qtype):
    """Each ISA's kernels over the interleaved layout (AVX-512 VNNI's vpdpbusd, AVX2's vpmaddubsw) give the portable
    kernels' bits on the file's rows, at every column count their loops split (4, 2, 1 columns per pass, both
    activation terms) and a ragged N and K."""
    n, k = shape_for(qtype)
    n += 8  # 37 rows: four whole groups and a padded one
    rows = random_rows(qtype, n, k, seed=300 + int(qtype))
    x = np.random.default_rng(4).standard_normal((11, k)).astype(np.float32)
    want = run(kernels["scalar"], [CpuWeight.from_rows(rows, qtype, (n, k))], x)
    for isa, kern in kernels.items():
        if isa == "scalar":
            continue
        packed = CpuWeight.repacked(kern, rows, qtype, (n, k), release=False)
        assert packed.layout == "x8", f"{isa}: {qtype.name} has no interleaved kernel"
        for m in (1, 2, 3, 4, 5, 6, 7, 11):
            got = run(kern, [packed], x[:m])
            bad = np.argwhere(got != want[:m])
            assert not len(bad), f"{isa}: {qtype.name} m={m} differs from scalar at (row, col) {bad[:5].tolist()}"


def test_mxfp4_scales_at_the_ends_of_e8m0(kernels):
    """The interleaved MXFP4 kernel turns its eight scale bytes into floats at once: the subnormal halves (e = 0, 1)
    and large exponents give the portable kernels' bits, at decode and prefill row counts."""
    n, k = 16, 256
    rows = random_rows(Q.MXFP4, n, k, seed=5).reshape(n, k // 32, 17)
    rows[:, :, 0] = np.resize(np.array([0, 1, 2, 3, 60, 127, 128, 190], np.uint8), rows.shape[:2])
    rows = np.ascontiguousarray(rows.reshape(n, -1))
    x = np.random.default_rng(6).standard_normal((11, k)).astype(np.float32)
    want = run(kernels["scalar"], [CpuWeight.from_rows(rows, Q.MXFP4, (n, k))], x)
    assert np.isfinite(want).all() and (want != 0).any()
    for isa, kern in kernels.items():
        packed = CpuWeight.repacked(kern, rows, Q.MXFP4, (n, k), release=False)
        for m in (1, 2, 11):
            assert np.array_equal(run(kern, [packed], x[:m]), want[:m]), f"{isa} {packed.layout} m={m}"


def test_vnni_is_chosen_where_the_cpu_has_it():
    """auto picks AVX-512 VNNI where the CPU reports avx512f/bw/vl/vnni, and every variant can be forced."""
    flags = set(open("/proc/cpuinfo").read().split()) if os.path.exists("/proc/cpuinfo") else set()
    if not {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"} <= flags:
        pytest.skip("this CPU lacks AVX-512 F/BW/VL/VNNI: the VNNI kernels cannot run here (AVX2 serves)")
    assert available_isas()[-1] == "avx512vnni"
    assert CpuKernels(1).isa == "avx512vnni"
    for isa in available_isas():
        assert CpuKernels(1, isa).isa == isa


def test_fused_weights_equal_separate_calls(kernels):
    """q/k/v of different types in one call: x quantized once per activation format, each weight's columns."""
    k = 1024
    parts = [(Q.Q4_K, 40), (Q.Q6_K, 16), (Q.Q8_0, 24)]
    x = np.random.default_rng(3).standard_normal((5, k)).astype(np.float32)
    for kern in kernels.values():
        ws = [CpuWeight.repacked(kern, random_rows(t, n, k, i), t, (n, k), release=False) for i, (t, n) in
              enumerate(parts)]  # fmt: skip
        fused = run(kern, ws, x)
        alone = np.concatenate([run(kern, [w], x) for w in ws], axis=1)
        assert np.array_equal(fused, alone)


def test_interleaved_layout_is_the_file_size(kernels):
    kern = kernels[available_isas()[-1]]
    for qtype, extra in ((Q.Q8_0, 0), (Q.Q6_K, 0), (Q.Q4_K, 32 / 1152), (Q.MXFP4, 0), (Q.IQ4_NL, 0)):
        n, k = 64, 4096
        size = kern.impl.x8_bytes(int(qtype), n, k)
        if not size:
            pytest.skip("this CPU has no interleaved kernels (AVX2)")
        file = n * k // GGML_QUANT_SIZES[qtype][0] * GGML_QUANT_SIZES[qtype][1]
        assert size == round(file * (1 + extra)), qtype.name


def test_bad_calls_are_refused(kernels):
    kern = next(iter(kernels.values()))
    rows = random_rows(Q.Q4_K, 8, 256, 0)
    w = CpuWeight.from_rows(rows, Q.Q4_K, (8, 256))
    with pytest.raises(ValueError, match="features"):
        cpu_qmatmul(torch.zeros(2, 128), [w], kern)
    with pytest.raises(ValueError, match="between 1 and 4"):
        cpu_qmatmul(torch.zeros(2, 256), [w] * 5, kern)
    with pytest.raises(ValueError, match="no CPU kernel"):
        CpuWeight.from_rows(rows, Q.F16, (8, 256))
    with pytest.raises(ValueError, match="threads"):
        CpuKernels(0)
    with pytest.raises(ValueError, match="not available"):
        CpuKernels(1, "neon")


def test_release_pages_gives_back_a_mapped_tensor(tmp_path):
    """After a tensor is repacked, its mapped pages leave the process's resident set."""
    path = tmp_path / "blob"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 64 << 20, dtype=np.uint8).tobytes())
    mapped = np.memmap(path, mode="r")
    view = mapped[4096 : 4096 + (32 << 20)]

    def resident() -> int:
        return int(open("/proc/self/statm").read().split()[1])

    int(view.sum())  # touch every page
    before = resident()
    assert release_pages(view)
    assert before - resident() >= (30 << 20) // 4096
    assert not release_pages(np.zeros(10, np.uint8))
