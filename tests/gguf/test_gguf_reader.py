"""read_gguf: values and tensors as written, and one clear GGUFError for every kind of bad file."""

from __future__ import annotations

import shutil
import time

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf_files import cut_tensor_data, first_value_type_offset, patch, tensor_type_offset, write_gguf

from lexi.gguf.errors import GGUFError
from lexi.gguf.reader import SUPPORTED_ARCHITECTURES, SUPPORTED_TENSOR_TYPES, read_gguf

METADATA = {
    "general.name": "tiny test model",
    "llama.block_count": 2,
    "llama.big": 2**40,
    "llama.negative": -5,
    "llama.rope.freq_base": 10000.5,
    "llama.flag": True,
    "llama.other_flag": False,
    "tokenizer.ggml.tokens": ["<s>", "▁hello", "日本", "🦙", ""],
    "tokenizer.ggml.scores": [0.0, -1.5, -2.25, -3.0, 4.0],
    "tokenizer.ggml.token_type": [3, 1, 1, 1, 4],
}


def _tensors(rng: np.random.Generator) -> dict:
    x = rng.standard_normal((4, 64)).astype(np.float32)
    return {
        "f32.weight": (rng.standard_normal((3, 5)).astype(np.float32), None),
        "f16.weight": (rng.standard_normal((2, 8)).astype(np.float16), None),
        "vec.weight": (rng.standard_normal(7).astype(np.float32), None),
        "bf16.weight": (gguf.quants.quantize(x, T.BF16), T.BF16),
        "q8.weight": (gguf.quants.quantize(x, T.Q8_0), T.Q8_0),
        "q4.weight": (gguf.quants.quantize(x, T.Q4_0), T.Q4_0),
    }


@pytest.fixture
def tiny(tmp_path):
    rng = np.random.default_rng(0)
    tensors = _tensors(rng)
    return write_gguf(tmp_path / "tiny.gguf", metadata=METADATA, tensors=tensors), tensors


def test_metadata_comes_back_as_plain_python_values(tiny):
    path, _ = tiny
    f = read_gguf(path)
    assert f.architecture == "llama"
    assert f.path == path
    for key, value in METADATA.items():
        assert f.metadata[key] == value, key
        assert type(f.metadata[key]) is type(value), key
    assert all(type(v) is float for v in f.metadata["tokenizer.ggml.scores"])
    assert not any(key.startswith("GGUF.") for key in f.metadata)


def test_tensors_are_read_only_maps_in_pytorch_order(tiny):
    path, tensors = tiny
    f = read_gguf(path)
    assert set(f.tensors) == set(tensors)
    for name, (array, raw_dtype) in tensors.items():
        info = f.tensors[name]
        assert info.name == name
        assert info.qtype == (raw_dtype or (T.F16 if array.dtype == np.float16 else T.F32))
        np.testing.assert_array_equal(info.data, array)
        assert info.data.dtype == array.dtype
        assert not info.data.flags.writeable
    assert f.tensors["f32.weight"].shape == (3, 5)
    assert f.tensors["vec.weight"].shape == (7,)
    assert f.tensors["bf16.weight"].shape == (4, 64)
    assert f.tensors["bf16.weight"].data.shape == (4, 128)
    assert f.tensors["q8.weight"].shape == (4, 64)
    assert f.tensors["q8.weight"].data.shape == (4, 68)
    assert f.tensors["q4.weight"].data.shape == (4, 36)


def test_moe_and_iquant_types_read_back(tmp_path):
    """A 3-D MXFP4 expert tensor (gguf-py's own quantizer, as converters write gpt-oss) and IQ4_NL / IQ4_XS blocks
    read back in PyTorch order, byte for byte, and dequantize as gguf-py dequantizes them."""
    from lexi.gguf.dequant import dequantize_tensor

    rng = np.random.default_rng(1)
    experts = rng.standard_normal((4, 8, 64)).astype(np.float32)  # (n_expert, n_ff, n_embd)
    tensors = {"blk.0.ffn_gate_exps.weight": (gguf.quants.quantize(experts, T.MXFP4), T.MXFP4)}
    for qtype, (rows, size) in {T.IQ4_NL: (3, 18), T.IQ4_XS: (2, 136)}.items():
        blocks = rng.integers(0, 256, (rows * 2, size), dtype=np.uint8)
        blocks[:, 0:2] = rng.random(rows * 2).astype(np.float16).view(np.uint8).reshape(-1, 2)  # finite fp16 d
        tensors[f"{qtype.name.lower()}.weight"] = (blocks.reshape(rows, 2 * size), qtype)
    path = write_gguf(tmp_path / "types.gguf", tensors=tensors)
    f = read_gguf(path)
    assert {info.qtype for info in f.tensors.values()} == {T.MXFP4, T.IQ4_NL, T.IQ4_XS} <= SUPPORTED_TENSOR_TYPES
    gate = f.tensors["blk.0.ffn_gate_exps.weight"]
    assert gate.shape == (4, 8, 64) and gate.data.shape == (4, 8, 2 * 17)
    assert f.tensors["iq4_nl.weight"].shape == (3, 64) and f.tensors["iq4_xs.weight"].shape == (2, 512)
    for name, (array, qtype) in tensors.items():
        info = f.tensors[name]
        np.testing.assert_array_equal(info.data, array)
        want = gguf.quants.dequantize(array, qtype)
        assert np.array_equal(dequantize_tensor(info).numpy().view(np.uint32), want.view(np.uint32)), name
    # MXFP4 keeps 4 bits of each value against the block's power-of-two scale: close to what was quantized.
    assert np.abs(dequantize_tensor(gate).numpy() - experts).max() <= 0.5 * np.abs(experts).max()


def test_bundled_smollm2_matches_gguf_reader(smollm2_path, smollm2_gguf):
    _assert_matches_gguf_reader(smollm2_path, smollm2_gguf)
    assert smollm2_gguf.architecture == "llama"
    assert smollm2_gguf.tensors["token_embd.weight"].shape == (49152, 576)


@pytest.mark.peer
def test_bundled_gemma3_matches_gguf_reader_and_reads_faster(gemma3_path):
    start = time.perf_counter()
    f = read_gguf(gemma3_path)
    ours = time.perf_counter() - start
    start = time.perf_counter()
    reference = _assert_matches_gguf_reader(gemma3_path, f)
    theirs = time.perf_counter() - start
    print(f"gemma3 read: read_gguf {ours:.2f}s, gguf.GGUFReader + contents() {theirs:.2f}s")
    assert len(reference.tensors) == len(f.tensors) == 236
    assert ours * 3 < theirs, "the one-pass metadata arrays should make reading several times faster"


def _assert_matches_gguf_reader(path, f):
    reader = gguf.GGUFReader(str(path))
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        assert f.metadata[key] == _reference_value(field), key
    assert len(f.metadata) == sum(1 for k in reader.fields if not k.startswith("GGUF."))
    for tensor in reader.tensors:
        info = f.tensors[tensor.name]
        assert info.qtype == tensor.tensor_type
        assert info.shape == tuple(int(d) for d in reversed(tensor.shape))
        assert info.data.shape == tensor.data.shape and info.data.dtype == tensor.data.dtype
        np.testing.assert_array_equal(info.data[:2], tensor.data[:2])
    return reader


def _reference_value(field):
    """gguf-py's own value for a field; its per-element `contents()` is only used on small fields (it is slow)."""
    if field.types[0] != gguf.GGUFValueType.ARRAY or len(field.data) < 1000:
        return field.contents()
    if field.types[-1] == gguf.GGUFValueType.STRING:
        return [bytes(field.parts[i]).decode("utf-8") for i in field.data]
    return np.concatenate([field.parts[i] for i in field.data]).tolist()


def _refused(path, *fragments):
    with pytest.raises(GGUFError) as err:
        read_gguf(path)
    message = str(err.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_missing_file(tmp_path):
    _refused(tmp_path / "absent.gguf", "absent.gguf", "no such file")


def test_directory(tmp_path):
    _refused(tmp_path, "not a regular file")


@pytest.mark.parametrize("content", [b"", b"GG", b"not a gguf file at all", b"\x89PNG\r\n\x1a\n" + bytes(100)])
def test_not_a_gguf_file(tmp_path, content):
    path = tmp_path / "x.gguf"
    path.write_bytes(content)
    _refused(path, "not a GGUF file")


def test_unsupported_version(tiny):
    path, _ = tiny
    patch(path, 4, (7).to_bytes(4, "little"))
    _refused(path, "GGUF version 7 is not supported")


def test_big_endian(tmp_path):
    writer = gguf.GGUFWriter(str(tmp_path / "be.gguf"), arch="llama", endianess=gguf.GGUFEndian.BIG)
    writer.add_uint32("llama.block_count", 1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    _refused(tmp_path / "be.gguf", "big-endian")


@pytest.mark.parametrize("keep", [10, 24, 40, 100, 200])
def test_header_cut_short(tiny, keep):
    path, _ = tiny
    path.write_bytes(path.read_bytes()[:keep])
    _refused(path, "truncated GGUF file")


@pytest.mark.parametrize("cut", [1, 100])
def test_tensor_data_beyond_end_of_file(tiny, cut):
    path, tensors = tiny
    cut_tensor_data(path, cut)
    message = _refused(path, "truncated GGUF file", "tensor")
    assert any(f"'{name}'" in message for name in tensors)


def test_corrupt_value_type(tiny):
    path, _ = tiny
    patch(path, first_value_type_offset(path), (99).to_bytes(4, "little"))
    _refused(path, "corrupt GGUF header")


def test_missing_architecture(tiny):
    path, _ = tiny
    data = path.read_bytes()
    assert data.count(b"general.architecture") == 1
    path.write_bytes(data.replace(b"general.architecture", b"general.architecturX"))
    _refused(path, "general.architecture")


def test_unknown_architecture(tmp_path):
    path = write_gguf(tmp_path / "mamba.gguf", arch="mamba", metadata={"mamba.block_count": 1})
    message = _refused(path, "'mamba'", "not supported")
    assert all(arch in message for arch in SUPPORTED_ARCHITECTURES)


@pytest.mark.parametrize(
    "array, raw_dtype, type_name",
    [
        (np.zeros((2, 3), np.int32), None, "I32"),
        (np.zeros((2, 66), np.uint8), T.IQ2_XXS, "IQ2_XXS"),
    ],
)
def test_unsupported_tensor_type(tmp_path, array, raw_dtype, type_name):
    assert getattr(T, type_name) not in SUPPORTED_TENSOR_TYPES
    tensors = {"ok.weight": (np.zeros((2, 4), np.float32), None), "blk.0.odd.weight": (array, raw_dtype)}
    path = write_gguf(tmp_path / "odd.gguf", tensors=tensors)
    _refused(path, "'blk.0.odd.weight'", f"type {type_name}", "not supported")


def test_unknown_tensor_type_id(tiny):
    path, _ = tiny
    patch(path, tensor_type_offset(path, "q8.weight"), (250).to_bytes(4, "little"))
    _refused(path, "'q8.weight'", "unknown ggml type id 250")


def test_refusal_leaves_the_file_alone(tiny, tmp_path):
    path, _ = tiny
    copy = shutil.copy(path, tmp_path / "copy.gguf")
    cut_tensor_data(path, 1)
    _refused(path, "truncated")
    assert read_gguf(copy).architecture == "llama"
