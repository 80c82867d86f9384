"""Where a call's body ends: the first closing marker that the body's own grammar does not quote.

The constraint that writes a call lets a JSON string hold any text, `</tool_call>`, `<|call|>` and
`<|im_end|>` included, and a function-form string parameter any text but `</parameter>`. A reader that cut
the body at the first closing marker it saw would end such a call inside its value. So the body is walked
as the constraint wrote it: a JSON body (one opening with `{` or `[`) closes only outside its strings; a
function-form body (`<function=NAME>`) only outside its `<parameter=KEY>...</parameter>` elements, an element
ending at the first `</parameter>` when its value is text and outside JSON strings when the tool's schema
gives the parameter a JSON value; any other body at the first marker. The walk resumes where the last
piece left it, so a long value costs its length once, not once a token.
"""

from __future__ import annotations

import re
from collections.abc import Callable

FUNCTION, PARAMETER, PARAMETER_END = "<function=", "<parameter=", "</parameter>"
_QUOTED = re.compile(r'["\\]')  # inside a JSON string: where it may end
_UNQUOTED = re.compile(r'["<]')  # outside: a string opens, or a marker may start (every marker starts with '<')

JsonValued = Callable[[str, str], bool]  # (function name, parameter key) -> its value is JSON text, not raw text


class JsonWalk:
    """Walks JSON text piece by piece and finds a marker outside its strings."""

    __slots__ = ("at", "quoted")

    def __init__(self, at: int = 0) -> None:
        self.at = at  # where the walk resumes
        self.quoted = False

    def find(self, text: str, markers: tuple[str, ...]) -> tuple[int, str]:
        """(index, marker) of the first marker outside a string, or (-1, "") until more text comes."""
        i = self.at
        while True:
            found = (_QUOTED if self.quoted else _UNQUOTED).search(text, i)
            if found is None:
                self.at = len(text)
                return -1, ""
            j = found.start()
            if self.quoted:
                if text[j] == "\\":
                    if j + 1 >= len(text):  # the escaped character has not come yet
                        self.at = j
                        return -1, ""
                    i = j + 2
                    continue
                self.quoted, i = False, j + 1
            elif text[j] == '"':
                self.quoted, i = True, j + 1
            else:
                marker = next((m for m in markers if text.startswith(m, j)), None)
                if marker is not None:
                    self.at = j
                    return j, marker
                if any(m.startswith(text[j:]) for m in markers):  # a marker may be arriving
                    self.at = j
                    return -1, ""
                i = j + 1


class CallEnd:
    """The end of one call body fed piece by piece: `find(body)` with the whole body so far each time."""

    __slots__ = ("_markers", "_json_valued", "_mode", "_walk", "_name", "_element", "_at")

    def __init__(self, markers: tuple[str, ...], json_valued: JsonValued | None = None) -> None:
        self._markers = markers
        self._json_valued = json_valued
        self._mode = ""  # "", then "json", "function" or "plain" once the body's first characters tell
        self._walk = JsonWalk()
        self._name = ""  # the function form's function
        self._element: JsonWalk | None | bool = False  # in a parameter: its JSON walk, or None for a text value
        self._at = 0

    def find(self, body: str) -> tuple[int, str]:
        """(index, marker) of the closing marker, or (-1, "") while the call is still open."""
        if not self._mode:
            self._mode = _mode_of(body)
            if not self._mode:
                return _first(body, self._markers)
            self._walk.at = len(body) - len(body.lstrip())
        if self._mode == "json":
            return self._walk.find(body, self._markers)
        if self._mode == "function":
            return self._function(body)
        return _first(body, self._markers)

    def _function(self, body: str) -> tuple[int, str]:
        if not self._name:
            start = body.find(FUNCTION)
            close = body.find(">", start)
            if close < 0:
                return _first(body, self._markers)
            self._name, self._at = body[start + len(FUNCTION) : close].strip(), close + 1
        while True:
            if self._element is not False:
                end = self._element_end(body)
                if end < 0:
                    return -1, ""
                self._element, self._at = False, end + len(PARAMETER_END)
                continue
            at, marker = _first(body, (*self._markers, PARAMETER), self._at)
            if at < 0 or marker != PARAMETER:
                return at, marker
            close = body.find(">", at)
            if close < 0:
                return -1, ""  # the key is still arriving
            key = body[at + len(PARAMETER) : close].strip()
            valued = self._json_valued is not None and self._json_valued(self._name, key)
            self._element, self._at = (JsonWalk(close + 1) if valued else None), close + 1

    def _element_end(self, body: str) -> int:
        if isinstance(self._element, JsonWalk):
            return self._element.find(body, (PARAMETER_END,))[0]
        end = body.find(PARAMETER_END, self._at)
        if end < 0:
            self._at = max(self._at, len(body) - len(PARAMETER_END) + 1)
        return end


def _mode_of(body: str) -> str:
    text = body.lstrip()
    if not text:
        return ""
    if text[0] in "{[":
        return "json"
    if text.startswith(FUNCTION):
        return "function"
    return "" if FUNCTION.startswith(text) else "plain"


def _first(text: str, markers: tuple[str, ...], start: int = 0) -> tuple[int, str]:
    found = [(at, m) for m in markers if (at := text.find(m, start)) >= 0]
    return min(found) if found else (-1, "")
