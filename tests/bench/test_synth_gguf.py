"""bench/synth_gguf.py: the synthetic models the device check serves are valid GGUF files that load and generate."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf.quants import dequantize

from lexi.gguf.reader import read_gguf
from lexi.gguf.tokenizer import Tokenizer
from lexi.model.args import model_args_from_gguf
from lexi.model.loader import LoadConfig, load_model
from lexi.model.single import SingleSequence

ROOT = Path(__file__).resolve().parents[2]
SYNTH = ROOT / "bench" / "synth_gguf.py"


def _run(*args: str, exe: str = sys.executable) -> str:
    run = subprocess.run([exe, *args], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout


@pytest.fixture(scope="module")
def vocab_export(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth") / "smollm2-vocab.json.gz"
    _run(str(SYNTH), "export-vocab", str(out))
    assert out.stat().st_size < 1 << 20  # it travels to the device machine with the wheels
    return out


@pytest.mark.parametrize("shape", ["tiny-llama", "tiny-qwen3", "tiny-gemma3", "tiny-qwen3moe"])
def test_tiny_synthetic_model_loads_and_generates(tmp_path, vocab_export, shape):
    path = tmp_path / f"{shape}.gguf"
    _run(str(SYNTH), "write", shape, str(path), "--vocab-from", str(vocab_export), "--vocab", "4096")
    f = read_gguf(path)
    args = model_args_from_gguf(f)
    assert (args.family, args.vocab_size, args.n_layers) == (shape.removeprefix("tiny-"), 4096, 2)
    assert args.layer_windows == ((16, 0) if shape == "tiny-gemma3" else (0, 0))
    kinds = Counter(info.qtype.name for info in f.tensors.values())
    embed = "Q8_0" if shape == "tiny-qwen3moe" else "Q4_K"  # MoE shapes: a zero-mean table (see synth_gguf)
    assert set(kinds) == {"Q4_K", "Q6_K", "F32", embed} and kinds["Q4_K"] > kinds["Q6_K"]
    for info in f.tensors.values():  # every block decodes to finite values of a sane scale
        values = dequantize(np.asarray(info.data), info.qtype)
        assert np.isfinite(values).all() and 0.0 < float(np.abs(values).max()) < 100.0, info.name
    model = load_model(f, LoadConfig(dtype="float32", device="cpu"))
    tokenizer = Tokenizer.from_gguf(f)
    ids = tokenizer.encode("The quick brown fox jumps over the lazy dog")
    logits = SingleSequence(model, 32).extend(ids, all_logits=True)
    assert torch.isfinite(logits).all() and float(logits.std()) > 0.1
    out = json.loads(_run("generate", "-m", str(path), "--prompt", "Hello", "--n-predict", "4", "--temp", "0",
                          "--json", exe=str(Path(sys.executable).with_name("lexi-engine"))))  # fmt: skip
    assert len(out["tokens"]) == 4 and all(0 <= t < 4096 for t in out["tokens"])


def test_tiny_gpt_oss_loads_and_generates(tmp_path, vocab_export):
    """llama.cpp's gpt-oss layout: biases, sinks, MXFP4 experts whose E8M0 scales give unit-scale layers, YaRN keys."""
    path = tmp_path / "tiny-gpt-oss.gguf"
    _run(str(SYNTH), "write", "tiny-gpt-oss", str(path), "--vocab-from", str(vocab_export), "--vocab", "4096")
    f = read_gguf(path)
    args = model_args_from_gguf(f)
    assert (args.family, args.vocab_size, args.n_layers, args.layer_windows) == ("gpt-oss", 4096, 4, (16, 0, 16, 0))
    assert (args.attn_sinks, args.yarn_factor, args.expert_count, args.expert_used_count) == (True, 32.0, 4, 2)
    assert set(Counter(info.qtype.name for info in f.tensors.values())) == {"Q8_0", "MXFP4", "F32"}
    for info in f.tensors.values():
        values = dequantize(np.asarray(info.data), info.qtype)
        assert np.isfinite(values).all() and 0.0 < float(np.abs(values).max()) < 100.0, info.name
    experts = dequantize(
        np.asarray(f.tensors["blk.0.ffn_up_exps.weight"].data), f.tensors["blk.0.ffn_up_exps.weight"].qtype
    )
    assert 0.5 < float(experts.std()) * 256**0.5 < 2.0  # about unit-scale outputs from unit-scale inputs
    model = load_model(f, LoadConfig(device="cpu"))
    ids = Tokenizer.from_gguf(f).encode("The quick brown fox jumps over the lazy dog, twice: the quick brown fox")
    logits = SingleSequence(model, 32).extend(ids, all_logits=True)
    assert len(ids) > 16 and torch.isfinite(logits).all() and float(logits.std()) > 0.1


def test_gpt_oss_20b_plan_has_the_real_models_tensors_and_size():
    """gpt-oss-20b's tensor list (never written here: ~12 GB): 24 layers of 19 tensors, 20.9B parameters."""
    synth_gguf = _synth_module()
    shape = synth_gguf.SHAPES["gpt-oss-20b"]
    plan = synth_gguf.tensors(shape)
    assert len(plan) == 24 * 19 + 3
    dims = {name: d for name, d, _ in plan}
    assert dims["blk.0.ffn_gate_inp.weight"] == (32, 2880) and dims["blk.0.attn_sinks.weight"] == (64,)
    assert dims["blk.23.ffn_down_exps.weight"] == (32, 2880, 2880) and dims["blk.23.ffn_down_exps.bias"] == (32, 2880)
    assert dims["blk.0.attn_q.weight"] == (4096, 2880) and dims["blk.0.attn_k.weight"] == (512, 2880)
    params = sum(int(np.prod(d)) for d in dims.values())
    assert 20.8e9 < params < 21.0e9, params
    size = synth_gguf.file_bytes(shape)
    assert 11.0e9 < size < 13.0e9, size  # MXFP4 experts (4.25 bits), Q8_0 elsewhere


def _synth_module():
    sys.path.insert(0, str(SYNTH.parent))
    try:
        import synth_gguf
    finally:
        sys.path.remove(str(SYNTH.parent))
    return synth_gguf


def test_qwen3moe_30b_a3b_plan_has_the_real_models_tensors_and_size():
    """Qwen3-30B-A3B's tensor list (never written here: ~18 GB): 48 layers of 12 tensors, 30.5B parameters."""
    synth_gguf = _synth_module()
    shape = synth_gguf.SHAPES["qwen3moe-30b-a3b"]
    plan = synth_gguf.tensors(shape)
    assert len(plan) == 48 * 12 + 3
    dims = {name: d for name, d, _ in plan}
    assert dims["blk.0.ffn_gate_inp.weight"] == (128, 2048)
    assert dims["blk.47.ffn_gate_exps.weight"] == dims["blk.47.ffn_up_exps.weight"] == (128, 768, 2048)
    assert dims["blk.47.ffn_down_exps.weight"] == (128, 2048, 768)
    assert "blk.0.ffn_gate.weight" not in dims
    params = sum(int(np.prod(d)) for d in dims.values())
    assert 30.4e9 < params < 30.6e9, params
    size = synth_gguf.file_bytes(shape)
    assert 17.0e9 < size < 19.5e9, size  # Q4_K / Q6_K at 4.5 / 6.56 bits a weight


def test_padded_vocabulary_reaches_the_shape_size(vocab_export):
    synth_gguf = _synth_module()
    vocab = synth_gguf.load_vocab(str(vocab_export))
    padded = synth_gguf.sized_vocab(vocab, 128256)
    assert len(padded["tokenizer.ggml.tokens"]) == len(padded["tokenizer.ggml.token_type"]) == 128256
    assert padded["tokenizer.ggml.tokens"][-1] == "[synth128255]"
    assert padded["tokenizer.ggml.merges"] == vocab["tokenizer.ggml.merges"]
    # Llama-3-8B's tensor list: 32 layers of 9 tensors, the embedding, the final norm and the output layer.
    plan = synth_gguf.tensors(synth_gguf.SHAPES["llama3-8b"])
    assert len(plan) == 32 * 9 + 3
    assert sum(1 for _, _, q in plan if q.name == "Q6_K") == 1 + 2 * (4 + 4 + 8)  # output, attn_v/ffn_down wide
