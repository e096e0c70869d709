"""What a check cell shows: a success message, or a hint that helps a student on.

A :class:`Feedback` is a value, not an exception: a check returns it, the notebook displays
it (green or amber box in Jupyter, one block of text elsewhere), and tests read ``ok`` and
``text``.  Checks are written with :func:`attempt`, which turns any error the student's
code raises while being checked into a hint quoting that error, instead of a traceback in
the middle of the course.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from revbench.function import ReversibleFunction, copy_arg


@dataclass(frozen=True)
class Feedback:
    """The outcome of checking one exercise.

    ``ok`` says whether the answer is right; ``title`` is the headline (``"Right!"`` or
    the first thing that is wrong); ``details`` are further lines: the input tried, the
    value got against the value expected, the rule to remember.
    """

    ok: bool
    exercise: str
    title: str
    details: tuple[str, ...] = field(default=())

    @property
    def text(self) -> str:
        mark = "✔" if self.ok else "✘"
        lines = [f"{mark} {self.exercise}: {self.title}"]
        lines += [f"  {d}" for d in self.details]
        return "\n".join(lines)

    def __bool__(self) -> bool:
        return self.ok

    def __repr__(self) -> str:
        return self.text

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text)

    def _repr_html_(self) -> str:
        # The text in the theme's own colour (light or dark), on a translucent tint that
        # reads on both; the bar in the theme's success or warning colour.
        if self.ok:
            colour, bg = "var(--jp-success-color1, #1a7f37)", "rgba(46, 160, 67, 0.15)"
        else:
            colour, bg = "var(--jp-warn-color1, #9a6700)", "rgba(212, 167, 44, 0.18)"
        mark = "✔" if self.ok else "✘"
        items = "".join(f"<li>{html.escape(d)}</li>" for d in self.details)
        body = f"<ul style='margin:4px 0 0 0'>{items}</ul>" if items else ""
        return (f"<div class='rb-feedback rb-feedback-{'ok' if self.ok else 'hint'}' "
                f"style='border-left:4px solid {colour};background:{bg};"
                f"color:var(--jp-content-font-color1, #1f2328);"
                f"padding:6px 10px;border-radius:4px;font-family:sans-serif'>"
                f"<b>{mark} {html.escape(self.exercise)}</b>: {html.escape(self.title)}{body}</div>")


def success(exercise: str, message: str = "Right!", *details: str) -> Feedback:
    """A right answer: ``message`` says what the student has now shown."""
    return Feedback(True, exercise, message, tuple(details))


def hint(exercise: str, message: str, *details: str) -> Feedback:
    """A wrong answer: ``message`` says what is wrong, ``details`` how to find out why."""
    return Feedback(False, exercise, message, tuple(details))


class _Wrong(Exception):
    """Raised inside a check to stop at the first wrong thing (see :func:`attempt`)."""

    def __init__(self, feedback: Feedback):
        super().__init__(feedback.text)
        self.feedback = feedback


def fail(exercise: str, message: str, *details: str) -> None:
    """Stop the check running in :func:`attempt` with this hint."""
    raise _Wrong(hint(exercise, message, *details))


def attempt(exercise: str, check: Callable[[], Feedback]) -> Feedback:
    """Run ``check()``; a :func:`fail` inside becomes its hint, and any other exception
    (raised by the student's code) becomes a hint quoting the error's first line."""
    try:
        return check()
    except _Wrong as w:
        return w.feedback
    except Exception as e:  # the student's code failed: say how, never a traceback
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return hint(exercise, f"your code raised {type(e).__name__}" + (f": {first}" if first else ""),
                    "Run your answer's cell on its own and read the whole message: it names the "
                    "line and the variable.")


def need_function(exercise: str, f: Any, name: str) -> ReversibleFunction:
    """The student's answer must be a reversible function (a ``%%reversible`` ``def``)."""
    if not isinstance(f, ReversibleFunction):
        fail(exercise, f"`{name}` should be a reversible function, got {type(f).__name__}",
             "Define it in a `%%reversible` cell (or with `@reversible`), then run the check again.")
    return f


def show(v: Any) -> str:
    """A value as a hint quotes it: short, with enough digits to tell two floats apart."""
    if isinstance(v, np.ndarray):
        return np.array2string(v, precision=6, threshold=12)
    if isinstance(v, (float, np.floating)):
        text = f"{float(v):.10g}"
        return text if any(c in text for c in ".eni") else text + ".0"  # 2.0, not 2
    if isinstance(v, tuple):
        return "(" + ", ".join(show(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    return repr(v)


def close(got: Any, want: Any, rtol: float = 1e-7, atol: float = 1e-10) -> bool:
    """Equal as a check means it: exactly for ints and bools, within tolerance for floats."""
    if isinstance(want, tuple):
        return isinstance(got, tuple) and len(got) == len(want) and all(
            close(g, w, rtol, atol) for g, w in zip(got, want))
    try:
        g, w = np.asarray(got), np.asarray(want)
    except Exception:  # not array-like: compare as values
        return bool(got == want)
    if g.shape != w.shape:
        return False
    if w.dtype.kind in "biu" and g.dtype.kind in "biu":
        return bool(np.array_equal(g, w))
    return bool(np.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True))


def call(f: ReversibleFunction, *args: Any) -> tuple:
    """``f(*args)`` on copies, so that a check never changes the arrays it was given."""
    return f(*(copy_arg(a) for a in args))


def expect_outputs(exercise: str, f: ReversibleFunction, args: tuple, want: tuple,
                   what: str = "") -> None:
    """Fail with a hint naming the first argument whose final value is wrong."""
    got = call(f, *args)
    for name, g, w in zip(f.params, got, want):
        if not close(g, w):
            fail(exercise, f"{what or f.__name__ + show(args)}: `{name}` ends as {show(g)}, "
                           f"expected {show(w)}",
                 f"inputs: {', '.join(f'{p}={show(a)}' for p, a in zip(f.params, args))}")


def run_answer(exercise: str, f: ReversibleFunction, args: tuple, where: str, advice: str,
               at: Callable[[], str] | None = None) -> tuple:
    """``f(*args)`` on copies, for a check; a dirty ancilla becomes the hint every lesson
    gives for it (``where``: the inputs, as the hint names them; ``advice``: how to clean it
    up in this exercise; ``at``: a further place, such as the loop index, found on demand).
    Any other error goes on to :func:`attempt`, which quotes it."""
    from revbench.lang.errors import ReversibilityError

    try:
        return call(f, *args)
    except ReversibilityError as e:
        if not str(e).startswith("ancilla"):
            raise
        place = at() if at is not None else ""
        fail(exercise, f"{where}: `del {e.variable}` finds {e.variable} = {show(e.actual)}, not "
                       f"{show(e.expected)}{place}: the ancilla is dirty", advice)
        raise  # not reached: fail() raises
