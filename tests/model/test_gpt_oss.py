"""gpt-oss (gpt-oss-20b/120b's family) on tiny random GGUF files in llama.cpp's tensor naming, against llama.cpp:
MXFP4 (and F32) experts with biases, a biased router choosing by top-k logits, attention sinks, sliding-window layers
alternating with global ones, YaRN rope, the clamped SwiGLU.

transformers 5.24 fails reading a gpt-oss GGUF in llama.cpp's naming (FACTS.md), so llama.cpp is the reference. The
vocabulary is SmolLM2's first 2048 tokens; the window is 16 tokens, so the long prompt runs past it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize as gguf_dequantize
from llama_reference import greedy, llama_cpp_reference
from tiny_gguf import TinySpec, small_vocab, write_tiny_gguf

from lexi.gguf.dequant import dequantize_tensor
from lexi.gguf.errors import GGUFError
from lexi.gguf.reader import read_gguf
from lexi.kernels.fused_moe_cpu import CpuExperts
from lexi.kernels.fused_moe_ref import dequantize_expert
from lexi.kernels.moe_types import SWIGLU_OAI
from lexi.model.args import model_args_from_gguf
from lexi.model.loader import LoadConfig, load_model
from lexi.model.moe import MoEFFN, route_topk_softmax
from lexi.model.rope import inverse_frequencies, yarn_frequencies
from lexi.model.single import SingleSequence

VOCAB = 2048
WINDOW = 16
GPT_OSS = dict(
    dim=256, n_layers=4, n_heads=4, n_kv_heads=2, head_dim=64, ffn_dim=256, rope_base=150000.0, n_experts=4,
    n_experts_used=2, expert_ffn_dim=256, sliding_window=WINDOW, yarn=(32.0, 4096), tied=False,
)  # fmt: skip
SPECS = {
    # Everything float32: llama.cpp quantizes no activations, so its greedy tokens are ours exactly.
    "f32": TinySpec("gpt-oss", **GPT_OSS, linear_types=(Q.F32,), embed_type=Q.F32, output_type=Q.F32),
    # MXFP4 experts as gpt-oss ships them (llama.cpp multiplies them by Q8_0-quantized activations: near-ties flip).
    "mxfp4": TinySpec(
        "gpt-oss", **GPT_OSS, linear_types=(Q.F32,), embed_type=Q.F32, output_type=Q.F32, expert_types=(Q.MXFP4,)
    ),
    # The default CPU load's case: every matmul on the C kernels (the lean decode loop needs them).
    "quant": TinySpec(
        "gpt-oss", **GPT_OSS, linear_types=(Q.Q8_0,), embed_type=Q.Q8_0, output_type=Q.Q8_0, expert_types=(Q.MXFP4,)
    ),
}
PROMPTS = {
    "short": [300, 1200, 517, 42, 1999, 860, 77, 1500, 640, 333, 1024, 901],
    "long": torch.randint(260, VOCAB, (3 * WINDOW + 5,), generator=torch.Generator().manual_seed(9)).tolist(),
}
N_TOKENS = 8

# (greedy tokens that must agree, teacher-forced top-1 agreement)
AGREE = {"f32": (N_TOKENS, 1.0), "mxfp4": (4, 0.9)}


@pytest.fixture(scope="module")
def gpt_oss_files(tmp_path_factory, smollm2_gguf):
    root = tmp_path_factory.mktemp("gpt-oss")
    vocab = small_vocab(smollm2_gguf.metadata, VOCAB)
    return {
        name: write_tiny_gguf(root / f"tiny-gpt-oss-{name}.gguf", spec, vocab, seed=60 + i)
        for i, (name, spec) in enumerate(SPECS.items())
    }


def test_the_file_gives_the_gpt_oss_switches(gpt_oss_files):
    f = read_gguf(gpt_oss_files["mxfp4"])
    a = model_args_from_gguf(f)
    assert (a.family, a.rope_style, a.moe_style, a.attn_sinks, a.qkv_bias, a.out_bias) == (
        "gpt-oss", "neox", "gpt-oss", True, True, True
    )  # fmt: skip
    assert a.layer_windows == (WINDOW, 0, WINDOW, 0)  # llama.cpp's set_swa_pattern(2): even layers slide
    assert (a.yarn_factor, a.yarn_orig_ctx, a.rope_scale, a.rope_local_scaled) == (32.0, 4096, 1.0, True)
    assert (a.expert_count, a.expert_used_count, a.expert_ffn_dim) == (4, 2, 256)
    model = load_model(f, LoadConfig(dtype="float32", device="cpu"))
    assert model.rope_local is None  # the sliding layers rotate with the global (YaRN) table
    for block in model.blocks:
        m = block.mlp
        assert isinstance(m, MoEFFN) and m.routing == "topk_softmax" and m.router_bias is not None
        assert m.experts.activation == SWIGLU_OAI and {m.experts.gate.qtype, m.experts.down.qtype} == {Q.MXFP4}
        assert m.experts.gate_bias.shape == (4, 256) and m.experts.down_bias.shape == (4, 256)
        assert block.attn.sinks.shape == (4,) and block.attn.wo.bias is not None
    del f.metadata["gpt-oss.attention.sliding_window"]
    with pytest.raises(GGUFError, match="gpt-oss.attention.sliding_window"):
        model_args_from_gguf(f)


def test_mxfp4_experts_dequantize_as_gguf_does(gpt_oss_files):
    """Each expert of the file's MXFP4 tensors, dequantized from its own bytes, equals gguf-py's dequantizer block
    for block; so does the whole tensor through lexi.gguf.dequant."""
    f = read_gguf(gpt_oss_files["mxfp4"])
    model = load_model(f, LoadConfig(dtype="float32", device="cpu"))
    for i, block in enumerate(model.blocks):
        experts = block.mlp.experts
        for name in ("gate", "up", "down"):
            info = f.tensors[f"blk.{i}.ffn_{name}_exps.weight"]
            want = gguf_dequantize(np.asarray(info.data), Q.MXFP4).reshape(info.shape)
            np.testing.assert_array_equal(dequantize_tensor(info).numpy(), want)
            w = getattr(experts, name)
            for e in range(w.shape[0]):
                np.testing.assert_array_equal(dequantize_expert(w, e).numpy(), want[e])


def test_routing_takes_the_top_logits_and_softmaxes_them():
    logits = torch.tensor([[2.0, 0.0, 1.0, -1.0], [0.0, 3.0, 3.5, 5.0]])
    ids, w = route_topk_softmax(logits, 2)
    assert ids.tolist() == [[0, 2], [3, 2]]
    torch.testing.assert_close(w, torch.softmax(torch.tensor([[2.0, 1.0], [5.0, 3.5]]), -1))


def test_yarn_frequencies_follow_ggml():
    """ggml's rope_yarn per pair i, written out: the ramp between the corrected dims, and mscale 1 + 0.1 ln s."""
    d, base, s, orig = 64, 150000.0, 32.0, 4096
    inv = inverse_frequencies(d, base)
    got, mscale = yarn_frequencies(inv, base, s, orig)
    corr = [d * np.log(orig / (b * 2 * np.pi)) / (2 * np.log(base)) for b in (32.0, 1.0)]
    low, high = max(0, np.floor(corr[0])), min(d - 1, np.ceil(corr[1]))
    for i in range(d // 2):
        ramp = 1 - min(1, max(0, (i - low) / max(0.001, high - low)))
        want = inv[i] / s * (1 - ramp) + inv[i] * ramp
        assert abs(float(got[i]) - float(want)) <= 1e-6 * float(inv[i])
    assert abs(mscale - (1 + 0.1 * np.log(s))) < 1e-9
    assert float(got[0]) == pytest.approx(float(inv[0])) and float(got[-1]) == pytest.approx(float(inv[-1]) / s)


@pytest.mark.peer
@pytest.mark.parametrize("name", ["f32", "mxfp4"])
def test_greedy_tokens_and_logits_match_llamacpp(gpt_oss_files, name):
    path = gpt_oss_files[name]
    forced = torch.randint(260, VOCAB, (48,), generator=torch.Generator().manual_seed(5)).tolist()
    want, ref = llama_cpp_reference(path, PROMPTS, forced, N_TOKENS)
    model = load_model(read_gguf(path), LoadConfig(dtype="float32", device="cpu"))
    got = {p: greedy(model, ids, N_TOKENS) for p, ids in PROMPTS.items()}
    ours = SingleSequence(model, 48, block_size=8).extend(forced, all_logits=True)
    same = ours.argmax(-1) == ref.argmax(-1)
    rows = (ours - ref).abs().amax(-1)
    n_same, rate = AGREE[name]
    print(
        f"{name}: llama.cpp {want}, ours {got}; teacher-forced top-1 {float(same.float().mean()):.1%}, "
        f"max |diff| {float((ours - ref).abs().max()):.4f} (median of the rows' {float(rows.median()):.4f}) of range "
        f"{float(ref.max() - ref.min()):.2f}"
    )
    for p in PROMPTS:
        assert got[p][:n_same] == want[p][:n_same], p
    assert float(same.float().mean()) >= rate
    if name == "f32":
        assert float((ours - ref).abs().max()) <= 1e-3 * float(ref.max() - ref.min())


def test_default_cpu_path_decodes_through_the_lean_loop_like_float32(gpt_oss_files):
    """The default CPU load (MXFP4 experts on the C kernels with their biases, sinks and the output bias in the lean
    decode loop) against the float32 reference (experts dequantized per chosen expert), one token at a time, past the
    window."""
    f = read_gguf(gpt_oss_files["quant"])
    ref = load_model(f, LoadConfig(dtype="float32", device="cpu"))
    model = load_model(f, LoadConfig(device="cpu"))
    assert model.decode_stack is not None and all(layer.sinks is not None for layer in model.decode_stack.layers)
    assert all(isinstance(b.mlp.experts, CpuExperts) for b in model.blocks)
    ids = PROMPTS["long"]
    want = SingleSequence(ref, len(ids)).extend(ids, all_logits=True)
    seq = SingleSequence(model, len(ids))
    got = torch.stack([seq.extend([t]) for t in ids])
    chunked = SingleSequence(model, len(ids)).extend(ids, all_logits=True)  # the prefill path (modules)
    for name, x in (("decode", got), ("prefill", chunked)):
        same = float((x.argmax(-1) == want.argmax(-1)).float().mean())
        print(f"{name}: top-1 agreement {same:.1%}, max |diff| {float((x - want).abs().max()):.3f}")
        assert same >= 0.9


def test_triton_kernels_match_the_reference(gpt_oss_files):
    """--kernels triton under Triton's interpreter: paged attention with sinks over both kinds of layer (the window
    passed within the prompt) and the fused MoE over MXFP4 experts with their biases and the clamped SwiGLU."""
    f = read_gguf(gpt_oss_files["mxfp4"])
    ref = load_model(f, LoadConfig(dtype="float32", device="cpu", kernels="reference"))
    tri = load_model(f, LoadConfig(dtype="float32", device="cpu", kernels="triton"))
    assert all(b.mlp.kernels == "triton" and b.attn.kernels == "triton" for b in tri.blocks)
    ids = PROMPTS["long"][: WINDOW + 8]
    expected = SingleSequence(ref, len(ids) + 4, block_size=8).extend(ids, all_logits=True)
    seq = SingleSequence(tri, len(ids) + 4, block_size=8)
    got = seq.extend(ids[:-4], all_logits=True)  # the prefill kernel, then decode steps past the window
    got = torch.cat([got, torch.stack([seq.extend([t]) for t in ids[-4:]])])
    span = float(expected.max() - expected.min())
    assert float((got - expected).abs().max()) <= 1e-4 * span
    assert greedy(tri, ids, 3) == greedy(ref, ids, 3)
