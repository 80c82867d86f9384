"""Fill the ignored .whl/ with what the device machine's image lacks, for bench/device_check.sh to install there.

The H200 image (FACTS.md, device KINDS.md) has Python 3.12, torch, triton, numpy, jinja2, click, tqdm, tokenizers,
prometheus-client, pyyaml, requests, attrs and typing-extensions, but not gguf, tornado, outlines-core or
jsonschema (with its three helpers). This downloads cp312 manylinux wheels of exactly the versions installed
here (so the device runs what the tests ran), without dependencies (each one is named), and writes the synthetic
models' vocabulary (bench/synth_gguf.py export-vocab), since no bundled model can travel: a call carries 64 MiB.

    python bench/fetch_wheels.py          # then, on the device: bash bench/device_check.sh, carry [".whl"]
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WHEELS = ROOT / ".whl"
PACKAGES = ["gguf", "tornado", "outlines-core", "jsonschema", "jsonschema-specifications", "referencing", "rpds-py"]
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux_2_5_x86_64", "manylinux1_x86_64"]  # fmt: skip
CARRY_LIMIT = 64 << 20  # bytes one device call carries, the working tree included


def main() -> int:
    WHEELS.mkdir(exist_ok=True)
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in PACKAGES]
    for old in WHEELS.glob("*.whl"):  # one version of each: two would stop the whole install there
        old.unlink()
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
           "--implementation", "cp", *(f"--platform={p}" for p in PLATFORMS), "-d", str(WHEELS), *pins]  # fmt: skip
    subprocess.run(cmd, check=True)
    vocab = WHEELS / "smollm2-vocab.json.gz"
    subprocess.run([sys.executable, str(ROOT / "bench" / "synth_gguf.py"), "export-vocab", str(vocab)], check=True)
    total = sum(p.stat().st_size for p in WHEELS.iterdir())
    print(f"{WHEELS}: {', '.join(sorted(p.name for p in WHEELS.iterdir()))}; {total / 1e6:.1f} MB")
    if total > CARRY_LIMIT // 2:
        print(f"warning: {total / 1e6:.0f} MB leaves little of the 64 MiB a device call carries", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
