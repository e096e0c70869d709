"""Lesson 06's exercise checks (``revbench.course.lesson06``): the reference solutions
pass, typical wrong answers fail with a hint that names the problem, the notebook's
skeletons get a hint (not an error), and the checks never change their inputs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from course_harness import assert_hint, load_solutions, wrong

import revbench
from revbench.course import lesson06 as check

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "06_workloads.ipynb"


@pytest.fixture(scope="module")
def solutions():
    return load_solutions("06")


def notebook_code(start: str) -> str:
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and start in cell.source:
            return cell.source
    raise AssertionError(f"no cell holds {start!r}")


def test_the_solutions_pass(solutions):
    fb = check.exercise_1(solutions.csr_sqnorm)   # Numba, as a teacher would run it
    assert fb.ok, fb.text
    fb = check.exercise_2(solutions.ba_jacobians, loop_seconds_per_obs=1e-4)
    assert fb.ok and "times faster than the loop" in fb.text, fb.text


def test_the_reference_blocks_are_the_dense_jacobian():
    data = check.ba_problem(12)
    blocks = check.reference_blocks(data)
    dense = revbench.workloads.ba.jacobian_numpy(data).toarray()
    i = 7
    cam, pt = data.obs[i]
    cols = [*range(11 * cam, 11 * cam + 11), *range(11 * data.n + 3 * pt, 11 * data.n + 3 * pt + 3),
            11 * data.n + 3 * data.m + i]
    assert np.array_equal(blocks[i], dense[2 * i:2 * i + 2, cols])


def test_exercise_1_wrong_answers():
    no_square = wrong("""
def csr_sqnorm(s, x, data, indices, indptr):
    for i in range(len(indptr) - 1):
        for p in range(indptr[i], indptr[i + 1]):
            s += data[p] * x[indices[p]]
""")
    assert_hint(check.exercise_1(no_square), "sum of A x, not of its squares")
    squares_products = wrong("""
def csr_sqnorm(s, x, data, indices, indptr):
    for i in range(len(indptr) - 1):
        for p in range(indptr[i], indptr[i + 1]):
            s += (data[p] * x[indices[p]]) ** 2
""")
    assert_hint(check.exercise_1(squares_products), "squares each product", "ROW's sum")
    dirty = wrong("""
def csr_sqnorm(s, x, data, indices, indptr):
    for i in range(len(indptr) - 1):
        t = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            t += data[p] * x[indices[p]]
        s += t * t
        del t
""")
    assert_hint(check.exercise_1(dirty), "`del t` finds t", "dirty", "uncompute")
    writes_x = wrong("""
def csr_sqnorm(s, x, data, indices, indptr):
    for i in range(len(indptr) - 1):
        with routine:
            t = 0.0
            for p in range(indptr[i], indptr[i + 1]):
                t += data[p] * x[indices[p]]
        s += t * t
        ~routine
    x *= 2.0
""")
    assert_hint(check.exercise_1(writes_x), "changes `x`")
    assert_hint(check.exercise_1(lambda s, x, d, i, p: None), "should be a reversible function")


def test_exercise_2_wrong_answers(solutions):
    jac = revbench.jacobian(solutions.ba_residual, outputs="r", wrt=("cam", "X", "w"),
                            batch=("r", "cam", "X", "w", "feat"))

    def no_gather(cams, X, w, feats, obs):
        p = len(w)
        return jac(np.zeros((p, 2)), cams[np.arange(p) % len(cams)], X[np.arange(p) % len(X)], w, feats)

    assert_hint(check.exercise_2(no_gather), "differs from the reference", "gather cams[obs[:, 0]]")

    def transposed(cams, X, w, feats, obs):
        J_cam, J_X, J_w = solutions.ba_jacobians(cams, X, w, feats, obs)
        return J_cam.transpose(0, 2, 1), J_X, J_w

    assert_hint(check.exercise_2(transposed), "J_cam has shape (300, 11, 2)", "(items, outputs, wrt)")

    def in_place(cams, X, w, feats, obs):
        w *= 2.0
        return solutions.ba_jacobians(cams, X, w, feats, obs)

    assert_hint(check.exercise_2(in_place), "changed its argument `w`")
    assert_hint(check.exercise_2(lambda *a: None), "returns None")


def test_the_skeletons_get_hints_not_errors():
    source = notebook_code("def csr_sqnorm(").split("\n", 1)[1]
    assert_hint(check.exercise_1(wrong(source)), "s grows by 0.0", "Row i's entries")
    ns = {"np": np}
    exec(notebook_code("def ba_jacobians("), ns)
    assert_hint(check.exercise_2(ns["ba_jacobians"]), "every Jacobian block is zero")
