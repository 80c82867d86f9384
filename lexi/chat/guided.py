"""Output held to a client's regex, or to one of a list of strings: vLLM's structured outputs.

vLLM takes `structured_outputs: {"regex": ...}` / `{"choice": [...]}` (and, before 0.12, `guided_regex` /
`guided_choice`) on its chat and completions routes; the JSON forms of the same field are response formats
(`response_format.py`). Here both become one guided phase of a constraint plan, compiled like every other
constraint regex. The regex is the client's, in outlines-core's (Rust `regex`) syntax: one it cannot
compile is the client's fault, a 400 naming the field it came in.
"""

from __future__ import annotations

from dataclasses import dataclass

from lexi.structured import ConstraintPlan, FreeText, Guided
from lexi.structured.regex_text import alt, literal

# Longer ones are refused before they reach the compiler, which has one worker: a 5,000-character regex
# takes it ~9 s on a busy 2-core machine (choices count as the regex they make, each a literal).
MAX_REGEX_CHARS = 4096
MAX_CHOICES = 1024


class GuidedSpecError(ValueError):
    """A guided-output value that is not one (names the field)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True, slots=True)
class GuidedText:
    """The answer must match `regex` whole; `param` is the request field that asked for it (for errors)."""

    regex: str
    param: str

    def __post_init__(self) -> None:
        if not isinstance(self.regex, str) or not self.regex:
            raise GuidedSpecError(f"{self.param} must be a non-empty regex string", self.param)
        if len(self.regex) > MAX_REGEX_CHARS:
            raise GuidedSpecError(f"{self.param} makes a regex of over {MAX_REGEX_CHARS} characters", self.param)

    @classmethod
    def choice(cls, choices: object, param: str) -> GuidedText:
        """Exactly one of `choices`, written as it is (each a literal, so no character is special)."""
        if not isinstance(choices, list) or not choices or len(choices) > MAX_CHOICES:
            raise GuidedSpecError(f"{param} must be an array of 1-{MAX_CHOICES} strings", param)
        for i, choice in enumerate(choices):
            if not isinstance(choice, str) or not choice:
                raise GuidedSpecError(f"{param}[{i}] must be a non-empty string", f"{param}[{i}]")
        return cls(alt(f"(?:{literal(c)})" for c in choices), param)


def guided_plan(guided: GuidedText, opened: tuple[str, str] | None) -> ConstraintPlan:
    """The plan: a thought the prompt opened stays free (up to its closer), then the answer is the regex."""
    thought = (FreeText(opened[1], enter=True, may_end=False),) if opened else ()
    return ConstraintPlan((*thought, Guided(guided.regex)))
