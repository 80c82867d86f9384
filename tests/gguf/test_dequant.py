"""lexi.gguf.dequant against gguf-py's numpy dequantizers, bit for bit, on random valid blocks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize as gguf_dequantize

from lexi.gguf.dequant import DEQUANT_TYPES, dequantize, dequantize_blocks, dequantize_tensor

Q = GGMLQuantizationType
BLOCK_TYPES = [
    Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.IQ4_NL, Q.IQ4_XS, Q.MXFP4,
]  # fmt: skip


def random_blocks(qtype: GGMLQuantizationType, rows: int, cols: int, seed: int) -> np.ndarray:
    """Random bytes whose fp16 fields are finite: every byte pair is an fp16 in [0, 1), then the non-scale
    bytes are overwritten with uniform random bits so every quant value and scale index occurs."""
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(seed)
    nbytes = rows * cols // block_size * type_size
    data = rng.random(nbytes // 2).astype(np.float16).view(np.uint8)
    if nbytes % 2:
        data = np.concatenate([data, np.zeros(1, np.uint8)])
    blocks = data.reshape(-1, type_size).copy()
    # Positions of the fp16 fields (d, m / dmin) inside each block; everything else gets full-range bytes.
    f16_at = {
        Q.Q4_0: [0],
        Q.Q4_1: [0, 2],
        Q.Q5_0: [0],
        Q.Q5_1: [0, 2],
        Q.Q8_0: [0],
        Q.Q2_K: [80, 82],
        Q.Q3_K: [108],
        Q.Q4_K: [0, 2],
        Q.Q5_K: [0, 2],
        Q.Q6_K: [208],
        Q.IQ4_NL: [0],
        Q.IQ4_XS: [0],
        Q.MXFP4: [],  # its scale is one E8M0 byte: every value is a valid power of two
    }[qtype]
    keep = np.zeros(type_size, bool)
    for off in f16_at:
        keep[off : off + 2] = True
    noise = rng.integers(0, 256, size=blocks.shape, dtype=np.uint8)
    blocks[:, ~keep] = noise[:, ~keep]
    # Signed fp16 scales too: flip the sign bit of half the fields.
    for off in f16_at:
        blocks[::2, off + 1] |= 0x80
    return blocks.reshape(rows, cols // block_size * type_size)


@pytest.mark.parametrize("qtype", BLOCK_TYPES, ids=lambda q: q.name)
def test_block_types_bit_exact(qtype):
    rows, cols = 7, 2 * GGML_QUANT_SIZES[qtype][0] * (4 if GGML_QUANT_SIZES[qtype][0] == 32 else 1)
    data = random_blocks(qtype, rows, cols, seed=int(qtype))
    with np.errstate(over="ignore"):  # random MXFP4 scales reach 2^127: 12 * 2^127 is inf in gguf-py and here
        want = gguf_dequantize(data, qtype)
    got = dequantize(torch.from_numpy(data), qtype, (rows, cols))
    assert got.dtype == torch.float32 and got.shape == (rows, cols)
    diff = np.flatnonzero(got.numpy().view(np.uint32) != want.view(np.uint32))
    first = diff[:5]
    assert diff.size == 0, (
        f"{qtype.name}: {diff.size} mismatches at {first}: {got.numpy().ravel()[first]} vs {want.ravel()[first]}"
    )


@pytest.mark.parametrize("qtype", [Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K], ids=lambda q: q.name)
def test_every_k_subblock_scale(qtype):
    """One block per (sub-block, scale value): each sub-block in turn gets a distinct scale/min while its quants
    are all ones, so a swapped or mis-unpacked scale index (the classic bug is sub-blocks 4-7) shows up."""
    type_size = GGML_QUANT_SIZES[qtype][1]
    data = random_blocks(qtype, 64, 256, seed=100 + int(qtype)).reshape(-1, type_size)
    # Extreme scale bytes: all-ones and all-zeros patterns stress the high-bit paths of the 6-bit packing.
    scale_slice = {
        Q.Q2_K: slice(0, 16),
        Q.Q3_K: slice(96, 108),
        Q.Q4_K: slice(4, 16),
        Q.Q5_K: slice(4, 16),
        Q.Q6_K: slice(192, 208),
    }[qtype]
    data[0, scale_slice] = 0xFF
    data[1, scale_slice] = 0x00
    data[2, scale_slice] = 0xC0
    data[3, scale_slice] = 0x3F
    want = gguf_dequantize(data, qtype)
    got = dequantize_blocks(torch.from_numpy(data), qtype).numpy()
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_mxfp4_every_exponent():
    """All 256 E8M0 scale bytes, each with all 16 E2M1 codes: the subnormal scales (bytes 0 and 1, which ggml
    builds from bits), the largest (2^127, where 12 * 2^127 overflows to inf in both), and every code's sign."""
    blocks = np.zeros((256, 17), np.uint8)
    blocks[:, 0] = np.arange(256)
    blocks[:, 1:9] = np.arange(16, dtype=np.uint8)[0::2] | (np.arange(16, dtype=np.uint8)[1::2] << 4)
    blocks[:, 9:17] = np.arange(16, dtype=np.uint8)[::-1][0::2] | (np.arange(16, dtype=np.uint8)[::-1][1::2] << 4)
    with np.errstate(over="ignore"):
        want = gguf_dequantize(blocks, Q.MXFP4)
    got = dequantize_blocks(torch.from_numpy(blocks), Q.MXFP4).numpy()
    assert np.isinf(want).any() and (want[:2] != 0).any()
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_iq4_xs_every_subblock_scale():
    """IQ4_XS: each sub-block's 6-bit scale is a nibble of scales_l and 2 bits of the 16-bit scales_h; blocks whose
    scale bytes are all ones, all zeros, and alternating patterns put the high bits of every sub-block to use."""
    data = random_blocks(Q.IQ4_XS, 8, 256, seed=5).reshape(-1, 136)
    for i, pattern in enumerate((0xFF, 0x00, 0xAA, 0x55, 0x0F, 0xF0)):
        data[i, 2:8] = pattern
    want = gguf_dequantize(data, Q.IQ4_XS)
    got = dequantize_blocks(torch.from_numpy(data), Q.IQ4_XS).numpy()
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_scale_min_k4_subblocks_4_to_7():
    """Hand-built Q4_K block: every quant 1, d = dmin = 1, so element value = scale(j) - min(j) per sub-block j.
    Checked against ggml's get_scale_min_k4 written out with scalar loops."""
    rng = np.random.default_rng(7)
    sc = rng.integers(0, 256, 12, dtype=np.uint8)
    block = np.zeros(144, np.uint8)
    block[0:2] = np.array([1.0], np.float16).view(np.uint8)
    block[2:4] = np.array([1.0], np.float16).view(np.uint8)
    block[4:16] = sc
    block[16:] = 0x11
    expect = []
    for j in range(8):
        if j < 4:
            s, m = sc[j] & 63, sc[j + 4] & 63
        else:
            s = (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4)
            m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4)
        expect += [float(s) - float(m)] * 32
    got = dequantize(torch.from_numpy(block.reshape(1, 144)), Q.Q4_K, (256,))
    assert got.tolist() == expect


def test_float_types():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 48)).astype(np.float32)
    assert torch.equal(dequantize(torch.from_numpy(x), Q.F32, (5, 48)), torch.from_numpy(x))
    h = x.astype(np.float16)
    assert torch.equal(dequantize(h, Q.F16, (5, 48)), torch.from_numpy(gguf_dequantize(h, Q.F16)))
    raw = torch.from_numpy(x).to(torch.bfloat16).view(torch.uint8).reshape(5, 96)
    want = gguf_dequantize(raw.numpy(), Q.BF16)
    got = dequantize(raw, Q.BF16, (5, 48))
    assert np.array_equal(got.numpy().view(np.uint32), want.view(np.uint32))


def test_numpy_memmap_input_and_chunking(tmp_path):
    """Read-only memory-mapped input (what the reader hands over), larger than one chunk."""
    qtype = Q.Q8_0
    rows, cols = 100, 1024  # 102400 elements: several CPU chunks, the last one partial
    data = random_blocks(qtype, rows, cols, seed=11)
    path = tmp_path / "t.bin"
    data.tofile(path)
    mm = np.memmap(path, dtype=np.uint8, mode="r", shape=data.shape)
    got = dequantize(mm, qtype, (rows, cols))
    assert np.array_equal(got.numpy(), gguf_dequantize(data, qtype))


def test_refuses_bad_input():
    data = torch.zeros(1, 18, dtype=torch.uint8)
    with pytest.raises(ValueError, match="bytes"):
        dequantize(data, Q.Q4_0, (64,))
    with pytest.raises(ValueError, match="whole number"):
        dequantize(data, Q.Q4_0, (31,))
    assert {Q.Q4_K, Q.IQ4_NL, Q.IQ4_XS, Q.MXFP4} <= DEQUANT_TYPES and Q.IQ2_XXS not in DEQUANT_TYPES
    with pytest.raises(ValueError, match="IQ2_XXS"):
        dequantize(data, Q.IQ2_XXS, (256,))


def test_dequantize_tensor_bundled_gemma3(gemma3_gguf):
    """Every tensor of Gemma 3 270M (Q8_0, Q5_0, Q4_K, Q6_K, F32) dequantizes; the smallest tensor of each type
    is bit-exact with gguf-py. The time of the whole pass is printed (load-time budget: a few seconds)."""
    import time

    start = time.perf_counter()
    smallest: dict[GGMLQuantizationType, tuple[int, str]] = {}
    for name, info in gemma3_gguf.tensors.items():
        out = dequantize_tensor(info)
        assert out.shape == info.shape and out.dtype == torch.float32
        size = out.numel()
        if info.qtype not in smallest or size < smallest[info.qtype][0]:
            smallest[info.qtype] = (size, name)
    elapsed = time.perf_counter() - start
    print(f"dequantized {len(gemma3_gguf.tensors)} gemma3 tensors in {elapsed:.2f}s")
    assert {Q.Q8_0, Q.Q5_0, Q.Q4_K, Q.Q6_K, Q.F32} <= set(smallest)
    for qtype, (_, name) in smallest.items():
        info = gemma3_gguf.tensors[name]
        want = gguf_dequantize(np.asarray(info.data), qtype).reshape(info.shape)
        got = dequantize_tensor(info).numpy()
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), name
