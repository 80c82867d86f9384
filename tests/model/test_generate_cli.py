"""`lexi-engine generate` as a user runs it: a subprocess on the default model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from lexi.model.generate import GenerateConfig, generate_tokens, greedy


def _generate(*args: str) -> subprocess.CompletedProcess:
    cmd = [str(Path(sys.executable).with_name("lexi-engine")), "generate", *args]  # the installed command
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


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
    assert bad.returncode == 2 and "top_p" in bad.stderr
