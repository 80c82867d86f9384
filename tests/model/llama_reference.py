"""llama.cpp as the reference for tiny model files, and our greedy decode beside it (the MoE family tests share them).

llama.cpp runs in its own process: its OpenMP threads and ours would take the cores from each other.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from lexi.model.single import SingleSequence

ROOT = Path(__file__).resolve().parents[2]

# greedy tokens after each prompt, then the logits of every position of a teacher-forced sequence
_SCRIPT = r"""
import json, sys
import llama_cpp
import numpy as np
path, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[5]
prompts, forced = json.loads(sys.argv[3]), json.loads(sys.argv[4])
llm = llama_cpp.Llama(path, n_ctx=128, n_threads=2, logits_all=True, verbose=False)
result = {}
for name, prompt in prompts.items():
    llm.reset()
    llm.eval(prompt)
    tokens = []
    for _ in range(n):
        tokens.append(int(np.argmax(llm.scores[llm.n_tokens - 1])))
        llm.eval([tokens[-1]])
    result[name] = tokens
llm.reset()
llm.eval(forced)
np.save(out, np.array(llm.scores[: len(forced)], dtype=np.float32))
print(json.dumps(result))
"""


def llama_cpp_reference(
    path: Path, prompts: dict[str, list[int]], forced: list[int], n: int
) -> tuple[dict[str, list[int]], torch.Tensor]:
    """llama.cpp's n greedy tokens after each prompt, and its logits (len(forced), vocab) over `forced`."""
    scores = path.with_suffix(".scores.npy")
    run = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(path), str(n), json.dumps(prompts), json.dumps(forced), str(scores)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1]), torch.from_numpy(np.load(scores))


def greedy(model, ids: list[int], n: int) -> list[int]:
    """Our n greedy tokens after `ids`, one sequence through the paged cache."""
    seq = SingleSequence(model, len(ids) + n + 1, block_size=8)
    logits = seq.extend(ids)
    out = []
    for _ in range(n):
        out.append(int(logits.argmax()))
        logits = seq.extend([out[-1]])
    return out
