"""Lesson 05's exercise checks (``revbench.course.lesson05``): the counts they compare
with are those a real ``TimeLoop`` run reports, the reference solutions pass, typical
wrong answers fail with a hint that names the rule, and the notebook's skeletons get a
hint, not an error.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from course_harness import assert_hint, load_solutions

from revbench import reversible
from revbench.checkpoint import Bennett, Periodic, Reverse, Revolve, StoreAll, TimeLoop
from revbench.course import lesson05 as check

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "05_space_time.ipynb"


@pytest.fixture(scope="module")
def solutions():
    return load_solutions("05")


def test_plan_counts_are_what_a_run_reports():
    @reversible(backend="python")
    def step(u_new, u, t, dt):
        for i in range(len(u)):
            u_new[i] += u[i] + dt * u[i]

    @reversible(backend="python")
    def loss(out, u, dt):
        for i in range(len(u)):
            out += u[i] * u[i]

    loop = TimeLoop(step, n_steps=20, loss=loss)
    for strategy in (StoreAll(), Periodic(every=4), Revolve(snapshots=3), Bennett(k=2)):
        loop.value_and_grad(np.ones(2), 0.1, strategy=strategy)
        c = check.plan_counts(strategy, 20)
        s = loop.stats
        assert (c.forward_steps, c.inverse_steps, c.peak_states) == \
               (s.forward_steps, s.inverse_steps, s.peak_states), strategy


def test_the_solutions_pass(solutions):
    assert check.exercise_1(solutions.prediction).ok
    assert check.exercise_2(solutions.one_snapshot_forward).ok
    assert check.exercise_3(solutions.strategy).ok


def test_exercise_1_wrong_answers(solutions):
    right = solutions.prediction
    assert_hint(check.exercise_1({**right, "StoreAll states": 100}), "100 is too few", "s_0 is one too")
    assert_hint(check.exercise_1({**right, "Periodic forward steps": 200}), "200 is too many",
                "9 steps a segment")
    assert_hint(check.exercise_1({**right, "Periodic states": 10}), "10 is too few", "checkpoints")
    assert_hint(check.exercise_1({**right, "Periodic states": 2.5}), "whole number")


def test_exercise_2_wrong_answers():
    assert_hint(check.exercise_2(lambda T: T * T), "for T = 2", "s_0 needs no recomputation")
    assert_hint(check.exercise_2(lambda T: T * (T - 1) // 2), "for T = 1")
    assert_hint(check.exercise_2(lambda T, c: T), "function of one argument")


def test_exercise_3_wrong_answers():
    assert_hint(check.exercise_3(StoreAll()), "over the budget of 12")
    assert_hint(check.exercise_3(Revolve(snapshots=11)), "13 states", "over the budget")
    assert_hint(check.exercise_3(Revolve(snapshots=4)), "room for more snapshots")
    assert_hint(check.exercise_3(Bennett(k=2)), "inverse steps", "uncomputing")
    assert_hint(check.exercise_3(Reverse()), "in-place step")
    assert_hint(check.exercise_3(Revolve), "is the class")


def test_the_skeletons_get_hints_not_errors():
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    ns = {"Periodic": Periodic, "Revolve": Revolve, "StoreAll": StoreAll, "Bennett": Bennett}
    for cell in nb.cells:
        starts = ("prediction =", "strategy =", "def one_snapshot")
        if cell.cell_type == "code" and cell.source.startswith(starts):
            exec(cell.source, ns)
    assert_hint(check.exercise_1(ns["prediction"]), "still None")
    assert_hint(check.exercise_2(ns["one_snapshot_forward"]), "for T = 2")
    assert_hint(check.exercise_3(ns["strategy"]), "over the budget")
