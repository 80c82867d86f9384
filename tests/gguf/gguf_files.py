"""Small GGUF files written with gguf-py's own writer, and ways to damage copies of them."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gguf
import numpy as np


def add_value(writer: gguf.GGUFWriter, key: str, value: Any) -> None:
    """One metadata value, typed the way GGUF converters type them."""
    if isinstance(value, bool):
        writer.add_bool(key, value)
    elif isinstance(value, int):
        if 0 <= value < 2**32:
            writer.add_uint32(key, value)
        else:
            writer.add_int64(key, value)
    elif isinstance(value, float):
        writer.add_float32(key, value)
    elif isinstance(value, str):
        writer.add_string(key, value)
    elif isinstance(value, list):
        writer.add_array(key, value)
    else:
        raise TypeError(f"no GGUF type for {key}={value!r}")


def write_gguf(
    path: Path,
    *,
    arch: str = "llama",
    metadata: Mapping[str, Any] | None = None,
    tensors: Mapping[str, tuple[np.ndarray, gguf.GGMLQuantizationType | None]] | None = None,
) -> Path:
    """A GGUF file with `metadata` (general.architecture comes from `arch`) and `tensors`.

    Each tensor is (array, raw_dtype): numpy float arrays with raw_dtype None are written as they are;
    quantized ones are uint8 block bytes with their type.
    """
    writer = gguf.GGUFWriter(str(path), arch=arch)
    for key, value in (metadata or {}).items():
        if key != "general.architecture":
            add_value(writer, key, value)
    for name, (array, raw_dtype) in (tensors or {}).items():
        writer.add_tensor(name, array, raw_dtype=raw_dtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def tensor_type_offset(path: Path, tensor_name: str) -> int:
    """Byte offset of the ggml type field in a tensor's header entry (name, n_dims, dims, type, offset)."""
    reader = gguf.GGUFReader(str(path))
    for tensor in reader.tensors:
        if tensor.name == tensor_name:
            n_dims = len(tensor.shape)
            return tensor.field.offset + 8 + len(tensor_name.encode()) + 4 + 8 * n_dims
    raise KeyError(tensor_name)


def first_value_type_offset(path: Path) -> int:
    """Byte offset of the first metadata entry's value type: after magic, version, counts, key length and key."""
    data = path.read_bytes()
    key_len = int.from_bytes(data[24:32], "little")
    return 32 + key_len


def patch(path: Path, offset: int, new: bytes) -> None:
    data = bytearray(path.read_bytes())
    data[offset : offset + len(new)] = new
    path.write_bytes(bytes(data))


def cut_tensor_data(path: Path, cut: int) -> None:
    """Truncate the file `cut` bytes before the end of its last tensor's data (the padding after it is not data)."""
    reader = gguf.GGUFReader(str(path))
    data_end = max(t.data_offset + t.n_bytes for t in reader.tensors)
    del reader
    path.write_bytes(path.read_bytes()[: data_end - cut])
