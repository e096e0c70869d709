"""Lesson 03's exercise checks (``revbench.course.lesson03``): they pass the reference
solutions (``notebooks/solutions/lesson03.py``), fail typical wrong answers with a hint
that names the rule or the value that is wrong, and give the notebook's committed
skeletons a hint, not an error.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from course_harness import assert_hint, cell_with, code_cells, load_solutions, wrong

from revbench.course import lesson03 as check

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "03_ad_by_uncomputation.ipynb"
C, A, B = math.cos(1.0), check.A, check.B   # t = a * b = 1


@pytest.fixture(scope="module")
def solutions():
    return load_solutions("03")


def notebook_cells() -> list[str]:
    return code_cells(NOTEBOOK)


def notebook_cell(needle: str) -> str:
    return cell_with(NOTEBOOK, needle)


def test_the_solutions_pass(solutions):
    assert solutions.soft_norm.backend == "numba"
    for fb in [check.exercise_1(solutions.dy_da, solutions.dy_db),
               check.exercise_2(solutions.tape_floats),
               check.exercise_3(solutions.soft_norm),
               check.exercise_4(solutions.g)]:
        assert fb.ok, fb.text


def test_the_notebook_shows_the_programs_the_checks_use():
    assert notebook_cell("def prog(").strip() == check.PROGRAM_SOURCE.strip()
    assert notebook_cell("def re_square(").strip() == check.COMPLEX_SOURCE.strip()
    ns: dict = {"math": math, "np": np}
    exec(notebook_cell("def soft_norm_py("), ns)  # also prints 0.8333...
    x = np.array([-1.0, 0.5, 2.0])
    assert ns["soft_norm_py"](x) == check.soft_norm_py(x)


def test_the_committed_skeletons_get_a_hint():
    ns: dict = {"np": np}
    exec(notebook_cell("dy_da = "), ns)
    assert_hint(check.exercise_1(ns["dy_da"], ns["dy_db"]), "placeholder")
    exec(notebook_cell("def tape_floats("), ns)
    assert_hint(check.exercise_2(ns["tape_floats"]), "the tape holds 90 floats, your formula gives 0")
    assert_hint(check.exercise_3(wrong(notebook_cell("def soft_norm("))), "`del s` finds s = 25.0", "dirty")
    exec(notebook_cell("g = 0j"), ns)
    assert_hint(check.exercise_4(ns["g"]), "placeholder")


# -- exercise 1 -------------------------------------------------------------------------
def test_ex1_the_product_rule_half_done():
    assert_hint(check.exercise_1(B * C + A * B, A * C + A * A), "dy/da", "product rule")


def test_ex1_the_chain_rule_inner_factor_missed():
    assert_hint(check.exercise_1(B * C + 2 * A * B, C + A * A), "dy/db", "chain rule", "dt/db = a")
    assert_hint(check.exercise_1(C + 2 * A * B, A * C + A * A), "dy/da", "chain rule", "dt/da = b")


def test_ex1_sin_differentiated_wrong_and_a_term_dropped():
    assert_hint(check.exercise_1(B * math.sin(1.0) + 2 * A * B, 0.0), "dy/da", "cos(t), not sin(t)")
    assert_hint(check.exercise_1(B * C + 2 * A * B, A * C), "dy/db", "a·t depends on b through t")


def test_ex1_not_numbers():
    assert_hint(check.exercise_1("3.08", 0.5), "`dy_da` should be a number")


# -- exercise 2 -------------------------------------------------------------------------
@pytest.mark.parametrize("formula, phrase", [
    (lambda T, n: 2 * n * T, "you left out E"),
    (lambda T, n: n * T, "p[i] AND q[i]"),
    (lambda T, n: 2 * n + 1, "that is one step"),
    (lambda T, n: 3 * T, "arrays of n elements"),
    (lambda T, n: T * n * n, "count per step"),
    (lambda T, n: "many", "not a number"),
])
def test_ex2_wrong_counts(formula, phrase):
    assert_hint(check.exercise_2(formula), phrase)


# -- exercise 3 -------------------------------------------------------------------------
def test_ex3_clean_but_the_norm_not_soft():
    f = wrong("""
def soft_norm(L, x):
    with routine:
        s = 0.0
        for i in range(len(x)):
            s += x[i] * x[i]
    L += math.sqrt(s)
    ~routine
""")
    assert_hint(check.exercise_3(f), "L ends as 5.0, expected 0.8333")


def test_ex3_the_sqrt_ancilla_left_dirty():
    f = wrong("""
def soft_norm(L, x):
    with routine:
        s = 0.0
        for i in range(len(x)):
            s += x[i] * x[i]
    r = 0.0
    r += math.sqrt(s)
    L += r / (1.0 + r)
    del r
    ~routine
""")
    assert_hint(check.exercise_3(f), "`del r` finds r = 5.0", "dirty")


def test_ex3_a_plain_python_function_and_x_changed():
    assert_hint(check.exercise_3(lambda L, x: None), "should be a reversible function")
    f = wrong("""
def soft_norm(L, x):
    L += np.sqrt(np.sum(x * x)) / (1.0 + np.sqrt(np.sum(x * x)))
    x *= 2.0
""")
    assert_hint(check.exercise_3(f), "x ends as [6. 8.]", "leave x as it was")


def test_ex3_another_right_answer():
    f = wrong("""
def soft_norm(L, x):
    s = 0.0
    s += np.sum(x * x)
    L += math.sqrt(s) / (1.0 + math.sqrt(s))
    s -= np.sum(x * x)
    del s
""")
    assert check.exercise_3(f).ok


# -- exercise 4 -------------------------------------------------------------------------
@pytest.mark.parametrize("g, phrase", [
    (2 * check.Z, "complex derivative"),
    (2.0, "depends on y too"),
    (2 + 4j, "complex derivative"),
    (-2 - 4j, "sign of the y part"),
    (1 + 1j, "write L in x = Re(z)"),
    ("2-4j", "should be a number"),
])
def test_ex4_wrong_gradients(g, phrase):
    assert_hint(check.exercise_4(g), phrase)
