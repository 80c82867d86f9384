"""Shared fixtures: the bundled models are loaded once per test session."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

# Before torch is imported: models load on one thread and engines step on another, and libgomp's default
# spin-waiting then lets the idle OpenMP team starve the busy one on 2 cores.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Triton kernels run on the CPU through Triton's interpreter (kernel tests, and `--kernels triton` through the
# model and engine). Triton chooses the interpreter when a `@triton.jit` function is defined, so the variable is
# set here, before any test module imports a kernel module. `--kernels auto` never picks Triton on a CPU.
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
from worker_units import order_units, unit_of  # noqa: E402


@pytest.fixture(scope="session")
def smollm2_path():
    """SmolLM2-135M-Instruct (llama arch, GPT-2 BPE vocabulary), the default bundled model."""
    from lexi.gguf.bundled import DEFAULT_MODEL, resolve_model

    return resolve_model(DEFAULT_MODEL)


@pytest.fixture(scope="session")
def gemma3_path():
    """Gemma 3 270M (gemma3 arch, SentencePiece vocabulary), assembled once into the user's cache."""
    from lexi.gguf.bundled import GEMMA3_MODEL, resolve_model

    return resolve_model(GEMMA3_MODEL)


@pytest.fixture(scope="session")
def smollm2_gguf(smollm2_path):
    from lexi.gguf.reader import read_gguf

    return read_gguf(smollm2_path)


@pytest.fixture(scope="session")
def gemma3_gguf(gemma3_path):
    from lexi.gguf.reader import read_gguf

    return read_gguf(gemma3_path)


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_gguf):
    from lexi.gguf.tokenizer import Tokenizer

    return Tokenizer.from_gguf(smollm2_gguf)


@pytest.fixture(scope="session")
def gemma3_tokenizer(gemma3_gguf):
    from lexi.gguf.tokenizer import Tokenizer

    return Tokenizer.from_gguf(gemma3_gguf)


@pytest.fixture(scope="session")
def smollm2_model(smollm2_gguf):
    """SmolLM2 loaded once with the default LoadConfig (shared by model, engine and http tests)."""
    from lexi.model.loader import load_model

    return load_model(smollm2_gguf)


@pytest.fixture(scope="session")
def gemma3_model(gemma3_gguf):
    """Gemma 3 270M loaded once with the default LoadConfig."""
    from lexi.model.loader import load_model

    return load_model(gemma3_gguf)


@pytest.fixture(scope="session")
def smollm2_f32(smollm2_gguf):
    """SmolLM2 at float32: the dtype whose results do not depend on how many rows a step batches."""
    from lexi.model.loader import LoadConfig, load_model

    return load_model(smollm2_gguf, LoadConfig(dtype="float32", device="cpu"))


@pytest.fixture(scope="session")
def gemma3_f32(gemma3_gguf):
    """Gemma 3 270M at float32."""
    from lexi.model.loader import LoadConfig, load_model

    return load_model(gemma3_gguf, LoadConfig(dtype="float32", device="cpu"))


# Published chat templates ship in llama-cpp-python's source distribution (vendor/llama.cpp/models/templates/):
# fetched once into the user's cache, the templates alone kept, never committed.
PUBLISHED_SDIST = "llama-cpp-python==0.3.36"
PUBLISHED_TEMPLATES = Path.home() / ".cache" / "lexi-engine" / "templates" / "llama-cpp-python-0.3.36"


def fetch_published_templates(root: Path = PUBLISHED_TEMPLATES) -> Path:
    """The folder of published templates, downloaded (`pip download --no-binary :all: --no-deps`) on first use,
    under a file lock: both pytest-xdist workers may ask for it at once."""
    if (root / "openai-gpt-oss-120b.jinja").exists():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _download_published_templates(root)


def _download_published_templates(root: Path) -> Path:
    if (root / "openai-gpt-oss-120b.jinja").exists():  # the other worker fetched it while this one waited
        return root
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", PUBLISHED_SDIST, "-d", tmp],
            check=True, capture_output=True, timeout=900,
        )  # fmt: skip
        (sdist,) = Path(tmp).glob("*.tar.gz")
        staged = Path(tmp) / "templates"
        staged.mkdir()
        with tarfile.open(sdist) as tar:
            for member in tar.getmembers():
                folder, _, name = member.name.rpartition("/")
                wanted = folder.endswith("/vendor/llama.cpp/models/templates") and name.endswith(".jinja")
                if wanted and member.isfile():
                    (staged / name).write_bytes(tar.extractfile(member).read())
        shutil.rmtree(root, ignore_errors=True)
        shutil.move(staged, root)
    return root


@pytest.fixture(scope="session")
def published_templates() -> Path:
    return fetch_published_templates()


@pytest.fixture(scope="session")
def harmony_path(tmp_path_factory):
    """bench/synth_gguf.py's tiny-gpt-oss (random weights, MXFP4 experts) whose 4096-token vocabulary ends with
    gpt-oss's harmony tokens: a model the harmony chat format can be served on."""
    path = tmp_path_factory.mktemp("harmony") / "tiny-gpt-oss-harmony.gguf"
    synth = Path(__file__).resolve().parents[1] / "bench" / "synth_gguf.py"
    command = [sys.executable, str(synth), "write", "tiny-gpt-oss", str(path), "--vocab", "4096", "--harmony"]
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    return path


@pytest.fixture(scope="session")
def harmony_tokenizer(harmony_path):
    from lexi.gguf.reader import read_gguf
    from lexi.gguf.tokenizer import Tokenizer

    return Tokenizer.from_gguf(read_gguf(harmony_path))


# The tiers `make test-fast` leaves out (`-m "not server and not triton and not peer and not slow"`): everything
# still runs in `make test`. A module is a server module when it starts `lexi-engine` (or Ray, or a bench script
# that does) as a process; a Triton module runs kernels through Triton's interpreter or compiles them offline.
SERVER_DIRS = {"http", "ray", "bench"}
SERVER_MODULES = {"test_generate_cli.py", "test_real_size.py"}
TRITON_MODULES = {
    "test_qmatmul.py", "test_paged_attention.py", "test_fused_moe.py", "test_triton_path.py", "test_qmatmul_compile.py",
    "test_fused_moe_compile.py", "test_paged_attention_sm90.py", "test_kernels_gfx942.py",
}  # fmt: skip


def pytest_collection_modifyitems(config, items):
    """The tiers above, and the units of work of `make test`'s two workers (tests/worker_units.py)."""
    tests = Path(__file__).parent
    units = {}
    for item in items:
        path = Path(item.path)
        parts = path.relative_to(tests).parts if tests in path.parents else ()
        if (parts and parts[0] in SERVER_DIRS) or path.name in SERVER_MODULES:
            item.add_marker(pytest.mark.server)
        if path.name in TRITON_MODULES or "triton" in item.name:
            item.add_marker(pytest.mark.triton)
        units[item] = unit_of(parts or (path.name,))
    order_units(items, units)
