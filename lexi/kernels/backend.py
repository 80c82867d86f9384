"""Which kernels a model runs, Triton's or the PyTorch references: chosen once at load, held by the modules.

`auto` is Triton on CUDA and the references elsewhere (DESIGN.md: on a CPU the reference path is the serving
path). `triton` also runs on a CPU under Triton's interpreter (TRITON_INTERPRET=1, read by Triton when a
`@triton.jit` function is defined): numpy executes each kernel program, which is slow but is the same kernel
code over the same GGUF bytes, so tests can put the real kernels through the whole model and engine.
`reference` on CUDA keeps the GGUF blocks on the device and runs the references over them (a yardstick for the
device check). Importing this module imports neither torch nor triton.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Literal

KERNELS = ("auto", "triton", "reference")
Kernels = Literal["triton", "reference"]


def interpreter_enabled() -> bool:
    """True when Triton will interpret kernels (the variable must be set before any kernel module is imported)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def triton_problem(device_type: str) -> str | None:
    """Why the Triton kernels cannot run on this device type, or None when they can."""
    if importlib.util.find_spec("triton") is None:
        return "triton is not installed (pip install 'lexi-engine[gpu]', or a CUDA build of torch, which ships it)"
    if device_type == "cuda":
        return None
    if device_type == "cpu":
        if interpreter_enabled():
            return None
        return (
            "there is no CUDA device; on a CPU the Triton kernels run only under Triton's interpreter "
            "(set TRITON_INTERPRET=1; slow, meant for tests)"
        )
    return f"device type {device_type!r} has no Triton backend here"


def resolve_kernels(kernels: str, device_type: str) -> Kernels:
    """`auto` -> triton on CUDA when it can run there, else reference; `triton` -> ValueError saying why it
    cannot run; `reference` as asked."""
    if kernels not in KERNELS:
        raise ValueError(f"kernels must be one of {', '.join(KERNELS)}; got {kernels!r}")
    if kernels == "reference":
        return "reference"
    problem = triton_problem(device_type)
    if kernels == "auto":
        return "triton" if device_type == "cuda" and problem is None else "reference"
    if problem is not None:
        raise ValueError(f"'triton' cannot run: {problem}")
    return "triton"
