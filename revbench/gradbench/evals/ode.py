"""``ode``: cmpad's ``an_ode``, ``y' = f(y)`` with ``f(y)_0 = x_0`` and
``f(y)_i = x_i y_(i-1)``, from ``y(0) = 0`` to ``t = 2`` by ``s`` classic Runge-Kutta
steps; the gradient of the last component of ``y(2)`` with respect to ``x`` by
``revbench.grad``.  Every state is kept (``Y[t]``: a step is not invertible by itself);
each step's stages are ancillas, computed and uncomputed."""

from __future__ import annotations

from typing import Any

import numpy as np

from revbench import ad
from revbench.function import reversible
from revbench.gradbench.evals.base import Eval, Steps, field, floats, integer, program
from revbench.lang.markers import routine


@reversible
def rhs(k, x, y):
    """``k += f(y)``: ``f(y)_0 = x_0``, ``f(y)_i = x_i y_(i-1)``."""
    k[0] += x[0]
    for i in range(1, len(x)):
        k[i] += x[i] * y[i - 1]


def an_ode(Y, x, s):
    n = len(x)
    h = 2.0 / s
    for t in range(s):
        with routine as stages:
            k1 = np.zeros(n)
            rhs(k1, x, Y[t])
            y2 = np.zeros(n)
            y2 += Y[t] + h / 2 * k1
            k2 = np.zeros(n)
            rhs(k2, x, y2)
            y3 = np.zeros(n)
            y3 += Y[t] + h / 2 * k2
            k3 = np.zeros(n)
            rhs(k3, x, y3)
            y4 = np.zeros(n)
            y4 += Y[t] + h * k3
            k4 = np.zeros(n)
            rhs(k4, x, y4)
        Y[t + 1] += Y[t] + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        ~stages
    del h


def _args(raw: Any) -> tuple[np.ndarray, int]:
    x = floats(field(raw, "x"), "x", 1)
    s = integer(field(raw, "s"), "s", 1)
    if x.size == 0:
        raise ValueError("`x` must have at least one element")
    return x, s


class Ode(Eval):
    name = "ode"

    def steps(self) -> dict[str, Steps]:
        f = program(an_ode, self.check)
        grads: dict[tuple[int, int], Any] = {}

        def primal(a):  # (the states are updated in place: new ones for each run)
            x, s = a
            return f(np.zeros((s + 1, x.size)), x, s)[0][-1]

        def gradient(a):
            x, s = a
            key = (s, x.size)
            if key not in grads:  # (the seed's element: the last component at t = 2)
                grads[key] = ad.grad(f, loss=("Y", (s, x.size - 1)), wrt="x")
            return grads[key](np.zeros((s + 1, x.size)), x, s)[1]

        return {"primal": (_args, primal, lambda v: v.tolist()),
                "gradient": (_args, gradient, lambda v: v.tolist())}

    def sample(self) -> Any:
        return {"x": [0.5, 0.25, 1.0], "s": 2}
