"""Lesson 01's exercise checks (``revbench.course.lesson01``): they pass the reference
solutions (``notebooks/solutions/lesson01.py``), fail typical wrong answers with a hint that
names the problem, and give the tour's committed skeletons a hint, not an error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from course_harness import assert_hint, load_solutions

import revbench
from revbench.course import lesson01 as check

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "01_tour.ipynb"


@pytest.fixture(scope="module")
def solutions():
    return load_solutions("01")


def wrong(body: str):
    """``square_into`` with this body: a student's answer, on the Python backend."""
    return revbench.define(f"def square_into(y, x):\n    {body}\n", {"np": np},
                           backend="python")["square_into"]


def test_the_solutions_pass(solutions):
    for fb in (check.exercise_1(solutions.square_into), check.exercise_2(solutions.dy_dx)):
        assert fb.ok, fb.text
        assert fb.text.startswith("✔") and "rb-feedback-ok" in fb._repr_html_()


@pytest.mark.parametrize(("body", "phrases"), [
    ("pass", ("`y` did not change", "y += ...")),
    ("y -= x * x", ("gives y = -9.0, expected 9.0", "sign")),
    ("y += x * x * x", ("gives y = 27.0, expected 9.0", "y += x * x")),
    ("y += x * x\n    x += 1.0", ("changed `x` to 4.0",)),
])
def test_exercise_1_wrong_answers(body, phrases):
    assert_hint(check.exercise_1(wrong(body)), "Exercise 1.1", *phrases)


def test_exercise_1_needs_a_reversible_function():
    assert_hint(check.exercise_1(lambda y, x: (y + x * x, x)), "should be a reversible function")


@pytest.mark.parametrize(("answer", "phrases"), [
    (None, ("still None",)),
    ((1.0, -8.0), ("whole tuple", "[1]")),
    (1.0, ("dy/dy",)),
    (5.25, ("value of y",)),           # poly(0.0, -1.5)
    (13.0, ("another x",)),            # the tour's x = 2
    (8.0, ("is not 8.0",)),            # the sign lost
    (np.array([-8.0]), ("should be a number",)),
])
def test_exercise_2_wrong_answers(answer, phrases):
    assert_hint(check.exercise_2(answer), "Exercise 1.2", *phrases)


def test_exercise_2_takes_numpy_floats():
    assert check.exercise_2(np.float64(-8.0)).ok


def test_the_tours_skeletons_get_hints_not_errors():
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    cells = {c.id: c.source for c in nb.cells}
    body = cells["lesson01-ex1-answer"].split("\n", 1)[1]
    f = revbench.define(body, backend="python")["square_into"]
    assert_hint(check.exercise_1(f), "did not change")
    ns: dict = {}
    exec(cells["lesson01-ex2-answer"], ns)
    assert_hint(check.exercise_2(ns["dy_dx"]), "still None")
    assert cells["lesson01-ex1-check"] == "check.exercise_1(square_into)"
    assert cells["lesson01-ex2-check"] == "check.exercise_2(dy_dx)"
