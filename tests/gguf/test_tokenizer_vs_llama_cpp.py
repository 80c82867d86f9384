"""Our tokenizer against llama.cpp's (llama-cpp-python, vocab only) on the same GGUF files."""

from __future__ import annotations

import ctypes

import pytest
from gguf_files import write_gguf
from tokenizer_corpus import corpus

from lexi.gguf.reader import read_gguf
from lexi.gguf.tokenizer import Tokenizer

llama_cpp = pytest.importorskip("llama_cpp")

pytestmark = pytest.mark.peer

CORPUS = corpus()
# tokenizer.ggml.pre values llama.cpp knows, each tried on SmolLM's vocabulary and merges.
PRE_TOKENIZERS = ["smollm", "gpt-2", "llama-bpe", "qwen2", "default", "starcoder"]
_NOT_TEXT_ATTRS = (
    llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN | llama_cpp.LLAMA_TOKEN_ATTR_UNUSED
)


def _llama(path):
    return llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)


@pytest.fixture(scope="module", params=["smollm2", "gemma3", "harmony"])
def pair(request):
    """(our tokenizer, llama.cpp's) for each bundled model, and a vocabulary ending with gpt-oss's harmony tokens."""
    tok = request.getfixturevalue(f"{request.param}_tokenizer")
    return request.param, tok, _llama(request.getfixturevalue(f"{request.param}_path"))


def _mismatches(tok, llama, texts, *, special):
    bad = []
    for text in texts:
        ours = tok.encode(text, add_bos=False, special=special)
        theirs = llama.tokenize(text.encode("utf-8"), add_bos=False, special=special)
        if ours != theirs:
            bad.append((text, ours, theirs))
    return bad


@pytest.mark.parametrize("special", [True, False])
def test_corpus_tokenizes_like_llama_cpp(pair, special):
    name, tok, llama = pair
    bad = _mismatches(tok, llama, CORPUS, special=special)
    print(f"{name} special={special}: {len(CORPUS) - len(bad)}/{len(CORPUS)} strings identical to llama.cpp")
    assert bad == []


def test_decode_gives_llama_cpps_bytes(pair):
    # special=True: llama-cpp-python's special=False also drops one leading space after BOS, which is
    # wrong for vocabularies without a space prefix (Gemma's "   x" would lose a space).
    _, tok, llama = pair
    for text in CORPUS:
        ids = tok.encode(text, special=True)
        assert tok.decode(ids).encode("utf-8") == llama.detokenize(ids, special=True), text


def test_bos_is_added_like_llama_cpp(pair):
    # llama.cpp's add_bos=True means "add what the model adds"; ours does that when add_bos is left unset.
    _, tok, llama = pair
    for text in CORPUS[:50]:
        assert tok.encode(text) == llama.tokenize(text.encode("utf-8"), add_bos=True, special=True), text
    assert tok.add_bos == llama._model.add_bos_token()


def test_special_ids_match_llama_cpp(pair):
    _, tok, llama = pair
    vocab = llama._model.vocab
    assert tok.vocab_size == llama_cpp.llama_vocab_n_tokens(vocab)
    assert tok.bos_id == llama_cpp.llama_vocab_bos(vocab)
    assert tok.eos_id == llama_cpp.llama_vocab_eos(vocab)
    theirs = {i for i in range(tok.vocab_size) if llama_cpp.llama_vocab_is_eog(vocab, i)}
    assert tok.eog_ids == theirs - _text_end_tags(tok)


def _text_end_tags(tok):
    """Our one deliberate difference: llama.cpp stops at "</s>" even where the vocabulary makes it plain text."""
    token_id = tok.token_to_id("</s>")
    return {token_id} if token_id is not None and not tok.is_special(token_id) else set()


def test_every_token_has_llama_cpps_bytes_and_kind(pair):
    _, tok, llama = pair
    vocab = llama._model.vocab
    buf = ctypes.create_string_buffer(1024)
    wrong_bytes, wrong_kind = [], []
    for i in range(tok.vocab_size):
        n = llama_cpp.llama_token_to_piece(vocab, i, buf, len(buf), 0, True)
        if tok.token_bytes(i) != buf.raw[:n]:
            wrong_bytes.append((i, tok.token_bytes(i), buf.raw[:n]))
        if tok.is_special(i) != bool(llama_cpp.llama_vocab_get_attr(vocab, i) & _NOT_TEXT_ATTRS):
            if i not in _text_end_tags(tok):
                wrong_kind.append(i)
    assert wrong_bytes[:10] == [] and wrong_kind[:10] == []


@pytest.fixture(scope="module")
def vocab_files(smollm2_gguf, tmp_path_factory):
    """SmolLM2's metadata with tokenizer.ggml.pre replaced: one file per pre-tokenizer, no tensors."""
    folder = tmp_path_factory.mktemp("pre")
    files = {}
    for pre in [*PRE_TOKENIZERS, "gpt2"]:
        meta = {**smollm2_gguf.metadata, "tokenizer.ggml.pre": pre}
        files[pre] = write_gguf(folder / f"{pre}.gguf", metadata=meta)
    return files


@pytest.mark.parametrize("pre", PRE_TOKENIZERS)
def test_pre_tokenizers_split_like_llama_cpp(vocab_files, pre):
    tok = Tokenizer.from_gguf(read_gguf(vocab_files[pre]))
    bad = _mismatches(tok, _llama(vocab_files[pre]), CORPUS, special=False)
    print(f"pre={pre}: {len(CORPUS) - len(bad)}/{len(CORPUS)} identical")
    assert bad == []


def test_gpt2_is_an_alias_of_gpt_2(vocab_files):
    # llama.cpp spells it "gpt-2" and refuses "gpt2"; converters have written both.
    tok = Tokenizer.from_gguf(read_gguf(vocab_files["gpt2"]))
    assert _mismatches(tok, _llama(vocab_files["gpt-2"]), CORPUS, special=False) == []


def test_sentencepiece_space_prefix_like_llama_cpp(gemma3_gguf, tmp_path):
    # Llama-2-style SentencePiece models prefix a space to the text and after every special token.
    meta = {**gemma3_gguf.metadata, "tokenizer.ggml.add_space_prefix": True}
    path = write_gguf(tmp_path / "spm.gguf", arch="gemma3", metadata=meta)
    tok = Tokenizer.from_gguf(read_gguf(path))
    assert tok.add_space_prefix
    llama = _llama(path)
    for special in (True, False):
        assert _mismatches(tok, llama, CORPUS, special=special) == []
