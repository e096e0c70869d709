"""What every eval has: :class:`Eval` and the input checks."""


from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

#: what one function of an eval is: (prepare, compute, output)
Steps = tuple[Callable[[Any], Any], Callable[[Any], Any], Callable[[Any], Any]]


class Eval:
    """The functions of one eval, compiled (checks on or off)."""

    #: GradBench's name of the eval (its module)
    name = ""

    def __init__(self, check: bool = False) -> None:
        self.check = check
        self.functions: dict[str, Steps] = self.steps()
        self.warm()

    def steps(self) -> dict[str, Steps]:
        raise NotImplementedError

    def sample(self) -> Any:
        """A small input in GradBench's format, to compile on."""
        raise NotImplementedError

    def warm(self) -> None:
        """Compile every function: each run once on :meth:`sample`."""
        raw = self.sample()
        for prepare, compute, output in self.functions.values():
            output(compute(prepare(raw)))


_PROGRAMS: dict[tuple[Callable, bool], Any] = {}


def program(fn: Callable, check: bool):
    """``fn`` made reversible with checks on or off (one per process)."""
    from revbench.function import reversible

    key = (fn, check)
    if key not in _PROGRAMS:
        _PROGRAMS[key] = reversible(check=check)(fn)
    return _PROGRAMS[key]


def floats(value: Any, name: str, ndim: int) -> np.ndarray:
    """A JSON list as a float64 array of ``ndim`` dimensions, or a clear error."""
    try:
        a = np.array(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"`{name}` must be numbers, {ndim}-dimensional: {exc}") from None
    if a.ndim != ndim:
        raise ValueError(f"`{name}` must be {ndim}-dimensional, got shape {a.shape}")
    return a


def integer(value: Any, name: str, least: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"`{name}` must be an integer >= {least}, got {value!r}")
    return value


def field(raw: Any, name: str) -> Any:
    if not isinstance(raw, dict) or name not in raw:
        raise ValueError(f"the input must be an object with `{name}`")
    return raw[name]
