"""Argument checks shared by the encoders and the time-series code: whole numbers without int()'s bare errors."""

from __future__ import annotations

import math
import numbers
from typing import Any

__all__ = ["is_integer", "whole_number"]


def is_integer(value: Any) -> bool:
    """An integer (Python's or numpy's), not a bool, a float or a string."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def whole_number(value: Any, minimum: int | None = None) -> bool:
    """An integer or an integral float (3 or 3.0, not a bool, a string, 2.5 or inf), at least ``minimum`` when
    given; never raises, so the caller's message says what was expected."""
    if is_integer(value):
        whole = True
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        whole = math.isfinite(value) and float(value).is_integer()
    else:
        return False
    return whole and (minimum is None or value >= minimum)
