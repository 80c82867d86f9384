"""The tokenizer a GGUF file carries, rebuilt with `tokenizers` to give llama.cpp's token ids.

Two vocabulary kinds:
- `gpt2`: byte-level BPE over the file's merges, split into words by the regexes that
  `tokenizer.ggml.pre` names (see `pretokenize.py`);
- `llama` (SentencePiece, e.g. Gemma): BPE by scores. llama.cpp merges the adjacent pair whose joined
  text is the highest-scoring token; a BPE whose merge ranks are the vocabulary sorted by score does
  the same. Spaces are `▁`, unknown characters fall back to `<0xNN>` byte tokens, and the text is one
  word (no pre-splitting).
Special tokens are cut out of the text first (`special.py`), and decoding joins each token's bytes
(`vocab.py`), so `decode`, `token_bytes` and the incremental detokenizer agree byte for byte.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models

from lexi.gguf.errors import GGUFError
from lexi.gguf.pretokenize import SUPPORTED_PRE_TOKENIZERS, build_pre_tokenizer, pre_tokenizer_spec
from lexi.gguf.reader import GGUFFile
from lexi.gguf.special import SpecialSplitter
from lexi.gguf.vocab import TokenType, token_bytes_table

SUPPORTED_TOKENIZER_MODELS = ("gpt2", "llama")
# Token texts llama.cpp treats as end of generation wherever they appear in a vocabulary. Left out on
# purpose: "</s>" (llama.cpp added it for PaddleOCR; Gemma 3 has "</s>" as ordinary user-defined text,
# and stopping there cuts off generated markup).
_EOG_TEXTS = (
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",  # o200k_harmony (gpt-oss): the end of the answer
    "<|call|>",  # o200k_harmony: the end of a tool call
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|flush|>",
    "<|calls|>",
    # llama.cpp also stops at fill-in-the-middle pad, repo and file-separator tokens.
    "<|fim_pad|>",
    "<fim-pad>",
    "<fim_pad>",
    "<PAD>",
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
    "<|file_sep|>",
)
# gpt-oss's harmony frame: text in the output (the chat layer reads the channels), as llama.cpp renders them.
_HARMONY_FRAME = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")
_NOT_TEXT = frozenset({TokenType.CONTROL, TokenType.UNKNOWN, TokenType.UNUSED})
_SPACE = "\u2581"


class Tokenizer:
    """Text <-> token ids for one vocabulary. Immutable after construction, so threads may share it."""

    def __init__(
        self,
        *,
        model: str,
        hf: HFTokenizer,
        tokens: list[str],
        ids: dict[str, int],
        types: list[int],
        bos_id: int | None,
        eos_id: int,
        eog_ids: frozenset[int],
        add_bos: bool,
        add_space_prefix: bool,
        chat_template: str | None,
    ) -> None:
        self.model = model
        self.vocab_size = len(tokens)
        self.bos_id = bos_id
        self.eos_id = eos_id
        self.eog_ids = eog_ids
        self.add_bos = add_bos
        self.add_space_prefix = add_space_prefix
        self.chat_template = chat_template
        self._hf = hf
        self._tokens = tokens
        self._types = types
        self._bytes = token_bytes_table(tokens, types, byte_level=model == "gpt2")
        self._not_text = [t in _NOT_TEXT for t in types]
        self._ids = ids
        user = {tokens[i]: i for i, t in enumerate(types) if t == TokenType.USER_DEFINED}
        control = {tokens[i]: i for i, t in enumerate(types) if t in (TokenType.CONTROL, TokenType.UNKNOWN)}
        self._split_plain = SpecialSplitter(user)
        self._split_special = SpecialSplitter({**control, **user})

    @classmethod
    def from_gguf(cls, f: GGUFFile) -> Tokenizer:
        meta = f.metadata
        model, tokens, types = _vocabulary(f)
        ids = {text: i for i, text in enumerate(tokens)}  # a repeated text maps to its last id, as in llama.cpp
        hf = _hf_tokenizer(f, model, tokens, ids)
        bos_id = meta.get("tokenizer.ggml.bos_token_id")
        eog, eos_id, types = _end_tokens(f, ids, types, bos_id)
        add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", model == "llama")) and bos_id is not None
        return cls(
            model=model,
            hf=hf,
            tokens=tokens,
            ids=ids,
            types=types,
            bos_id=bos_id,
            eos_id=eos_id,
            eog_ids=frozenset(eog),
            add_bos=add_bos,
            add_space_prefix=model == "llama" and bool(meta.get("tokenizer.ggml.add_space_prefix", True)),
            chat_template=meta.get("tokenizer.chat_template"),
        )

    def encode(self, text: str, *, add_bos: bool | None = None, special: bool = True) -> list[int]:
        """Token ids of `text`; special=True parses control tokens written in it (llama.cpp's parse_special)."""
        ids: list[int] = []
        if (self.add_bos if add_bos is None else add_bos) and self.bos_id is not None:
            ids.append(self.bos_id)
        splitter = self._split_special if special else self._split_plain
        after_special = True  # SentencePiece prefixes a space to text that starts the input or follows a special
        for fragment in splitter.split(text):
            if isinstance(fragment, int):
                ids.append(fragment)
                after_special = True
                continue
            if self.model == "llama":
                if self.add_space_prefix and after_special:
                    fragment = " " + fragment
                fragment = fragment.replace(" ", _SPACE)
            ids.extend(self._hf.encode(fragment, add_special_tokens=False).ids)
            after_special = False
        return ids

    def decode(self, ids: Sequence[int], *, skip_special: bool = False) -> str:
        """Text of `ids`; bytes that are not valid UTF-8 become U+FFFD, as in the final detokenizer output."""
        return self._raw(ids, skip_special).decode("utf-8", errors="replace")

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes one token stands for (a lone byte token may be a fragment of a UTF-8 character)."""
        return self._bytes[self._check(token_id)]

    def token_text(self, token_id: int) -> str:
        """The token as the vocabulary spells it (`Ġhello`, `▁hello`, `<0x0A>`)."""
        return self._tokens[self._check(token_id)]

    def token_to_id(self, piece: str) -> int | None:
        return self._ids.get(piece)

    def is_special(self, token_id: int) -> bool:
        """Control, unknown and unused tokens: not text (user-defined tokens such as Gemma's `\\n` are text)."""
        return self._not_text[self._check(token_id)]

    def detokenizer(self, *, skip_special: bool = False) -> IncrementalDetokenizer:
        return IncrementalDetokenizer(self, skip_special=skip_special)

    def _raw(self, ids: Sequence[int], skip_special: bool) -> bytes:
        table = self._bytes
        if skip_special:
            return b"".join(table[self._check(i)] for i in ids if not self._not_text[self._check(i)])
        return b"".join(table[self._check(i)] for i in ids)

    def _check(self, token_id: int) -> int:
        if not 0 <= token_id < self.vocab_size:
            raise ValueError(f"token id {token_id} is outside the vocabulary of {self.vocab_size}")
        return token_id


class IncrementalDetokenizer:
    """Text of a token stream as it grows, holding back bytes that do not yet complete a character.

    The concatenation of everything `feed` returned plus `finish()` equals `Tokenizer.decode` of the
    same ids, and no returned piece ever ends inside a UTF-8 sequence (byte-fallback tokens and
    emoji spread over several tokens are held until they are whole).
    """

    __slots__ = ("_tokenizer", "_skip_special", "_decoder")

    def __init__(self, tokenizer: Tokenizer, *, skip_special: bool = False) -> None:
        self._tokenizer = tokenizer
        self._skip_special = skip_special
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, token_id: int) -> str:
        if self._skip_special and self._tokenizer.is_special(token_id):
            return ""
        return self._decoder.decode(self._tokenizer.token_bytes(token_id))

    def finish(self) -> str:
        """Whatever is still held back (an unfinished sequence comes out as U+FFFD)."""
        return self._decoder.decode(b"", final=True)


def _vocabulary(f: GGUFFile) -> tuple[str, list[str], list[int]]:
    """(tokenizer model, token texts, token types) of the file, refused with a GGUFError when unusable."""
    meta = f.metadata
    model = meta.get("tokenizer.ggml.model")
    if model is None:
        raise GGUFError(f"{f.path}: no tokenizer in the metadata (tokenizer.ggml.model is missing)")
    if model not in SUPPORTED_TOKENIZER_MODELS:
        raise GGUFError(
            f"{f.path}: tokenizer model {model!r} is not supported (supported: {', '.join(SUPPORTED_TOKENIZER_MODELS)})"
        )
    tokens = meta.get("tokenizer.ggml.tokens")
    if not tokens:
        raise GGUFError(f"{f.path}: the vocabulary (tokenizer.ggml.tokens) is missing or empty")
    types = meta.get("tokenizer.ggml.token_type") or [int(TokenType.NORMAL)] * len(tokens)
    if len(types) != len(tokens):
        raise GGUFError(f"{f.path}: {len(types)} token types for {len(tokens)} tokens")
    return model, tokens, types


def _hf_tokenizer(f: GGUFFile, model: str, tokens: list[str], ids: dict[str, int]) -> HFTokenizer:
    try:
        if model == "gpt2":
            return _byte_level_bpe(f, ids)
        scores = f.metadata.get("tokenizer.ggml.scores") or [0.0] * len(tokens)
        return _sentencepiece_bpe(tokens, scores, ids)
    except GGUFError:
        raise
    except Exception as exc:  # tokenizers raises plain Exceptions for inconsistent vocabularies
        raise GGUFError(f"{f.path}: the {model} vocabulary cannot be built: {exc}") from None


def _end_tokens(
    f: GGUFFile, ids: dict[str, int], types: list[int], bos_id: int | None
) -> tuple[set[int], int, list[int]]:
    """(end-of-generation ids, the end-of-sequence id, the token types with llama.cpp's corrections)."""
    meta, n = f.metadata, len(types)  # one type a token (_vocabulary checks it)
    eog = {
        meta[k]
        for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")
        if k in meta
    }
    eog |= {ids[text] for text in _EOG_TEXTS if text in ids}
    out_of_range = sorted(i for i in (*eog, bos_id) if i is not None and not 0 <= i < n)
    if out_of_range:
        raise GGUFError(f"{f.path}: special token id {out_of_range[0]} is outside the vocabulary of {n}")
    # llama.cpp makes every end-of-generation token a control token, whatever the file says.
    types = [int(TokenType.CONTROL) if i in eog else t for i, t in enumerate(types)]
    eos_id = meta.get("tokenizer.ggml.eos_token_id", meta.get("tokenizer.ggml.eot_token_id"))
    if all(text in ids for text in ("<|return|>", "<|call|>", "<|end|>")):
        # o200k_harmony, as llama.cpp reads it: <|end|> closes one message (a thought) inside the answer, which
        # <|return|> or <|call|> ends; the frame tokens and <|end|> are text the chat layer reads.
        end = ids["<|end|>"]
        eog.discard(end)
        types[end] = int(TokenType.USER_DEFINED)
        eos_id = ids["<|return|>"] if eos_id == end else eos_id
    for text in _HARMONY_FRAME:
        if text in ids:
            types[ids[text]] = int(TokenType.USER_DEFINED)
    if eos_id is None:
        if not eog:
            raise GGUFError(f"{f.path}: the vocabulary has no end-of-sequence token")
        eos_id = min(eog)
    return eog, eos_id, types


def _byte_level_bpe(f: GGUFFile, vocab: dict[str, int]) -> HFTokenizer:
    pre = f.metadata.get("tokenizer.ggml.pre")
    spec = pre_tokenizer_spec(pre)
    if spec is None:
        raise GGUFError(
            f"{f.path}: pre-tokenizer {pre!r} (tokenizer.ggml.pre) is not supported "
            f"(supported: {', '.join(SUPPORTED_PRE_TOKENIZERS)})"
        )
    merges = [tuple(m.split(" ", 1)) for m in f.metadata.get("tokenizer.ggml.merges", [])]
    hf = HFTokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=spec.ignore_merges))
    hf.pre_tokenizer = build_pre_tokenizer(spec)
    return hf


def _sentencepiece_bpe(tokens: list[str], scores: list[float], vocab: dict[str, int]) -> HFTokenizer:
    """BPE whose merge order is the vocabulary by descending score: SentencePiece's BPE, as llama.cpp runs it."""
    contains = vocab.__contains__
    merges: list[tuple[str, str]] = []
    # Python's sort is stable, so equal scores keep vocabulary order (lower id merges first).
    for i in sorted(range(len(tokens)), key=scores.__getitem__, reverse=True):
        text = tokens[i]
        if len(text) > 1:
            merges += [(text[:c], text[c:]) for c in range(1, len(text)) if contains(text[:c]) and contains(text[c:])]
    return HFTokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=True))
