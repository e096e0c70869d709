"""Checks for ``notebooks/02_reversible_programming.ipynb``.

Four exercises, one check each: :func:`exercise_1` (the inverse of a function, by hand),
:func:`exercise_2` (a dirty ancilla, cleaned), :func:`exercise_3` (an ``if`` with the right
postcondition) and :func:`exercise_4` (a ``while`` with the right postcondition).  Each
runs the student's reversible function on inputs chosen to catch the usual mistakes (every
branch, several trip counts, negative numbers, arrays) and returns a
:class:`~revbench.course.feedback.Feedback` naming the first input that goes wrong, the
value got and expected, and the rule behind it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from revbench.course import Feedback
from revbench.course.feedback import attempt, call, close, fail, need_function, run_answer, show, success
from revbench.function import ReversibleFunction, define
from revbench.lang.errors import ReversibilityError
from revbench.lang.ir import Call, walk_stmts

#: The function whose inverse exercise 1 asks for (the notebook shows the same text).
SCRAMBLE_SOURCE = '''\
def scramble(x, y, k):
    for i in range(len(x)):
        y[i] += x[i] * x[i]
        x[i] -= 2.0 * y[i]
    x[0], x[1] = x[1], x[0]
    k ^= 6
    y *= 3.0
'''

_reference: dict[str, ReversibleFunction] = {}


def _scramble() -> ReversibleFunction:
    """The check's own copy of ``scramble``: a student who edits theirs changes nothing."""
    if "scramble" not in _reference:
        _reference.update(define(SCRAMBLE_SOURCE, filename="<lesson02: scramble>"))
    return _reference["scramble"]


def _called(f: ReversibleFunction) -> set[str]:
    """The reversible functions ``f``'s body calls (by name), to spot ``~scramble(...)``."""
    return {s.func for s in walk_stmts(f._program.ir.body) if isinstance(s, Call)}


def _inputs(args: tuple) -> str:
    return ", ".join(show(a) for a in args)


def _need_params(ex: str, f: ReversibleFunction, names: tuple[str, ...]) -> None:
    if len(f.params) != len(names):
        fail(ex, f"`{f.name}` takes {len(f.params)} argument(s) ({', '.join(f.params)}), "
                 f"it should take {len(names)}: ({', '.join(names)})",
             "Keep the signature of the skeleton.")


# --------------------------------------------------------------------------------------
# Exercise 1: the inverse, by hand
# --------------------------------------------------------------------------------------
SCRAMBLE_INPUTS = (
    (np.array([1.0, 2.0, 3.0]), np.array([0.5, -1.0, 2.0]), 3),
    (np.array([-2.5, 4.0]), np.array([-1.0, -3.0]), -7),
    (np.array([0.0, -1.0, 10.0, 0.25]), np.array([1.0, 1.0, -0.5, 1.0]), 0),
)


def exercise_1(unscramble: Any) -> Feedback:
    """``unscramble`` must undo ``scramble`` (written by hand, not by calling ``~scramble``).

    Runs ``scramble`` then ``unscramble`` on arrays with negative numbers and several
    lengths, and a negative ``k``; every argument must come back (floats to 1e-9).
    """
    ex = "Exercise 2.1"

    def check() -> Feedback:
        f = need_function(ex, unscramble, "unscramble")
        scramble = _scramble()
        _need_params(ex, f, scramble.params)
        if f.is_inverse or "scramble" in _called(f):
            fail(ex, "write the inverse yourself, statement by statement: no call of "
                     "`scramble` or `~scramble`",
                 "Calling ~scramble is what you will do in practice; here the point is to "
                 "see how revbench builds it.")
        for n, args in enumerate(SCRAMBLE_INPUTS, 1):
            after = call(scramble, *args)
            back = call(f, *after)
            for name, got, want in zip(f.params, back, args):
                if not close(got, want, rtol=1e-9, atol=1e-12):
                    rule = ("`k ^= 6` is its own inverse: undo it with `k ^= 6`." if name == "k" else
                            "Invert every statement (+= ↔ -=, *= ↔ /=, a swap is its own "
                            "inverse) and run them in the OPPOSITE order: the last statement "
                            "of scramble is undone first, and inside the loop body too "
                            "(undo `x[i] -= ...` before `y[i] += ...`).")
                    fail(ex, f"input {n} (x={show(args[0])}, y={show(args[1])}, k={args[2]}): "
                             f"after scramble then unscramble, `{name}` is {show(got)}, "
                             f"it should be back at {show(want)}",
                         f"scramble gave x={show(after[0])}, y={show(after[1])}, k={after[2]}.",
                         rule)
        return success(ex, "unscramble undoes scramble on every input.",
                       "revbench derives ~scramble the same way: each statement inverted, in "
                       "reverse order (the loop walks i backwards too).")

    return attempt(ex, check)


# --------------------------------------------------------------------------------------
# Exercise 2: clean up the dirty ancilla
# --------------------------------------------------------------------------------------
RMS_INPUTS = (
    (0.0, np.array([3.0, 4.0])),
    (1.0, np.array([-1.0, 2.0, -2.0])),
    (-0.5, np.array([0.5])),
)


def _rms(r: float, x: np.ndarray) -> float:
    return r + math.sqrt(float(np.sum(x * x)) / len(x))


def exercise_2(rms_into: Any) -> Feedback:
    """``rms_into(r, x)`` must add the root mean square of ``x`` to ``r`` and give its
    ancilla back clean (``del s`` checks it), so that ``~rms_into`` undoes it."""
    ex = "Exercise 2.2"

    def check() -> Feedback:
        f = need_function(ex, rms_into, "rms_into")
        _need_params(ex, f, ("r", "x"))
        for r0, x in RMS_INPUTS:
            got = run_answer(ex, f, (r0, x), f"on x={show(x)}",
                             "It still holds the sum of squares when it is freed. After its last "
                             "use (the update of r) and before `del`, undo the loop that computed "
                             "it: the same loop with `-=` (or put the computation in `with "
                             "routine:` and write `~routine` after using it).")
            want = _rms(r0, x)
            if not close(got[0], want):
                why = ("r did not change: the uncompute ran before s was used. Compute, then "
                       "use (r += ...), then uncompute." if close(got[0], r0) else
                       "r must be increased by sqrt(mean of x[i]**2) = sqrt(s / len(x)).")
                fail(ex, f"on r={show(r0)}, x={show(x)}: r ends as {show(got[0])}, "
                         f"expected {show(want)}", why)
            back = call(f.inverse, *got)
            if not close(back[0], r0):
                fail(ex, f"on r={show(r0)}, x={show(x)}: ~rms_into does not give r back: "
                         f"{show(back[0])} instead of {show(r0)}")
        return success(ex, "the ancilla comes back clean, r is right, and ~rms_into undoes it.",
                       "Compute, use, uncompute: that is the pattern `with routine:` ... "
                       "`~routine` writes for you.")

    return attempt(ex, check)


# --------------------------------------------------------------------------------------
# Exercise 3: an if with the right postcondition
# --------------------------------------------------------------------------------------
FOLD_INPUTS = ((-2.5, False), (3.0, False), (0.0, False), (-0.125, False))


def exercise_3(fold: Any) -> Feedback:
    """``fold(x, flipped)`` makes ``x`` non-negative and sets ``flipped`` when it was
    negative; its ``if`` needs a postcondition that tells afterwards which branch ran."""
    ex = "Exercise 2.3"

    def check() -> Feedback:
        f = need_function(ex, fold, "fold")
        _need_params(ex, f, ("x", "flipped"))
        for x, flag in FOLD_INPUTS:
            taken = x < 0.0
            branch = "takes the branch" if taken else "does not take the branch"
            try:
                got = call(f, x, flag)
            except ReversibilityError as e:
                if str(e).startswith("postcondition"):
                    post = e.variable
                    if taken:
                        what = (f"after the branch x = {show(-x)}, and your postcondition `{post}` "
                                "is False, although the branch ran")
                    else:
                        what = (f"your postcondition `{post}` is True afterwards, although the "
                                "branch did not run")
                    fail(ex, f"x={show(x)} {branch}: {what}",
                         "Running backwards, `if (post, pre):` decides from the postcondition "
                         "whether to undo the branch, so it must be True after the if exactly "
                         "when the branch ran. x < 0.0 no longer says so once x is flipped: test "
                         "something the branch sets, such as the flag.")
                raise
            want = (-x if taken else x, flag ^ taken)
            if not close(got, want):
                fail(ex, f"fold({show(x)}, {flag}) gives {show(got)}, expected {show(want)}",
                     "x must end non-negative, and flipped must record whether it was negative.")
            back = call(f.inverse, *got)
            if not close(back, (x, flag)):
                fail(ex, f"~fold{show(got)} gives {show(back)}, expected {show((x, flag))}")
        return success(ex, "the postcondition tells the inverse which branch ran, on both "
                           "branches and at x = 0.0.")

    return attempt(ex, check)


# --------------------------------------------------------------------------------------
# Exercise 4: a while with the right postcondition
# --------------------------------------------------------------------------------------
GROW_INPUTS = ((250.0, 200.0), (195.0, 200.0), (100.0, 200.0))


def _years(balance: float, target: float) -> tuple[float, int]:
    n = 0
    while balance < target:
        balance *= 1.05
        n += 1
    return balance, n


def exercise_4(grow: Any) -> Feedback:
    """``grow(balance, target, years)`` multiplies ``balance`` by 1.05 a year until it
    reaches ``target``, counting the years in ``years`` (which starts at 0).  Tried on
    0, 1 and 15 trips round the loop."""
    ex = "Exercise 2.4"

    def check() -> Feedback:
        f = need_function(ex, grow, "grow")
        _need_params(ex, f, ("balance", "target", "years"))
        for balance, target in GROW_INPUTS:
            end, trips = _years(balance, target)
            case = (f"balance={show(balance)}, target={show(target)}, years=0 "
                    f"(the loop runs {trips} time{'s' if trips != 1 else ''})")
            try:
                got = call(f, balance, target, 0)
            except ReversibilityError as e:
                msg = str(e)
                if "must be false when the loop starts" in msg:
                    fail(ex, f"{case}: your postcondition `{e.variable}` is already True when "
                             "the loop starts",
                         "Backwards, the loop `while (post, cond):` runs while the postcondition "
                         "holds; True at the start, it would undo an iteration that never ran. "
                         "It must be False before the first iteration.")
                if "must be true after every iteration" in msg:
                    fail(ex, f"{case}: your postcondition `{e.variable}` is False after an "
                             "iteration",
                         "Backwards, the loop `while (post, cond):` stops as soon as the "
                         "postcondition is False, so it must be True after EVERY iteration and "
                         "False only at the very start. A counter that starts at 0 does that.")
                raise
            want = (end, target, trips)
            if not close(got, want):
                fail(ex, f"{case}: grow gives {show(got)}, expected {show(want)}",
                     "Each iteration multiplies balance by 1.05 and adds 1 to years.")
            back = call(f.inverse, *got)
            if not close(back, (balance, target, 0)):
                fail(ex, f"{case}: ~grow{show(got)} gives {show(back)}, expected "
                         f"{show((balance, target, 0))}")
        return success(ex, "the postcondition is False at the start and True after every "
                           "iteration: ~grow runs the loop exactly as many times back.")

    return attempt(ex, check)
