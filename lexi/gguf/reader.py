"""Reading a GGUF file once: metadata as plain Python values, tensors as memory-mapped numpy views.

Built over `gguf.GGUFReader`, with two changes made in a subclass:
- metadata arrays are parsed in one pass (numbers as one numpy view, strings by walking their length
  prefixes) instead of gguf-py's several numpy views per element, which took ~10 s on Gemma's
  262,144-token vocabulary;
- every read is bounds-checked, and tensors are checked (architecture, type, data inside the file)
  before gguf-py builds them, so a bad file is refused with one `GGUFError` that names the problem
  rather than a numpy reshape error or an IndexError from deep inside the parser.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGUF_MAGIC, GGMLQuantizationType, GGUFReader, GGUFValueType

from lexi.gguf.errors import GGUFError

SUPPORTED_ARCHITECTURES = ("llama", "qwen2", "qwen3", "qwen3moe", "gemma3", "gpt-oss")

_T = GGMLQuantizationType
SUPPORTED_TENSOR_TYPES: frozenset[GGMLQuantizationType] = frozenset(
    {_T.F32, _T.F16, _T.BF16, _T.Q4_0, _T.Q4_1, _T.Q5_0, _T.Q5_1, _T.Q8_0, _T.Q2_K, _T.Q3_K, _T.Q4_K, _T.Q5_K, _T.Q6_K,
     _T.IQ4_NL, _T.IQ4_XS, _T.MXFP4}
)  # fmt: skip
_SUPPORTED_VERSIONS = (2, 3)
_MIN_HEADER = 24  # magic, version, tensor count, kv count


@dataclass(frozen=True, slots=True)
class TensorInfo:
    name: str
    qtype: GGMLQuantizationType
    shape: tuple[int, ...]  # PyTorch order: (rows, cols) for a matrix (ggml order reversed)
    # memory-mapped, read-only. Quantized and BF16: uint8 (..., bytes_per_row); F32/F16: that dtype, shaped `shape`
    data: np.ndarray = dataclasses.field(repr=False)


@dataclass(frozen=True, slots=True)
class GGUFFile:
    path: Path
    metadata: dict[str, Any]  # key -> plain Python value (str/int/float/bool/list)
    tensors: dict[str, TensorInfo]
    architecture: str  # general.architecture


def read_gguf(path: str | os.PathLike[str]) -> GGUFFile:
    """Read a GGUF file's metadata and map its tensors; GGUFError names whatever makes it unusable."""
    path = Path(path)
    _check_preamble(path)
    try:
        reader = _CheckedReader(path)
    except GGUFError:
        raise
    except _Truncated as exc:
        raise GGUFError(
            f"{path}: truncated GGUF file: the header needs {exc.needed} bytes, the file has {exc.size}"
        ) from None
    except (ValueError, KeyError, IndexError, OverflowError, UnicodeDecodeError) as exc:
        raise GGUFError(f"{path}: corrupt GGUF header: {exc}") from None
    try:
        metadata = {name: _field_value(f) for name, f in reader.fields.items() if not name.startswith("GGUF.")}
    except UnicodeDecodeError as exc:
        raise GGUFError(f"{path}: corrupt GGUF header: a metadata string is not UTF-8 ({exc})") from None
    tensors = {
        t.name: TensorInfo(
            t.name, GGMLQuantizationType(t.tensor_type), tuple(int(d) for d in reversed(t.shape)), t.data
        )
        for t in reader.tensors
    }
    return GGUFFile(path=path, metadata=metadata, tensors=tensors, architecture=metadata["general.architecture"])


def _check_preamble(path: Path) -> None:
    """Missing file, wrong magic and unknown version, told apart before gguf-py sees the file."""
    if not path.exists():
        raise GGUFError(f"{path}: no such file")
    if not path.is_file():
        raise GGUFError(f"{path}: not a regular file")
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            head = fh.read(8)
    except OSError as exc:
        raise GGUFError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if len(head) < 4 or int.from_bytes(head[:4], "little") != GGUF_MAGIC:
        raise GGUFError(f"{path}: not a GGUF file (magic {head[:4]!r}, expected b'GGUF')")
    if size < _MIN_HEADER:
        raise GGUFError(f"{path}: truncated GGUF file: {size} bytes, shorter than the {_MIN_HEADER}-byte header")
    version = int.from_bytes(head[4:8], "little")
    if version & 0xFFFF == 0:
        # Tensor data would need byte swapping before any kernel could read it; llama.cpp refuses these too.
        raise GGUFError(f"{path}: big-endian GGUF files are not supported")
    if version not in _SUPPORTED_VERSIONS:
        raise GGUFError(f"{path}: GGUF version {version} is not supported (supported: 2, 3)")


class _Truncated(Exception):
    def __init__(self, needed: int, size: int) -> None:
        super().__init__(needed, size)
        self.needed = needed
        self.size = size


class _CheckedReader(GGUFReader):
    """gguf-py's reader with bounds checks, fast metadata arrays and tensor checks (see the module doc)."""

    def _get(self, offset, dtype, count=1, override_order=None):
        end = int(offset) + np.dtype(dtype).itemsize * int(count)
        if end > len(self.data):
            raise _Truncated(end, len(self.data))
        return super()._get(offset, dtype, count, override_order)

    def _get_field_parts(self, orig_offs: int, raw_type: int):
        if raw_type != GGUFValueType.ARRAY:
            return super()._get_field_parts(orig_offs, raw_type)
        raw_itype = self._get(orig_offs, np.uint32)
        alen = self._get(orig_offs + 4, np.uint64)
        itype = GGUFValueType(int(raw_itype[0]))
        count = int(alen[0])
        offs = orig_offs + 12
        types = [GGUFValueType.ARRAY, itype]
        nptype = self.gguf_scalar_to_np.get(itype)
        if nptype is not None:
            # One view for the whole array; `ReaderField.contents()` still flattens it correctly.
            values = self._get(offs, nptype, count)
            return offs + int(values.nbytes) - orig_offs, [raw_itype, alen, values], [2], types
        if itype == GGUFValueType.STRING:
            parts = self._string_parts(offs, count)
            end = offs + 8 * count + sum(len(p) for p in parts)
            return end - orig_offs, [raw_itype, alen, *parts], list(range(2, 2 + count)), types
        # Arrays of arrays are rare; gguf-py's general path handles them.
        return super()._get_field_parts(orig_offs, raw_type)

    def _string_parts(self, offs: int, count: int) -> list[np.ndarray]:
        """Views of the bytes of `count` length-prefixed strings, found by walking the prefixes once."""
        data = self.data.view(np.ndarray)  # slicing np.memmap runs Python hooks per slice; a plain view does not
        size = len(data)
        raw = memoryview(data)
        parts = []
        for _ in range(count):
            if offs + 8 > size:
                raise _Truncated(offs + 8, size)
            length = int.from_bytes(raw[offs : offs + 8], "little")
            start = offs + 8
            offs = start + length
            if offs > size:
                raise _Truncated(offs, size)
            parts.append(data[start:offs])
        return parts

    def _build_tensors(self, start_offs: int, fields: list) -> None:
        self._check_architecture()
        size = len(self.data)
        for field in fields:
            name = str(bytes(field.parts[1]), encoding="utf-8")
            dims = [int(d) for d in field.parts[3]]
            raw_type = int(field.parts[4][0])
            try:
                qtype = GGMLQuantizationType(raw_type)
            except ValueError:
                raise GGUFError(f"{self._path}: tensor {name!r} has unknown ggml type id {raw_type}") from None
            if qtype not in SUPPORTED_TENSOR_TYPES:
                supported = ", ".join(sorted(t.name for t in SUPPORTED_TENSOR_TYPES))
                raise GGUFError(
                    f"{self._path}: tensor {name!r} has type {qtype.name}, which is not supported "
                    f"(supported: {supported})"
                )
            block, type_size = GGML_QUANT_SIZES[qtype]
            n_elements = int(np.prod(dims, dtype=np.int64)) if dims else 1
            if dims and dims[0] % block:
                raise GGUFError(
                    f"{self._path}: corrupt GGUF header: tensor {name!r} has {dims[0]} columns, "
                    f"not a multiple of {qtype.name}'s block of {block}"
                )
            end = start_offs + int(field.parts[5][0]) + n_elements // block * type_size
            if end > size:
                raise GGUFError(
                    f"{self._path}: truncated GGUF file: tensor {name!r} needs bytes up to {end}, the file has {size}"
                )
        super()._build_tensors(start_offs, fields)

    def _check_architecture(self) -> None:
        field = self.fields.get("general.architecture")
        if field is None or field.types != [GGUFValueType.STRING]:
            raise GGUFError(f"{self._path}: no general.architecture string in the metadata")
        arch = str(bytes(field.parts[-1]), encoding="utf-8")
        if arch not in SUPPORTED_ARCHITECTURES:
            raise GGUFError(
                f"{self._path}: architecture {arch!r} is not supported "
                f"(supported: {', '.join(SUPPORTED_ARCHITECTURES)})"
            )

    @property
    def _path(self) -> str:
        return str(getattr(self.data, "filename", "") or "GGUF file")


def _field_value(field: Any) -> Any:
    """A metadata field as a plain Python value: str, int, float, bool, or a list of them."""
    types = field.types
    if types[0] == GGUFValueType.ARRAY:
        if len(types) == 1:  # an empty array records no element type
            return []
        if types[-1] == GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8") for i in field.data]
        if len(types) == 2:
            return field.parts[field.data[0]].tolist() if field.data else []
        return field.contents()
    if types[0] == GGUFValueType.STRING:
        return bytes(field.parts[-1]).decode("utf-8")
    return field.parts[-1].tolist()[0]
