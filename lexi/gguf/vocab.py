"""The raw bytes behind every token of a GGUF vocabulary, as llama.cpp's `token_to_piece` gives them.

GPT-2 byte-level vocabularies spell each byte as a printable character (`Ġ` for a space); those are
mapped back. SentencePiece vocabularies write spaces as `▁` and bytes as `<0xNN>`. User-defined and
control tokens are their text as written. Decoding a sequence is then joining bytes and decoding
UTF-8 once, which is what makes the incremental detokenizer and constraint vocabularies exact.
"""

from __future__ import annotations

import re
from enum import IntEnum


class TokenType(IntEnum):
    """`tokenizer.ggml.token_type` values (llama.cpp's llama_token_type)."""

    UNDEFINED = 0
    NORMAL = 1
    UNKNOWN = 2
    CONTROL = 3
    USER_DEFINED = 4
    UNUSED = 5
    BYTE = 6


_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def gpt2_byte_decoder() -> dict[str, int]:
    """The inverse of GPT-2's bytes_to_unicode: printable bytes stand for themselves, the rest shift past 255."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    shift = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + shift)
            shift += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def token_bytes_table(tokens: list[str], types: list[int], byte_level: bool) -> list[bytes]:
    """Bytes of every token: byte-level (GPT-2) or SentencePiece spelling, by the vocabulary's model."""
    if byte_level:
        decoder = gpt2_byte_decoder()
        table = []
        for text, kind in zip(tokens, types, strict=True):
            if kind == TokenType.NORMAL or kind == TokenType.UNDEFINED:
                try:
                    table.append(bytes(decoder[c] for c in text))
                    continue
                except KeyError:
                    pass  # not byte-level text after all: keep it as written
            table.append(text.encode("utf-8"))
        return table
    table = []
    for text, kind in zip(tokens, types, strict=True):
        if kind == TokenType.BYTE:
            match = _BYTE_TOKEN.fullmatch(text)
            if match:
                table.append(bytes([int(match.group(1), 16)]))
                continue
        if kind == TokenType.CONTROL or kind == TokenType.UNKNOWN or kind == TokenType.UNUSED:
            table.append(text.encode("utf-8"))
        else:
            table.append(text.replace("\u2581", " ").encode("utf-8"))
    return table
