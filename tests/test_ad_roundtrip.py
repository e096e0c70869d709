"""With checks on, AD verifies that its reverse sweep recovered the inputs it started from.

The reverse sweep runs the program's inverse; for floats that only approximately undoes
the forward run, and in a chaotic map round-off grows until the recovered inputs -- and
the gradient computed along them -- are garbage.  ``grad``, ``value_and_grad`` and
``jacobian`` then raise :class:`revbench.ReversibilityError` instead of returning it.
"""

from __future__ import annotations

import traceback

import numpy as np
import pytest

import revbench
from revbench import ReversibilityError, grad, jacobian, value_and_grad
from revbench.ad import reverse as ad_module
from revbench.ad import sweep

# The standard map, kicked hard, written in place: p += k sin(x); x += p.  Its inverse
# (x -= p; p -= k sin(x)) loses every digit of x and p within a few dozen steps.
CHAOS = """
    def chaos(L, x, p, k, n):
        for t in range(n):
            for i in range(len(x)):
                p[i] += k * sin(x[i])
                x[i] += p[i]
        L += x[0]
"""
K, STEPS = 6.0, 2000

# the adjoints of a chaotic map overflow: the Python backend says so, Numba does not
chaotic = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def chaos_args():
    return 0.0, np.array([0.1, 0.7, 1.3, 2.9]), np.array([0.0, 0.2, -0.3, 0.5]), K, STEPS


@pytest.fixture
def global_tolerance():
    """Restores the global tolerance a test changes."""
    saved = revbench.config.get_tolerance()
    yield
    revbench.set_tolerance(*saved)


# -- programs the sweep does recover ---------------------------------------------------------


def test_normal_function_passes_for_float_int_and_bool_arguments(make):
    f = make("""
        def f(y, x, n, m, flag, c):
            n += 3
            flag ^= True
            for i in range(len(x)):
                m[i] += 2 * i + n
                x[i] *= 2.0
                x[i] += c
                y += x[i] * x[i]
    """)
    x, m = np.array([1.0, -2.0, 0.5]), np.array([4, 5, 6])
    args = (0.5, x, 7, m, False, 0.25)
    gy, gx, gn, gm, gflag, gc = grad(f, loss="y")(*args)
    xo = 2 * x + 0.25
    assert gy == 1.0 and gn is None and gm is None and gflag is None
    np.testing.assert_allclose(gx, 4 * xo)
    assert gc == pytest.approx(2 * xo.sum())
    outs, _ = value_and_grad(f, loss="y")(*args)
    assert outs[2] == 10 and outs[4] is True and list(outs[3]) == [14, 17, 20]
    J = jacobian(f, outputs="x", wrt="x")(*args)
    np.testing.assert_allclose(J, 2 * np.eye(3))
    assert list(x) == [1.0, -2.0, 0.5] and list(m) == [4, 5, 6]  # the caller's, untouched


def test_a_few_chaotic_steps_are_still_recovered(make):
    # round-off has not grown yet: well within the default tolerance, so no error
    chaos = make(CHAOS)
    L, x, p, k, _ = chaos_args()
    g = grad(chaos, loss="L")(L, x, p, k, 3)
    assert g[0] == 1.0 and np.isfinite(g[1]).all()


# -- a chaotic map whose inverse does not recover its inputs ----------------------------------


@chaotic
def test_the_chaotic_round_trip_is_really_off(make):
    # (so the tests below are meaningful): running the inverse by hand does not give x back
    chaos = make(CHAOS)
    L, x, p, k, n = chaos_args()
    back = (~chaos)(*chaos(L, x.copy(), p.copy(), k, n))
    assert np.abs(back[1] - x).max() > 1.0
    assert np.abs(back[2] - p).max() > 1.0


@chaotic
@pytest.mark.parametrize("api", ["grad", "value_and_grad", "jacobian"])
def test_chaotic_gradient_raises(make, api):
    chaos = make(CHAOS)
    args = chaos_args()
    run = {"grad": lambda: grad(chaos, loss="L"),
           "value_and_grad": lambda: value_and_grad(chaos, loss="L"),
           "jacobian": lambda: jacobian(chaos, outputs="x", wrt="p")}[api]()
    with pytest.raises(ReversibilityError) as info:
        run(*args)
    err = info.value
    msg = str(err)
    assert err.variable == "x" and err.function == "chaos" and err.stage == "ad"
    assert msg.startswith(f"{api}(chaos): the reverse sweep did not recover the value of argument `x`")
    assert "x[" in msg and "largest difference" in msg
    assert "cannot be trusted" in msg
    for hint in ("checkpoint", "TimeLoop", "Revolve(snapshots=", "StoreAll()", "atol="):
        assert hint in msg
    # expected / actual: the worst element's value at entry and as recovered
    assert err.expected in list(args[1]) and abs(err.actual - err.expected) > 1.0


@chaotic
def test_the_error_has_no_internal_context(make):
    chaos = make(CHAOS)
    with pytest.raises(ReversibilityError) as info:
        grad(chaos, loss="L")(*chaos_args())
    err = info.value
    assert err.__cause__ is None and err.__context__ is None
    files = [fs.filename for fs in traceback.extract_tb(err.__traceback__)]
    assert not any("rbgen_" in name or name.endswith("function.py") for name in files)


@chaotic
def test_callers_arrays_are_unchanged_after_the_error(make):
    chaos = make(CHAOS)
    L, x, p, k, n = chaos_args()
    x0, p0 = x.copy(), p.copy()
    for run in (grad(chaos, loss="L"), value_and_grad(chaos, loss="L"),
                jacobian(chaos, outputs="x", wrt="x")):
        with pytest.raises(ReversibilityError):
            run(L, x, p, k, n)
        assert np.array_equal(x, x0) and np.array_equal(p, p0)


@chaotic
def test_check_false_checks_nothing(make):
    chaos = make(CHAOS, check=False)
    args = chaos_args()
    g = grad(chaos, loss="L")(*args)  # garbage, but asked for without checks
    assert g[0] == 1.0
    value_and_grad(chaos, loss="L")(*args)
    assert jacobian(chaos, outputs="x", wrt="p")(*args).shape == (4, 4)


@chaotic
def test_the_inverse_view_is_checked_too(make):
    chaos = make(CHAOS)
    with pytest.raises(ReversibilityError) as info:
        grad(~chaos, loss="L")(*chaos_args())
    # ~chaos subtracts x[0] from L before its loop, so its sweep adds back the badly
    # recovered x[0]: L, the first argument, is already off (the first one off is named)
    assert info.value.variable == "L" and "recovered" in str(info.value)


# -- the tolerance ------------------------------------------------------------------------------


@chaotic
def test_the_functions_own_tolerance_wins(make, global_tolerance):
    loose = make(CHAOS, atol=1e9)  # a difference of ~4e5 is then within tolerance
    assert grad(loose, loss="L")(*chaos_args())[0] == 1.0
    revbench.set_tolerance(atol=1e9)
    strict = make(CHAOS, atol=1e-8)
    with pytest.raises(ReversibilityError, match="atol=1e-08"):
        grad(strict, loss="L")(*chaos_args())


@chaotic
def test_the_global_tolerance_applies(make, global_tolerance):
    chaos = make(CHAOS)
    revbench.set_tolerance(atol=1e9)
    assert grad(chaos, loss="L")(*chaos_args())[0] == 1.0


# -- the comparison itself -------------------------------------------------------------------


def test_integers_exact_floats_within_tolerance(make):
    f = make("""
        def f(y, z, n, m, flag, A, data):
            y += 1.0
            z += 1j
            n += 1
            m[0] += 1
            flag ^= True
            A[0, 0] += data[0]
    """, atol=0.5, rtol=0.0)
    entry = (1.0, 1 + 1j, 3, np.array([1, 2]), True, np.zeros((2, 3)), np.zeros(2))

    def check(**changes):
        recovered = [v.copy() if isinstance(v, np.ndarray) else v for v in entry]
        for name, value in changes.items():
            k = f.params.index(name)
            if isinstance(value, tuple):
                recovered[k][value[0]] = value[1]
            else:
                recovered[k] = value
        return sweep.check_recovered(f, entry, tuple(recovered), "grad(f)")

    assert check() is None
    assert check(y=1.4, z=1.3 + 1j, A=((1, 2), 0.4)) is None  # within atol=0.5
    assert check(data=(0, 100.0)) is None  # read-only: the sweep cannot change it
    for name, bad in (("y", 1.6), ("z", 1 + 1.6j), ("n", 4), ("m", (1, 3)), ("flag", False)):
        err = check(**{name: bad})
        assert isinstance(err, ReversibilityError) and err.variable == name, name
    err = check(A=((1, 2), 7.0))
    assert err.variable == "A" and "A[1, 2]" in str(err) and "largest difference is 7" in str(err)
    assert err.expected == 0.0 and err.actual == 7.0
    err = check(m=(1, 3))
    assert "m[1]" in str(err) and "exactly" in str(err)


def test_nan_and_inf_at_entry_count_as_recovered(make):
    f = make("""
        def f(y, x):
            y += 1.0
            x[0] += 1.0
    """)
    entry = (np.nan, np.array([np.inf, np.nan, 1.0]))
    assert sweep.check_recovered(f, entry, (np.nan, entry[1].copy()), "grad(f)") is None
    err = sweep.check_recovered(f, entry, (np.nan, np.array([np.inf, np.nan, np.nan])),
                                     "grad(f)")
    assert err.variable == "x" and "x[2]" in str(err)
    # and the gradient of a program given NaN runs (the NaN is recovered as NaN)
    assert grad(f, loss="y")(np.nan, np.array([np.inf, np.nan, 1.0]))[0] == 1.0


def test_jacobian_checks_every_sweep(make, monkeypatch):
    f = make("""
        def f(r, x):
            for i in range(len(r)):
                r[i] += x[i] * x[i]
    """)
    calls = []
    original = sweep.check_recovered

    def counting(*a, **kw):
        calls.append(a[3])
        return original(*a, **kw)

    monkeypatch.setattr(sweep, "check_recovered", counting)
    x = np.arange(20.0)
    J = jacobian(f, outputs="r", wrt="x")(np.zeros(20), x)
    np.testing.assert_allclose(J, np.diag(2 * x))
    lanes = ad_module.JACOBIAN_LANES
    assert calls == ["jacobian(f)"] * -(-20 // lanes)


def test_a_large_program_gets_fewer_jacobian_lanes(make, monkeypatch):
    """Each lane is another copy of every adjoint statement to compile: a program whose
    statements (its callees' included) times the lanes pass the budget gets fewer lanes,
    halving, and the same Jacobian from more sweeps (batched too)."""
    fns = make("""
        def g(r, x, i):
            r[i] += x[i] * x[i]
            r[i] += np.sin(x[i])

        def f(r, x):
            for i in range(len(r)):
                g(r, x, i)
    """, all=True)
    f = fns["f"]
    assert f._program.code_size() == 4  # the loop, the call, g's two updates
    x = np.linspace(0.1, 2.0, 20)
    want = np.diag(2 * x + np.cos(x))
    calls = []
    original = sweep.check_recovered
    monkeypatch.setattr(sweep, "check_recovered",
                        lambda *a, **kw: calls.append(a[3]) or original(*a, **kw))
    for budget, lanes in ((32, 8), (31, 4), (8, 2), (7, 1), (0, 1)):
        monkeypatch.setattr(sweep, "LANE_BUDGET", budget)
        assert sweep.jacobian_lanes(f, 20, 8) == lanes
        assert sweep.jacobian_lanes(f, 3, 8) == min(3, lanes)
        calls.clear()
        np.testing.assert_allclose(jacobian(f, outputs="r", wrt="x")(np.zeros(20), x), want,
                                   rtol=1e-14)
        assert len(calls) == -(-20 // lanes)
        xs = np.stack([x, 2 * x])
        J = jacobian(f, outputs="r", wrt="x", batch=("r", "x"))(np.zeros((2, 20)), xs)
        np.testing.assert_allclose(J[1], np.diag(4 * x + np.cos(2 * x)), rtol=1e-14)
