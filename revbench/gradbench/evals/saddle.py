"""``saddle``: ``min_x max_y f(x, y)`` with ``f(x, y) = (x_0^2 + x_1^2) - (y_0^2 + y_1^2)``
(GradBench's ``f x1 y1 x2 y2`` with ``x = (x1, y1)``, ``y = (x2, y2)``), both by the
gradient descent of :mod:`~revbench.gradbench.evals.descent`, from the same start.

The inner ``max_y`` is a descent too, and the outer one differentiates through it: so the
inner descent is written in revbench's language (:func:`best_response`, a ``while
checkpointed`` loop whose step holds a derivative of the payoff, ``docs/ad.md`` section
11), and the outer one takes ``revbench.grad`` (or ``jvp``) of it -- nested AD.  The four
functions pick the mode of each: ``rf`` is reverse outside, forward inside.  Step 2, the
best reply to the ``x`` found, is a plain descent on the host with the outer mode."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from revbench import ad
from revbench.checkpoint import Online, checkpointed
from revbench.function import reversible
from revbench.gradbench.evals import descent
from revbench.gradbench.evals.base import Eval, Steps, field, floats, program
from revbench.gradbench.evals.descent import DOUBLE_AFTER, ETA, TOLERANCE
from revbench.lang.markers import routine


@reversible
def loss(v, x, y):
    """The inner player's loss, ``-f(x, y)``: its descent is ``max_y f``."""
    v -= (x[0] ** 2 + x[1] ** 2) - (y[0] ** 2 + y[1] ** 2)


@reversible
def loss_gradient(g, x, y, forward):
    """``g +=`` the gradient of the loss in ``y``: one ``jvp`` per axis (``forward``) or
    one ``grad``."""
    if forward == 1:
        with routine as basis:
            e = np.zeros((2, 2))
            e[0, 0] += 1.0
            e[1, 1] += 1.0
        g[0] += ad.jvp(loss, 0.0, x, y, tangents={"y": e[0]}, outputs="v")
        g[1] += ad.jvp(loss, 0.0, x, y, tangents={"y": e[1]}, outputs="v")
        ~basis
    else:
        g += ad.grad(loss, loss="v", wrt="y")(0.0, x, y)


@reversible
def descent_step(s1, s0, x, forward):
    """``s1 +=`` the descent's state after one step from ``s0``: ``s = (y_0, y_1, loss,
    gradient_0, gradient_1, eta, accepted steps, going)``."""
    if s0[6] == DOUBLE_AFTER:  # ten accepted steps: a step twice as long
        s1 += s0
        s1[5] += s0[5]
        s1[6] -= DOUBLE_AFTER
    else:
        with routine as trial:
            y = np.zeros(2)
            y[0] += s0[0] - s0[5] * s0[3]
            y[1] += s0[1] - s0[5] * s0[4]
            moved = math.sqrt((y[0] - s0[0]) ** 2 + (y[1] - s0[1]) ** 2)
        if moved <= TOLERANCE:  # converged: the state stays, no longer going
            s1 += s0
            s1[7] -= 1.0
        else:
            with routine as value:
                v = 0.0
                loss(v, x, y)
            if v < s0[2]:  # accepted
                s1[0] += y[0]
                s1[1] += y[1]
                s1[2] += v
                loss_gradient(s1[3:5], x, y, forward)
                s1[5] += s0[5]
                s1[6] += s0[6] + 1.0
                s1[7] += 1.0
            else:  # rejected: a step half as long
                s1 += s0
                s1[5] -= 0.5 * s0[5]
                s1[6] -= s0[6]
            ~value
        ~trial


@reversible
def best_response(out, s_end, x, start, forward):
    """``out += max_y f(x, y)``, by the descent of the loss from ``start`` (its last state
    in ``s_end``)."""
    with routine as first:
        s0 = np.zeros(8)
        s0[0] += start[0]
        s0[1] += start[1]
        loss(s0[2], x, start)
        loss_gradient(s0[3:5], x, start, forward)
        s0[5] += ETA
        s0[7] += 1.0
    while checkpointed(s0[7] > 0.5 and math.sqrt(s0[3] ** 2 + s0[4] ** 2) > TOLERANCE,
                       Online(snapshots=64), new=s_end, old=s0):
        descent_step(s_end, s0, x, forward)
    out -= s_end[2]
    ~first


def _start(raw: Any) -> np.ndarray:
    start = floats(field(raw, "start"), "start", 1)
    if start.shape != (2,):
        raise ValueError(f"saddle: `start` must have 2 numbers, got {start.size}")
    return start


def gradient(f: Any, wrt: str, forward: bool, loss_name: str, args_of):
    """The gradient of the float ``loss_name`` of ``f`` by its 2-vector argument ``wrt``,
    as a function of the point: one ``grad`` or two ``jvp`` s."""
    if not forward:
        g = ad.grad(f, loss=loss_name, wrt=wrt)
        k = list(f.params).index(wrt)
        return lambda p: g(*args_of(p))[k]
    basis = np.eye(2)

    def along(p: np.ndarray) -> np.ndarray:
        return np.array([ad.jvp(f, *args_of(p), tangents={wrt: e}, outputs=loss_name)[1][0]
                         for e in basis])
    return along


class Saddle(Eval):
    name = "saddle"

    def steps(self) -> dict[str, Steps]:
        inner = program(best_response.__wrapped__, self.check)
        payoff = program(loss.__wrapped__, self.check)

        def variant(outer: str, inner_mode: str):
            fwd_in = int(inner_mode == "f")

            def solve(start: np.ndarray) -> list[float]:
                def cost_args(x):
                    return 0.0, np.zeros(8), x, start, fwd_in

                def cost(x):
                    return inner(*cost_args(x))[0]

                x = descent.argmin(cost, gradient(inner, "x", outer == "f", "out", cost_args),
                                   start)

                def reply_args(y):
                    return 0.0, x, y

                y = descent.argmin(lambda y: payoff(*reply_args(y))[0],
                                   gradient(payoff, "y", outer == "f", "v", reply_args), start)
                return [*x.tolist(), *y.tolist()]
            return solve

        return {name: (_start, variant(name[0], name[1]), list)
                for name in ("ff", "fr", "rf", "rr")}

    def sample(self) -> Any:
        return {"start": [1.0, 1.0]}
