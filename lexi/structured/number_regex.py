"""JSON numbers as regexes: integers in a range written out digit by digit, non-negative numbers."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from lexi.structured.regex_text import alt

INTEGER = "\\u002D?(?:0|[1-9][0-9]*)"
FRACTION_EXPONENT = "(?:\\u002E[0-9]+)?(?:[eE][\\u002B\\u002D]?[0-9]+)?"
NUMBER = INTEGER + FRACTION_EXPONENT
MAX_DIGITS = 18  # integer bounds with more digits are not written out


def integer_regex(schema: Mapping[str, Any]) -> str | None:
    low, high = _bounds(schema, integral=True)
    if low is not None and high is not None and low > high:
        return None
    return int_range(low, high)


def number_regex(schema: Mapping[str, Any]) -> str:
    low, _ = _bounds(schema, integral=False)
    if low is not None and low >= 0:
        # non-negative (a written -0 is zero, so it stays allowed)
        return f"(?:(?:0|[1-9][0-9]*){FRACTION_EXPONENT}|\\u002D0(?:\\u002E0+)?(?:[eE][\\u002B\\u002D]?[0-9]+)?)"
    return NUMBER


def _bounds(schema: Mapping[str, Any], integral: bool) -> tuple[Any, Any]:
    """(low, high) inclusive; integral bounds are rounded inward, bounds too big to write out dropped."""

    def num(key):
        value = schema.get(key)
        ok = not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)
        return value if ok else None

    low, high = num("minimum"), num("maximum")
    ex_low, ex_high = num("exclusiveMinimum"), num("exclusiveMaximum")
    if integral:
        low = None if low is None else math.ceil(low)
        high = None if high is None else math.floor(high)
        if ex_low is not None:
            low = max(math.floor(ex_low) + 1, low if low is not None else -math.inf)
        if ex_high is not None:
            high = min(math.ceil(ex_high) - 1, high if high is not None else math.inf)
        low = None if low is None or len(str(abs(int(low)))) > MAX_DIGITS else int(low)
        high = None if high is None or len(str(abs(int(high)))) > MAX_DIGITS else int(high)
    else:
        low = ex_low if low is None else low
        high = ex_high if high is None else high
    return low, high


def int_range(low: int | None, high: int | None) -> str:
    """Decimal integers in [low, high] (None = unbounded), as JSON writes them (no leading zeros)."""
    parts = []
    if low is None or low < 0:  # negatives: -(|high| .. |low|)
        neg_high = -1 if high is None or high >= 0 else high
        magnitude = _nonneg(-neg_high, None if low is None else -low)
        parts.append("\\u002D" + magnitude)
    if high is None or high >= 0:
        parts.append(_nonneg(max(low, 0) if low is not None else 0, high))
    return alt(parts) or INTEGER


def _nonneg(low: int, high: int | None) -> str:
    if high is None:
        digits = len(str(low))
        return alt([_span(low, 10**digits - 1), f"[1-9][0-9]{{{digits},}}"])
    assert low <= high, (low, high)
    parts = []
    while low <= high:
        top = min(high, 10 ** len(str(low)) - 1)
        parts.append(_span(low, top))
        low = top + 1
    return alt(parts)


def _span(low: int, high: int) -> str:
    """Integers low..high of the same number of digits."""
    return alt(_digits(str(low), str(high)))


def _digits(a: str, b: str) -> list[str]:
    if a == b:
        return [a]
    if set(a) == {"0"} and set(b) == {"9"} and len(a) > 1:
        return [f"[0-9]{{{len(a)}}}"]
    if len(a) == 1:
        return [f"[{a}-{b}]"]
    if a[0] == b[0]:
        return [a[0] + rest for rest in [alt(_digits(a[1:], b[1:]))]]
    n = len(a) - 1
    parts = [a[0] + alt(_digits(a[1:], "9" * n))]
    if int(b[0]) - int(a[0]) > 1:
        parts.append(f"[{int(a[0]) + 1}-{int(b[0]) - 1}][0-9]{{{n}}}")
    parts.append(b[0] + alt(_digits("0" * n, b[1:])))
    return parts
