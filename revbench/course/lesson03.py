"""Checks for ``notebooks/03_ad_by_uncomputation.ipynb``.

Four exercises: :func:`exercise_1` (a gradient by hand, compared with ``revbench.grad``;
a wrong partial is matched against the usual slips to name the rule that was missed),
:func:`exercise_2` (how many floats a tape would store for a loop, as a formula in ``T``
and ``n``), :func:`exercise_3` (a formula that overwrites its temporaries, rewritten
reversibly so that its gradient needs no tape) and :func:`exercise_4` (the gradient of a
real loss of a complex number, in revbench's convention ``dL/dRe + i dL/dIm``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from numbers import Number
from typing import Any

import numpy as np

from revbench.ad import grad
from revbench.course import Feedback
from revbench.course.feedback import (
    attempt,
    call,
    close,
    fail,
    hint,
    need_function,
    run_answer,
    show,
    success,
)
from revbench.function import ReversibleFunction, define

#: The program of exercise 1 (the notebook shows the same text): y += sin(a b) + a² b.
PROGRAM_SOURCE = '''\
def prog(y, a, b):
    t = a * b
    y += np.sin(t) + a * t
    del t
'''
#: The point where exercise 1 asks for the gradient.
A, B = 0.5, 2.0

#: The program of exercise 4: a real loss of a complex number.
COMPLEX_SOURCE = '''\
def re_square(L, z):
    L += (z * z).real
'''
Z = 1.0 + 2.0j

_reference: dict[str, ReversibleFunction] = {}


def _ref(name: str) -> ReversibleFunction:
    """The check's own copies of the lesson's functions (a student's edits change nothing).
    The Python backend: nothing to compile for a two-line program."""
    if name not in _reference:
        _reference.update(define(PROGRAM_SOURCE + "\n\n" + COMPLEX_SOURCE, {"np": np},
                                 backend="python", filename="<lesson03>"))
    return _reference[name]


def _number(ex: str, name: str, v: Any, kind: type = float) -> complex:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (Number, np.number)):
        fail(ex, f"`{name}` should be a number, got {type(v).__name__} {v!r}",
             "Type the value as a Python expression, e.g. `2.0 * np.cos(1.0) + 0.5`.")
    if kind is float and isinstance(v, (complex, np.complexfloating)):
        fail(ex, f"`{name}` should be a real number, got the complex {v!r}")
    return complex(v) if kind is complex else float(v)


# --------------------------------------------------------------------------------------
# Exercise 1: the gradient by hand
# --------------------------------------------------------------------------------------
def _slips(a: float, b: float) -> dict[str, list[tuple[float, str]]]:
    """The values a partial takes under each usual slip, with the rule the slip misses."""
    t, c, s = a * b, math.cos(a * b), math.sin(a * b)
    chain = ("chain rule: d sin(t)/d{v} = cos(t) · dt/d{v}, and t = a·b, so dt/d{v} = {o}")
    return {
        "a": [
            (b * c + t, "product rule: the term a·t depends on a twice, directly (giving t) and "
                        "through t = a·b (giving a·dt/da = a·b); you kept only the first"),
            (c + 2 * a * b, chain.format(v="a", o="b")),
            (b * s + 2 * a * b, "derivative of sin: d sin(t)/dt = cos(t), not sin(t)"),
            (-b * s + 2 * a * b, "derivative of sin: d sin(t)/dt = cos(t); -sin(t) is the "
                                 "derivative of cos"),
            (b * c, "y has two terms, sin(t) and a·t: the second contributes 2·a·b"),
            (2 * a * b, "y has two terms, sin(t) and a·t: the first contributes b·cos(a·b)"),
        ],
        "b": [
            (c + a * a, chain.format(v="b", o="a")),
            (a * c, "y has two terms: a·t depends on b through t, giving a·dt/db = a·a"),
            (a * c + a, "chain rule through the ancilla: a·t gives a·dt/db, and dt/db = a, so a·a"),
            (a * s + a * a, "derivative of sin: d sin(t)/dt = cos(t), not sin(t)"),
            (-a * s + a * a, "derivative of sin: d sin(t)/dt = cos(t); -sin(t) is the "
                             "derivative of cos"),
            (a * a, "y has two terms: sin(t) contributes a·cos(a·b)"),
        ],
    }


def exercise_1(dy_da: Any, dy_db: Any) -> Feedback:
    """The partials of ``prog``'s ``y`` with respect to ``a`` and ``b`` at (0.5, 2.0),
    worked out by hand; compared with ``revbench.grad`` to 1e-6."""
    ex = "Exercise 3.1"

    def check() -> Feedback:
        got = {"a": _number(ex, "dy_da", dy_da), "b": _number(ex, "dy_db", dy_db)}
        g = grad(_ref("prog"), loss="y")(0.0, A, B)
        want = {"a": g[1], "b": g[2]}
        slips = _slips(A, B)
        for v in ("a", "b"):
            if not close(got[v], want[v], rtol=1e-6, atol=1e-9):
                rule = next((r for val, r in slips[v] if close(got[v], val, rtol=1e-6, atol=1e-9)),
                            "work backwards from y: the adjoint of t is cos(t) + a, then "
                            "t = a·b passes t's adjoint times b to a and times a to b")
                if got[v] == 0.0:
                    rule = "still the placeholder 0.0: replace it with your value"
                fail(ex, f"dy/d{v} at a={A}, b={B} is not {show(got[v])}", rule)
        return success(ex, f"dy/da = {show(want['a'])} and dy/db = {show(want['b'])}, as "
                           "revbench.grad gives.",
                       "The reverse sweep did the same: the adjoint of y flowed back to t, then "
                       "from t to a and b.")

    return attempt(ex, check)


# --------------------------------------------------------------------------------------
# Exercise 2: count the tape
# --------------------------------------------------------------------------------------
def tape_of_pendulums(T: int, n: int) -> int:
    """Floats a store-everything tape keeps for ``pendulums``: per step, the n old values of
    p, the n old values of q and the old E."""
    return T * (2 * n + 1)


#: (10, 4) first: there each slip the check names gives a different number
_TAPE_CASES = ((10, 4), (1, 1), (10, 1), (1000, 50))


def exercise_2(tape_floats: Any) -> Feedback:
    """``tape_floats(T, n)``: how many floats a tape stores for ``pendulums`` (T steps, n
    pendulums), under the lesson's model (the old value of every assignment)."""
    ex = "Exercise 3.2"

    def check() -> Feedback:
        if not callable(tape_floats):
            fail(ex, f"`tape_floats` should be a function of T and n, got {type(tape_floats).__name__}")
        for T, n in _TAPE_CASES:
            got, want = tape_floats(T, n), tape_of_pendulums(T, n)
            if isinstance(got, (bool, np.bool_)) or not isinstance(got, (Number, np.number)):
                fail(ex, f"tape_floats({T}, {n}) returned {got!r}, not a number")
            if got == want:
                continue
            if got == 0:
                why = ("0 is revbench's count, which recomputes instead of storing; a tape-based "
                       "tool keeps the value each assignment overwrites")
            elif got == 2 * n * T:
                why = "you left out E: `E = E + ...` overwrites E once per step"
            elif got == n * T or got == (n + 1) * T:
                why = "each step overwrites p[i] AND q[i]: 2·n array elements, plus E"
            elif got == 2 * n + 1:
                why = "that is one step: the tape keeps the values of every one of the T steps"
            elif got == 2 * T + 1 or got == 3 * T:
                why = "p and q are arrays of n elements: each element overwritten is one float"
            else:
                why = "count per step: how many floats does one step overwrite? Then times T"
            fail(ex, f"for T={T} steps and n={n} pendulums the tape holds {want} floats, "
                     f"your formula gives {got}", why)
        return success(ex, "T·(2n + 1) floats: for T = 10⁶ steps of 1000 pendulums, 16 GB. "
                           "revbench's reverse sweep recomputes them: 0 floats.")

    return attempt(ex, check)


# --------------------------------------------------------------------------------------
# Exercise 3: make this gradient need no tape
# --------------------------------------------------------------------------------------
def soft_norm_py(x: np.ndarray) -> float:
    """The plain-Python formula of exercise 3: r = |x|, L = r / (1 + r).  Every assignment
    to ``s`` overwrites it, which is what a tape would have to remember."""
    s = 0.0
    for i in range(len(x)):
        s = s + x[i] * x[i]
    s = math.sqrt(s)
    return s / (1.0 + s)


SOFT_NORM_INPUTS = (
    (0.0, np.array([3.0, 4.0])),
    (1.0, np.array([-1.0, 0.5, 2.0])),
    (0.0, np.array([-0.25])),
)


def _central_differences(fn: Callable[[np.ndarray], float], x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    g = np.empty_like(x)
    for i in range(len(x)):
        up, down = x.copy(), x.copy()
        up[i] += h
        down[i] -= h
        g[i] = (fn(up) - fn(down)) / (2 * h)
    return g


def exercise_3(soft_norm: Any) -> Feedback:
    """``soft_norm(L, x)`` adds |x| / (1 + |x|) to ``L``, reversibly: its ancillas come
    back clean, ``~soft_norm`` undoes it, and ``revbench.grad`` agrees with finite
    differences of :func:`soft_norm_py`."""
    ex = "Exercise 3.3"

    def check() -> Feedback:
        f = need_function(ex, soft_norm, "soft_norm")
        if len(f.params) != 2:
            fail(ex, f"`soft_norm` takes ({', '.join(f.params)}), it should take (L, x)")
        for L0, x in SOFT_NORM_INPUTS:
            got = run_answer(ex, f, (L0, x), f"on x={show(x)}",
                             "Uncompute it after its last use: undo the updates that computed it, "
                             "in reverse order (or compute it inside `with routine:` and write "
                             "`~routine` after the update of L).")
            want = L0 + soft_norm_py(x)
            if not close(got[0], want):
                fail(ex, f"on L={show(L0)}, x={show(x)}: L ends as {show(got[0])}, expected "
                         f"{show(want)}", "L must grow by r / (1 + r), with r = sqrt(sum of x[i]²).")
            if not close(got[1], x):
                fail(ex, f"on x={show(x)}: x ends as {show(got[1])}: soft_norm must leave x as it "
                         "was (only L changes)")
            back = call(f.inverse, *got)
            if not close(back[0], L0):
                fail(ex, f"on x={show(x)}: ~soft_norm gives L = {show(back[0])}, not {show(L0)}")
            g = grad(f, loss=f.params[0])(L0, x)[1]
            fd = _central_differences(soft_norm_py, x)
            if not close(g, fd, rtol=1e-5, atol=1e-7):
                fail(ex, f"on x={show(x)}: revbench.grad gives dL/dx = {show(g)}, finite "
                         f"differences {show(fd)}")
        return success(ex, "reversible, the right value, its ancillas clean, and its gradient "
                           "matches finite differences.",
                       "The reverse sweep got every intermediate back by uncomputing it: "
                       "nothing was stored.")

    return attempt(ex, check)


# --------------------------------------------------------------------------------------
# Exercise 4: a complex number
# --------------------------------------------------------------------------------------
def exercise_4(g: Any) -> Feedback:
    """The gradient of ``L += (z * z).real`` with respect to ``z`` at 1 + 2j, in revbench's
    convention ``dL/dRe(z) + i dL/dIm(z)``."""
    ex = "Exercise 3.4"

    def check() -> Feedback:
        got = _number(ex, "g", g, complex)
        want = complex(grad(_ref("re_square"), loss="L")(0.0, Z)[1])
        if close(got, want):
            return success(ex, f"dL/dz = {show(want)}: with z = x + iy, L = x² - y², so "
                               "dL/dx = 2x and dL/dy = -2y.",
                           "That is 2·conj(z): for a real loss, revbench's convention gives the "
                           "direction of steepest ascent in the complex plane.")
        x, y = Z.real, Z.imag
        if close(got, 2 * Z):
            why = ("2z is the complex derivative d(z²)/dz; revbench gives dL/dRe + i·dL/dIm of "
                   "the real loss L = Re(z²) = x² - y²")
        elif close(got, complex(2 * x, 0.0)):
            why = "the imaginary part is dL/dy: L = x² - y² depends on y too"
        elif close(got, complex(2 * x, 2 * y)) or close(got, complex(-2 * x, -2 * y)):
            why = "check the sign of the y part: L = x² - y², so dL/dy = -2y"
        elif got == 0:
            why = "still the placeholder 0: replace it with your value"
        else:
            why = "write L in x = Re(z) and y = Im(z), then g = dL/dx + i·dL/dy"
        return hint(ex, f"dL/dz at z = {Z} is not {show(got)}", why)

    return attempt(ex, check)
