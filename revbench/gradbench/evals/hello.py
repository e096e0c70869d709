"""``hello``: ``square(x) = x * x`` and ``double(x)``, its derivative ``2 x`` -- by
``revbench.grad`` of the square, not written by hand."""

from __future__ import annotations

from typing import Any

from revbench import ad
from revbench.gradbench.evals.base import Eval, Steps, program


def square(y, x):
    y += x * x


def _number(raw: Any) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise ValueError(f"hello's input is a number, got {raw!r}")
    return float(raw)


class Hello(Eval):
    name = "hello"

    def steps(self) -> dict[str, Steps]:
        f = program(square, self.check)
        d = ad.grad(f, loss="y", wrt="x")
        return {"square": (_number, lambda x: f(0.0, x)[0], float),
                "double": (_number, lambda x: d(0.0, x)[1], float)}

    def sample(self) -> Any:
        return 1.0
