"""Process-wide settings LexiEngine's own commands apply before torch is imported (OpenMP reads them once).

They are for LexiEngine's process only: `lexi-engine` and the bench's LexiEngine worker call
`apply_process_defaults`; nothing here runs at import time, and a variable the user already set is kept.
"""

from __future__ import annotations

import os

# libgomp's idle OpenMP threads spin GOMP_SPINCOUNT times before they sleep. A decode step is hundreds of
# short parallel regions with gaps of microseconds between them, so sleeping threads (OMP_WAIT_POLICY=PASSIVE)
# pay a futex wake-up on almost every op: measured on 2 cores, SmolLM2 decode 19.5 tok/s passive vs 45 tok/s
# at libgomp's default (300000 spins). A bounded spin keeps nearly all of that while a thread team left idle
# (the loader's, once the model is in memory) stops burning a core within about a millisecond.
OPENMP_DEFAULTS = {"GOMP_SPINCOUNT": "100000"}


def apply_process_defaults(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Set OPENMP_DEFAULTS in `environ` (default: os.environ) where unset; returns what was set."""
    env = os.environ if environ is None else environ
    applied = {}
    for key, value in OPENMP_DEFAULTS.items():
        if key not in env:
            env[key] = value
            applied[key] = value
    return applied
