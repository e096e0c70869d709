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
            check_tolerance(name, v)
            setattr(TOLERANCE, name, float(v))


def check_tolerance(name: str, v: object) -> None:
    """Refuse a tolerance that is not a finite real number >= 0: a bool (``atol=True`` was
    taken as 1.0, and an ancilla left at 0.87 was freed without complaint), nan, inf (which
    would let every check pass), a string, a complex number."""
    import math
    import numbers

    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or v < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")


def get_tolerance() -> tuple[float, float]:
    return TOLERANCE.atol, TOLERANCE.rtol
