"""Kernel tests run the Triton kernels on the CPU through Triton's interpreter.

The interpreter is chosen when a `@triton.jit` function is defined, so the variable must be set before
any module under lexi.kernels is imported: this file is loaded by pytest before the test modules.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
