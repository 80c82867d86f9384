"""The default CPU path against the float32 path: top-1 agreement, teacher-forced over a fixed corpus.

The default path differs from float32 on purpose (bfloat16 activations and dense weights for prefill; at decode
sizes int4 or per-row int8 weights, and an int8 head with exact int32 sums; see README "The CPU path"). Those
roundings must not change what the model predicts: over 560 positions per bundled model, the argmax of the
default path's logits equals float32's at >= 98% of positions, both for a prompt prefilled in chunks (the
prefill path) and for the same tokens fed one at a time (the decode path). The margins of any disagreement are
printed, so a real bug (large margins) is told apart from near-ties.
"""

from __future__ import annotations

import pytest
import torch
from model_texts import FIDELITY_TEXT

from lexi.model.single import SingleSequence

POSITIONS = 560  # the corpus's first 560 tokens with either tokenizer (>= 256; more positions, less chance)


def _margin(row: torch.Tensor) -> float:
    top = row.topk(2).values
    return float(top[0] - top[1])


def _report(label: str, ours: torch.Tensor, ref: torch.Tensor) -> float:
    same = ours.argmax(-1) == ref.argmax(-1)
    diff = (ours - ref).abs()
    rate = float(same.float().mean())
    stats = f"max |diff| {diff.max():.3f}, mean {diff.mean():.3f}"
    print(f"{label}: top-1 agreement {rate:.2%} over {len(ref)} positions, {stats}")
    for r in (~same).nonzero().flatten().tolist():
        print(f"  position {r}: float32 margin {_margin(ref[r]):.3f}, ours {_margin(ours[r]):.3f}")
    return rate


@pytest.mark.parametrize("bundled", ["smollm2", "gemma3"], indirect=True)
def test_default_path_agrees_with_float32(bundled):
    ids = bundled.tokenizer.encode(FIDELITY_TEXT)
    assert len(ids) >= POSITIONS, len(ids)
    ids = ids[:POSITIONS]
    ref = SingleSequence(bundled.f32, POSITIONS).extend(ids, all_logits=True)
    model = bundled.auto
    assert model.dtype == torch.bfloat16  # the default CPU load
    seq = SingleSequence(model, POSITIONS)
    prefill = torch.cat([seq.extend(ids[a : a + 128], all_logits=True) for a in range(0, POSITIONS, 128)])
    seq = SingleSequence(model, POSITIONS)
    decode = torch.stack([seq.extend([t]) for t in ids])
    assert _report("prefill", prefill, ref) >= 0.98
    assert _report("decode", decode, ref) >= 0.98
