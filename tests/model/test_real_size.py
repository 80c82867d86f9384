"""A real-size model: a synthetic 1.2B-parameter Llama-3.2-1B-shaped Q4_K_M file (bench/synth_gguf.py), loaded as
`serve` loads it, holds no more memory than the file, its KV cache and the runtime, and decodes the same greedy
tokens as the exact float32 reference path, with the same logits: a random model's greedy tokens say little (its
argmax margins are large), so every step's whole logit row is compared too.

Each load runs in a process of its own, so its peak resident set (VmHWM) is its own: the mapped file's pages count
in it as they are touched, exactly as they count for llama.cpp.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
# Python, torch, numpy, the tokenizer and the engine's own buffers, measured at ~0.45 GB beside SmolLM2.
MARGIN = 0.7e9

PROBE = r"""
import json, sys
from lexi.gguf.reader import read_gguf
from lexi.gguf.tokenizer import Tokenizer
from lexi.model.loader import LoadConfig, load_model
from lexi.model.single import SingleSequence
import numpy as np
path, dtype, n, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
f = read_gguf(path)
model = load_model(f, LoadConfig(dtype=dtype))
ids = Tokenizer.from_gguf(f).encode("The history of the city begins with")
seq = SingleSequence(model, len(ids) + n)
logits = seq.extend(ids)
tokens, rows = [], []
for _ in range(n):
    rows.append(logits.numpy().copy())
    tokens.append(int(logits.argmax()))
    logits = seq.extend([tokens[-1]])
np.save(out, np.stack(rows))
kv = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in seq.kv_cache)
hwm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"tokens": tokens, "kv": kv, "peak_rss": hwm}))
"""


def _probe(path: Path, dtype: str, n: int) -> tuple[dict, np.ndarray]:
    out = path.with_suffix(f".{dtype}.npy")
    run = subprocess.run(
        [sys.executable, "-c", PROBE, str(path), dtype, str(n), str(out)],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1]), np.load(out)


@pytest.fixture(scope="module")
def llama_1b(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("real-size") / "llama3-1b.gguf"
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "synth_gguf.py"), "write", "llama3-1b", str(path)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return path


@pytest.mark.slow
def test_a_1b_model_loads_in_the_memory_of_its_file_and_decodes_as_the_reference(llama_1b):
    from lexi.gguf.reader import read_gguf
    from lexi.model.args import model_args_from_gguf

    a = model_args_from_gguf(read_gguf(llama_1b))
    params = a.vocab_size * a.dim + a.n_layers * (a.dim * (a.q_dim + 2 * a.kv_dim + a.q_dim) + 3 * a.dim * a.ffn_dim)
    assert params >= 1.0e9, params
    size = llama_1b.stat().st_size
    ours, ours_logits = _probe(llama_1b, "auto", 12)
    print(f"file {size / 1e9:.2f} GB, KV {ours['kv'] / 1e9:.3f} GB, peak RSS {ours['peak_rss'] / 1e9:.2f} GB")
    assert ours["peak_rss"] <= size + ours["kv"] + MARGIN
    ref, ref_logits = _probe(llama_1b, "float32", 12)
    assert ours["tokens"] == ref["tokens"]
    # Every step's logits (the reference's own greedy path, since the tokens agree): within 1% of their spread,
    # and the same 16 best tokens in the same order.
    spread = ref_logits.std(axis=1, keepdims=True)
    worst = float((np.abs(ours_logits - ref_logits) / spread).max())
    print(f"max |logit - reference| = {worst:.4f} x the logits' standard deviation")
    assert worst < 0.01
    assert (np.argsort(-ours_logits, axis=1)[:, :16] == np.argsort(-ref_logits, axis=1)[:, :16]).all()
