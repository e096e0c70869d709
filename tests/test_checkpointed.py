"""Checkpointed loops inside reversible code: ``for t in checkpointed(range(n), strategy,
new=..., old=...)`` (``docs/checkpointing.md``, "Inside reversible code").

The schedules (:mod:`revbench.checkpoint.actions`) are checked on symbols -- every action
finds the states it needs, Revolve's forward steps are Griewank's optimum -- then the loop
statement on both backends: its value, inverse and gradient against the same loop unrolled
with every state stored, against finite differences, nested two levels deep, called from
other functions, and every kind of bad input.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import revbench
from revbench import ReversibilityError, ReversibilitySyntaxError, ReversibilityTypeError
from revbench.checkpoint import Bennett, Periodic, Reverse, Revolve, StoreAll, actions

optimal_steps_binomial = pytest.importorskip("checkpoint_schedules").optimal_steps_binomial

NS = {"Revolve": Revolve, "StoreAll": StoreAll, "Periodic": Periodic, "Reverse": Reverse,
      "Bennett": Bennett, "checkpointed": revbench.checkpoint.checkpointed}

STEP = """
def step(y_new, y, t, h):
    for i in range(len(y)):
        y_new[i] += y[i] + h * np.sin(y[i] + 0.1 * t)
"""

UNROLLED = STEP + """
def step_k(y_new, y, t, h):
    step(y_new, y, t, h)

def unrolled(out, ys, h, n):
    for t in range(n):
        k = t
        step_k(ys[t + 1], ys[t], k, h)
        del k
    for i in range(ys.shape[1]):
        out += ys[n, i] * ys[n, i]
"""


def looped(strategy: str, lo: str = "", by: str = "") -> str:
    bounds = f"{lo + ', ' if lo else ''}n{', ' + by if by else ''}"
    return STEP + f"""
def solve(out, yT, y0, h, n):
    for t in checkpointed(range({bounds}), {strategy}, new=yT, old=y0):
        step(yT, y0, t, h)
    for i in range(len(yT)):
        out += yT[i] * yT[i]
"""


Y0 = np.array([0.3, -0.5, 1.0, 0.25])

# --------------------------------------------------------------------------- #
# The schedules, on symbols
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13, 40, 101])
@pytest.mark.parametrize("c", [1, 2, 3, 5, 9])
def test_revolve_makes_the_fewest_forward_steps(n, c):
    counts = actions.simulate(actions.revolve_actions(n, c), n, actions.revolve_slots(n, c))
    want = optimal_steps_binomial(n, min(c, n - 1)) if n > 1 else 1
    assert counts["forward_steps"] == want
    assert counts["reverse_steps"] == n
    assert counts["peak_states"] == actions.revolve_peak(n, c) == actions.revolve_slots(n, c)


@pytest.mark.parametrize("n,c", [(1000, 10), (10**5, 20), (10**6, 4)])
def test_extra_steps_is_griewanks_formula(n, c):
    r = next(r for r in range(n + 1) if math.comb(c + r, c) >= n)
    assert actions.extra_steps(n, c) == r * n - math.comb(c + r, c + 1)


@pytest.mark.parametrize("n", [1, 2, 7, 10, 23])
@pytest.mark.parametrize("k", [1, 2, 3, 10, 30])
def test_periodic_and_store_all_schedules_are_consistent(n, k):
    p = actions.simulate(actions.periodic_actions(n, k), n, actions.periodic_slots(n, k))
    q = -(-n // k)
    assert p["forward_steps"] == 2 * n - q and p["reverse_steps"] == n
    assert p["peak_states"] == actions.periodic_peak(n, k) <= actions.periodic_slots(n, k)
    s = actions.simulate(actions.store_all_actions(n, 0), n, actions.store_all_slots(n, 0))
    assert s == {"forward_steps": n, "inverse_steps": 0, "reverse_steps": n,
                 "peak_states": n + 1, "loads": 0}


def test_a_wrong_schedule_is_caught_by_the_simulator():
    def wrong(n, c):
        yield actions.FWD, 0, 0, 1
        yield actions.SEED, 1, 1, 0
        yield actions.REV, 0, 1, 0  # slots swapped

    with pytest.raises(AssertionError, match="REV 0"):
        actions.simulate(wrong(1, 0), 1, 2)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 16, 45])
@pytest.mark.parametrize("k", [2, 3, 5])
def test_bennett_generator_is_bennetts_schedule(n, k):
    """The compiled generator makes exactly the steps of the Python planner, and takes only
    as many slots as the planner holds states at once."""
    from revbench.checkpoint import plan

    got = actions.simulate(actions.bennett_actions(n, k), n, actions.bennett_bound(n, k))
    b = plan.PlanBuilder(False, plan.bennett_slots(n, k), lambda rows: None)
    b.start()
    plan.bennett(b, n, k)
    b.flush()
    assert (got["forward_steps"], got["inverse_steps"], got["reverse_steps"],
            got["peak_states"]) == (b.counts.forward_steps, b.counts.inverse_steps,
                                    b.counts.reverse_steps, b.counts.peak_states)
    used = {x for _, _, a, c in actions.bennett_actions(n, k) for x in (a, c)}
    assert max(used) < plan.bennett_slots(n, k)


def test_compiled_schedules_yield_the_same_actions():
    from revbench.backends.numba_backend import helper

    for fn, knob in ((actions.revolve_actions, 3), (actions.periodic_actions, 4),
                     (actions.store_all_actions, 0), (actions.bennett_actions, 3)):
        assert list(helper(fn)(37, knob)) == list(fn(37, knob))


# --------------------------------------------------------------------------- #
# The loop statement
# --------------------------------------------------------------------------- #


def reference(make, n: int, h: float = 0.1):
    """Value and gradients (y0, h) of the same loop unrolled, every state kept."""
    f = make(UNROLLED)
    ys = np.zeros((n + 1, len(Y0)))
    ys[0] = Y0
    value = f(0.0, ys.copy(), h, n)[0]
    g = revbench.grad(f, loss="out")(0.0, ys, h, n)
    return value, g[1][0], g[2]


@pytest.mark.parametrize("strategy", ["StoreAll()", "Periodic(every=3)", "Revolve(snapshots=1)",
                                      "Revolve(snapshots=2)", "Revolve(snapshots=5)",
                                      "Revolve(snapshots=40)", "Bennett(k=2)", "Bennett(k=3)"])
def test_every_strategy_gives_the_unrolled_gradient(make, strategy):
    n = 13
    value, g_y0, g_h = reference(make, n)
    f = make(looped(strategy), namespace=NS)
    out, yT, y0, _, _ = f(0.0, np.zeros(4), Y0.copy(), 0.1, n)
    assert out == pytest.approx(value, rel=1e-13)
    np.testing.assert_array_equal(y0, Y0)  # the old state is only read
    g = revbench.grad(f, loss="out")(0.0, np.zeros(4), Y0.copy(), 0.1, n)
    np.testing.assert_allclose(g[2], g_y0, rtol=1e-12)
    assert g[3] == pytest.approx(g_h, rel=1e-12)
    np.testing.assert_array_equal(g[1], 2 * yT)  # the adjoint of the new state passes through


def test_gradient_matches_finite_differences(make):
    f = make(looped("Revolve(snapshots=3)"), namespace=NS)
    revbench.check_grad(f, 0.0, np.zeros(4), Y0.copy(), 0.1, 9, loss="out")


@pytest.mark.parametrize("strategy", ["StoreAll()", "Periodic(every=2)", "Revolve(snapshots=2)",
                                      "Bennett(k=2)"])
@pytest.mark.parametrize("n", [0, 1, 2])
def test_short_loops(make, n, strategy):
    value, g_y0, g_h = reference(make, n) if n else (float(Y0 @ Y0), 2 * Y0, 0.0)
    f = make(looped(strategy), namespace=NS)
    assert f(0.0, np.zeros(4), Y0.copy(), 0.1, n)[0] == pytest.approx(value, rel=1e-14)
    g = revbench.grad(f, loss="out")(0.0, np.zeros(4), Y0.copy(), 0.1, n)
    np.testing.assert_allclose(g[2], g_y0, rtol=1e-13)
    assert g[3] == pytest.approx(g_h, abs=1e-14)


def test_range_with_start_and_step_passes_the_right_t(make):
    """t takes the range's values (the body reads it), whatever the schedule's order."""
    f = make(looped("Revolve(snapshots=2)", lo="2", by="3"), namespace=NS)
    g = make(looped("StoreAll()", lo="2", by="3"), namespace=NS)
    a = revbench.value_and_grad(f, loss="out")(0.0, np.zeros(4), Y0.copy(), 0.1, 20)
    b = revbench.value_and_grad(g, loss="out")(0.0, np.zeros(4), Y0.copy(), 0.1, 20)
    assert a[0][0] == pytest.approx(b[0][0], rel=1e-14)
    np.testing.assert_allclose(a[1][2], b[1][2], rtol=1e-13)
    # the steps ran for t = 2, 5, ..., 17: six of them
    h = make(STEP + """
def six(out, yT, y0, h):
    for t in checkpointed(range(2, 20, 3), StoreAll(), new=yT, old=y0):
        step(yT, y0, t, h)
    for i in range(len(yT)):
        out += yT[i] * yT[i]
""", namespace=NS)
    assert h(0.0, np.zeros(4), Y0.copy(), 0.1)[0] == pytest.approx(a[0][0], rel=1e-14)


def test_the_inverse_undoes_the_loop(make):
    f = make(looped("Periodic(every=4)"), namespace=NS)
    args = (0.0, np.zeros(4), Y0.copy(), 0.1, 11)
    back = (~f)(*f(*args))
    assert back[0] == pytest.approx(0.0, abs=1e-13)
    np.testing.assert_allclose(back[1], 0.0, atol=1e-14)
    revbench.check_inverse(f, *args)


def test_two_states_and_free_arrays(make):
    """A leapfrog-like step with position and velocity, reading a weight array: gradients
    with respect to both initial states and the weights, against the unrolled loop."""
    src = """
def force(v_new, x_new, v, x, t, w, h):
    for i in range(len(x)):
        v_new[i] += v[i] - h * w[i] * np.sin(x[i])
    for i in range(len(x)):
        x_new[i] += x[i] + h * v_new[i]

def energy(out, xT, vT, x0, v0, w, h, n):
    for t in checkpointed(range(n), Revolve(snapshots=3), new=(vT, xT), old=(v0, x0)):
        force(vT, xT, v0, x0, t, w, h)
    for i in range(len(xT)):
        out += xT[i] * xT[i] + 0.5 * vT[i] * vT[i]

def unrolled(out, xs, vs, w, h, n):
    for t in range(n):
        k = t
        force(vs[t + 1], xs[t + 1], vs[t], xs[t], k, w, h)
        del k
    for i in range(xs.shape[1]):
        out += xs[n, i] * xs[n, i] + 0.5 * vs[n, i] * vs[n, i]
"""
    fns = make(src, all=True, namespace=NS)
    n, x0, v0, w = 12, Y0.copy(), -0.5 * Y0, np.array([1.0, 2.0, 0.5, 1.5])
    g = revbench.grad(fns["energy"], loss="out")(0.0, np.zeros(4), np.zeros(4), x0, v0, w, 0.1, n)
    xs, vs = np.zeros((n + 1, 4)), np.zeros((n + 1, 4))
    xs[0], vs[0] = x0, v0
    r = revbench.grad(fns["unrolled"], loss="out")(0.0, xs, vs, w, 0.1, n)
    np.testing.assert_allclose(g[3], r[1][0], rtol=1e-12)
    np.testing.assert_allclose(g[4], r[2][0], rtol=1e-12)
    np.testing.assert_allclose(g[5], r[3], rtol=1e-12)
    assert g[6] == pytest.approx(r[4], rel=1e-12)


def test_nested_checkpointed_loops(make):
    """A checkpointed loop inside a checkpointed loop's step: a two-level scheme."""
    src = STEP + """
def block(z_new, z, t, h, m):
    for s in checkpointed(range(m), Revolve(snapshots=2), new=z_new, old=z):
        step(z_new, z, s, h)

def two_level(out, yT, y0, h, n, m):
    for t in checkpointed(range(n), Periodic(every=2), new=yT, old=y0):
        block(yT, y0, t, h, m)
    for i in range(len(yT)):
        out += yT[i] * yT[i]

def flat(out, yT, y0, h, n, m):
    for t in checkpointed(range(n), StoreAll(), new=yT, old=y0):
        block(yT, y0, t, h, m)
    for i in range(len(yT)):
        out += yT[i] * yT[i]
"""
    fns = make(src, all=True, namespace=NS)
    args = (0.0, np.zeros(4), Y0.copy(), 0.1, 5, 4)
    g = revbench.grad(fns["two_level"], loss="out")(*args)
    r = revbench.grad(fns["flat"], loss="out")(*args)
    np.testing.assert_allclose(g[2], r[2], rtol=1e-13)
    revbench.check_grad(fns["two_level"], *args, loss="out")


def test_called_from_another_function_and_inside_a_loop(make):
    src = looped("Revolve(snapshots=2)") + """
def twice(out, yT, y0, h, n):
    for r in range(2):
        solve(out, yT, y0, h, n)
        ~solve(out, yT, y0, h, n)
    solve(out, yT, y0, h, n)
"""
    fns = make(src, all=True, namespace=NS)
    args = (0.0, np.zeros(4), Y0.copy(), 0.1, 6)
    a = revbench.grad(fns["twice"], loss="out")(*args)
    b = revbench.grad(fns["solve"], loss="out")(*args)
    np.testing.assert_allclose(a[2], b[2], rtol=1e-12)


def test_in_place_loop_keeps_reverse(make):
    f = make("""
def spin(out, y, h, n):
    for t in checkpointed(range(n), Reverse()):
        for i in range(len(y)):
            y[i] += h * t * y[(i + 1) % len(y)]
    for i in range(len(y)):
        out += y[i] * y[i]
""", namespace=NS)
    revbench.check_grad(f, 0.0, Y0.copy(), 0.1, 5, loss="out")
    revbench.check_inverse(f, 0.0, Y0.copy(), 0.1, 5)


def test_the_debugger_shows_the_loop_as_one_step(make):
    f = make(looped("Revolve(snapshots=2)"), namespace=NS)
    tr = revbench.trace(f, 0.0, np.zeros(4), Y0.copy(), 0.1, 3, loss="out")
    steps = [s for s in tr if "checkpointed loop under Revolve(snapshots=2)" in repr(s)]
    assert len(steps) == 2  # forward, and the reverse sweep


# --------------------------------------------------------------------------- #
# Bad input
# --------------------------------------------------------------------------- #

LOOP_HEAD = "    for t in checkpointed(range(n), {}, new=yT, old=y0):\n"


@pytest.mark.parametrize("head,message", [
    ("    for t in checkpointed(range(n), Revolve(snapshots=2)):\n",
     "must say which variables hold the state: add `new=` and `old=`"),
    (LOOP_HEAD.format("Reverse()"), "Reverse() runs an in-place step backwards"),
    (LOOP_HEAD.format("Revolve"), "pass a strategy object, `Revolve()`, not the class"),
    (LOOP_HEAD.format("Revolve(snapshots=0)"), "must be an int >= 1, got 0"),
    (LOOP_HEAD.format("Revolved(3)"), "NameError: name 'Revolved' is not defined"),
    (LOOP_HEAD.format("3"), "is a int, not a checkpointing strategy"),
    ("    for t in checkpointed(range(n), StoreAll(), new=yT):\n", "or neither"),
    ("    for t in checkpointed(range(n), StoreAll(), new=yT, old=yT):\n", "named twice"),
    ("    for t in checkpointed(range(n), StoreAll(), new=yT, old=(y0, yT)):\n", "pair up"),
    ("    for t in checkpointed(range(n), StoreAll(), new=yT, old=y0, k=1):\n",
     "no keyword `k`"),
    ("    for t in checkpointed(range(n)):\n", "takes a range and a strategy"),
    ("    for t in checkpointed(range(n), StoreAll(), new=yT, old=y0 + 1):\n",
     "`old=` names the loop's state"),
])
def test_bad_loops_are_refused_at_definition(make, head, message):
    src = STEP + "\ndef f(yT, y0, h, n):\n" + head + "        step(yT, y0, t, h)\n"
    with pytest.raises(ReversibilitySyntaxError) as info:
        make(src, namespace=NS)
    assert message in str(info.value)
    assert info.value.lineno == 7


def test_a_body_that_writes_the_old_state_is_refused_at_its_line(make):
    src = "def f(yT, y0, n):\n" + LOOP_HEAD.format("StoreAll()") + \
        "        yT[0] += y0[0]\n        y0[0] += 1.0\n"
    with pytest.raises(ReversibilitySyntaxError, match="changes `y0`, the old state") as info:
        make(src, namespace=NS)
    assert info.value.lineno == 4


@pytest.mark.parametrize("body,var,role", [
    ("        step(y0, yT, t, h)\n", "y0", "the old state"),
    ("        step(yT, y0, t, h)\n        k += 1\n", "k", "a variable read from around"),
])
def test_a_body_that_writes_what_it_reads_is_refused_at_the_first_call(make, body, var, role):
    src = STEP + "\ndef f(yT, y0, h, n, k):\n" + LOOP_HEAD.format("Revolve(2)") + body
    f = make(src, namespace=NS)
    with pytest.raises(ReversibilityTypeError, match=f"changes `{var}`, {role}") as info:
        f(np.zeros(4), Y0.copy(), 0.1, 3, 0)
    assert info.value.lineno == 7


def test_bad_states_are_refused_and_nothing_is_changed(make):
    f = make(looped("Revolve(snapshots=2)"), namespace=NS)
    y0 = Y0.copy()
    with pytest.raises(ReversibilityError, match="have different shapes"):
        f(0.0, np.zeros(3), y0, 0.1, 4)
    np.testing.assert_array_equal(y0, Y0)
    with pytest.raises(ReversibilityTypeError, match=r"must be a float \(or complex\) array"):
        f(0.0, np.zeros(4), 1.0, 0.1, 4)
    with pytest.raises(ReversibilityTypeError, match="the same type"):
        f(0.0, np.zeros(4), Y0.astype(np.complex128), 0.1, 4)


def test_a_step_not_undone_by_its_reverse_sweep_stops_the_gradient(make):
    f = make("""
def lossy(y_new, y, t):
    for i in range(len(y)):
        y_new[i] += y[i]
        y_new[i] *= 3.0
        y_new[i] += 1000.0 * y[i]

def run(out, yT, y0, n):
    for t in checkpointed(range(n), Revolve(2), new=yT, old=y0):
        lossy(yT, y0, t)
    for i in range(len(yT)):
        out += yT[i]
""", namespace=NS, atol=0.0, rtol=0.0)
    with pytest.raises(ReversibilityError, match="did not bring the new state `yT` back to zero"):
        revbench.grad(f, loss="out")(0.0, np.zeros(3), np.array([0.1, 0.7, 1.1]), 1)


def test_second_derivatives_and_gpu_are_refused_clearly(make):
    f = make(looped("Revolve(snapshots=2)"), namespace=NS)
    with pytest.raises(ReversibilityTypeError, match="not supported yet"):
        revbench.hvp(f, loss="out", wrt="h")(0.0, np.zeros(4), Y0.copy(), 0.1, 3, 1.0)


@pytest.mark.parametrize("strategy", ["Revolve(snapshots=3)", "Bennett(k=2)"])
def test_jax_and_pytorch_users_get_the_checkpointed_gradient(strategy):
    """A JAX or PyTorch user differentiates a loop written in revbench, under Revolve or
    Bennett, inside ``jax.grad`` / ``loss.backward()``: the same gradient as revbench's."""
    jax = pytest.importorskip("jax")
    torch = pytest.importorskip("torch")
    from revbench.interop import to_jax, to_torch

    saved = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)
    try:
        _check_exports(jax, torch, to_jax, to_torch, strategy)
    finally:
        jax.config.update("jax_enable_x64", saved)


def _check_exports(jax, torch, to_jax, to_torch, strategy: str) -> None:
    fns = revbench.define(looped(strategy), {**NS, "np": np}, backend="python")
    f = fns["solve"]
    g = revbench.grad(f, loss="out")(0.0, np.zeros(4), Y0.copy(), 0.1, 20)
    jf = to_jax(f, outputs="out")
    gj = jax.grad(lambda y, h: jf(0.0, np.zeros(4), y, h, 20), argnums=(0, 1))(Y0.copy(), 0.1)
    np.testing.assert_allclose(np.asarray(gj[0]), g[2], rtol=1e-12)
    assert float(gj[1]) == pytest.approx(g[3], rel=1e-12)
    tf = to_torch(f, outputs="out")
    y = torch.tensor(Y0, requires_grad=True)
    h = torch.tensor(0.1, dtype=torch.float64, requires_grad=True)
    tf(0.0, torch.zeros(4, dtype=torch.float64), y, h, 20).backward()
    np.testing.assert_allclose(y.grad.numpy(), g[2], rtol=1e-12)
    assert h.grad.item() == pytest.approx(g[3], rel=1e-12)


ROUTINE_STEP = """
def heat(y_new, y, t, h):
    with routine:
        ly = np.zeros_like(y)
        for i in range(len(y)):
            ly[i] += np.sin(y[i])
    y_new += y + h * ly
    ~routine

def solve(out, yT, y0, h, n):
    for t in checkpointed(range(n), Revolve(snapshots=2), new=yT, old=y0):
        heat(yT, y0, t, h)
    for i in range(len(yT)):
        out += yT[i] * yT[i]
"""


def test_the_loops_run_before_the_callers_sweep_steps_lean(make):
    """grad's run of ``solve`` runs the loop's steps lean (``heat``'s ``~routine`` left to
    the step's own sweep, as in the schedule's forward steps): the step's full run is never
    compiled, and the gradient is the one of the same loop stepped in Python."""
    fns = make(ROUTINE_STEP, all=True, namespace=NS)
    solve, heat = fns["solve"], fns["heat"]
    y0, h, n = Y0.copy(), 0.1, 7
    value, grads = revbench.value_and_grad(solve, loss="out", wrt=("y0", "h"))(
        0.0, np.zeros(4), y0, h, n)
    loop = solve._program.lookup(solve._program.ir.loops[0].name)._program
    assert {str(key[0]) for key in heat._program._cache} == {"forward-before-sweep", "backward"}
    assert {str(key[0]) for key in loop._cache} == {"forward-before-sweep", "backward"}
    eps, ys = 1e-6, [y0]
    for _ in range(n):  # the same loop, stepped in Python: value and a finite difference
        ys.append(ys[-1] + h * np.sin(ys[-1]))
    assert value[0] == pytest.approx(float(ys[-1] @ ys[-1]), rel=1e-13)
    for k in range(4):
        yp, ym = y0.copy(), y0.copy()
        yp[k] += eps
        ym[k] -= eps
        fp, fm = (solve(0.0, np.zeros(4), y, h, n)[0] for y in (yp, ym))
        assert grads[2][k] == pytest.approx((fp - fm) / (2 * eps), rel=1e-6)


def test_a_dirty_ancilla_in_a_lean_loop_step_still_fails_the_gradient(make):
    """The loop's lean steps leave ``del``'s check to the step's sweep: a step whose
    ancilla is not uncomputed still fails the gradient, naming it, and the caller's arrays
    are unchanged."""
    bad = ROUTINE_STEP.replace("        for i in range(len(y)):\n            ly[i] += np.sin(y[i])",
                               "        for i in range(len(y)):\n            ly[i] += np.sin(y[i])"
                               "\n    ly[0] += 1.0")
    assert bad != ROUTINE_STEP
    solve = make(bad, namespace=NS)
    y0, yT = Y0.copy(), np.zeros(4)
    with pytest.raises(ReversibilityError) as err:
        revbench.grad(solve, loss="out", wrt="y0")(0.0, yT, y0, 0.1, 5)
    assert err.value.variable in ("ly", "ly[0]")
    np.testing.assert_array_equal(y0, Y0)
    np.testing.assert_array_equal(yT, 0.0)


BOUND_IN_BODY = """
def shift(y_new, y, t, h, n):
    for i in range(len(y)):
        y_new[i] += y[i] + h * np.sin(y[i] + t / n)

def solve(out, yT, y0, h, a, n):
    for t in checkpointed(range(a, n), {strategy}, new=yT, old=y0):
        for i in range(len(y0)):
            yT[i] += y0[i] + h * np.sin(y0[i] + t / n) + 0.0 * a
    for i in range(len(yT)):
        out += yT[i] * yT[i]

def called(out, yT, y0, h, n):
    for t in checkpointed(range(n, n + n), {strategy}, new=yT, old=y0):
        shift(yT, y0, t, h, n)
    for i in range(len(yT)):
        out += yT[i] * yT[i]
"""


@pytest.mark.parametrize("strategy", ["Revolve(snapshots=2)", "StoreAll()"])
def test_the_body_reads_the_loops_bounds(make, strategy):
    """The body reads the range's start and stop (and passes the stop to a call): the
    bounds go to the loop as copies, never the same variable twice to one call."""
    fns = make(BOUND_IN_BODY.format(strategy=strategy), all=True, namespace=NS)
    h, n = 0.1, 6
    y = Y0.copy()
    for t in range(2, n):  # the same loop, stepped in NumPy
        y = y + h * np.sin(y + t / n)
    value, grads = revbench.value_and_grad(fns["solve"], loss="out", wrt="h")(
        0.0, np.zeros(4), Y0.copy(), h, 2, n)
    assert value[0] == pytest.approx(float(y @ y), rel=1e-13)
    eps = 1e-6
    fd = (fns["solve"](0.0, np.zeros(4), Y0.copy(), h + eps, 2, n)[0]
          - fns["solve"](0.0, np.zeros(4), Y0.copy(), h - eps, 2, n)[0]) / (2 * eps)
    assert grads[3] == pytest.approx(fd, rel=1e-6)
    y = Y0.copy()
    for t in range(n, 2 * n):
        y = y + h * np.sin(y + t / n)
    assert fns["called"](0.0, np.zeros(4), Y0.copy(), h, n)[0] == pytest.approx(float(y @ y))


def test_messages_name_the_users_function_not_the_outlined_step(make):
    """An error inside a loop's body names the function the user wrote and the loop's line,
    never the internal step function (``solve_loop5_step``)."""
    src = """
def solve(out, yT, y0, n):
    for t in checkpointed(range(n), Revolve(snapshots=2), new=yT, old=y0):
        s = y0[0] * 0.5
        for i in range(len(y0)):
            yT[i] += y0[i] + s
        s -= y0[0]
        del s
"""
    f = make(src, namespace=NS)
    with pytest.raises(ReversibilityError) as err:
        f(0.0, np.zeros(4), Y0.copy(), 3)
    text = str(err.value)
    assert "in reversible function solve (its checkpointed loop at line 3)" in text, text
    assert "_loop" not in text


def test_checkpointed_by_another_name_and_its_strategy_by_keyword(make):
    """``from revbench.checkpoint import checkpointed as ckpt`` and
    ``checkpointed(range(n), strategy=...)`` are the same statement (the first was taken
    for a plain for loop over something that is not a range; the second refused)."""
    _, g_y0, g_h = reference(make, 9)
    sources = [looped("Revolve(snapshots=3)").replace("checkpointed(", "ckpt("),
               looped("strategy=Revolve(snapshots=3)")]
    for src in sources:
        f = make(src, namespace={**NS, "ckpt": NS["checkpointed"]})
        g = revbench.grad(f, loss="out")(0.0, np.zeros(4), Y0.copy(), 0.1, 9)
        np.testing.assert_allclose(g[2], g_y0, rtol=1e-12)
        assert g[3] == pytest.approx(g_h, rel=1e-12)


def test_a_loop_redefined_at_the_same_place_runs_its_new_step(make):
    """Generated modules are shared by their text: a loop whose header, place and types
    are those of an earlier one, around another step, must not run the earlier step's
    kernels (the loop's code names the content of the kernels it calls)."""
    template = """
    def f(y1, y0, n):
        for t in checkpointed(range(n), Revolve(snapshots=3), new=y1, old=y0):
            y1 += {factor} * y0
    """
    for factor in (2.0, 3.0):
        f = make(template.format(factor=factor), namespace=NS, filename="<same place>")
        y1, _, _ = f(np.zeros(2), np.ones(2), 3)
        np.testing.assert_allclose(y1, [factor ** 3] * 2)
        loss = ("y1", 0)  # d y1[0] / d y0 = factor**3 e_0
        g = revbench.grad(f, loss, wrt="y0")(np.zeros(2), np.ones(2), 3)[1]
        np.testing.assert_allclose(g, [factor ** 3, 0.0])


def test_the_kernels_read_the_schedules_actions_by_their_numbers():
    """The loop's kernels (a lower layer) name the actions by number: the schedules'."""
    from revbench.backends import loop_code

    names = ("FWD", "INV", "REV", "COPY", "SEED", "ASK", "STORE", "LOAD")
    assert [getattr(loop_code, n) for n in names] == [getattr(actions, n) for n in names]


def test_a_dirty_ancilla_after_a_loop_names_no_internal_variable(make):
    """Running the loop twice does not uncompute its new state: the ancilla check says so,
    and its hint never names the loop's own variables (it named `_rb_step..._1`)."""
    f = make(STEP + """
def f(out, y0, h, n):
    yT = np.zeros_like(y0)
    for t in checkpointed(range(n), Revolve(snapshots=2), new=yT, old=y0):
        step(yT, y0, t, h)
    for i in range(len(yT)):
        out += yT[i] * yT[i]
    for t in checkpointed(range(n), Revolve(snapshots=2), new=yT, old=y0):
        step(yT, y0, t, h)
    del yT
""", namespace=NS)
    with pytest.raises(ReversibilityError, match=r"ancilla `yT.*` is not back") as info:
        f(0.0, Y0.copy(), 0.1, 5)
    assert "_rb_" not in str(info.value)


def test_a_loop_in_another_file_shares_its_compiled_kernels():
    """The same loop defined in two files (a notebook names each session's cells anew)
    is the same code: its kernels' keys do not depend on the file, so a new session
    loads them from the cache (the file was in their header, and every Jupyter session
    compiled them again)."""
    from revbench.lang.types import VarType
    from revbench.transforms.pipeline import BACKWARD, FORWARD

    src = '''
from revbench.checkpoint import Revolve, checkpointed
def euler(y_new, y, t, h):
    for i in range(len(y)):
        y_new[i] += y[i] + h * np.sin(y[i])
def g(out, yT, y0, h, n):
    for t in checkpointed(range(n), Revolve(snapshots=4), new=yT, old=y0):
        euler(yT, y0, t, h)
    for i in range(len(yT)):
        out += yT[i] * yT[i]
'''
    keys = []
    for filename in ("/tmp/ipykernel_1/cell1.py", "/tmp/ipykernel_2/cell1.py"):
        g = revbench.define(src, {"np": np}, filename=filename)["g"]
        loop = g._program.lookup(g._program.ir.loops[0].name)._program
        sig = (VarType("float", 1), VarType("float", 1), *[VarType("int")] * 3, VarType("float"))
        keys.append([loop.generate(d, "numba", True, sig, compile_callees=False)[0].key
                     for d in (FORWARD, BACKWARD)])
    assert keys[0] == keys[1]
