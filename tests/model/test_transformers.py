"""Our float32 forward against transformers' implementation of the same GGUF file (dequantized to float32)."""

from __future__ import annotations

import pytest
import torch
from model_texts import PROMPTS, TEACHER_TEXT

from lexi.model.generate import GenerateConfig, generate_tokens, greedy
from lexi.model.single import SingleSequence

pytestmark = pytest.mark.peer
BOTH = pytest.mark.parametrize("bundled", ["smollm2", "gemma3"], indirect=True)


def _hf_logits(hf, ids: list[int], keep: int = 0) -> torch.Tensor:
    with torch.no_grad():
        return hf(torch.tensor([ids]), logits_to_keep=keep).logits[0].float()


def _compare(ours: torch.Tensor, ref: torch.Tensor, label: str) -> None:
    diff = (ours - ref).abs()
    span = float(ref.max() - ref.min())
    same = ours.argmax(-1) == ref.argmax(-1)
    print(
        f"{label}: max |diff| {diff.max():.3e} (range {span:.1f}, {diff.max() / span:.2e} of it), "
        f"argmax {same.sum()}/{len(same)}"
    )
    assert bool(same.all()), f"argmax differs at rows {(~same).nonzero().flatten().tolist()}"
    assert float(diff.max()) <= 2e-3 * span


@BOTH
def test_teacher_forced_logits_match_transformers(bundled):
    ids = bundled.tokenizer.encode(TEACHER_TEXT)[:64]
    assert len(ids) == 64
    ref = _hf_logits(bundled.hf, ids)
    seq = SingleSequence(bundled.f32, 64, block_size=16)
    _compare(seq.extend(ids, all_logits=True), ref, "one chunk")
    # The same positions fed in uneven chunks (crossing block boundaries) read back the paged cache.
    seq = SingleSequence(bundled.f32, 64, block_size=16)
    parts, start = [], 0
    for n in (5, 1, 17, 1, 30, 10):
        parts.append(seq.extend(ids[start : start + n], all_logits=True))
        start += n
    _compare(torch.cat(parts), ref, "chunks 5,1,17,1,30,10")


@BOTH
def test_greedy_tokens_match_transformers_generate(bundled):
    for prompt in PROMPTS:
        ids = bundled.tokenizer.encode(prompt)
        with torch.no_grad():
            out = bundled.hf.generate(
                torch.tensor([ids]),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                max_new_tokens=16,
                do_sample=False,
            )
        ref = out[0, len(ids) :].tolist()
        ours = list(generate_tokens(bundled.f32, ids, greedy, GenerateConfig(n_predict=16, stop_at_eog=False)))
        print(f"{prompt!r}: transformers {ref} / ours {ours}")
        assert len(ref) >= 1
        assert ours[: len(ref)] == ref  # transformers stops early only at EOS, which ours must also produce


@pytest.mark.parametrize("bundled", ["gemma3"], indirect=True)
def test_gemma3_sliding_window_layers_match_transformers(bundled):
    """Past 512 tokens the local layers forget the start and the global ones do not: rows 560-599 check both."""
    ids = bundled.tokenizer.encode(" ".join(f"Chapter {i}. {TEACHER_TEXT}" for i in range(12)))[:600]
    assert len(ids) == 600
    ref = _hf_logits(bundled.hf, ids, keep=40)
    seq = SingleSequence(bundled.f32, 600, block_size=16)
    seq.extend(ids[:560])
    _compare(seq.extend(ids[560:], all_logits=True), ref, "rows 560-599")
