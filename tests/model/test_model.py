"""ModelArgs, the loader's refusals, and the paged forward's own consistency (no peers)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from lexi.gguf.errors import GGUFError
from lexi.kernels.paged_attention import AttentionMetadata
from lexi.model.args import model_args_from_gguf
from lexi.model.loader import LoadConfig, LoadConfigError, load_model
from lexi.model.single import SingleSequence


def test_smollm2_args(smollm2_gguf):
    a = model_args_from_gguf(smollm2_gguf)
    md = smollm2_gguf.metadata
    assert (a.family, a.dim, a.n_layers) == ("llama", md["llama.embedding_length"], md["llama.block_count"])
    assert (a.n_heads, a.n_kv_heads, a.head_dim) == (9, 3, 64)
    assert a.rope_base == md["llama.rope.freq_base"] and a.rope_style == "norm"
    assert a.tied_output and not a.qkv_bias and not a.qk_norm and not a.sandwich_norm
    assert a.layer_windows == (0,) * 30 and a.vocab_size == len(md["tokenizer.ggml.tokens"])


def test_gemma3_args(gemma3_gguf):
    a = model_args_from_gguf(gemma3_gguf)
    window = gemma3_gguf.metadata["gemma3.attention.sliding_window"]
    # five sliding-window layers, then one global, repeated
    assert a.layer_windows == tuple(0 if i % 6 == 5 else window for i in range(18))
    assert a.rope_base == 1e6 and a.rope_base_local == 10000.0 and a.rope_style == "neox"
    assert a.embed_scale == pytest.approx(math.sqrt(640)) and a.attn_scale == pytest.approx(256**-0.5)
    assert a.activation == "gelu_tanh" and a.sandwich_norm and a.qk_norm and a.tied_output
    assert (a.n_heads, a.n_kv_heads, a.head_dim) == (4, 1, 256)


def _without(f, key):
    return dataclasses.replace(f, metadata={k: v for k, v in f.metadata.items() if k != key})


@pytest.mark.parametrize("key", ["llama.embedding_length", "llama.attention.layer_norm_rms_epsilon"])
def test_missing_metadata_key_is_named(smollm2_gguf, key):
    with pytest.raises(GGUFError, match=key.replace(".", r"\.")):
        model_args_from_gguf(_without(smollm2_gguf, key))


def test_unknown_architecture_and_missing_tensor_are_refused(smollm2_gguf):
    with pytest.raises(GGUFError, match="'gpt2' is not supported"):
        model_args_from_gguf(dataclasses.replace(smollm2_gguf, architecture="gpt2"))
    tensors = {k: v for k, v in smollm2_gguf.tensors.items() if k != "blk.3.ffn_up.weight"}
    with pytest.raises(GGUFError, match=r"blk\.3\.ffn_up\.weight"):
        load_model(dataclasses.replace(smollm2_gguf, tensors=tensors), LoadConfig(device="cpu"))


def test_load_config_validates():
    with pytest.raises(ValueError, match="dtype"):
        LoadConfig(dtype="int4")
    with pytest.raises(ValueError, match="device"):
        LoadConfig(device="tpu")
    with pytest.raises(ValueError, match="kernels"):
        LoadConfig(kernels="cuda")
    with pytest.raises(ValueError, match="quantized"):
        LoadConfig(kernels="triton", quantized=False)
    with pytest.raises(ValueError, match="deterministic"):
        LoadConfig(kernels="triton", deterministic=True)
    with pytest.raises(LoadConfigError, match="deterministic: the row-independent paths are the CPU's"):
        LoadConfig(device="cuda", deterministic=True).resolve()  # refused before asking whether CUDA is there
    device, dtype, kernels = LoadConfig(dtype="float16", device="cpu").resolve()
    assert (device.type, dtype, kernels) == ("cpu", torch.float16, "reference")


def test_float16_is_refused_for_gemma3(gemma3_gguf):
    with pytest.raises(ValueError, match="float16 overflows"):
        load_model(gemma3_gguf, LoadConfig(dtype="float16", device="cpu"))


def test_chunked_and_block_sizes_agree(smollm2_f32, smollm2_tokenizer):
    from model_texts import TEACHER_TEXT

    ids = smollm2_tokenizer.encode(TEACHER_TEXT)[:32]
    whole = SingleSequence(smollm2_f32, 32, block_size=16).extend(ids, all_logits=True)
    seq = SingleSequence(smollm2_f32, 32, block_size=5)
    steps = [seq.extend(ids[:20], all_logits=True)] + [seq.extend([t])[None] for t in ids[20:]]
    stepped = torch.cat(steps)
    assert stepped.dtype == torch.float32 and stepped.shape == (32, smollm2_f32.args.vocab_size)
    assert float((stepped - whole).abs().max()) < 1e-3
    with pytest.raises(ValueError, match="max_tokens"):
        seq.extend([1])


def test_batch_of_sequences_equals_each_alone(gemma3_model, gemma3_tokenizer):
    """Two sequences in one flat batch, scattered over non-contiguous blocks, give each one's own logits."""
    model = gemma3_model
    a = gemma3_tokenizer.encode("The weather today is")
    b = gemma3_tokenizer.encode("In mathematics, a prime number is a natural number greater than one")
    alone = [SingleSequence(model, 32, block_size=4).extend(x) for x in (a, b)]
    cache = model.new_kv_cache(num_blocks=24, block_size=4)
    tables = [[7, 2, 11, 5, 20, 21, 22, 23], [1, 9, 3, 14, 0, 6, 8, 10, 12, 13, 15, 16]]
    meta = AttentionMetadata.build([len(a), len(b)], [0, 0], tables, 4)
    logits = model(torch.tensor(a + b), meta, cache)
    assert logits.shape == (2, model.args.vocab_size) and logits.dtype == torch.float32
    tol = 0.05 * float(alone[1].max() - alone[1].min())  # bfloat16 default dtype on CPU
    for row, ref in zip(logits, alone, strict=True):
        assert int(row.argmax()) == int(ref.argmax())
        assert float((row - ref).abs().max()) < tol
    # one decode step for both: the cache from the batched prefill is what each sequence reads back
    nxt = [int(x.argmax()) for x in logits]
    meta = AttentionMetadata.build([1, 1], [len(a), len(b)], tables, 4)
    step = model(torch.tensor(nxt), meta, cache)
    for row, x, t in zip(step, (a, b), nxt, strict=True):
        seq = SingleSequence(model, 32, block_size=4)
        seq.extend(x)
        ref = seq.extend([t])
        assert int(row.argmax()) == int(ref.argmax())
