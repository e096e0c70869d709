"""Lesson 04's exercise checks (``revbench.course.lesson04``): they pass the reference
solutions, fail typical wrong answers with a hint that names the problem, give the
notebook's committed skeletons a hint (not an error), and never change the arrays they
test with.  The facts the checks compare with are read off a real trace.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from course_harness import assert_hint, load_solutions, reversible_cell, wrong

import revbench
from revbench.course import lesson04 as check

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "04_debugger.ipynb"


@pytest.fixture(scope="module")
def solutions():
    return load_solutions("04")


def notebook_cell(name: str) -> str:
    return reversible_cell(NOTEBOOK, name)


def test_the_solutions_pass(solutions):
    assert check.exercise_1(solutions.answer_1).ok
    assert check.exercise_2(solutions.answer_2).ok
    fb = check.exercise_3(solutions.kinetic_fixed)  # Numba, as a teacher would run it
    assert fb.ok, fb.text


def test_the_notebook_shows_the_checks_programs():
    assert notebook_cell("kinetic").strip() == check.KINETIC_SOURCE.strip()
    assert notebook_cell("chain").strip() == check.CHAIN_SOURCE.strip()


def test_facts_come_from_the_trace():
    t = revbench.trace(check._program("kinetic"), *check.KINETIC_ARGS)
    facts = check.failure_facts(t)
    assert facts == {"i": 2, "ancilla": "t", "value": pytest.approx(0.5 ** 2 - 0.35 ** 2),
                     "culprit": "v[i] -= dt * x[i]"}
    clean = revbench.trace(check._program("kinetic"), 0.0, np.zeros(2), np.ones(2), 0.1)
    with pytest.raises(ValueError, match="ran clean"):
        check.failure_facts(clean)


def test_exercise_1_wrong_answers():
    right = {"i": 2, "ancilla": "t", "value": 0.1275, "culprit": "v[i]-=dt*x[i]"}
    assert check.exercise_1(right).ok  # spacing of the statement does not matter
    assert_hint(check.exercise_1({**right, "i": 0}), "at i = 0 the run does not fail yet", "x[0] = 0.0")
    assert_hint(check.exercise_1({**right, "i": 3}), "never reaches i = 3")
    assert_hint(check.exercise_1({**right, "value": 0.0}), "t is not 0.0 when it is freed")
    assert_hint(check.exercise_1({**right, "culprit": "t -= v[i] * v[i]"}),
                "is not what made t dirty", "writes v[i]")
    assert_hint(check.exercise_1([2, "t"]), "should be a dict")


def test_exercise_2_wrong_answers():
    right = {"first": 1, "after_first": [0.0, 3.0, 2.0], "final": [2.0, 4.0, 2.0]}
    assert_hint(check.exercise_2({**right, "first": 0}), "does not start at i = 0", "last index down")
    assert_hint(check.exercise_2({**right, "after_first": [2.0, 1.0, 0.0]}),
                "after the backward step of i = 1")
    assert_hint(check.exercise_2({**right, "final": [2.0, 3.0, 2.0]}), "accumulate")
    assert_hint(check.exercise_2({**right, "final": [2.0, 4.0]}), "an array of 3 numbers")


def test_exercise_3_wrong_answers():
    removed_update = wrong("""
def kinetic_fixed(e, x, v, dt):
    for i in range(len(x)):
        t = 0.0
        t += v[i] * v[i]
        e += 0.5 * t
        t -= v[i] * v[i]
        del t
""")
    assert_hint(check.exercise_3(removed_update), "`v` ends as", "v must still move")
    new_velocity_energy = wrong("""
def kinetic_fixed(e, x, v, dt):
    for i in range(len(x)):
        v[i] -= dt * x[i]
        t = 0.0
        t += v[i] * v[i]
        e += 0.5 * t
        t -= v[i] * v[i]
        del t
""")
    assert_hint(check.exercise_3(new_velocity_energy), "`e` ends as", "BEFORE the update")
    assert_hint(check.exercise_3(check._program("chain")), "takes (y, x)")
    assert_hint(check.exercise_3(lambda e, x, v, dt: None), "should be a reversible function")


def test_the_skeletons_get_hints_not_errors():
    assert_hint(check.exercise_1({"i": None, "ancilla": None, "value": None, "culprit": None}),
                "'i' is still None")
    assert_hint(check.exercise_2({"first": None, "after_first": None, "final": None}),
                "'first' is still None")
    skeleton = revbench.define(notebook_cell("kinetic_fixed"), {"np": np}, backend="python")
    assert_hint(check.exercise_3(skeleton["kinetic_fixed"]), "at i = 2", "the ancilla is dirty")


def test_checks_do_not_change_the_arrays(solutions):
    answer = {k: (np.array(v) if isinstance(v, np.ndarray) else v)
              for k, v in solutions.answer_2.items()}
    check.exercise_2(answer)
    assert np.array_equal(answer["after_first"], [0.0, 3.0, 2.0])
    args = [a.copy() if isinstance(a, np.ndarray) else a for a in check.KINETIC_ARGS]
    check.exercise_1(solutions.answer_1)
    for a, b in zip(args, check.KINETIC_ARGS):
        assert np.array_equal(a, b)
