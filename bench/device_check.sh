#!/usr/bin/env bash
# The GPU check in one command, from the repository root on the device machine:
#     bash bench/device_check.sh            # tables in $OUT (device_check.md, .json, .log, serve.log)
#     bash bench/device_check.sh --dry-run  # the same script on this CPU: tiny shapes, Triton's interpreter
# Before a device run, here: `python bench/fetch_wheels.py` fills the ignored .whl/ (the wheels the device image
# lacks, and the vocabulary of the synthetic models); the run names .whl in `carry`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DRY=0
for arg in "$@"; do [ "$arg" = --dry-run ] && DRY=1; done
OUT=${OUT:-$(mktemp -d -t lexi-device-check-XXXX)}
mkdir -p "$OUT"
if [ "$DRY" = 0 ]; then
    if ! ls .whl/*.whl >/dev/null 2>&1; then
        echo "bench/device_check.sh: .whl/ holds no wheels; run python bench/fetch_wheels.py first" >&2
        exit 2
    fi
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/lexi-site .whl/*.whl
    export PYTHONPATH=/tmp/lexi-site:$PWD
    # Triton's compiles run in parallel worker processes and their results are reused from this cache.
    export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/lexi-triton-cache}
else
    export TRITON_INTERPRET=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1 LEXI_COMMIT=${LEXI_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
echo "bench/device_check.sh: tables go to $OUT"
"$PY" bench/device_check.py --out "$OUT" "$@" 2>&1 | tee "$OUT/device_check.log"
