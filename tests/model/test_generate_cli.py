"""`lexi-engine generate` as a user runs it: a subprocess on the default model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lexi.model.generate import GenerateConfig, generate_tokens, greedy


def _generate(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    cmd = [str(Path(sys.executable).with_name("lexi-engine")), "generate", *args]  # the installed command
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)


def test_generate_json_greedy_matches_in_process(smollm2_tokenizer, smollm2_model):
    prompt = "The capital of France is"
    run = _generate("--prompt", prompt, "--n-predict", "8", "--temp", "0", "--json")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["prompt_tokens"] == smollm2_tokenizer.encode(prompt)
    expected = list(
        generate_tokens(
            smollm2_model, out["prompt_tokens"], greedy, GenerateConfig(n_predict=8), smollm2_tokenizer.eog_ids
        )
    )
    assert out["tokens"] == expected
    assert out["text"] == smollm2_tokenizer.decode(expected)


def test_generate_sampling_is_seeded_and_refuses_bad_options():
    args = ("--prompt", "Once upon a time", "--n-predict", "6", "--temp", "0.9", "--seed", "11", "--json")
    first, second = _generate(*args), _generate(*args)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["tokens"] == json.loads(second.stdout)["tokens"]
    bad = _generate("--prompt", "x", "--top-p", "1.5")
    assert bad.returncode == 2 and "'--top-p'" in bad.stderr, bad.stderr  # the option, not an internal name


@pytest.mark.slow
def test_generate_with_triton_kernels_matches_the_reference():
    """The real Triton kernels (Triton's interpreter, TRITON_INTERPRET=1 from tests/conftest.py) through the whole
    default model over its GGUF blocks give the reference path's greedy tokens at float32. The interpreter pays
    for every weight element: measured ~35 s a token for SmolLM2 on 2 busy cores, so two tokens only."""
    args = ("--prompt", "The capital of France is", "--n-predict", "2", "--temp", "0", "--dtype", "float32", "--json")
    reference = _generate(*args, "--kernels", "reference")
    started = time.monotonic()
    triton = _generate(*args, "--kernels", "triton", env={**os.environ, "TRITON_INTERPRET": "1"})
    print(f"generate --kernels triton: {time.monotonic() - started:.0f} s")
    assert reference.returncode == 0 and triton.returncode == 0, reference.stderr + triton.stderr
    assert json.loads(triton.stdout)["tokens"] == json.loads(reference.stdout)["tokens"]


def test_generate_refuses_triton_kernels_it_cannot_run():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = _generate("--prompt", "x", "--kernels", "triton", env=env)
    assert run.returncode == 2 and "--kernels" in run.stderr and "TRITON_INTERPRET=1" in run.stderr, run.stderr
    run = _generate("--prompt", "x", "--kernels", "triton", "--dtype", "bfloat16", env={**env, "TRITON_INTERPRET": "1"})
    assert run.returncode == 2 and "--dtype" in run.stderr and "bfloat16" in run.stderr, run.stderr


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("--temp", "-5"), "'--temp'"),
        (("--n-predict", "0"), "'--n-predict'"),
        (("--top-p", "2"), "'--top-p'"),
        (("--top-k", "-1"), "'--top-k'"),
        (("--min-p", "5"), "'--min-p'"),
        (("-m", "/nonexistent/model.gguf"), "'--model'"),
    ],
)
def test_generate_refuses_bad_values_naming_the_option(args, option):
    run = _generate("--prompt", "x", *args)
    assert run.returncode == 2 and option in run.stderr and "Traceback" not in run.stderr, run.stderr
