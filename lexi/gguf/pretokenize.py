"""GPT-2-style pre-tokenizers, named by a GGUF file's `tokenizer.ggml.pre`, as llama.cpp splits text.

llama.cpp applies a list of regexes in turn: each one splits every piece left by the previous ones
into its matches and the gaps between them, and both are kept. `tokenizers`' `Split(..., "isolated")`
does exactly that, so a chain of them followed by the byte-to-unicode map reproduces llama.cpp's
words; BPE merges then run inside each word. The regexes are llama.cpp's (llama-vocab.cpp), written
with `(?i:...)` where llama.cpp had to spell case-insensitive contractions out by hand.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenizers import Regex, pre_tokenizers

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)
_QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)


@dataclass(frozen=True, slots=True)
class PreTokenizerSpec:
    regexes: tuple[str, ...]  # applied in order, each splitting the pieces the previous ones left
    ignore_merges: bool = False  # a whole word found in the vocabulary is one token (llama3)


_DEFAULT = PreTokenizerSpec((r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"))
_SPECS = {
    "default": _DEFAULT,
    "gpt2": PreTokenizerSpec((_GPT2,)),
    "smollm": PreTokenizerSpec((r"\p{N}", _GPT2)),
    "llama3": PreTokenizerSpec((_LLAMA3,), ignore_merges=True),
    "qwen2": PreTokenizerSpec((_QWEN2,)),
}
# Other names llama.cpp gives the same splitting (llama-vocab.cpp, `tokenizer_pre == ...`).
_ALIASES = {
    "gpt-2": "gpt2",
    "phi-2": "gpt2",
    "mpt": "gpt2",
    "olmo": "gpt2",
    "jais": "gpt2",
    "starcoder": "smollm",
    "refact": "smollm",
    "command-r": "smollm",
    "codeshell": "smollm",
    "exaone": "smollm",
    "minerva-7b": "smollm",
    "llama-bpe": "llama3",
    "llama-v3": "llama3",
    "falcon3": "llama3",
    "pixtral": "llama3",
    "dbrx": "llama3",
    "smaug-bpe": "llama3",
    "deepseek-r1-qwen": "qwen2",
    "stablelm2": "qwen2",
    "megrez": "qwen2",
}
SUPPORTED_PRE_TOKENIZERS = tuple(sorted(set(_SPECS) | set(_ALIASES)))


def pre_tokenizer_spec(name: str | None) -> PreTokenizerSpec | None:
    """The spec for a `tokenizer.ggml.pre` value (missing means llama.cpp's default); None if unknown."""
    if name is None:
        return _DEFAULT
    return _SPECS.get(_ALIASES.get(name, name))


def build_pre_tokenizer(spec: PreTokenizerSpec) -> pre_tokenizers.PreTokenizer:
    splits = [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in spec.regexes]
    return pre_tokenizers.Sequence([*splits, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
