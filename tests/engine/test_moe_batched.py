"""A mixture-of-experts model served in batches: rows that the router sends to different experts in the same step
give, under --deterministic, the same greedy tokens as each request alone.

The models are bench/synth_gguf.py's tiny-qwen3moe (4 experts, 2 per token, Q4_K/Q6_K) and tiny-gpt-oss (4 experts,
2 per token, MXFP4, biases, attention sinks, a 16-token window on alternate layers) at the default CPU dtype.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from engine_helpers import collect, run, running_engine, tokens_of

from lexi.engine.request import GenerationRequest
from lexi.engine.sampling import SamplingParams
from lexi.gguf.reader import read_gguf
from lexi.gguf.tokenizer import Tokenizer
from lexi.model.loader import LoadConfig, load_model
from lexi.model.moe import MoEFFN

ROOT = Path(__file__).resolve().parents[2]
GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)


@pytest.fixture(scope="module", params=["tiny-qwen3moe", "tiny-gpt-oss"])
def tiny_moe(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("moe") / f"{request.param}.gguf"
    run_ = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "synth_gguf.py"), "write", request.param, str(path), "--vocab", "4096"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert run_.returncode == 0, run_.stderr[-3000:]
    f = read_gguf(path)
    return load_model(f, LoadConfig(device="cpu", deterministic=True)), Tokenizer.from_gguf(f)


def test_rows_on_different_experts_give_the_tokens_they_give_alone(tiny_moe, monkeypatch):
    """gpt-oss's prompts run past its 16-token window, through its sinks and biased MXFP4 experts."""
    model, tok = tiny_moe
    assert model.dtype == torch.bfloat16 and model.deterministic
    steps: list[torch.Tensor] = []  # every layer's expert ids of every step

    def recording(route):
        def recording_route(x, force_rowwise=False):
            ids, weights = route(x, force_rowwise)
            steps.append(ids.clone())
            return ids, weights

        return recording_route

    for block in model.blocks:
        assert isinstance(block.mlp, MoEFFN)
        monkeypatch.setattr(block.mlp, "route", recording(block.mlp.route))
    gen = torch.Generator().manual_seed(11)
    prompts = [torch.randint(300, 4096, (n,), generator=gen).tolist() for n in (21, 6, 35, 13)]
    config = dict(parallel=4, ctx_size=128, batch_size=32)
    with running_engine(model, tok, **config) as engine:
        alone = [tokens_of(run(collect(engine, GenerationRequest(p, GREEDY)))) for p in prompts]
    steps.clear()
    with running_engine(model, tok, **config) as engine:

        async def together():
            return await asyncio.gather(*(collect(engine, GenerationRequest(p, GREEDY)) for p in prompts))

        batched = [tokens_of(d) for d in run(together())]
    # Some batched step held rows whose expert choices differ (so rows met different experts in one call).
    mixed = [ids for ids in steps if ids.shape[0] > 1 and len({tuple(sorted(r)) for r in ids.tolist()}) > 1]
    assert mixed, f"no step routed its rows to different experts: {len(steps)} steps, {[s.tolist() for s in steps[:3]]}"
    assert batched == alone


def test_staggered_arrivals_and_a_shared_prefix_keep_each_requests_tokens(tiny_moe):
    """Continuous batching over experts: requests join while others decode (prefill chunks beside decode rows), and a
    later request whose prompt shares three blocks with an earlier one takes them from the prefix cache; each still
    gives the greedy tokens it gives alone in a fresh engine."""
    model, tok = tiny_moe
    gen = torch.Generator().manual_seed(23)
    shared = torch.randint(300, 4096, (48,), generator=gen).tolist()
    prompts = [shared + torch.randint(300, 4096, (n,), generator=gen).tolist() for n in (5, 9)]
    prompts.append(torch.randint(300, 4096, (27,), generator=gen).tolist())
    # the first request decodes long enough that the others surely join while it runs
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in (48, 16, 16)]
    config = dict(parallel=4, ctx_size=128, batch_size=16)
    alone = []
    for p, sp in zip(prompts, params, strict=True):
        with running_engine(model, tok, **config) as engine:  # fresh: no prefix cache
            alone.append(run(collect(engine, GenerationRequest(p, sp))))
    assert all(d[-1].cached_tokens == 0 for d in alone)
    with running_engine(model, tok, **config) as engine:

        async def staggered():
            async def later(i, wait):
                await asyncio.sleep(wait)
                return await collect(engine, GenerationRequest(prompts[i], params[i]))

            first = asyncio.ensure_future(collect(engine, GenerationRequest(prompts[0], params[0])))
            while engine.stats.steps_total < 5:  # the first request is decoding before the others arrive
                await asyncio.sleep(0.005)
            assert not first.done(), "the first request ended before the others joined it"
            rest = await asyncio.gather(later(1, 0.0), later(2, 0.02))
            return [await first, *rest]

        together = run(staggered())
    assert [tokens_of(d) for d in together] == [tokens_of(d) for d in alone]
    assert together[1][-1].cached_tokens == 48  # the three shared 16-token blocks


def test_constrained_rows_beside_free_ones_keep_their_schema(tiny_moe):
    """Constraints over a MoE model: sampled JSON answers of a schema, batched with free rows, always validate."""
    import jsonschema

    from lexi.chat.constraint_plan import plan_output
    from lexi.chat.response_format import ResponseFormat
    from lexi.structured.compiler import ConstraintCompiler
    from lexi.structured.vocabulary import ConstraintVocabulary

    model, tok = tiny_moe
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0, "maximum": 99}},
        "required": ["ok", "n"],
        "additionalProperties": False,
    }
    plan = plan_output(None, "json", ResponseFormat("json_schema", schema, "answer"), None)
    compiler = ConstraintCompiler(ConstraintVocabulary(tok))
    gen = torch.Generator().manual_seed(5)
    prompts = [torch.randint(300, 4096, (n,), generator=gen).tolist() for n in (12, 7, 19, 4)]
    try:
        with running_engine(model, tok, parallel=4, ctx_size=128, batch_size=32) as engine:

            async def mixed():
                requests = []
                for i, p in enumerate(prompts):
                    params = SamplingParams(temperature=1.0, seed=100 + i, max_tokens=40)
                    constraint = await compiler.constraint(plan, 40) if i % 2 == 0 else None
                    requests.append(collect(engine, GenerationRequest(p, params, constraint=constraint)))
                return await asyncio.gather(*requests)

            outs = run(mixed())
    finally:
        compiler.shutdown()
    for i, deltas in enumerate(outs):
        if i % 2 == 0:
            assert deltas[-1].finish_reason == "stop", deltas[-1]
            jsonschema.validate(json.loads("".join(d.text for d in deltas)), schema)
        else:
            assert deltas[-1].completion_tokens > 0
