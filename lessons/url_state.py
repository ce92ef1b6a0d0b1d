"""A lesson's controls from the URL: /app?lesson=knob&batch_size=16 opens the knob at 16.

A link is typed by people and kept for years, so a value out of range is clamped to the nearest
allowed one and an unknown choice falls back to the default, each with a notice the page shows,
rather than failing or being ignored silently.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import param

MAX_TEXT = 2000  # characters of free text taken from a URL
TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off"}


def raw_value(value: Any) -> str:
    """The last value given for a query argument, as text (Tornado hands lists of bytes)."""
    if isinstance(value, (list, tuple)):
        value = value[-1] if value else ""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return str(value).strip()


def _label(p: param.Parameter, name: str) -> str:
    return p.label or name


def _clamp_number(p: param.Number, name: str, text: str, integer: bool):
    """(value, notice or None); value None means: keep the current value."""
    label = _label(p, name)
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        return None, f"The link gave {label} = {text!r}, which is not a number; it is left at its default."
    value: float | int = round(number) if integer else number
    notice = None
    if integer and value != number:
        notice = f"{label} takes whole numbers: {text} was rounded to {value}."
    lo, hi = p.bounds or (None, None)
    inc_lo, inc_hi = getattr(p, "inclusive_bounds", (True, True))
    if lo is not None and (value < lo or (value == lo and not inc_lo)):
        value = (lo if inc_lo else lo + 1) if integer else (lo if inc_lo else math.nextafter(lo, math.inf))
        notice = f"The link asked for {label} = {text}, below the smallest allowed ({value}); it is set to {value}."
    elif hi is not None and (value > hi or (value == hi and not inc_hi)):
        value = (hi if inc_hi else hi - 1) if integer else (hi if inc_hi else math.nextafter(hi, -math.inf))
        notice = f"The link asked for {label} = {text}, above the largest allowed ({value}); it is set to {value}."
    return value, notice


def _choose(p: param.Selector, name: str, text: str, default: Any):
    label = _label(p, name)
    objects = p.objects
    if isinstance(objects, dict):
        names = {str(k): v for k, v in objects.items()}
    else:
        names = {str(o): o for o in objects}
    for key, obj in names.items():
        if text == key or text.lower() == key.lower() or text == str(obj):
            return obj, None
    shown = ", ".join(names)
    return None, (f"The link asked for {label} = {text!r}, which is not one of {shown}; "
                  f"it is left at {default!r}.")


def parse_value(obj: param.Parameterized, name: str, text: str) -> tuple[Any, str | None]:
    """The value for parameter `name` of obj from query text, clamped to what the parameter
    allows, and a notice when the text had to be changed or was refused (value None then)."""
    p = obj.param[name]
    current = getattr(obj, name)
    if isinstance(p, param.Boolean):
        low = text.lower()
        if low in TRUE or low in FALSE:
            return low in TRUE, None
        return None, f"The link gave {_label(p, name)} = {text!r}; use true or false. It is left at {current}."
    if isinstance(p, param.Integer):
        return _clamp_number(p, name, text, integer=True)
    if isinstance(p, param.Number):
        return _clamp_number(p, name, text, integer=False)
    if isinstance(p, param.Selector):
        return _choose(p, name, text, current)
    if isinstance(p, param.String):
        if len(text) > MAX_TEXT:
            return text[:MAX_TEXT], f"{_label(p, name)} from the link was cut to {MAX_TEXT} characters."
        return text, None
    try:
        value = p.deserialize(text)
        p._validate(value)
    except Exception:
        return None, f"The link gave {_label(p, name)} = {text!r}, which does not fit; it is left at {current!r}."
    return value, None


def apply_query_args(obj: param.Parameterized, args: Mapping[str, Any],
                     names: Iterable[str] | None = None) -> list[str]:
    """Set obj's parameters from query arguments (only those named, by default all but `name`),
    clamping numbers to their bounds and refusing unknown choices; returns the notices to show.
    Arguments that are not parameters (like `lesson`) are ignored."""
    names = [n for n in (names or obj.param) if n != "name"]
    values: dict[str, Any] = {}
    notices: list[str] = []
    for name in names:
        if name not in args:
            continue
        value, notice = parse_value(obj, name, raw_value(args[name]))
        if notice:
            notices.append(notice)
        if value is not None:
            values[name] = value
    obj.param.update(**values)
    return notices
