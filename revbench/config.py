"""Process-wide settings: the default float tolerance of runtime checks."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Tolerance:
    atol: float = 1e-8
    rtol: float = 1e-8


TOLERANCE = Tolerance()


def set_tolerance(atol: float | None = None, rtol: float | None = None) -> None:
    """Set the global tolerance of float checks: ``|a - b| <= atol + rtol * |b|``.

    Functions decorated with their own ``atol``/``rtol`` keep theirs.  Takes
    effect on the next call; nothing is recompiled.
    """
    for name, v in (("atol", atol), ("rtol", rtol)):
        if v is not None:
            if not (isinstance(v, (int, float)) and v >= 0):
                raise ValueError(f"{name} must be a non-negative number, got {v!r}")
            setattr(TOLERANCE, name, float(v))


def get_tolerance() -> tuple[float, float]:
    return TOLERANCE.atol, TOLERANCE.rtol
