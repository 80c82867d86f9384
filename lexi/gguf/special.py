"""Finding special tokens written in text, the way llama.cpp's `tokenizer_st_partition` does.

llama.cpp cuts the text at every occurrence of each special token, longest tokens first, and
tokenizes the plain fragments between the cuts on their own. User-defined tokens are always cut
(so Gemma's `\\n` and tab runs are single tokens even with special=False); control and unknown tokens
only when the caller asks for special parsing. Doing this here, rather than with `tokenizers`'
added tokens, keeps one immutable `tokenizers.Tokenizer` for both modes and gives SentencePiece the
fragment boundaries it needs for its leading-space rule.
"""

from __future__ import annotations

from collections import defaultdict

Fragment = str | int  # plain text, or the id of a special token found in the text


class SpecialSplitter:
    """Cuts text at special tokens; built once per vocabulary, immutable afterwards."""

    __slots__ = ("_by_first_char",)

    def __init__(self, specials: dict[str, int]) -> None:
        by_first: dict[str, list[tuple[str, int]]] = defaultdict(list)
        for text, token_id in specials.items():
            if text:
                by_first[text[0]].append((text, token_id))
        self._by_first_char = dict(by_first)

    def split(self, text: str) -> list[Fragment]:
        """Plain fragments (non-empty str) and special token ids, in order."""
        candidates = [entry for char in set(text) & self._by_first_char.keys() for entry in self._by_first_char[char]]
        present = [entry for entry in candidates if entry[0] in text]
        if not present:
            return [text] if text else []
        present.sort(key=lambda entry: -len(entry[0]))
        fragments: list[Fragment] = [text]
        for special, token_id in present:
            cut: list[Fragment] = []
            for fragment in fragments:
                if isinstance(fragment, int) or special not in fragment:
                    cut.append(fragment)
                    continue
                for index, part in enumerate(fragment.split(special)):
                    if index:
                        cut.append(token_id)
                    if part:
                        cut.append(part)
            fragments = cut
        return fragments
