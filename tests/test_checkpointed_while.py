"""Loops whose length is known only when they end: ``while checkpointed(condition,
Online(snapshots=c), new=..., old=..., max_steps=...)`` and the online schedule behind it
(``docs/checkpointing.md``, "Loops of unknown length").

The schedule is checked on symbols (every action finds its states; its forward steps are
exactly its rule's count, and close to Revolve's optimum for the same length known
ahead); the statement on both backends: a falling body stopped by the floor, against the
same loop run in NumPy, its inverse, finite differences and the same number of steps
under a ``for`` loop with every state kept; a condition false on entry; a loop that never
ends (stopped at ``max_steps``, nothing changed); every kind of bad loop refused where it
is written.
"""

from __future__ import annotations

import numpy as np
import pytest

import revbench
from revbench import ReversibilityError, ReversibilitySyntaxError
from revbench.checkpoint import (
    Online,
    Reverse,
    Revolve,
    StoreAll,
    TimeLoop,
    actions,
    checkpointed,
)
from revbench.lang.ir import DEFAULT_MAX_STEPS

optimal_steps_binomial = pytest.importorskip("checkpoint_schedules").optimal_steps_binomial

NS = {"Online": Online, "Revolve": Revolve, "StoreAll": StoreAll, "Reverse": Reverse,
      "checkpointed": checkpointed}

STEP = """
def fall(s1, s0, h):
    s1[0] += s0[0] + h * s0[1]
    s1[1] += s0[1] - h * (9.81 + 0.1 * s0[1] * abs(s0[1]))
"""

DROP = STEP + """
def drop(out, s, s0, h):
    while checkpointed(s0[0] > floor, {strategy}, new=s, old=s0{limit}):
        fall(s, s0, h)
    out += s[1] * s[1]
"""


def drop_source(strategy: str = "Online(snapshots=4)", limit: str = "") -> str:
    return DROP.format(strategy=strategy, limit=f", max_steps={limit}" if limit else "")


def numpy_drop(s0: np.ndarray, h: float, floor: float) -> tuple[np.ndarray, int]:
    s = s0.copy()
    n = 0
    while s[0] > floor:
        s = np.array([s[0] + h * s[1], s[1] - h * (9.81 + 0.1 * s[1] * abs(s[1]))])
        n += 1
    return s, n


S0 = np.array([2.0, 0.5])


# --------------------------------------------------------------------------- #
# The online schedule, on symbols
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("c", [3, 4, 5, 8, 20])
def test_online_schedule_is_right_and_makes_its_rules_count(c):
    assert list(actions.online_known(0, c)) == []
    for n in [*range(1, 70), 100, 257, 1000]:
        counts = actions.simulate(actions.online_known(n, c), n, actions.online_slots(n, c))
        assert counts["forward_steps"] == actions.online_bound(n, c), (n, c)
        assert counts["reverse_steps"] == n and counts["inverse_steps"] == 0
        assert counts["peak_states"] <= actions.online_peak(n, c) <= c + 2
        if n < c:  # every state kept: each step runs once
            assert counts["forward_steps"] == n


@pytest.mark.parametrize("n,c,ratio", [(100, 10, 1.15), (1000, 10, 1.15), (10**4, 20, 1.1),
                                       (10**5, 20, 1.05), (10**6, 30, 1.05), (10**4, 5, 1.4)])
def test_online_costs_little_more_than_revolve_knowing_the_length(n, c, ratio):
    """Placed without knowing n, c snapshots cost a few per cent more forward steps than
    Griewank's optimum for n known ahead (``n + extra_steps``: Revolve's count, checked
    against checkpoint_schedules in test_checkpointed.py); the fewer the snapshots, the
    more."""
    optimum = n + actions.extra_steps(n, c)
    assert optimum <= actions.online_bound(n, c) <= ratio * optimum


def test_online_schedule_asks_before_each_step_and_stops_when_told():
    """The while loop's kernel answers ASK; the schedule it then runs is the one for the
    length it found."""
    for n in (0, 1, 5, 37):
        ended = np.zeros(1, np.int64)
        seen = []
        for op, i, a, b in actions.online_actions(-1, 5, ended):
            if op == actions.ASK:
                if i == n:
                    ended[0] = 1
                continue
            seen.append((op, i, a, b))
        assert seen == list(actions.online_known(n, 5))


def test_compiled_online_schedule_yields_the_same_actions():
    from revbench.backends.numba_backend import helper

    for n in (0, 3, 37, 500):
        assert list(helper(actions.online_known)(n, 6)) == list(actions.online_known(n, 6))


# --------------------------------------------------------------------------- #
# The while statement
# --------------------------------------------------------------------------- #
def test_the_loop_runs_until_the_condition_fails(make):
    f = make(drop_source(), namespace={**NS, "floor": 0.0})
    s_end, n = numpy_drop(S0, 0.01, 0.0)
    out, s, s0, h = f(0.0, np.zeros(2), S0.copy(), 0.01)
    assert n > 50
    np.testing.assert_allclose(s, s_end, rtol=1e-14)
    assert out == pytest.approx(s_end[1] ** 2, rel=1e-14)
    np.testing.assert_array_equal(s0, S0)  # the old state is only read
    back = (~f)(out, s, s0, h)
    assert back[0] == pytest.approx(0.0, abs=1e-12)
    np.testing.assert_allclose(back[1], 0.0, atol=1e-12)


@pytest.mark.parametrize("strategy", ["Online(snapshots=3)", "Online(snapshots=5)",
                                      "Online(snapshots=40)"])
def test_gradient_is_the_stored_trajectorys(make, strategy):
    """The gradient of the while loop is that of the same n steps with every state kept
    (the condition is piecewise constant: the step count does not move with the inputs)."""
    f = make(drop_source(strategy), namespace={**NS, "floor": 0.0})
    _, n = numpy_drop(S0, 0.01, 0.0)
    g = make(STEP + """
def steps(out, s, s0, h, n):
    for t in checkpointed(range(n), StoreAll(), new=s, old=s0):
        fall(s, s0, h)
    out += s[1] * s[1]
""", namespace=NS)
    got = revbench.value_and_grad(f, loss="out")(0.0, np.zeros(2), S0.copy(), 0.01)
    want = revbench.value_and_grad(g, loss="out")(0.0, np.zeros(2), S0.copy(), 0.01, n)
    assert got[0][0] == pytest.approx(want[0][0], rel=1e-14)
    np.testing.assert_allclose(got[1][2], want[1][2], rtol=1e-12)
    assert got[1][3] == pytest.approx(want[1][3], rel=1e-12)


def test_gradient_matches_finite_differences(make):
    f = make(drop_source(), namespace={**NS, "floor": 0.0})
    g = revbench.grad(f, loss="out")(0.0, np.zeros(2), S0.copy(), 0.01)
    eps = 1e-7

    def value(v0, h):
        return f(0.0, np.zeros(2), np.array([2.0, v0]), h)[0]

    assert g[2][1] == pytest.approx((value(0.5 + eps, 0.01) - value(0.5 - eps, 0.01)) / (2 * eps),
                                    rel=1e-6)
    assert g[3] == pytest.approx((value(0.5, 0.01 + eps) - value(0.5, 0.01 - eps)) / (2 * eps),
                                 rel=1e-6)


def test_a_condition_false_on_entry_runs_no_step(make):
    f = make(drop_source(), namespace={**NS, "floor": 5.0})
    s = f(0.0, np.zeros(2), S0.copy(), 0.01)[1]
    np.testing.assert_array_equal(s, S0)
    g = revbench.grad(f, loss="out")(0.0, np.zeros(2), S0.copy(), 0.01)
    np.testing.assert_array_equal(g[2], [0.0, 2 * S0[1]])
    assert g[3] == 0.0


def test_a_loop_that_never_ends_stops_at_max_steps_and_changes_nothing(make):
    f = make(drop_source(limit="300"), namespace={**NS, "floor": -1e300})
    s, s0 = np.zeros(2), S0.copy()
    for run in (f, revbench.grad(f, loss="out")):
        with pytest.raises(ReversibilityError, match="reached its max_steps") as err:
            run(0.0, s, s0, 0.01)
        assert "max_steps=300" in str(err.value) and "raise the limit" in str(err.value)
        assert err.value.lineno == 7  # the loop's line
        np.testing.assert_array_equal(s, 0.0)
        np.testing.assert_array_equal(s0, S0)


def test_a_max_steps_given_at_run_time_is_checked_there(make):
    """``max_steps=m`` with ``m`` an argument: a negative one is refused when the loop runs
    (not taken as 0 steps), a float one when it is typed, each naming max_steps; nothing
    is changed."""
    src = STEP + """
def drop(out, s, s0, h, m):
    while checkpointed(s0[0] > floor, Online(snapshots=4), new=s, old=s0, max_steps=m):
        fall(s, s0, h)
    out += s[1] * s[1]
"""
    f = make(src, namespace={**NS, "floor": 0.0})
    s, s0 = np.zeros(2), S0.copy()
    for run in (f, revbench.grad(f, loss="out", wrt="s0")):
        with pytest.raises(ReversibilityError, match=r"max_steps .* must be an int >= 0") as err:
            run(0.0, s, s0, 0.01, -1)
        assert "got -1" in str(err.value) and "_loop" not in str(err.value)
        np.testing.assert_array_equal(s, 0.0)
        np.testing.assert_array_equal(s0, S0)
    with pytest.raises(revbench.ReversibilityTypeError, match=r"max_steps .* takes an int"):
        f(0.0, s, s0, 0.01, 5.0)


def test_the_default_step_limit_is_documented():
    text = open("docs/checkpointing.md").read()
    assert f"{DEFAULT_MAX_STEPS:_}" in text


def test_online_in_a_for_loop_and_in_a_time_loop(make):
    """Online(c) also serves loops of known length, with the same gradient."""
    src = STEP + """
def steps(out, s, s0, h, n):
    for t in checkpointed(range(n), {}, new=s, old=s0):
        fall(s, s0, h)
    out += s[1] * s[1]
"""
    f = make(src.format("Online(snapshots=4)"), namespace=NS)
    g = make(src.format("StoreAll()"), namespace=NS)
    args = (0.0, np.zeros(2), S0.copy(), 0.01, 77)
    a = revbench.value_and_grad(f, loss="out")(*args)
    b = revbench.value_and_grad(g, loss="out")(*args)
    np.testing.assert_allclose(a[1][2], b[1][2], rtol=1e-12)
    fns = make(STEP + """
def fall_t(s1, s0, t, h):
    fall(s1, s0, h)

def speed2(out, s, h):
    out += s[1] * s[1]
""", all=True, namespace=NS)
    loop = TimeLoop(fns["fall_t"], 77, loss=fns["speed2"])
    ref = loop.value_and_grad(S0.copy(), 0.01, strategy=StoreAll())
    got = loop.value_and_grad(S0.copy(), 0.01, strategy=Online(snapshots=4))
    assert got[0] == pytest.approx(ref[0], rel=1e-14)
    np.testing.assert_allclose(got[1][0], ref[1][0], rtol=1e-12)
    assert loop.stats.forward_steps == actions.online_bound(77, 4)


def test_reverse_serves_the_reversible_while(make):
    """``while checkpointed((condition, postcondition), Reverse())`` is the language's
    own reversible while: run backwards, no state kept."""
    f = make("""
def count(out, x, k):
    while checkpointed((x < 10.0, k > 0), Reverse()):
        x += 1.5
        k += 1
    out += x * x
""", namespace=NS)
    out, x, k = f(0.0, 1.0, 0)
    assert (x, k) == (10.0, 6)
    assert (~f)(out, x, k) == (0.0, 1.0, 0)
    assert revbench.grad(f, loss="out")(0.0, 1.0, 0)[1] == pytest.approx(2 * 10.0)


@pytest.mark.parametrize("head,message", [
    ("while checkpointed(s0[0] > 0, Revolve(snapshots=4), new=s, old=s0):",
     "known only when it ends: use Online"),
    ("while checkpointed(s[0] > 0, Online(snapshots=4), new=s, old=s0):",
     "the condition reads `s`, the new state"),
    ("while checkpointed((s0[0] > 0, s0[0] < 0), Online(snapshots=4), new=s, old=s0):",
     "needs no postcondition"),
    ("while checkpointed(s0[0] > 0, Online(snapshots=4), new=s, old=s0, max_steps=-1):",
     "max_steps must be an int >= 0"),
    ("while checkpointed(s0[0] > 0, Online(snapshots=4), new=s, old=s0, steps=3):",
     "no keyword `steps`"),
    ("while checkpointed(s0[0] > 0, Reverse()):", "needs a postcondition"),
    ("while checkpointed((s0[0] > 0, s0[0] < 0), Reverse(), max_steps=5):",
     "drop `max_steps=`"),
    ("while checkpointed(s0[0] > 0, Online(snapshots=2), new=s, old=s0):",
     r"not valid: Online\(snapshots=...\) must be an int >= 3"),
    ("while checkpointed(s0[0] > 0, Online(snapshots=4)):", "add `new=` and `old=`"),
])
def test_bad_while_loops_are_refused_at_their_line(make, head, message):
    src = STEP + f"\ndef bad(out, s, s0, h):\n    {head}\n        fall(s, s0, h)\n"
    with pytest.raises(ReversibilitySyntaxError, match=message) as err:
        make(src, namespace=NS)
    assert err.value.lineno == 7
