"""Short steps on the CPU serving path: a step where sequences add a few rows each (a speculative draft's positions
checked in one step) runs the lean decode loop, its attention masked row by row (lexi/kernels/paged_attention_cpu.py,
DecodeBatch with rows > 1). Its logits must be those of feeding the same tokens one step at a time, on the default
load of both bundled models, with one sequence alone (its blocks consecutive: a view of the pool) and two sharing
a step (gathered, padded to the longer one's rows). The matmuls give every row the same bits in any step; attention
sums a row's keys grouped otherwise, and the bfloat16 cache dtype its output is rounded to now and then turns that
last-bit difference into an ulp (SmolLM2: none seen; Gemma 3: up to 1% of the logit span): within 2% of the span,
and the same greedy token wherever one-row steps do not see a near-tie."""

from __future__ import annotations

import pytest
import torch

from lexi.kernels.attention_metadata import AttentionMetadata

BLOCK = 16
PROMPT = 37  # the prompt ends mid-block, and the short rows cross into the next block


def run_step(model, cache, tables, new: list[list[int]], cached: list[int]) -> torch.Tensor:
    """Logits of every new row of one step (sequence s adds new[s] after cached[s] tokens)."""
    meta = AttentionMetadata.build([len(n) for n in new], cached, tables, BLOCK, logits_of_last_only=False)
    return model(torch.tensor([t for n in new for t in n]), meta, cache)


@pytest.mark.parametrize("bundle", ["smollm2_model", "gemma3_model"])
def test_a_short_step_gives_the_logits_of_one_row_a_step(bundle, request):
    model = request.getfixturevalue(bundle)
    assert model.decode_stack is not None  # the default CPU load runs the lean loop
    gen = torch.Generator().manual_seed(5)
    prompts = [torch.randint(200, 20000, (PROMPT + s,), generator=gen).tolist() for s in range(2)]
    rows = [torch.randint(200, 20000, (n,), generator=gen).tolist() for n in (9, 3)]
    per_seq = -(-(PROMPT + 1 + 9) // BLOCK)
    cache = model.new_kv_cache(2 * per_seq + 1, BLOCK)
    # sequence 0's blocks consecutive, sequence 1's shuffled after them
    tables = [list(range(per_seq)), list(range(2 * per_seq, per_seq, -1))]
    with torch.inference_mode():
        for s, prompt in enumerate(prompts):
            run_step(model, cache, [tables[s]], [prompt], [0])
        want = []  # one row a step
        for s, new in enumerate(rows):
            want.append(torch.cat([run_step(model, cache, [tables[s]], [[t]], [len(prompts[s]) + j])
                                   for j, t in enumerate(new)]))  # fmt: skip
        cached = [len(p) for p in prompts]
        alone = run_step(model, cache, [tables[0]], [rows[0]], [cached[0]])
        together = run_step(model, cache, tables, rows, cached)
    got_together = [together[: len(rows[0])], together[len(rows[0]) :]]
    for label, got, expected in (("alone", alone, want[0]), ("together 0", got_together[0], want[0]),
                                 ("together 1", got_together[1], want[1])):  # fmt: skip
        span = float(expected.max() - expected.min())
        err = float((got - expected).abs().max())
        print(f"{bundle} {label}: max |diff| {err:.2e} of a logit span {span:.1f}")
        assert err <= 2e-2 * span, label
        top2 = expected.topk(2, dim=-1).values
        clear = (top2[:, 0] - top2[:, 1]) > 2 * err
        assert torch.equal(got.argmax(-1)[clear], expected.argmax(-1)[clear]), label
