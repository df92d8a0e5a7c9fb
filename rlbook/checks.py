"""Checks of a setting's value, shared by the configs: its type (that of its default), its choices."""
from __future__ import annotations

import json
import math
from dataclasses import MISSING, fields


def defaults(settings) -> dict:
    """The default of every field of a dataclass (or of its instance)."""
    return {f.name: f.default if f.default is not MISSING else f.default_factory() for f in fields(settings)}


def choose(name: str, value, valid) -> None:
    """value is one of valid (a ValueError naming the setting and every choice otherwise)."""
    if value not in valid:
        raise ValueError(f"{name}={value!r} is not valid; choose one of: {', '.join(map(str, valid))}")


def check_type(name: str, value, default, optional: bool = False) -> None:
    """value has the type of default (an int is a float; a bool is no number); floats are finite; dicts are JSON."""
    if value is None and optional:
        return
    expected = (int, float) if type(default) is float else type(default)
    if not isinstance(value, expected) or (isinstance(value, bool) and type(default) is not bool):
        raise ValueError(f"{name}={value!r} has type {type(value).__name__}; expected {type(default).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name}={value!r} is not a finite number")
    if isinstance(value, dict):
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{name}={value!r} is not a JSON object of finite values ({error})") from None
