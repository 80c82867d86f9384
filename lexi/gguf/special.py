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

    __slots__ = ("_groups", "_ids")

    def __init__(self, specials: dict[str, int]) -> None:
        self._ids = {text: token_id for text, token_id in specials.items() if text}
        by_first: dict[str, set[str]] = defaultdict(set)
        for text in self._ids:
            by_first[text[0]].add(text)
        # Per first character: the token texts and their distinct lengths, so finding which tokens occur
        # costs a few slices per occurrence of that character rather than one scan per token (Gemma has
        # 6,000 control tokens starting with "<").
        self._groups = {
            char: (frozenset(texts), tuple(sorted({len(t) for t in texts}))) for char, texts in by_first.items()
        }

    def split(self, text: str) -> list[Fragment]:
        """Plain fragments (non-empty str) and special token ids, in order."""
        present = self._present(text)
        if not present:
            return [text] if text else []
        fragments: list[Fragment] = [text]
        for special in sorted(present, key=len, reverse=True):  # longest first, as llama.cpp
            token_id = self._ids[special]
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

    def _present(self, text: str) -> set[str]:
        found: set[str] = set()
        for char in set(text) & self._groups.keys():
            texts, lengths = self._groups[char]
            pos = text.find(char)
            while pos != -1:
                found.update(piece for n in lengths if (piece := text[pos : pos + n]) in texts)
                pos = text.find(char, pos + 1)
        return found
