"""``llsq``: the linear least-squares objective of cmpad,
``y(x) = 1/2 sum_i (sign(t_i) - sum_j x_j t_i ** j) ** 2`` with ``t_i = -1 + 2 i / (n - 1)``,
and its gradient by ``revbench.grad``."""

from __future__ import annotations

from typing import Any

import numpy as np

from revbench import ad
from revbench.gradbench.evals.base import Eval, Steps, field, floats, integer, program
from revbench.lang.markers import routine


def llsq(y, x, n):
    m = len(x)
    for i in range(n):
        with routine as residual:
            t = -1.0 + i * 2.0 / (n - 1)
            p = 0.0
            for j in range(m):
                p += x[j] * t ** j
            r = np.sign(t) - p
        y += 0.5 * r * r
        ~residual


def _args(raw: Any) -> tuple[np.ndarray, int]:
    return floats(field(raw, "x"), "x", 1), integer(field(raw, "n"), "n", 2)


class Llsq(Eval):
    name = "llsq"

    def steps(self) -> dict[str, Steps]:
        f = program(llsq, self.check)
        g = ad.grad(f, loss="y", wrt="x")
        return {"primal": (_args, lambda a: f(0.0, *a)[0], float),
                "gradient": (_args, lambda a: g(0.0, *a)[1], lambda v: v.tolist())}

    def sample(self) -> Any:
        return {"x": [0.5, 0.25, 1.0], "n": 4}
