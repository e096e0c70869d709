"""Checks for ``notebooks/01_tour.ipynb``.

Two warm-up exercises that fit the ten-minute tour: :func:`exercise_1` (the rejected
``y = x * x`` written reversibly) and :func:`exercise_2` (a derivative read off
``revbench.grad``).  Each returns a :class:`~revbench.course.feedback.Feedback`; the hints
name the input, the value got and expected, and the rule.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from revbench.course.feedback import Feedback, attempt, call, close, fail, hint, need_function, show, success

# --------------------------------------------------------------------------------------
# Exercise 1: y = x * x, reversibly
# --------------------------------------------------------------------------------------
SQUARE_INPUTS = ((0.0, 3.0), (1.5, -2.0), (-4.0, 0.5))


def exercise_1(square_into: Any) -> Feedback:
    """``square_into(y, x)`` must add ``x * x`` to ``y`` and leave ``x`` as it was, so that
    ``~square_into`` takes ``y`` back (the reversible form of the refused ``y = x * x``)."""
    ex = "Exercise 1.1"

    def check() -> Feedback:
        f = need_function(ex, square_into, "square_into")
        if len(f.params) != 2:
            fail(ex, f"`square_into` takes {len(f.params)} argument(s) ({', '.join(f.params)}), "
                     "it should take two: (y, x)")
        for y, x in SQUARE_INPUTS:
            got_y, got_x = call(f, y, x)
            if not close(got_x, x):
                fail(ex, f"square_into({show(y)}, {show(x)}) changed `x` to {show(got_x)}",
                     "Only `y` should change: update it with `y += ...`, and read `x`.")
            if not close(got_y, y + x * x):
                if close(got_y, y):
                    why = "`y` did not change: add the square to it with `y += ...`."
                elif close(got_y, x * x):
                    why = ("that is `y = x * x`, which loses the old `y`: ADD the square, so the "
                           "old value can be taken back by subtracting it.")
                elif close(got_y, y - x * x):
                    why = "the sign is the wrong way round: add the square."
                else:
                    why = "the reversible form of `y = x * x` is `y += x * x`."
                fail(ex, f"square_into({show(y)}, {show(x)}) gives y = {show(got_y)}, expected "
                         f"{show(y + x * x)}", why)
            back = call(~f, got_y, got_x)
            if not (close(back[0], y) and close(back[1], x)):
                fail(ex, f"~square_into did not take ({show(got_y)}, {show(got_x)}) back to "
                         f"({show(y)}, {show(x)}): got {show(back)}")
        return success(ex, "square_into adds x² to y, and ~square_into takes it away again.",
                       "Updating instead of overwriting is what makes every revbench function "
                       "runnable backwards.")

    return attempt(ex, check)


# --------------------------------------------------------------------------------------
# Exercise 2: a derivative from revbench.grad
# --------------------------------------------------------------------------------------
X2 = -1.5


def _poly(x: float) -> float:
    return 3.0 * x * x + x


def exercise_2(dy_dx: Any) -> Feedback:
    """``dy_dx`` must be the derivative of ``poly``'s final ``y`` with respect to ``x`` at
    ``x = -1.5`` (``y`` starting at 0.0), read off ``revbench.grad``: 6x + 1 = -8."""
    ex = "Exercise 1.2"
    want = 6.0 * X2 + 1.0

    def check() -> Feedback:
        if dy_dx is None:
            fail(ex, "`dy_dx` is still None: put the derivative there",
                 'revbench.grad(poly, loss="y") is a function; call it on (0.0, -1.5).')
        if isinstance(dy_dx, tuple):
            fail(ex, f"`dy_dx` is the whole tuple {show(dy_dx)}: grad gives one derivative per "
                     "argument, (dy/dy, dy/dx)",
                 "Take the entry of x, the second one: [1].")
        if isinstance(dy_dx, (np.ndarray, list)) or not isinstance(dy_dx, numbers.Real):
            fail(ex, f"`dy_dx` should be a number, got {type(dy_dx).__name__} {show(dy_dx)}")
        v = float(dy_dx)
        if close(v, want):
            return success(ex, f"dy/dx = {show(want)} at x = -1.5, which is 6x + 1.",
                           "revbench found it by running ~poly backwards: no tape, no formula "
                           "written by hand.")
        if close(v, 1.0):
            fail(ex, "1.0 is dy/dy, the derivative with respect to the starting y (the first "
                     "entry of the tuple)", "Take the second entry: the one for x.")
        if close(v, _poly(X2)):
            fail(ex, f"{show(v)} is the value of y at x = -1.5, not its derivative",
                 'Use revbench.grad(poly, loss="y")(0.0, -1.5), not poly(0.0, -1.5).')
        if close(v, 6.0 * 2.0 + 1.0) or close(v, 6.0 * 1.5 + 1.0):
            fail(ex, f"{show(v)} is the derivative at another x",
                 "Call the gradient at x = -1.5 (the second argument), with y = 0.0.")
        return hint(ex, f"dy/dx at x = -1.5 is not {show(v)}",
                    'revbench.grad(poly, loss="y")(0.0, -1.5) returns (dy/dy, dy/dx): take [1].')

    return attempt(ex, check)
