"""``lse``: LogSumExp ``log(sum(exp(x)))`` from its parts, shifted by the largest element
(as the eval asks: no library LogSumExp), and its gradient by ``revbench.grad``."""

from __future__ import annotations

from typing import Any

import numpy as np

from revbench import ad
from revbench.gradbench.evals.base import Eval, Steps, field, floats, program
from revbench.lang.markers import routine


def logsumexp(out, x):
    with routine as shifted:
        m = np.max(x)
        s = 0.0
        s += np.sum(np.exp(x - m))
    out += m + np.log(s)
    ~shifted


def _x(raw: Any) -> np.ndarray:
    x = floats(field(raw, "x"), "x", 1)
    if x.size == 0:
        raise ValueError("`x` must have at least one element")
    return x


class Lse(Eval):
    name = "lse"

    def steps(self) -> dict[str, Steps]:
        f = program(logsumexp, self.check)
        g = ad.grad(f, loss="out", wrt="x")
        return {"primal": (_x, lambda x: f(0.0, x)[0], float),
                "gradient": (_x, lambda x: g(0.0, x)[1], lambda v: v.tolist())}

    def sample(self) -> Any:
        return {"x": [0.5, 0.25, 1.0]}
