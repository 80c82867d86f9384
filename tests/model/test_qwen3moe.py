"""qwen3moe (Qwen3-30B-A3B's family) on tiny random GGUF files in llama.cpp's tensor naming, against llama.cpp and
transformers: F32 experts, and quantized ones (Q8_0, Q4_K, Q6_K).

transformers 5.24 does not map `qwen3moe.expert_feed_forward_length` (its config keeps moe_intermediate_size 768)
nor a head_dim (128), so the files use those sizes. The vocabulary is SmolLM2's first 2048 tokens, so a float32
output layer stays small.
"""

from __future__ import annotations

import pytest
import torch
from gguf import GGMLQuantizationType as Q
from llama_reference import greedy, llama_cpp_reference
from tiny_gguf import TinySpec, small_vocab, write_tiny_gguf

from lexi.gguf.errors import GGUFError
from lexi.gguf.reader import read_gguf
from lexi.kernels.fused_moe_cpu import CpuExperts
from lexi.model.args import model_args_from_gguf
from lexi.model.loader import LoadConfig, load_model
from lexi.model.moe import MoEFFN, route_softmax_topk
from lexi.model.single import SingleSequence

VOCAB = 2048
MOE = dict(
    dim=256, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=128, ffn_dim=1024, qk_norm=True, rope_base=1e6,
    n_experts=8, n_experts_used=2, expert_ffn_dim=768,
)  # fmt: skip
SPECS = {
    # Everything float32 (llama.cpp quantizes no activations then): its greedy tokens are ours exactly.
    "f32": TinySpec("qwen3moe", **MOE, linear_types=(Q.F32,), embed_type=Q.F32, tied=False, output_type=Q.F32),
    "quant": TinySpec(
        "qwen3moe", **MOE, linear_types=(Q.Q8_0, Q.Q4_0, Q.Q4_K), embed_type=Q.Q8_0, tied=False,
        output_type=Q.Q6_K, expert_types=(Q.Q8_0, Q.Q4_K, Q.Q6_K),
    ),
}  # fmt: skip
PROMPT = [300, 1200, 517, 42, 1999, 860, 77, 1500, 640, 333, 1024, 901]
N_TOKENS = 8

# llama.cpp quantizes activations in its matmuls with quantized weights, so near-ties can flip there: the
# quantized file must agree on its first greedy tokens and on the top-1 of most teacher-forced positions.
AGREE = {"f32": (N_TOKENS, 1.0), "quant": (4, 0.9)}


@pytest.fixture(scope="module")
def moe_files(tmp_path_factory, smollm2_gguf):
    root = tmp_path_factory.mktemp("qwen3moe")
    vocab = small_vocab(smollm2_gguf.metadata, VOCAB)
    return {
        name: write_tiny_gguf(root / f"tiny-qwen3moe-{name}.gguf", spec, vocab, seed=40 + i)
        for i, (name, spec) in enumerate(SPECS.items())
    }


def test_the_file_gives_the_expert_switches(moe_files):
    f = read_gguf(moe_files["quant"])
    a = model_args_from_gguf(f)
    assert (a.family, a.rope_style, a.qk_norm, a.is_moe) == ("qwen3moe", "neox", True, True)
    assert (a.expert_count, a.expert_used_count, a.expert_ffn_dim) == (8, 2, 768)
    model = load_model(f, LoadConfig(dtype="float32", device="cpu"))
    moes = [b.mlp for b in model.blocks]
    assert all(isinstance(m, MoEFFN) for m in moes)
    assert {w.qtype for m in moes for w in (m.experts.gate, m.experts.up, m.experts.down)} == {Q.Q8_0, Q.Q4_K, Q.Q6_K}
    del f.metadata["qwen3moe.expert_used_count"]
    with pytest.raises(GGUFError, match="qwen3moe.expert_used_count"):
        model_args_from_gguf(f)


def test_routing_is_softmax_over_all_then_topk_renormalised():
    logits = torch.tensor([[2.0, 0.0, 1.0, -1.0], [0.0, 3.0, 3.5, 0.0]])
    ids, w = route_softmax_topk(logits, 2)
    assert ids.tolist() == [[0, 2], [2, 1]]
    p = torch.softmax(logits, -1)
    want = torch.stack([p[0, [0, 2]] / p[0, [0, 2]].sum(), p[1, [2, 1]] / p[1, [2, 1]].sum()])
    torch.testing.assert_close(w, want)
    torch.testing.assert_close(w.sum(-1), torch.ones(2))


@pytest.mark.peer
@pytest.mark.parametrize("name", list(SPECS))
def test_greedy_tokens_and_logits_match_llamacpp(moe_files, name):
    path = moe_files[name]
    forced = torch.randint(0, VOCAB, (40,), generator=torch.Generator().manual_seed(5)).tolist()
    want, ref = llama_cpp_reference(path, {"prompt": PROMPT}, forced, N_TOKENS)
    want = want["prompt"]
    model = load_model(read_gguf(path), LoadConfig(dtype="float32", device="cpu"))
    got = greedy(model, PROMPT, N_TOKENS)
    ours = SingleSequence(model, 40, block_size=8).extend(forced, all_logits=True)
    same = ours.argmax(-1) == ref.argmax(-1)
    n_same, rate = AGREE[name]
    print(
        f"{name}: llama.cpp {want}, ours {got}; teacher-forced top-1 {float(same.float().mean()):.1%}, "
        f"max |diff| {float((ours - ref).abs().max()):.3f} of range {float(ref.max() - ref.min()):.2f}"
    )
    for r in (~same).nonzero().flatten().tolist():
        top = ref[r].topk(2).values
        print(f"  position {r}: llama.cpp margin {float(top[0] - top[1]):.3f}")
    assert got[:n_same] == want[:n_same]
    assert float(same.float().mean()) >= rate


@pytest.mark.peer
@pytest.mark.parametrize("name", list(SPECS))
def test_logits_and_greedy_tokens_match_transformers(moe_files, name):
    from transformers import AutoModelForCausalLM

    path = moe_files[name]
    model = load_model(read_gguf(path), LoadConfig(dtype="float32", device="cpu"))
    hf = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    ids = torch.randint(0, VOCAB, (40,), generator=torch.Generator().manual_seed(7)).tolist()
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0].float()
    seq = SingleSequence(model, 40, block_size=8)
    ours = torch.cat([seq.extend(ids[:13], all_logits=True), seq.extend(ids[13:], all_logits=True)])
    diff, span = float((ours - ref).abs().max()), float(ref.max() - ref.min())
    print(f"{name}: max |diff| {diff:.3e} of range {span:.2f}")
    assert torch.equal(ours.argmax(-1), ref.argmax(-1))
    assert diff <= 2e-3 * span
    with torch.no_grad():
        out = hf.generate(torch.tensor([PROMPT]), max_new_tokens=N_TOKENS, do_sample=False)
    assert greedy(model, PROMPT, N_TOKENS) == out[0, len(PROMPT) :].tolist()


def test_default_cpu_path_decodes_through_the_lean_loop_like_float32(moe_files):
    """The default CPU load (attention and experts on the CPU kernels, the lean decode loop calling the MoE module)
    against the float32 reference (experts through fused_moe_ref), teacher-forced one token at a time."""
    f = read_gguf(moe_files["quant"])
    ref = load_model(f, LoadConfig(dtype="float32", device="cpu"))
    model = load_model(f, LoadConfig(device="cpu"))
    assert model.decode_stack is not None and all(layer.moe is not None for layer in model.decode_stack.layers)
    assert all(isinstance(b.mlp.experts, CpuExperts) for b in model.blocks)  # the experts on the C kernels
    ids = torch.randint(0, VOCAB, (48,), generator=torch.Generator().manual_seed(3)).tolist()
    want = SingleSequence(ref, 48).extend(ids, all_logits=True)
    seq = SingleSequence(model, 48)
    got = torch.stack([seq.extend([t]) for t in ids])
    same = float((got.argmax(-1) == want.argmax(-1)).float().mean())
    print(f"top-1 agreement {same:.1%}, max |diff| {float((got - want).abs().max()):.3f}")
    assert same >= 0.9


TRITON_SPEC = TinySpec(
    "qwen3moe", dim=256, n_layers=2, n_heads=4, n_kv_heads=1, head_dim=64, ffn_dim=512, qk_norm=True,
    linear_types=(Q.Q8_0, Q.Q4_0), embed_type=Q.Q8_0, n_experts=4, n_experts_used=2, expert_ffn_dim=256,
    expert_types=(Q.Q4_K, Q.Q8_0, Q.F32),
)  # fmt: skip


def test_triton_kernels_match_the_reference(tmp_path, smollm2_gguf):
    """--kernels triton under Triton's interpreter (fused MoE GEMM for the prefill, GEMV for decode steps)."""
    path = write_tiny_gguf(tmp_path / "moe-triton.gguf", TRITON_SPEC, small_vocab(smollm2_gguf.metadata, 1024), 7)
    f = read_gguf(path)
    ref = load_model(f, LoadConfig(dtype="float32", device="cpu", kernels="reference"))
    tri = load_model(f, LoadConfig(dtype="float32", device="cpu", kernels="triton"))
    assert all(b.mlp.kernels == "triton" for b in tri.blocks) and tri.decode_stack is None
    ids = [300, 700, 517, 42, 999, 860, 77, 500, 640, 333]
    expected = SingleSequence(ref, 24, block_size=8).extend(ids, all_logits=True)
    got = SingleSequence(tri, 24, block_size=8).extend(ids, all_logits=True)
    span = float(expected.max() - expected.min())
    assert float((got - expected).abs().max()) <= 1e-4 * span
    assert greedy(tri, ids, 3) == greedy(ref, ids, 3)
