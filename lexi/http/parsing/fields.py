"""Reading request bodies: typed field access that names the offending param, and the sampling fields.

Request values override server defaults whenever they are present, explicit zeros included; a
field that is absent (or JSON null) falls back to the `--temp`/`--top-p`/... default, then to the
engine's own. A field the route does not know is a 400 naming it (as OpenAI answers), never
ignored: each route lists what it reads, and the fields it accepts without effect say why.
Bodies are bounded before any of that: nesting deeper than MAX_NESTING is refused, since the
validators that walk a body (JSON Schema checks, translation) recurse once per level.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from lexi.engine.sampling import MAX_LOGPROBS
from lexi.http.errors import bad_request
from lexi.http.ops.config import SamplingDefaults

MAX_STOP_STRINGS = 16
MAX_NESTING = 64  # arrays and objects inside one another

# Fields every generation route takes with no effect on the output, and why that is honest:
# identifiers of the end user or of a cache key that the server's automatic prefix cache makes moot.
NO_EFFECT = ("user", "safety_identifier", "prompt_cache_key")


def parse_json_body(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body or b"")
    except RecursionError:
        raise bad_request(
            f"request body is nested too deeply (at most {MAX_NESTING} levels)", code="invalid_json"
        ) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad_request(f"request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise bad_request("request body must be a JSON object", code="invalid_json")
    if nesting(data) > MAX_NESTING:
        raise bad_request(f"request body is nested too deeply (at most {MAX_NESTING} levels)", code="invalid_json")
    return data


def nesting(value: Any) -> int:
    """How deeply arrays and objects nest in `value` (iterative: a hostile body cannot exhaust the stack)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, depth)
            if depth <= MAX_NESTING:
                stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


UNSUPPORTED_VALUE = "unsupported_value"  # OpenAI's code for a known field given a value this server cannot honour
UNSUPPORTED_PARAMETER = "unsupported_parameter"  # ... and for a known field this server does not take at all


def refuse_unknown(data: dict[str, Any], known: tuple[str, ...] | frozenset[str], prefix: str = "") -> None:
    """A field the route does not read is a 400 naming it (OpenAI: "Unrecognized request argument")."""
    for key in data:
        if key not in known:
            name = f"{prefix}{key}"
            raise bad_request(
                f"unknown parameter {name!r}: this route does not take it", param=name, code="unknown_parameter"
            )


class Fields:
    """Typed getters over one JSON object; each error names the param (with its path, e.g. messages[2].role)."""

    def __init__(self, data: dict[str, Any], prefix: str = "") -> None:
        self.data = data
        self.prefix = prefix

    def name(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def present(self, key: str) -> bool:
        return self.data.get(key) is not None

    def fail(self, key: str, message: str, code: str | None = None):
        raise bad_request(f"{self.name(key)} {message}", param=self.name(key), code=code)

    def number(self, key: str, low: float, high: float, default: float | None = None) -> float | None:
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float) or not _finite(value):
            self.fail(key, f"must be a number, got {_short(value)}")
        if not low <= value <= high:
            self.fail(key, f"must be in [{low:g}, {high:g}], got {_short(value)}")
        return float(value)

    def integer(self, key: str, low: int, high: int, default: int | None = None) -> int | None:
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(key, f"must be an integer, got {_short(value)}")
        if not low <= value <= high:
            self.fail(key, f"must be in [{low}, {high}], got {_short(value)}")
        return value

    def boolean(self, key: str, default: bool = False) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.fail(key, f"must be a boolean, got {_short(value)}")
        return value

    def string(self, key: str, default: str | None = None, choices: tuple[str, ...] | None = None) -> str | None:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            self.fail(key, f"must be a string, got {_short(value)}")
        if choices is not None and value not in choices:
            self.fail(key, f"must be one of {', '.join(choices)}, got {_short(value)}")
        return value

    def obj(self, key: str) -> dict[str, Any] | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            self.fail(key, "must be a JSON object")
        return value

    def tagged(self, key: str) -> dict[str, Any] | None:
        """An object with a string `type` (how providers tag what they echo, e.g. a call's `caller`), or None."""
        value = self.obj(key)
        if value is not None and not isinstance(value.get("type"), str):
            self.fail(key, 'must be an object with a "type" (as a response gave it, e.g. {"type": "direct"})')
        return value

    def array(self, key: str) -> list[Any] | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, list):
            self.fail(key, "must be an array")
        return value

    def tools(self, empty_is_none: bool = False) -> list[Any]:
        """`tools`: absent means none. An empty array is refused as OpenAI's Chat Completions refuses it, unless
        `empty_is_none`: its Responses API takes `[]` as no tools (openai-agents sends it for an agent without any)."""
        value = self.array("tools")
        if value == [] and not empty_is_none:
            self.fail("tools", "is an empty array: send at least one tool, or leave tools out", code="empty_array")
        return value or []


@dataclass(frozen=True, slots=True)
class SamplingRequest:
    """The sampling fields of a chat or completion request after defaults; max_tokens None = the client set no
    limit: the server's --n-predict (`default_max_tokens`) or the room left in the context, whichever is less."""

    temperature: float | None
    top_p: float | None
    top_k: int | None
    min_p: float | None
    max_tokens: int | None
    seed: int | None
    stop: tuple[str, ...]
    presence_penalty: float
    frequency_penalty: float
    repeat_penalty: float | None
    logit_bias: dict[int, float]
    logprobs: int | None  # top-n alternatives per token; None = no logprobs
    ignore_eos: bool
    n: int = 1  # choices, generated together
    speculative: bool = True  # false: this request decodes a token a step even where the server speculates
    default_max_tokens: int | None = None  # --n-predict: a cap, so a long prompt never makes it a 400


MAX_CHOICES = 128

# The fields parse_sampling reads, by route kind: each route adds its own.
SAMPLING_FIELDS = (
    "n", "temperature", "top_p", "top_k", "min_p", "seed", "stop", "presence_penalty", "frequency_penalty",
    "repeat_penalty", "repetition_penalty", "logit_bias", "ignore_eos", "max_tokens", "speculative",
)  # fmt: skip
CHAT_SAMPLING_FIELDS = (*SAMPLING_FIELDS, "max_completion_tokens", "logprobs", "top_logprobs")
COMPLETION_SAMPLING_FIELDS = (*SAMPLING_FIELDS, "logprobs")


def parse_sampling(f: Fields, defaults: SamplingDefaults, *, chat: bool) -> SamplingRequest:
    n = f.integer("n", 1, MAX_CHOICES, default=1)
    if chat:
        max_tokens = f.integer("max_completion_tokens", 1, 1 << 20)
        if max_tokens is None:
            max_tokens = f.integer("max_tokens", 1, 1 << 20)
        logprobs = None
        if f.boolean("logprobs"):
            logprobs = f.integer("top_logprobs", 0, MAX_LOGPROBS, default=0)
        elif f.present("top_logprobs"):
            f.fail("top_logprobs", "needs logprobs: true")
    else:
        max_tokens = f.integer("max_tokens", 1, 1 << 20)
        logprobs = f.integer("logprobs", 0, MAX_LOGPROBS)
    return SamplingRequest(
        temperature=f.number("temperature", 0.0, 2.0, defaults.temp),
        top_p=f.number("top_p", 0.0, 1.0, defaults.top_p),
        top_k=f.integer("top_k", 0, 1 << 20, defaults.top_k),
        min_p=f.number("min_p", 0.0, 1.0, defaults.min_p),
        max_tokens=max_tokens,
        default_max_tokens=defaults.n_predict,
        seed=f.integer("seed", -(1 << 63), (1 << 63) - 1),  # int64, as OpenAI and vLLM take it
        stop=_stop(f),
        presence_penalty=f.number("presence_penalty", -2.0, 2.0, 0.0),
        frequency_penalty=f.number("frequency_penalty", -2.0, 2.0, 0.0),
        repeat_penalty=_repeat_penalty(f),
        logit_bias=_logit_bias(f),
        logprobs=logprobs,
        ignore_eos=f.boolean("ignore_eos"),
        n=n,
        speculative=f.boolean("speculative", default=True),
    )


def _repeat_penalty(f: Fields) -> float | None:
    """repeat_penalty (llama.cpp's name) or repetition_penalty (vLLM's and transformers'): one setting."""
    ours = f.number("repeat_penalty", 0.01, 10.0)
    theirs = f.number("repetition_penalty", 0.01, 10.0)
    if ours is not None and theirs is not None and ours != theirs:
        f.fail("repetition_penalty", f"({theirs:g}) and repeat_penalty ({ours:g}) name one setting: send one of them")
    return ours if ours is not None else theirs


def _stop(f: Fields) -> tuple[str, ...]:
    value = f.data.get("stop")
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or any(not isinstance(s, str) or not s for s in stops):
        f.fail("stop", "must be a non-empty string or an array of non-empty strings")
    if len(stops) > MAX_STOP_STRINGS:
        f.fail("stop", f"may hold at most {MAX_STOP_STRINGS} strings")
    return tuple(stops)


def _logit_bias(f: Fields) -> dict[int, float]:
    raw = f.obj("logit_bias")
    if not raw:
        return {}
    bias: dict[int, float] = {}
    for key, value in raw.items():
        if not (key.isascii() and key.isdigit()) or len(key) > 12:  # "²" is a digit to str.isdigit, not to int()
            f.fail("logit_bias", f"keys must be token ids (decimal strings), got {_short(key)}")
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not _finite(value)
            or not -100 <= value <= 100
        ):
            f.fail("logit_bias", f"values must be numbers in [-100, 100], got {_short(value)} for {key}")
        bias[int(key)] = float(value)
    return bias


def _finite(value: int | float) -> bool:
    """False for NaN, infinities and integers too large for a float (math.isfinite raises on those)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _short(value: Any) -> str:
    """A value quoted in an error message, cut short (a 400-digit number or a megabyte string stays readable)."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (ValueError, TypeError, RecursionError):
        text = repr(type(value))
    return text if len(text) <= 60 else text[:57] + "..."


def stream_options(f: Fields) -> tuple[bool, bool]:
    """(stream, include_usage)."""
    stream = f.boolean("stream")
    options = f.obj("stream_options")
    if options is None:
        return stream, False
    if not stream:
        f.fail("stream_options", "is only allowed with stream: true")
    refuse_unknown(options, ("include_usage", "include_obfuscation"), f.name("stream_options."))
    o = Fields(options, f.name("stream_options."))
    if o.boolean("include_obfuscation"):
        o.fail("include_obfuscation", "true is not supported: chunks carry no obfuscation padding")
    return stream, o.boolean("include_usage")
