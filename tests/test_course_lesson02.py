"""Lesson 02's exercise checks (``revbench.course.lesson02``): they pass the reference
solutions (``notebooks/solutions/lesson02.py``), fail typical wrong answers with a hint
that names the problem, give the notebook's committed skeletons a hint (not an error), and
never change the arrays they test with.

Wrong answers run on the Python backend (nothing to compile); the solutions, as a teacher
would import them, on Numba.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from course_harness import assert_hint, load_solutions, reversible_cell, wrong

import revbench
from revbench.course import lesson02 as check

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "02_reversible_programming.ipynb"


@pytest.fixture(scope="module")
def solutions():
    return load_solutions("02")


def notebook_cell(name: str) -> str:
    return reversible_cell(NOTEBOOK, name)


def test_the_solutions_pass(solutions):
    for ex, f in [(check.exercise_1, solutions.unscramble), (check.exercise_2, solutions.rms_into),
                  (check.exercise_3, solutions.fold), (check.exercise_4, solutions.grow)]:
        assert f.backend == "numba"
        fb = ex(f)
        assert fb.ok, fb.text
        assert "✔" in fb.text and "✔" in fb._repr_html_()


def test_the_notebook_shows_the_scramble_the_check_uses():
    assert notebook_cell("scramble").strip() == check.SCRAMBLE_SOURCE.strip()


@pytest.mark.parametrize("name, exercise, phrases", [
    ("unscramble", check.exercise_1, ("input 1", "`x` is", "OPPOSITE order")),
    ("rms_into", check.exercise_2, ("`del s` finds s = 25.0", "dirty", "undo the loop")),
    ("fold", check.exercise_3, ("x=-2.5 takes the branch", "postcondition `x < 0.0` is False")),
    ("grow", check.exercise_4, ("the loop runs 1 time", "`False` is False after an iteration")),
])
def test_the_committed_skeletons_get_a_hint(name, exercise, phrases):
    assert_hint(exercise(wrong(notebook_cell(name))), *phrases)


# -- exercise 1 -------------------------------------------------------------------------
def test_ex1_loop_body_in_the_original_order():
    f = wrong("""
def unscramble(x, y, k):
    y /= 3.0
    k ^= 6
    x[0], x[1] = x[1], x[0]
    for i in range(len(x)):
        y[i] -= x[i] * x[i]
        x[i] += 2.0 * y[i]
""")
    assert_hint(check.exercise_1(f), "input 1", "should be back at", "inside the loop body too")


def test_ex1_the_xor_not_undone():
    f = wrong("""
def unscramble(x, y, k):
    y /= 3.0
    x[0], x[1] = x[1], x[0]
    for i in range(len(x)):
        x[i] += 2.0 * y[i]
        y[i] -= x[i] * x[i]
""")
    assert_hint(check.exercise_1(f), "`k` is 5, it should be back at 3", "`k ^= 6` is its own inverse")


def test_ex1_calling_the_inverse_is_not_the_exercise():
    fns = revbench.define(check.SCRAMBLE_SOURCE + """
def unscramble(x, y, k):
    ~scramble(x, y, k)
""", backend="python")
    assert_hint(check.exercise_1(fns["unscramble"]), "write the inverse yourself")
    assert_hint(check.exercise_1(~fns["scramble"]), "write the inverse yourself")


def test_ex1_not_a_reversible_function_and_a_crash():
    assert_hint(check.exercise_1(lambda x, y, k: None), "should be a reversible function")
    f = wrong("""
def unscramble(x, y, k):
    x[7] += 1.0
""")
    assert_hint(check.exercise_1(f), "your code raised IndexError")
    f = wrong("""
def unscramble(x, y):
    pass
""")
    assert_hint(check.exercise_1(f), "it should take 3: (x, y, k)")


def test_the_checks_never_change_their_inputs():
    before = [tuple(np.copy(a) if isinstance(a, np.ndarray) else a for a in args)
              for args in check.SCRAMBLE_INPUTS]
    f = wrong("""
def unscramble(x, y, k):
    x *= 2.0
    y += 1.0
""")
    check.exercise_1(f)
    for args, saved in zip(check.SCRAMBLE_INPUTS, before):
        for a, b in zip(args, saved):
            assert np.array_equal(a, b)


# -- exercise 2 -------------------------------------------------------------------------
def test_ex2_uncomputed_before_use():
    f = wrong("""
def rms_into(r, x):
    s = 0.0
    for i in range(len(x)):
        s += x[i] * x[i]
    for i in range(len(x)):
        s -= x[i] * x[i]
    r += math.sqrt(s / len(x))
    del s
""")
    assert_hint(check.exercise_2(f), "r ends as 0.0, expected 3.5355", "uncompute ran before s was used")


def test_ex2_clean_but_the_wrong_value():
    f = wrong("""
def rms_into(r, x):
    with routine:
        s = 0.0
        for i in range(len(x)):
            s += x[i] * x[i]
    r += math.sqrt(s)
    ~routine
""")
    assert_hint(check.exercise_2(f), "r ends as 5.0, expected 3.5355", "sqrt(s / len(x))")


def test_ex2_a_half_uncompute_is_still_dirty():
    f = wrong("""
def rms_into(r, x):
    s = 0.0
    for i in range(len(x)):
        s += x[i] * x[i]
    r += math.sqrt(s / len(x))
    for i in range(len(x)):
        s -= x[i]
    del s
""")
    assert_hint(check.exercise_2(f), "`del s` finds s = 18.0, not 0.0")


# -- exercise 3 -------------------------------------------------------------------------
def test_ex3_a_postcondition_true_when_the_branch_did_not_run():
    f = wrong("""
def fold(x, flipped):
    if (x < 0.0, x > 0.0):
        x *= -1.0
        flipped ^= True
""")
    assert_hint(check.exercise_3(f), "x=3.0 does not take the branch",
                "postcondition `x > 0.0` is True afterwards")


def test_ex3_the_flag_never_set():
    f = wrong("""
def fold(x, flipped):
    if (x < 0.0, flipped):
        x *= -1.0
""")
    assert_hint(check.exercise_3(f), "x=-2.5 takes the branch", "postcondition `flipped` is False")


def test_ex3_x_equal_zero_taken_as_negative():
    f = wrong("""
def fold(x, flipped):
    if (x <= 0.0, flipped):
        x *= -1.0
        flipped ^= True
""")
    assert_hint(check.exercise_3(f), "fold(0.0, False) gives (-0.0, True), expected (0.0, False)")


# -- exercise 4 -------------------------------------------------------------------------
def test_ex4_the_loop_condition_negated():
    f = wrong("""
def grow(balance, target, years):
    while (balance < target, balance >= target):
        balance *= 1.05
        years += 1
""")
    assert_hint(check.exercise_4(f), "the loop runs 0 times", "already True when the loop starts")


def test_ex4_a_counter_true_at_the_start():
    f = wrong("""
def grow(balance, target, years):
    while (balance < target, years >= 0):
        balance *= 1.05
        years += 1
""")
    assert_hint(check.exercise_4(f), "`years >= 0` is already True", "False before the first iteration")


def test_ex4_the_counter_not_counted():
    f = wrong("""
def grow(balance, target, years):
    while (balance < target, years > 0):
        balance *= 1.05
""")
    assert_hint(check.exercise_4(f), "the loop runs 1 time", "`years > 0` is False after an iteration",
                "A counter")
