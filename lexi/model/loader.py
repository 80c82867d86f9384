"""Load a read GGUF file into a ready `Transformer` as `LoadConfig` asks: the device, the compute dtype and how the
weights are held. The modules themselves come from lexi/model/builder.py, tensor by tensor."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from lexi.kernels.backend import KERNELS, Kernels, interpreter_enabled, resolve_kernels
from lexi.kernels.cpu_qmatmul import ACTIVATIONS, CpuKernels
from lexi.model.args import model_args_from_gguf
from lexi.model.builder import ModelBuilder, Tensors

if TYPE_CHECKING:
    from lexi.gguf.reader import GGUFFile
    from lexi.model.transformer import Transformer

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DEVICES = ("auto", "cpu", "cuda")

# Measured on the 2-core AVX-512 CPU machine (SmolLM2 / Gemma 3 270M, 2 threads): bfloat16 prefills
# 1.6-2x faster than float32 (~700 vs ~420 tok/s) and decodes no slower (~57 vs ~70 ms/token);
# float16 decodes fastest (~33 ms) but prefills 4-5x slower than bfloat16. bfloat16 still agrees with
# llama.cpp's top-1 on >= 98% of teacher-forced positions (tests/model/test_llamacpp.py).
CPU_AUTO_DTYPE = torch.bfloat16
CUDA_AUTO_DTYPE = torch.bfloat16


class LoadConfigError(ValueError):
    """A LoadConfig that cannot be served on this machine; `field` names the field (and CLI option) at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


@dataclass(frozen=True, slots=True)
class LoadConfig:
    dtype: str = "auto"  # auto | float32 | bfloat16 | float16: the compute dtype of activations and dense weights
    device: str = "auto"  # auto | cpu | cuda
    # How quantized weights are held. None: the CPU kernels on a CPU (lexi/kernels/cpu_qmatmul.py; dense float32
    # copies for a float32 load, the exact reference tests compare with transformers), GGUF blocks for qmatmul on
    # CUDA or with Triton kernels. True: GGUF blocks for qmatmul everywhere (on a CPU its PyTorch reference, which
    # dequantizes per call: tests check the CUDA path's wiring with it). False: dense copies in the compute dtype.
    quantized: bool | None = None
    # Row-independent paths only (lexi/model/step.py): greedy tokens then do not depend on the batch a request
    # shares or on prefix-cache hits, at the price of slower prefill (bench/RESULTS.md measures it).
    deterministic: bool = False
    # auto | triton | reference (lexi/kernels/backend.py): auto is Triton on CUDA, the PyTorch references
    # elsewhere; triton on a CPU runs the kernels in Triton's interpreter (TRITON_INTERPRET=1; tests).
    kernels: str = "auto"
    # int16 | int8: how the CPU kernels carry a matmul's input (lexi/kernels/cpu_qmatmul.py CpuKernels): two int8
    # terms (finer than bfloat16), or one, llama.cpp's arithmetic and the faster prefill.
    activations: str = "int16"

    def __post_init__(self) -> None:
        if self.activations not in ACTIVATIONS:
            raise ValueError(f"activations must be one of {', '.join(ACTIVATIONS)}; got {self.activations!r}")
        if not isinstance(self.deterministic, bool):
            raise ValueError(f"deterministic must be True or False; got {self.deterministic!r}")
        if self.quantized not in (None, True, False):
            raise ValueError(f"quantized must be None, True or False; got {self.quantized!r}")
        if self.dtype != "auto" and self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of auto, {', '.join(DTYPES)}; got {self.dtype!r}")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {', '.join(DEVICES)}; got {self.device!r}")
        if self.kernels not in KERNELS:
            raise ValueError(f"kernels must be one of {', '.join(KERNELS)}; got {self.kernels!r}")
        if self.kernels == "triton" and self.quantized is False:
            raise ValueError("kernels 'triton' reads the GGUF blocks: quantized cannot be False")
        if self.kernels == "triton" and self.deterministic:
            raise LoadConfigError(
                "deterministic", "takes the CPU reference's row-independent paths: not with kernels 'triton'"
            )

    def resolve(self) -> tuple[torch.device, torch.dtype, Kernels]:
        """(device, compute dtype, kernels) on this machine; LoadConfigError names the field that cannot be met."""
        if self.device == "auto":
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        else:
            device = torch.device(self.device)
        if self.deterministic and device.type != "cpu":
            # On CUDA the kernels (Triton and cuBLAS alike) choose their path by row count: refuse, never ignore.
            raise LoadConfigError(
                "deterministic", f"the row-independent paths are the CPU's; on {device.type} use --device cpu"
            )
        if device.type == "cuda" and not torch.cuda.is_available():
            raise LoadConfigError("device", "'cuda' was asked for but torch sees no CUDA device")
        try:
            kernels = resolve_kernels(self.kernels, device.type)
        except ValueError as exc:
            raise LoadConfigError("kernels", str(exc)) from None
        interpreted = kernels == "triton" and device.type != "cuda" and interpreter_enabled()
        if self.dtype != "auto":
            dtype = DTYPES[self.dtype]
            if interpreted and dtype == torch.bfloat16:
                # Measured (triton 3.9): a bfloat16 tl.dot returns values near 1e10 in the interpreter.
                raise LoadConfigError("dtype", "Triton's interpreter computes bfloat16 tl.dot wrongly; use float32")
        elif device.type == "cuda":
            dtype = CUDA_AUTO_DTYPE
        else:
            dtype = torch.float32 if interpreted else CPU_AUTO_DTYPE
        return device, dtype, kernels


def _progress_bar(f: GGUFFile, enabled: bool):
    """A tqdm bar over the tensors, on an interactive terminal only (logs and pipes stay clean)."""
    if not enabled or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=len(f.tensors), desc=f"loading {f.path.name}", unit="tensor", leave=False)


def load_model(f: GGUFFile, config: LoadConfig | None = None, progress: bool = False) -> Transformer:
    """Every tensor of `f` into a ready `Transformer`: CPU-kernel weights (CPU), GGUF blocks (CUDA), or dense."""
    config = config or LoadConfig()
    args = model_args_from_gguf(f)
    device, dtype, kernels = config.resolve()
    if dtype == torch.float16 and args.family == "gemma3":
        # Measured: Gemma 3's activations pass 65504 and every logit comes out NaN in float16.
        raise ValueError("dtype float16 overflows Gemma 3's activations (NaN logits); use bfloat16 or float32")
    if config.quantized is None:
        quantized = device.type == "cuda" or kernels == "triton"
        dense = not quantized and dtype == torch.float32
    else:
        quantized, dense = config.quantized, not config.quantized
    cpu_kernels = None
    if device.type == "cpu" and not quantized and not dense:
        cpu_kernels = CpuKernels(torch.get_num_threads(), activations=config.activations)
    bar = _progress_bar(f, progress)
    try:
        builder = ModelBuilder(f, args, Tensors(f, bar), dtype, device, quantized, kernels, cpu_kernels)
        model = builder.transformer(config.deterministic)
    finally:
        if bar is not None:
            bar.close()
    return model.eval()
