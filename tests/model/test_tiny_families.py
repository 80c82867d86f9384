"""Families and tensor types the bundled models lack, on tiny random GGUF files, against transformers."""

from __future__ import annotations

import pytest
import torch
from gguf import GGMLQuantizationType as Q
from tiny_gguf import TinySpec, write_tiny_gguf

from lexi.gguf.reader import read_gguf
from lexi.model.loader import LoadConfig, load_model
from lexi.model.single import SingleSequence

SPECS = {
    "qwen2": TinySpec(
        "qwen2",
        dim=128,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        head_dim=32,
        ffn_dim=256,
        linear_types=(Q.F32, Q.F16, Q.Q8_0, Q.Q4_0),
        qkv_bias=True,
        tied=False,
        rope_base=1e6,
    ),
    "qwen3": TinySpec(
        # transformers' Qwen3 reads no head_dim from GGUF and defaults to 128
        "qwen3",
        dim=256,
        n_layers=2,
        n_heads=2,
        n_kv_heads=1,
        head_dim=128,
        ffn_dim=384,
        linear_types=(Q.Q4_0, Q.Q8_0, Q.F16, Q.F32),
        qk_norm=True,
        tied=True,
        rope_base=1e6,
    ),
    "llama-kquants": TinySpec(
        "llama",
        dim=256,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        head_dim=64,
        ffn_dim=512,
        linear_types=(Q.Q4_K, Q.Q6_K, Q.Q5_K, Q.Q2_K, Q.Q3_K),
        embed_type=Q.Q6_K,
        tied=False,
    ),
}


@pytest.fixture(scope="session")
def tiny_files(tmp_path_factory, smollm2_gguf):
    root = tmp_path_factory.mktemp("tiny_gguf")
    return {
        name: write_tiny_gguf(root / f"tiny-{name}.gguf", spec, smollm2_gguf.metadata, seed=i)
        for i, (name, spec) in enumerate(SPECS.items())
    }


@pytest.mark.parametrize("name", list(SPECS))
def test_tiny_model_loads_with_the_family_switches(tiny_files, name):
    spec = SPECS[name]
    f = read_gguf(tiny_files[name])
    model = load_model(f, LoadConfig(dtype="float32", device="cpu"))
    a = model.args
    assert (a.family, a.head_dim, a.qkv_bias, a.qk_norm, a.tied_output) == (
        spec.arch,
        spec.head_dim,
        spec.qkv_bias,
        spec.qk_norm,
        spec.tied,
    )
    assert a.rope_style == ("norm" if spec.arch == "llama" else "neox")
    kinds = {info.qtype for info in f.tensors.values()}
    assert set(spec.linear_types) <= kinds


@pytest.mark.peer
@pytest.mark.parametrize("name", list(SPECS))
def test_tiny_model_logits_match_transformers(tiny_files, name):
    from transformers import AutoModelForCausalLM

    path = tiny_files[name]
    model = load_model(read_gguf(path), LoadConfig(dtype="float32", device="cpu"))
    hf = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    ids = torch.randint(0, model.args.vocab_size, (40,), generator=torch.Generator().manual_seed(7)).tolist()
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0].float()
    seq = SingleSequence(model, 40, block_size=8)
    ours = torch.cat([seq.extend(ids[:13], all_logits=True), seq.extend(ids[13:], all_logits=True)])
    diff = float((ours - ref).abs().max())
    span = float(ref.max() - ref.min())
    same = ours.argmax(-1) == ref.argmax(-1)
    print(f"{name}: max |diff| {diff:.3e} of range {span:.2f}, argmax {int(same.sum())}/{len(ids)}")
    assert bool(same.all())
    assert diff <= 2e-3 * span


@pytest.mark.parametrize("name", list(SPECS))
def test_quantized_weights_path_matches_dense(tiny_files, name):
    """The CUDA layout (GGUF blocks through lexi.kernels.qmatmul), run with qmatmul's CPU reference."""
    f = read_gguf(tiny_files[name])
    dense = load_model(f, LoadConfig(dtype="float32", device="cpu", quantized=False))
    quant = load_model(f, LoadConfig(dtype="float32", device="cpu", quantized=True))
    assert any(m.qweight is not None for m in quant.modules() if hasattr(m, "qweight"))
    ids = list(range(300, 320))
    ref = SingleSequence(dense, 20).extend(ids, all_logits=True)
    got = SingleSequence(quant, 20).extend(ids, all_logits=True)
    assert float((got - ref).abs().max()) <= 1e-4 * float(ref.max() - ref.min())
