"""Process-wide settings LexiEngine's own commands apply before torch is imported (OpenMP reads them once).

They are for LexiEngine's process only: `lexi-engine` and the bench's LexiEngine worker call
`apply_process_defaults`; nothing here runs at import time, and a variable the user already set is kept.
"""

from __future__ import annotations

import os

# libgomp's idle OpenMP threads spin GOMP_SPINCOUNT times (a few tens of ns each) before they sleep. A decode
# step is hundreds of short parallel regions with gaps of microseconds between them, so threads that sleep at
# once (OMP_WAIT_POLICY=PASSIVE) pay a futex wake-up on almost every op, and threads that spin long (libgomp's
# default, 300000) hold a core for milliseconds after every region, which starves a busy neighbour and, on a
# shared machine, themselves (a barrier waits for a thread the scheduler parked). Measured on 2 cores, SmolLM2
# tg128 through `lexi-engine serve`, tok/s: quiet machine 92 (300000), 89 (100000), 84 (10000), 49 (1000),
# passive 19.5-87 (erratic); with a busy loop on the other core 2-7 (100000), 86-96 (30000), 84-98 (10000), ~50
# (1000). 30000 (~1 ms) keeps nearly all of the quiet speed and most of the busy one. Also: libgomp spins only
# ~100 times when it manages more threads than there are cores, e.g. when a thread that ran torch ops (a model
# loaded on the main thread) stays alive beside the engine's step thread; `lexi-engine serve` loads on a thread
# that then exits.
OPENMP_DEFAULTS = {"GOMP_SPINCOUNT": "30000"}


def apply_process_defaults(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Set OPENMP_DEFAULTS in `environ` (default: os.environ) where unset; returns what was set."""
    env = os.environ if environ is None else environ
    applied = {}
    for key, value in OPENMP_DEFAULTS.items():
        if key not in env:
            env[key] = value
            applied[key] = value
    return applied
