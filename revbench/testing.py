"""Helpers for users' own tests of reversible functions."""

from __future__ import annotations

from typing import Any

import numpy as np

from revbench.function import ReversibleFunction, copy_arg


def _close(a: Any, b: Any, atol: float, rtol: float) -> bool:
    if isinstance(a, np.ndarray):
        if a.dtype.kind in "biu":
            return bool(np.array_equal(a, b))
        return bool(np.allclose(a, b, atol=atol, rtol=rtol, equal_nan=True))
    if isinstance(a, (bool, int, np.integer)) and not isinstance(a, float):
        return a == b
    return abs(a - b) <= atol + rtol * abs(b)


def check_inverse(f: ReversibleFunction, *args: Any, atol: float = 1e-8, rtol: float = 1e-6) -> tuple:
    """Run ``f`` forward, then ``~f``, and assert the arguments come back.

    Integers and bools must come back exactly, floats within the tolerance.
    The caller's arrays are not modified.  Returns ``f``'s outputs.
    """
    if not isinstance(f, ReversibleFunction):
        raise TypeError(f"check_inverse needs a reversible function, got {f!r}")
    original = tuple(copy_arg(a) for a in args)
    outputs = f(*(copy_arg(a) for a in args))
    kept = tuple(copy_arg(o) for o in outputs)
    back = (~f)(*outputs)
    for name, a, b in zip(f.params, original, back):
        if not _close(b, a, atol, rtol):
            raise AssertionError(f"check_inverse({f.__name__}): argument `{name}` did not come "
                                 f"back: started as {a!r}, ended as {b!r}")
    return kept
