"""``particle``: a charged particle from ``x(0) = (0, 8)``, ``x'(0) = (0.75, 0)``, pulled
by two fixed charges at ``(10, 10 - w)`` and ``(10, 0)`` (the force: minus the gradient of
the potential ``p(x; w) = sum 1 / |x - charge|``), integrated by Euler steps of 0.1 until it
would cross the x axis, then linearly to the crossing ``x(t_f)``; the control ``w`` that
brings the crossing to the origin, ``argmin_w x_0(t_f)^2``, by the gradient descent of
:mod:`~revbench.gradbench.evals.descent` from the given ``w``.

Each Euler step holds the potential's gradient (``revbench.grad`` or two ``jvp`` s, the
inner mode), the trajectory is a ``while checkpointed`` loop (its length is known only when
the particle gets there), and the descent takes the derivative of the whole trajectory by
``w`` (``grad`` or ``jvp``, the outer mode): nested AD through an unbounded loop.  ``rf``
is reverse outside, forward inside."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from revbench import ad
from revbench.checkpoint import Online, checkpointed
from revbench.function import reversible
from revbench.gradbench.evals import descent
from revbench.gradbench.evals.base import Eval, Steps, field, program
from revbench.lang.markers import routine

#: the Euler step, the start (position then velocity)
DT = 0.1
START = (0.0, 8.0, 0.75, 0.0)


@reversible
def potential(v, x, w):
    v += (1.0 / math.sqrt((x[0] - 10.0) ** 2 + (x[1] - 10.0 + w) ** 2)
          + 1.0 / math.sqrt((x[0] - 10.0) ** 2 + x[1] ** 2))


@reversible
def force(a, x, w, forward):
    """``a -=`` the potential's gradient at ``x``: the force on the particle (its mass
    is 1), by one ``jvp`` per axis (``forward``) or one ``grad``."""
    if forward == 1:
        with routine as basis:
            e = np.zeros((2, 2))
            e[0, 0] += 1.0
            e[1, 1] += 1.0
        a[0] -= ad.jvp(potential, 0.0, x, w, tangents={"x": e[0]}, outputs="v")
        a[1] -= ad.jvp(potential, 0.0, x, w, tangents={"x": e[1]}, outputs="v")
        ~basis
    else:
        a -= ad.grad(potential, loss="v", wrt="x")(0.0, x, w)


@reversible
def euler_step(s1, s0, w, dt, forward):
    """``s1 +=`` the state ``(x_0, x_1, x'_0, x'_1)`` one Euler step after ``s0``."""
    with routine as pulled:
        a = np.zeros(2)
        force(a, s0[0:2], w, forward)
    s1[0] += s0[0] + dt * s0[2]
    s1[1] += s0[1] + dt * s0[3]
    s1[2] += s0[2] + dt * a[0]
    s1[3] += s0[3] + dt * a[1]
    ~pulled


@reversible
def miss(out, s_end, s0, w, dt, forward):
    """``out += x_0(t_f)^2``: where the particle crosses the x axis, squared (``s_end``:
    its last state above it)."""
    while checkpointed(s0[1] + dt * s0[3] > 0.0, Online(snapshots=64), new=s_end, old=s0):
        euler_step(s_end, s0, w, dt, forward)
    with routine as crossing:
        x0 = s_end[0] - s_end[1] / s_end[3] * s_end[2]
    out += x0 * x0
    ~crossing


def _w(raw: Any) -> float:
    w = field(raw, "w")
    if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w):
        raise ValueError(f"particle: `w` must be a finite number, got {w!r}")
    return float(w)


class Particle(Eval):
    name = "particle"

    def steps(self) -> dict[str, Steps]:
        f = program(miss.__wrapped__, self.check)
        start = np.array(START)

        def variant(outer: str, inner: str):
            fwd = int(inner == "f")

            def args(w: np.ndarray) -> tuple:
                return 0.0, np.zeros(4), start, float(w[0]), DT, fwd

            if outer == "r":
                g = ad.grad(f, loss="out", wrt="w")

                def gradient(w):
                    return np.array([g(*args(w))[3]])
            else:
                def gradient(w):
                    return np.array([ad.jvp(f, *args(w), tangents={"w": 1.0},
                                            outputs="out")[1][0]])

            def solve(w0: float) -> float:
                return float(descent.argmin(lambda w: f(*args(w))[0], gradient,
                                            np.array([w0]))[0])
            return solve

        return {name: (_w, variant(name[0], name[1]), float) for name in ("ff", "fr", "rf", "rr")}

    def sample(self) -> Any:
        return {"w": 0.0}
