"""The gradient descent that GradBench's ``saddle`` and ``particle`` use (Pearlmutter and
Siskind's ``multivariate_argmin``), run on the host around compiled programs.

From ``x`` with step ``eta = 1e-5``: stop when the gradient's norm is at most ``1e-5``;
after 10 accepted steps in a row double ``eta``; else try ``x' = x - eta g``, stop when it
moves ``x`` by at most ``1e-5``, accept it when ``f(x') < f(x)`` (then take the gradient
there), else halve ``eta``.  The same rule written in revbench's language, for a descent
that is itself differentiated, is ``saddle.descent_step``."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

#: the solver's constants: the first step size, the tolerance on the gradient and on a
#: step, the accepted steps in a row after which the step doubles
ETA, TOLERANCE, DOUBLE_AFTER = 1e-5, 1e-5, 10

#: where a descent gives up: GradBench's solver has no limit, a tool must not hang
MAX_STEPS = 1_000_000


def argmin(f: Callable[[np.ndarray], float], g: Callable[[np.ndarray], np.ndarray],
           x: np.ndarray) -> np.ndarray:
    """The point where the descent of ``f`` (gradient ``g``) from ``x`` stops."""
    x = np.array(x, dtype=np.float64)
    fx, gx = f(x), g(x)
    eta, accepted = ETA, 0
    for _ in range(MAX_STEPS):
        if math.sqrt(float(gx @ gx)) <= TOLERANCE:
            return x
        if accepted == DOUBLE_AFTER:
            eta, accepted = 2.0 * eta, 0
            continue
        x_new = x - eta * gx
        if math.sqrt(float((x - x_new) @ (x - x_new))) <= TOLERANCE:
            return x
        f_new = f(x_new)
        if f_new < fx:
            x, fx, gx, accepted = x_new, f_new, g(x_new), accepted + 1
        else:
            eta, accepted = eta / 2.0, 0
    raise RuntimeError(f"the gradient descent did not stop in {MAX_STEPS} steps")
