"""Our default dtype against llama.cpp on the same file: top-1 agreement over teacher-forced positions.

llama.cpp quantizes activations inside its matmuls, so near-ties can flip; the margins of any
disagreement are printed so a real bug (large margins) is told apart from noise (tiny ones).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from model_texts import TEACHER_TEXT

from lexi.model.single import SingleSequence

pytestmark = pytest.mark.peer


def _margin(row: torch.Tensor) -> float:
    top = row.topk(2).values
    return float(top[0] - top[1])


@pytest.mark.parametrize("bundled", ["smollm2", "gemma3"], indirect=True)
def test_top1_agrees_with_llamacpp(bundled):
    ids = bundled.tokenizer.encode(TEACHER_TEXT)[:64]
    llm = bundled.lcpp
    llm.reset()
    llm.eval(ids)
    ref = torch.from_numpy(np.array(llm.scores[: len(ids)], dtype=np.float32))
    model = bundled.auto
    ours = SingleSequence(model, len(ids)).extend(ids, all_logits=True)
    same = ours.argmax(-1) == ref.argmax(-1)
    diff = (ours - ref).abs()
    print(
        f"dtype {model.dtype}: top-1 agreement {float(same.float().mean()):.1%} over {len(ids)} positions, "
        f"max |diff| {diff.max():.3f}, mean {diff.mean():.3f}"
    )
    for r in (~same).nonzero().flatten().tolist():
        print(f"  position {r}: llama.cpp margin {_margin(ref[r]):.3f}, ours {_margin(ours[r]):.3f}")
    assert float(same.float().mean()) >= 0.90
