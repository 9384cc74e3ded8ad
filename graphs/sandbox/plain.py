"""Plain data: what a sandboxed run may say about a value, and what the trusted side rebuilds
from it. Standard library only: the sandbox's runner imports it in a bare interpreter.

``encode`` (inside the run) turns a value into JSON-ready data using only the exact built-in
types (``type(x) is int``, never ``isinstance``), so no object of the code's own making is ever
compared on the trusted side: an instance of any other class (an ``int`` subclass, an object
whose ``__eq__`` is always true) becomes an ``Opaque`` naming its class and its attributes.
``decode`` (outside) rebuilds fresh built-in values from that data, refusing anything malformed.
Lists are JSON lists; every other container is a one-key object: ``{"tuple": [...]}``,
``{"set": [...]}``, ``{"frozenset": [...]}``, ``{"dict": [[k, v], ...]}``, ``{"bytes": hex}``,
``{"complex": [re, im]}``, ``{"object": name, "attrs": {...}}``, ``{"too_big": why}``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

MAX_DEPTH = 40
MAX_ITEMS = 20000
"""values nested deeper, or holding more items, encode as ``too_big`` (which matches nothing)"""


@dataclass(frozen=True)
class Opaque:
    """A value of a class that is not a plain built-in: equal only to an Opaque of the same
    class name and attributes (never to a number, a string or a container)."""

    type_name: str
    attrs: tuple = ()

    def __repr__(self) -> str:
        return f"<{self.type_name} object>"


@dataclass(frozen=True)
class TooBig:
    """A value the run could not encode within the bounds: equal to nothing, itself included."""

    why: str

    def __eq__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"<value not comparable: {self.why}>"


def encode(value: Any) -> Any:
    """JSON-ready plain data for ``value`` (inside the run)."""
    budget = [MAX_ITEMS]
    try:
        return _encode(value, 0, budget)
    except _Overflow as exc:
        return {"too_big": str(exc)}
    except (RecursionError, ValueError, TypeError) as exc:
        return {"too_big": type(exc).__name__}


class _Overflow(Exception):
    pass


def _encode(value: Any, depth: int, budget: list[int]) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        raise _Overflow(f"more than {MAX_ITEMS} items")
    if depth > MAX_DEPTH:
        raise _Overflow(f"nested deeper than {MAX_DEPTH}")
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return value
    if kind is int:
        return value if abs(value) < 1 << 63 else {"int": str(value)}
    if kind is float:
        return value if math.isfinite(value) else {"float": repr(value)}
    if kind is complex:
        return {"complex": [_encode(value.real, depth + 1, budget), _encode(value.imag, depth + 1, budget)]}
    if kind is bytes:
        return {"bytes": value.hex()}
    if kind is list:
        return [_encode(item, depth + 1, budget) for item in list.__iter__(value)]
    if kind in (tuple, set, frozenset):
        return {kind.__name__: [_encode(item, depth + 1, budget) for item in kind.__iter__(value)]}
    if kind is dict:
        return {"dict": [[_encode(k, depth + 1, budget), _encode(v, depth + 1, budget)]
                         for k, v in dict.items(value)]}
    return {"object": f"{getattr(kind, '__module__', '?')}.{getattr(kind, '__qualname__', '?')}",
            "attrs": _attrs(value, depth, budget)}


def _attrs(value: Any, depth: int, budget: list[int]) -> list:
    try:
        found = object.__getattribute__(value, "__dict__")
    except (AttributeError, TypeError):
        return []
    if type(found) is not dict:
        return []
    return [[str(k), _encode(v, depth + 1, budget)] for k, v in dict.items(found) if type(k) is str]


def decode(data: Any, depth: int = 0) -> Any:
    """Fresh built-in values from plain data (outside the run); ValueError when malformed."""
    if depth > MAX_DEPTH + 2:
        raise ValueError("nested too deep")
    kind = type(data)
    if data is None or kind in (bool, str, int, float):
        return data
    if kind is list:
        return [decode(item, depth + 1) for item in data]
    if kind is not dict or len(data) not in (1, 2):
        raise ValueError(f"not plain data: {kind.__name__}")
    if "object" in data:
        attrs = data.get("attrs", [])
        if not isinstance(data["object"], str) or not isinstance(attrs, list):
            raise ValueError("malformed object")
        return Opaque(data["object"], tuple((str(k), _frozen(decode(v, depth + 1))) for k, v in attrs))
    (tag, inner), = data.items()
    try:
        if tag == "too_big":
            return TooBig(str(inner))
        if tag == "int":
            return int(inner)
        if tag == "float":
            return float(inner)
        if tag == "complex":
            return complex(*(float(part) for part in inner))
        if tag == "bytes":
            return bytes.fromhex(inner)
        if tag in ("tuple", "set", "frozenset"):
            items = [decode(item, depth + 1) for item in inner]
            return {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](items)
        if tag == "dict":
            return {decode(k, depth + 1): decode(v, depth + 1) for k, v in inner}
    except (TypeError, ValueError) as exc:
        raise ValueError(f"malformed {tag}: {exc}") from None
    raise ValueError(f"unknown tag {tag!r}")


def _frozen(value: Any) -> Any:
    """A hashable stand-in for an attribute value (lists and dicts inside an Opaque)."""
    if isinstance(value, list):
        return ("list", tuple(_frozen(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted(((repr(k), _frozen(v)) for k, v in value.items()))))
    if isinstance(value, set):
        return ("set", frozenset(value))
    return value
