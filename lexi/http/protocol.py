"""Reading request bodies: typed field access that names the offending param, and the sampling fields.

Request values override server defaults whenever they are present, explicit zeros included; a
field that is absent (or JSON null) falls back to the `--temp`/`--top-p`/... default, then to the
engine's own. Unknown fields are ignored, as OpenAI clients send extras (`user`, `metadata`...).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from lexi.engine.sampling import MAX_LOGPROBS
from lexi.http.config import SamplingDefaults
from lexi.http.errors import bad_request

MAX_STOP_STRINGS = 16


def parse_json_body(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body or b"")
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad_request(f"request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise bad_request("request body must be a JSON object", code="invalid_json")
    return data


class Fields:
    """Typed getters over one JSON object; each error names the param (with its path, e.g. messages[2].role)."""

    def __init__(self, data: dict[str, Any], prefix: str = "") -> None:
        self.data = data
        self.prefix = prefix

    def name(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def present(self, key: str) -> bool:
        return self.data.get(key) is not None

    def fail(self, key: str, message: str):
        raise bad_request(f"{self.name(key)} {message}", param=self.name(key))

    def number(self, key: str, low: float, high: float, default: float | None = None) -> float | None:
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            self.fail(key, f"must be a number, got {json.dumps(value)}")
        if not low <= value <= high:
            self.fail(key, f"must be in [{low:g}, {high:g}], got {value}")
        return float(value)

    def integer(self, key: str, low: int, high: int, default: int | None = None) -> int | None:
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(key, f"must be an integer, got {json.dumps(value)}")
        if not low <= value <= high:
            self.fail(key, f"must be in [{low}, {high}], got {value}")
        return value

    def boolean(self, key: str, default: bool = False) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.fail(key, f"must be a boolean, got {json.dumps(value)}")
        return value

    def string(self, key: str, default: str | None = None, choices: tuple[str, ...] | None = None) -> str | None:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            self.fail(key, f"must be a string, got {json.dumps(value)}")
        if choices is not None and value not in choices:
            self.fail(key, f"must be one of {', '.join(choices)}, got {json.dumps(value)}")
        return value

    def obj(self, key: str) -> dict[str, Any] | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            self.fail(key, "must be a JSON object")
        return value

    def array(self, key: str) -> list[Any] | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, list):
            self.fail(key, "must be an array")
        return value


@dataclass(frozen=True, slots=True)
class SamplingRequest:
    """The sampling fields of a chat or completion request after defaults; max_tokens None = room left."""

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


def parse_sampling(f: Fields, defaults: SamplingDefaults, *, chat: bool) -> SamplingRequest:
    if f.present("n") and f.integer("n", 1, 1 << 20) != 1:
        f.fail("n", "must be 1: one choice per request is supported")
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
    if max_tokens is None:
        max_tokens = defaults.n_predict
    return SamplingRequest(
        temperature=f.number("temperature", 0.0, 2.0, defaults.temp),
        top_p=f.number("top_p", 0.0, 1.0, defaults.top_p),
        top_k=f.integer("top_k", 0, 1 << 20, defaults.top_k),
        min_p=f.number("min_p", 0.0, 1.0, defaults.min_p),
        max_tokens=max_tokens,
        seed=f.integer("seed", -(1 << 63), (1 << 64) - 1),
        stop=_stop(f),
        presence_penalty=f.number("presence_penalty", -2.0, 2.0, 0.0),
        frequency_penalty=f.number("frequency_penalty", -2.0, 2.0, 0.0),
        repeat_penalty=f.number("repeat_penalty", 0.01, 10.0),
        logit_bias=_logit_bias(f),
        logprobs=logprobs,
        ignore_eos=f.boolean("ignore_eos"),
    )


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
        if not key.isdigit():
            f.fail("logit_bias", f"keys must be token ids (decimal strings), got {json.dumps(key)}")
        if isinstance(value, bool) or not isinstance(value, int | float) or not -100 <= value <= 100:
            f.fail("logit_bias", f"values must be numbers in [-100, 100], got {json.dumps(value)} for {key}")
        bias[int(key)] = float(value)
    return bias


def stream_options(f: Fields) -> tuple[bool, bool]:
    """(stream, include_usage)."""
    stream = f.boolean("stream")
    options = f.obj("stream_options")
    if options is None:
        return stream, False
    if not stream:
        f.fail("stream_options", "is only allowed with stream: true")
    return stream, Fields(options, f.name("stream_options.")).boolean("include_usage")
