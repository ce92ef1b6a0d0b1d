"""Parameter types: each declares a default and the one check its values get.

A job kind declares its parameters with these (engine.lab.registry), the command line builds its
argument types from them (engine.cli), and a page can read their bounds and choices. `check`
takes a JSON value (what a job receives) and returns it in the type the job body uses, or raises
ConfigError with one line that names the parameter and its limit; `parse` does the same for text
typed on a command line. Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

Bound = float | Callable[[dict], float] | None  # a number, or one computed from the other params


def _limit(lo, hi, above: bool = False) -> str:
    if hi is None:
        return f"above {lo}" if above else f"at least {lo}"
    return f"between {lo} and {hi}"


def _number(text: str, kind: type, name: str, what: str):
    """int(text) or float(text); ConfigError naming the parameter if the text is not one."""
    try:
        return kind(text)
    except ValueError:
        raise ConfigError(f"{name} must be {what} (got {text!r})") from None


def _bound(bound: Bound, params: dict | None):
    return bound(params or {}) if callable(bound) else bound


@dataclass(frozen=True)
class Param:
    """A parameter's default; subclasses add the check."""

    default: Any = None

    def check(self, value: Any, name: str, params: dict | None = None) -> Any:
        """The value in the type the job uses; ConfigError naming `name` and the limit."""
        return value

    def parse(self, text: str, name: str) -> Any:
        """The value of a command-line text; ConfigError as for check."""
        return self.check(text, name)


@dataclass(frozen=True)
class Int(Param):
    """A whole number in [lo, hi] (hi None: no upper limit; hi may depend on other params)."""

    lo: int = 0
    hi: Bound = None

    def check(self, value: Any, name: str, params: dict | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or int(value) != value:
            raise ConfigError(f"{name} must be a whole number (got {value!r})")
        value = int(value)
        hi = _bound(self.hi, params)
        if value < self.lo or (hi is not None and value > hi):
            raise ConfigError(f"{name} must be {_limit(self.lo, hi)} (got {value})")
        return value

    def parse(self, text: str, name: str) -> int:
        return self.check(_number(text, int, name, "a whole number"), name)


@dataclass(frozen=True)
class Float(Param):
    """A finite number in [lo, hi]; above=True makes lo itself not allowed (> lo)."""

    lo: float = 0.0
    hi: Bound = None
    above: bool = False

    def check(self, value: Any, name: str, params: dict | None = None) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value):
            raise ConfigError(f"{name} must be a number (got {value!r})")
        hi = _bound(self.hi, params)
        if value < self.lo or (self.above and value == self.lo) or (hi is not None and value > hi):
            raise ConfigError(f"{name} must be {_limit(self.lo, hi, self.above)} (got {value})")
        return float(value)

    def parse(self, text: str, name: str) -> float:
        return self.check(_number(text, float, name, "a number"), name)


@dataclass(frozen=True)
class Choice(Param):
    """One of a fixed list of values."""

    choices: tuple = ()

    def check(self, value: Any, name: str, params: dict | None = None) -> Any:
        if value not in self.choices:
            raise ConfigError(f"{name} must be one of {', '.join(map(str, self.choices))} "
                              f"(got {value!r})")
        return value


@dataclass(frozen=True)
class Bool(Param):
    """true or false (JSON booleans only: 1 or "yes" are refused, not guessed)."""

    def check(self, value: Any, name: str, params: dict | None = None) -> bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{name} must be true or false (got {value!r})")
        return value


@dataclass(frozen=True)
class Optional(Param):
    """None, or a value that `of` accepts."""

    of: Param = Param()

    def check(self, value: Any, name: str, params: dict | None = None) -> Any:
        return None if value is None else self.of.check(value, name, params)


@dataclass(frozen=True)
class Text(Param):
    """A reader's text: not empty, at most max_chars characters."""

    what: str = "the text"
    max_chars: int | None = None

    def check(self, value: Any, name: str, params: dict | None = None) -> str:
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{self.what} is empty: give some text")
        if self.max_chars is not None and len(value) > self.max_chars:
            raise ConfigError(f"{self.what} is longer than {self.max_chars} characters")
        return value


@dataclass(frozen=True)
class Lengths(Param):
    """A range of token counts [A, B] with 1 <= A <= B (<= hi); single=True also takes one
    whole number A, meaning [A, A]. Returns (A, B)."""

    hi: int | None = None
    single: bool = False

    def check(self, value: Any, name: str, params: dict | None = None) -> tuple[int, int]:
        label = name.replace("_", " ")
        if self.single and isinstance(value, int) and not isinstance(value, bool):
            value = [value, value]
        if not (isinstance(value, (list, tuple)) and len(value) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
            form = "a whole number or [A, B]" if self.single else "[A, B] in tokens"
            raise ConfigError(f"{label} must be {form}")
        low, high = value
        if not (1 <= low <= high and (self.hi is None or high <= self.hi)):
            top = "" if self.hi is None else f" <= {self.hi}"
            raise ConfigError(f"{label} range {low}:{high} must satisfy 1 <= A <= B{top}")
        return low, high

    def parse(self, text: str, name: str) -> tuple[int, int]:
        """A or A:B."""
        parts = text.split(":")
        if len(parts) > 2:
            raise ConfigError(f"{name} must be A or A:B (got {text!r})")
        whole = Int(lo=1)
        low = whole.parse(parts[0], name)
        high = whole.parse(parts[1], name) if len(parts) == 2 else low
        return self.check([low, high], name)


@dataclass(frozen=True)
class Rate(Param):
    """Requests per second above lo, or "inf" (None and math.inf too): everything at t = 0."""

    lo: float = 1e-6

    def check(self, value: Any, name: str, params: dict | None = None) -> float:
        if value in ("inf", None) or (isinstance(value, float) and math.isinf(value)):
            return math.inf
        return Float(lo=self.lo).check(value, name)

    def parse(self, text: str, name: str) -> float:
        return math.inf if text == "inf" else Float(lo=self.lo).parse(text, name)


@dataclass(frozen=True)
class Many(Param):
    """A list of 1 to max_items values, each checked by `each` (named `each_name`)."""

    each: Param = Param()
    each_name: str = "value"
    max_items: int = 1
    what: str = "values"

    def check(self, value: Any, name: str, params: dict | None = None) -> list:
        if not isinstance(value, (list, tuple)) or not 1 <= len(value) <= self.max_items:
            raise ConfigError(f"{name} must be a list of 1 to {self.max_items} {self.what}")
        return [self.each.check(v, self.each_name, params) for v in value]


def check_all(declared: dict[str, Param], params: dict) -> dict:
    """Every declared parameter checked (in declaration order); the values the job uses."""
    return {name: p.check(params[name], name, params) for name, p in declared.items()}


def defaults(declared: dict[str, Param]) -> dict:
    return {name: p.default for name, p in declared.items()}
