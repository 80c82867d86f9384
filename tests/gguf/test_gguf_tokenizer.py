"""Tokenizer behaviour that needs no peer: round trips, special tokens, token bytes, the incremental detokenizer."""

from __future__ import annotations

import pytest
from gguf_files import write_gguf
from tokenizer_corpus import SPECIAL_TEXTS, corpus

from lexi.gguf.errors import GGUFError
from lexi.gguf.reader import read_gguf
from lexi.gguf.tokenizer import Tokenizer
from lexi.gguf.vocab import TokenType

CORPUS = corpus()


@pytest.fixture(params=["smollm2", "gemma3"])
def model(request):
    """(tokenizer, GGUFFile) of each bundled model."""
    return request.getfixturevalue(f"{request.param}_tokenizer"), request.getfixturevalue(f"{request.param}_gguf")


def _round_trippable(tok: Tokenizer, text: str) -> bool:
    # SentencePiece writes spaces as U+2581, so a literal U+2581 in the input decodes as a space (so does llama.cpp).
    return not (tok.model == "llama" and "\u2581" in text)


def test_corpus_is_large_and_varied():
    assert len(CORPUS) >= 200
    assert len(set(CORPUS)) == len(CORPUS)


def test_special_ids_come_from_the_metadata(model):
    tok, f = model
    meta = f.metadata
    assert tok.vocab_size == len(meta["tokenizer.ggml.tokens"])
    assert tok.bos_id == meta["tokenizer.ggml.bos_token_id"]
    assert tok.eos_id == meta["tokenizer.ggml.eos_token_id"]
    assert tok.eos_id in tok.eog_ids
    assert tok.add_bos == meta["tokenizer.ggml.add_bos_token"]
    assert tok.chat_template == meta.get("tokenizer.chat_template")
    for token_id in tok.eog_ids:
        assert tok.is_special(token_id)


def test_end_of_turn_tokens_end_generation(smollm2_tokenizer, gemma3_tokenizer):
    assert smollm2_tokenizer.token_to_id("<|im_end|>") in smollm2_tokenizer.eog_ids
    assert smollm2_tokenizer.token_to_id("<|im_start|>") not in smollm2_tokenizer.eog_ids
    assert smollm2_tokenizer.chat_template and "<|im_start|>" in smollm2_tokenizer.chat_template
    assert gemma3_tokenizer.token_to_id("<end_of_turn>") in gemma3_tokenizer.eog_ids
    assert gemma3_tokenizer.token_to_id("<start_of_turn>") not in gemma3_tokenizer.eog_ids
    assert gemma3_tokenizer.chat_template is None


def test_add_bos_follows_the_model_unless_told(model):
    tok, _ = model
    plain = tok.encode("Hello world", add_bos=False)
    assert tok.encode("Hello world") == ([tok.bos_id] if tok.add_bos else []) + plain
    assert tok.encode("Hello world", add_bos=True) == [tok.bos_id, *plain]
    assert tok.encode("", add_bos=False) == []


@pytest.mark.parametrize("special", [True, False])
def test_decode_inverts_encode(model, special):
    tok, _ = model
    failures = [
        text
        for text in CORPUS
        if _round_trippable(tok, text) and tok.decode(tok.encode(text, add_bos=False, special=special)) != text
    ]
    assert failures == []


def test_token_bytes_join_to_the_utf8_text(model):
    tok, _ = model
    for text in CORPUS:
        if _round_trippable(tok, text):
            ids = tok.encode(text, add_bos=False, special=False)
            assert b"".join(tok.token_bytes(i) for i in ids) == text.encode("utf-8"), text


def test_control_tokens_are_parsed_only_with_special(model):
    tok, _ = model
    control = [t for t in ("<|im_start|>", "<|im_end|>", "<start_of_turn>", "<end_of_turn>") if tok.token_to_id(t)]
    assert len(control) == 2
    for piece in control:
        token_id = tok.token_to_id(piece)
        text = f"before {piece} after"
        assert token_id in tok.encode(text, special=True)
        as_text = tok.encode(text, add_bos=False, special=False)
        assert token_id not in as_text
        assert tok.decode(as_text, skip_special=True) == tok.decode(as_text) == text


def test_user_defined_tokens_are_always_cut_out(gemma3_tokenizer):
    # Gemma's newline and tab runs are user-defined: llama.cpp cuts them out whatever `special` says.
    tok = gemma3_tokenizer
    newline = tok.token_to_id("\n")
    assert tok._types[newline] == TokenType.USER_DEFINED
    assert not tok.is_special(newline)
    for special in (True, False):
        ids = tok.encode("a\nb\n\n\nc", add_bos=False, special=special)
        assert newline in ids and tok.token_to_id("\n\n\n") in ids


def test_skip_special_drops_control_tokens_only(model):
    tok, _ = model
    for text in SPECIAL_TEXTS:
        ids = tok.encode(text, add_bos=True, special=True)
        kept = [i for i in ids if not tok.is_special(i)]
        assert tok.decode(ids, skip_special=True) == tok.decode(kept)
        assert all(tok.is_special(i) == (tok._types[i] in (2, 3, 5)) for i in ids)


def test_token_bytes_of_each_spelling(smollm2_tokenizer, gemma3_tokenizer):
    assert smollm2_tokenizer.token_bytes(smollm2_tokenizer.token_to_id("Ġhello")) == b" hello"
    assert smollm2_tokenizer.token_bytes(smollm2_tokenizer.token_to_id("Ċ")) == b"\n"
    assert smollm2_tokenizer.token_bytes(smollm2_tokenizer.eos_id) == b"<|im_end|>"
    assert gemma3_tokenizer.token_bytes(gemma3_tokenizer.token_to_id("▁hello")) == b" hello"
    assert gemma3_tokenizer.token_bytes(gemma3_tokenizer.token_to_id("<0x41>")) == b"A"
    assert gemma3_tokenizer.token_bytes(gemma3_tokenizer.token_to_id("<0xF0>")) == b"\xf0"
    assert gemma3_tokenizer.token_text(gemma3_tokenizer.token_to_id("<0xF0>")) == "<0xF0>"
    assert gemma3_tokenizer.token_to_id("no such token anywhere") is None


def test_out_of_range_ids_are_refused(model):
    tok, _ = model
    for bad in (-1, tok.vocab_size):
        with pytest.raises(ValueError, match="outside the vocabulary"):
            tok.decode([bad])
        with pytest.raises(ValueError):
            tok.token_bytes(bad)


def test_detokenizer_equals_decode_for_every_prefix(model):
    tok, _ = model
    held_back = 0
    for text in CORPUS:
        ids = tok.encode(text, add_bos=False, special=True)
        full = tok.decode(ids)
        streamed = ""
        stream = tok.detokenizer()
        for k, token_id in enumerate(ids, start=1):
            piece = stream.feed(token_id)
            if not piece and tok.token_bytes(token_id):
                held_back += 1
            streamed += piece
            assert full.startswith(streamed), (text, k)  # nothing emitted is ever taken back
            fresh = tok.detokenizer()
            prefix = "".join(fresh.feed(i) for i in ids[:k]) + fresh.finish()
            assert prefix == tok.decode(ids[:k]), (text, k)
        assert streamed + stream.finish() == full
    assert held_back > 20  # byte-fallback and split emoji really were held back


def test_detokenizer_holds_an_unfinished_character(model):
    tok, _ = model
    ids = tok.encode("🦙", add_bos=False)
    assert len(ids) > 1  # both vocabularies spell the llama in byte pieces
    stream = tok.detokenizer()
    assert [stream.feed(i) for i in ids[:-1]] == [""] * (len(ids) - 1)
    assert stream.feed(ids[-1]) == "🦙"
    cut = tok.detokenizer()
    assert cut.feed(ids[0]) == ""
    assert cut.finish() == "\ufffd" == tok.decode(ids[:1])[-1]


def test_detokenizer_can_skip_control_tokens(smollm2_tokenizer):
    tok = smollm2_tokenizer
    ids = tok.encode("<|im_start|>assistant\nHi 🦙<|im_end|>")
    stream = tok.detokenizer(skip_special=True)
    assert "".join(stream.feed(i) for i in ids) + stream.finish() == "assistant\nHi 🦙"


def _tokenizer_file(tmp_path, smollm2_gguf, overrides):
    # A slice of the real vocabulary is enough to be refused for the right reason, and quick to write.
    meta = {k: v for k, v in smollm2_gguf.metadata.items() if k.startswith("tokenizer.ggml.")}
    meta["tokenizer.ggml.tokens"] = meta["tokenizer.ggml.tokens"][:300]
    meta["tokenizer.ggml.token_type"] = meta["tokenizer.ggml.token_type"][:300]
    meta["tokenizer.ggml.merges"] = meta["tokenizer.ggml.merges"][:10]
    for key, value in overrides.items():
        if value is None:
            meta.pop(key)
        else:
            meta[key] = value
    return read_gguf(write_gguf(tmp_path / "vocab.gguf", metadata=meta))


def test_unsupported_tokenizers_are_refused(tmp_path, smollm2_gguf):
    cases = [
        ({"tokenizer.ggml.model": "bert"}, "tokenizer model 'bert' is not supported"),
        ({"tokenizer.ggml.pre": "not-a-pre"}, "pre-tokenizer 'not-a-pre'"),
        ({"tokenizer.ggml.model": None}, "no tokenizer"),
        ({"tokenizer.ggml.token_type": [1, 1, 1]}, "3 token types for 300 tokens"),
        ({"tokenizer.ggml.eos_token_id": 300}, "special token id 300 is outside the vocabulary of 300"),
        ({"tokenizer.ggml.merges": ["Ġ t", "no_such_token x"]}, "the gpt2 vocabulary cannot be built"),
    ]
    for overrides, fragment in cases:
        f = _tokenizer_file(tmp_path, smollm2_gguf, overrides)
        with pytest.raises(GGUFError, match=fragment):
            Tokenizer.from_gguf(f)


def test_gemma_end_tag_is_text_not_an_end_of_generation(gemma3_tokenizer):
    # llama.cpp stops at any "</s>"; in Gemma 3 it is a user-defined text token, so we do not.
    tok = gemma3_tokenizer
    end_tag = tok.token_to_id("</s>")
    assert tok._types[end_tag] == TokenType.USER_DEFINED
    assert end_tag not in tok.eog_ids and not tok.is_special(end_tag)
    assert end_tag in tok.encode("<p>x</s>", special=False)
    assert tok.decode(tok.encode("<p>x</s>", special=False), skip_special=True) == "<p>x</s>"


def test_harmony_tokens_are_read_as_llama_cpp_reads_them(harmony_tokenizer):
    """gpt-oss's vocabulary: <|return|> and <|call|> end generation; <|end|> only closes a message inside the answer,
    and it and the frame tokens are text the chat layer reads (tests/gguf/test_tokenizer_vs_llama_cpp.py checks the
    same file against llama.cpp)."""
    tok = harmony_tokenizer
    ids = {t: tok.token_to_id(t) for t in ("<|return|>", "<|call|>", "<|end|>", "<|start|>", "<|channel|>")}
    assert ids["<|return|>"] in tok.eog_ids and ids["<|call|>"] in tok.eog_ids and tok.eos_id == ids["<|return|>"]
    assert ids["<|end|>"] not in tok.eog_ids
    for text in ("<|end|>", "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>"):
        assert not tok.is_special(tok.token_to_id(text)), text
    text = "<|start|>assistant<|channel|>final<|message|>Hi<|end|>"
    encoded = tok.encode(text, special=False)  # user-defined tokens are cut out even from plain text
    assert ids["<|start|>"] in encoded and ids["<|end|>"] in encoded
    assert tok.decode(encoded, skip_special=True) == text
