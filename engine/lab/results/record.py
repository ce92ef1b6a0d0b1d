"""The base of every typed result record: from_dict checks a result dict's shape and types,
to_dict gives it back as JSON.

A job's result crosses a process boundary and sits in the disk cache as JSON; these records are
its shape, written down once. `Record.from_dict` checks a result dict (every field present, of
its type; no unknown field) and raises ResultError naming the first field that is wrong;
`to_dict` gives the JSON dict back (from_dict(d).to_dict() == d). Field names are the JSON keys,
so `result["metrics"]["ttft_ms"]["p99"]` reads `result.metrics.ttft_ms.p99`. Torch-free.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from functools import cache
from typing import Any, ClassVar, TypeVar

from ...errors import ResultError

R = TypeVar("R", bound="Record")


class Record:
    """A result record (a dataclass): from_dict checks shape and types; to_dict is JSON-ready."""

    job_kind: ClassVar[str] = ""  # the job kind whose result this is ("" for nested records)

    @classmethod
    def from_dict(cls: type[R], data: Any, where: str = "") -> R:
        where = where or (f"{cls.job_kind} result" if cls.job_kind else cls.__name__)
        if not isinstance(data, dict):
            raise ResultError(f"{where} must be an object (got {type(data).__name__})")
        hints = _hints(cls)
        unknown = sorted(set(data) - set(hints))
        if unknown:
            raise ResultError(f"{where} has an unknown field {unknown[0]!r}")
        values = {}
        for f in dataclasses.fields(cls):
            if f.name not in data:
                if f.default is not dataclasses.MISSING:
                    continue
                raise ResultError(f"{where} has no field {f.name!r}")
            values[f.name] = _convert(data[f.name], hints[f.name], f"{where}: {f.name}")
        return cls(**values)

    def to_dict(self) -> dict:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)
                if not (getattr(self, f.name) is None and f.default is None
                        and f.metadata.get("omit_none"))}


def _plain(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


_NAMES = {int: "a whole number", float: "a number", str: "text", bool: "true or false"}


def _convert(value: Any, tp: Any, where: str) -> Any:
    """value checked against the type annotation tp (nested records built)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _convert(value, option, where)
            except ResultError as e:
                errors.append(str(e))
        raise ResultError(errors[0] if len(errors) == 1 else
                          f"{where} has an unexpected value {value!r}")
    if origin is list:
        if not isinstance(value, list):
            raise ResultError(f"{where} must be a list (got {type(value).__name__})")
        (item,) = typing.get_args(tp) or (Any,)
        return [_convert(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ResultError(f"{where} must be an object (got {type(value).__name__})")
        return value
    if isinstance(tp, type) and issubclass(tp, Record):
        return tp.from_dict(value, where)
    if tp is Any:
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ResultError(f"{where} must be a number (got {value!r})")
        return value
    if tp is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ResultError(f"{where} must be a whole number (got {value!r})")
    if tp in (str, bool) and not isinstance(value, tp):
        raise ResultError(f"{where} must be {_NAMES[tp]} (got {value!r})")
    return value
