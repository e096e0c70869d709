"""Custom adjoints (``revbench.custom_adjoint``): one registration, used by every consumer.

Two kinds of adjoint are registered here:

* a *correct* one -- the implicit-function theorem for a linear solve done by Jacobi
  sweeps, the hand-derived adjoint of a time step -- checked against the derived reverse
  sweep, hand-derived values and finite differences;
* a *deliberately different* one, whose gradient no derived sweep would give: that
  every consumer returns its numbers proves the consumer really calls it.
"""

from __future__ import annotations

import numpy as np
import pytest

import revbench
from revbench import ReversibilityError, ReversibilityTypeError, reversible
from revbench.checkpoint import Bennett, Revolve, StoreAll, TimeLoop
from revbench.rules.adjoints import ADJOINTS

MODULE = __name__


@pytest.fixture(autouse=True)
def _clean_registry():
    """Each test starts and ends without custom adjoints of this module's functions."""
    def clear():
        for key in [k for k in ADJOINTS if k[0] == MODULE]:
            del ADJOINTS[key]
        revbench.rules.functions.REGISTRY_VERSION[0] += 1
    clear()
    yield
    clear()


# --- a linear solve by Jacobi sweeps; its adjoint by the implicit-function theorem -------
def _jacobi_source():
    return '''
def jacobi(x, X, A, b):
    """len(X) - 1 Jacobi sweeps for A x = b (X[k] holds sweep k); x += the last."""
    for k in range(X.shape[0] - 1):
        for i in range(x.shape[0]):
            X[k + 1, i] += b[i] / A[i, i]
            for j in range(x.shape[0]):
                if j != i:
                    X[k + 1, i] -= A[i, j] * X[k, j] / A[i, i]
    for i in range(x.shape[0]):
        x[i] += X[X.shape[0] - 1, i]
'''


def ift(x, X, A, b, xbar, Xbar, Abar, bbar):
    """x = A^-1 b at exit (x entered at zero): b_bar += A^-T x_bar, A_bar -= lam x^T."""
    lam = np.linalg.solve(A.T, xbar)
    return xbar, Xbar, Abar - np.outer(lam, x), bbar + lam


def doubled(x, X, A, b, xbar, Xbar, Abar, bbar):
    """Not the derivative: twice the IFT adjoint of b (a consumer that uses it shows it)."""
    lam = np.linalg.solve(A.T, xbar)
    return xbar, Xbar, Abar, bbar + 2.0 * lam


def system(n=4, sweeps=60, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(n, n)) + 6.0 * np.eye(n)
    return np.zeros(n), np.zeros((sweeps, n)), A, rng.normal(size=n)


# (compiled with its adjoint's callbacks, the Numba variants take seconds each: slow suite)
@pytest.fixture(params=[pytest.param("numba", marks=pytest.mark.slow), "python"])
def jacobi(request):
    return revbench.define(_jacobi_source(), {"__name__": MODULE, "np": np},
                           backend=request.param)["jacobi"]


def test_grad_uses_the_adjoint_and_agrees_with_the_derived_sweep(jacobi):
    args = system()
    A, b = args[2], args[3]
    w = np.arange(1.0, 5.0)

    @reversible(backend=jacobi.backend)
    def loss(L, x, X, A, b, w):
        jacobi(x, X, A, b)
        for i in range(len(x)):
            L += w[i] * x[i] * x[i]

    derived = revbench.grad(loss, loss="L", wrt=("A", "b"))(0.0, *args, w)
    revbench.custom_adjoint(jacobi, ift)
    custom = revbench.grad(loss, loss="L", wrt=("A", "b"))(0.0, *args, w)
    xs = np.linalg.solve(A, b)
    lam = np.linalg.solve(A.T, 2 * w * xs)  # hand-derived: dL/db = A^-T (2 w x)
    np.testing.assert_allclose(custom[4], lam, rtol=1e-12)
    np.testing.assert_allclose(custom[3], -np.outer(lam, xs), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(custom[4], derived[4], rtol=1e-10)  # 60 sweeps converge
    revbench.custom_adjoint(jacobi, doubled)  # re-registering replaces it
    again = revbench.grad(loss, loss="L", wrt=("A", "b"))(0.0, *args, w)
    np.testing.assert_allclose(again[4], 2 * lam, rtol=1e-12)
    revbench.remove_adjoint(jacobi)
    np.testing.assert_allclose(revbench.grad(loss, loss="L", wrt=("A", "b"))(0.0, *args, w)[4],
                               derived[4], rtol=0, atol=0)


def test_jacobian_uses_the_adjoint_once_per_seed(jacobi):
    args = system()
    A = args[2]
    revbench.custom_adjoint(jacobi, ift)
    J = revbench.jacobian(jacobi, outputs="x", wrt="b")(*args)
    np.testing.assert_allclose(J, np.linalg.inv(A), rtol=1e-12, atol=1e-15)
    revbench.custom_adjoint(jacobi, doubled)
    J2 = revbench.jacobian(jacobi, outputs="x", wrt="b")(*args)
    np.testing.assert_allclose(J2, 2 * np.linalg.inv(A), rtol=1e-12, atol=1e-15)


def test_vjp_uses_the_adjoint(jacobi):
    args = system()
    A = args[2]
    revbench.custom_adjoint(jacobi, doubled)
    ct = np.array([1.0, -2.0, 0.5, 3.0])
    outs, pullback = revbench.vjp(jacobi, *args, outputs="x", wrt="b")
    np.testing.assert_allclose(outs[0], np.linalg.solve(A, args[3]), rtol=1e-12)
    (gb,) = pullback(ct)
    np.testing.assert_allclose(gb, 2 * np.linalg.solve(A.T, ct), rtol=1e-12)


# --- a time step with a hand-written adjoint ---------------------------------------
@reversible
def step(u_new, u, t, dt):
    for i in range(len(u)):
        u_new[i] += u[i] + dt * np.sin(u[i])


@reversible
def energy(out, u, dt):
    for i in range(len(u)):
        out += u[i] * u[i]


def step_adjoint(u_new, u, t, dt, u_new_bar, u_bar, dt_bar):
    return u_new_bar, u_bar + u_new_bar * (1.0 + dt * np.cos(u)), dt_bar + np.sum(u_new_bar * np.sin(u))


def step_adjoint_scaled(u_new, u, t, dt, u_new_bar, u_bar, dt_bar):
    """Not the derivative: the state's part scaled by 1/2 (changes every gradient)."""
    return u_new_bar, u_bar + 0.5 * u_new_bar * (1.0 + dt * np.cos(u)), dt_bar


# (StoreAll in the quick suite; the schedules that step again, seconds each, in the slow one)
@pytest.mark.parametrize("strategy", [
    pytest.param(StoreAll(), id="storeall"),
    pytest.param(Revolve(snapshots=3), id="revolve", marks=pytest.mark.slow),
    pytest.param(Bennett(k=2), id="bennett", marks=pytest.mark.slow)])
def test_timeloop_uses_the_adjoint(strategy):
    u0 = np.linspace(0.1, 1.0, 5)
    loop = TimeLoop(step, n_steps=12, loss=energy)
    value, derived = loop.value_and_grad(u0, 0.01, strategy=strategy)
    revbench.custom_adjoint(step, step_adjoint)
    v1, g1 = loop.value_and_grad(u0, 0.01, strategy=strategy)  # the same loop object
    assert v1 == value
    np.testing.assert_allclose(g1[0], derived[0], rtol=1e-13)
    np.testing.assert_allclose(g1[1], derived[1], rtol=1e-12)
    revbench.custom_adjoint(step, step_adjoint_scaled)
    _, g2 = loop.value_and_grad(u0, 0.01, strategy=strategy)
    # dt_bar never grows, and d value / d u0 is 0.5**12 times the state-only chain rule
    assert g2[1] == 0.0
    assert loop.stats.reverse_steps == 12
    ratio = g2[0] / derived[0]
    assert np.all(np.abs(ratio) < 1e-3)


def test_callers_compiled_before_registration_use_the_new_adjoint():
    @reversible
    def twice(L, u_new, u, t, dt):
        step(u_new, u, t, dt)
        for i in range(len(u)):
            L += u_new[i]

    args = (0.0, np.zeros(3), np.array([0.1, 0.2, 0.3]), 0, 0.5)
    g0 = revbench.grad(twice, loss="L")(*args)
    np.testing.assert_allclose(g0[2], 1 + 0.5 * np.cos(args[2]))
    revbench.custom_adjoint(step, step_adjoint_scaled)
    g1 = revbench.grad(twice, loss="L")(*args)
    np.testing.assert_allclose(g1[2], 0.5 * (1 + 0.5 * np.cos(args[2])))
    assert g1[4] == 0.0


def test_check_grad_passes_a_right_adjoint_and_names_a_wrong_one():
    args = (np.zeros(3), np.array([0.1, 0.2, 0.3]), 0, 0.5)
    revbench.custom_adjoint(step, step_adjoint)
    revbench.check_grad(step, *args, loss=("u_new", 1))
    revbench.custom_adjoint(step, step_adjoint_scaled)
    with pytest.raises(AssertionError, match=r"custom adjoint\(s\) step_adjoint_scaled \(of step\)"):
        revbench.check_grad(step, *args, loss=("u_new", 1))


def test_decorator_and_registration_by_name():
    @revbench.custom_adjoint(step)
    def adj(u_new, u, t, dt, unb, ub, dtb):
        return unb, ub + 3.0 * unb, dtb

    assert adj.__name__ == "adj"  # returned unchanged
    g = revbench.grad(step, loss=("u_new", 0))(np.zeros(2), np.ones(2), 0, 0.1)
    np.testing.assert_allclose(g[1], [3.0, 0.0])
    revbench.custom_adjoint("step", step_adjoint)  # a name of this module
    g = revbench.grad(step, loss=("u_new", 0))(np.zeros(2), np.ones(2), 0, 0.1)
    np.testing.assert_allclose(g[1], [1 + 0.1 * np.cos(1.0), 0.0])


def test_a_function_of_the_same_name_elsewhere_is_not_affected():
    revbench.custom_adjoint(step, step_adjoint_scaled)
    other = revbench.define("""
def step(u_new, u, t, dt):
    for i in range(len(u)):
        u_new[i] += u[i] + dt * np.sin(u[i])
""", {"__name__": "elsewhere", "np": np})["step"]
    g = revbench.grad(other, loss=("u_new", 0))(np.zeros(2), np.ones(2), 0, 0.1)
    np.testing.assert_allclose(g[1], [1 + 0.1 * np.cos(1.0), 0.0])


def test_exports_use_the_adjoint():
    jax = pytest.importorskip("jax", reason="JAX is an optional extra (revbench[interop])")
    torch = pytest.importorskip("torch", reason="PyTorch is an optional extra (revbench[interop])")
    from revbench.interop import to_jax, to_torch

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    revbench.custom_adjoint(step, step_adjoint_scaled)
    u0 = np.array([0.1, 0.2, 0.3])
    expect = 0.5 * (1 + 0.01 * np.cos(u0))
    jf = to_jax(step, outputs="u_new")
    gj = jax.jit(jax.grad(lambda u: jnp.sum(jf(jnp.zeros(3), u, 0, 0.01))))(jnp.asarray(u0))
    np.testing.assert_allclose(np.asarray(gj), expect, rtol=1e-14)
    tf = to_torch(step, outputs="u_new")
    u = torch.tensor(u0, requires_grad=True)
    tf(torch.zeros(3, dtype=torch.float64), u, 0, 0.01).sum().backward()
    np.testing.assert_allclose(u.grad.numpy(), expect, rtol=1e-14)
    # registered again after the exports ran: they use the new adjoint
    revbench.custom_adjoint(step, step_adjoint)
    exact = 1 + 0.01 * np.cos(u0)
    gj = jax.jit(jax.grad(lambda u: jnp.sum(jf(jnp.zeros(3), u, 0, 0.01))))(jnp.asarray(u0))
    np.testing.assert_allclose(np.asarray(gj), exact, rtol=1e-14)
    u = torch.tensor(u0, requires_grad=True)
    tf(torch.zeros(3, dtype=torch.float64), u, 0, 0.01).sum().backward()
    np.testing.assert_allclose(u.grad.numpy(), exact, rtol=1e-14)


def test_batched_grad_sees_a_new_registration():
    g = revbench.grad(step, loss=("u_new", 0), batch="u")
    U = np.array([[1.0, 2.0], [0.5, 0.0]])
    first = g(np.zeros(2), U, 0, 0.1)
    np.testing.assert_allclose(first[1][:, 0], 1 + 0.1 * np.cos(U[:, 0]))
    revbench.custom_adjoint(step, step_adjoint_scaled)
    second = g(np.zeros(2), U, 0, 0.1)
    np.testing.assert_allclose(second[1][:, 0], 0.5 * (1 + 0.1 * np.cos(U[:, 0])))


# --- the debugger shows the call as one step ----------------------------------------
def test_trace_steps():
    ns = {"__name__": MODULE, "np": np}
    revbench.define("""
def pstep(u_new, u, t, dt):
    for i in range(len(u)):
        u_new[i] += u[i] + dt * np.sin(u[i])

def outer(L, u_new, u, t, dt):
    pstep(u_new, u, t, dt)
    for i in range(len(u)):
        L += u_new[i]
""", ns, backend="python")
    outer = ns["outer"]
    revbench.custom_adjoint(ns["pstep"], step_adjoint_scaled)
    args = (0.0, np.zeros(3), np.array([0.1, 0.2, 0.3]), 0, 0.5)
    tr = revbench.trace(outer, *args, loss="L")
    calls = [s for s in tr if s.direction == "backward" and s.kind == "call"]
    assert len(calls) == 1
    assert "custom adjoint step_adjoint_scaled, then ~pstep" in calls[0].action
    assert not any(s.function.startswith("pstep") and s.direction == "backward" for s in tr)
    np.testing.assert_allclose(tr.gradients[2], 0.5 * (1 + 0.5 * np.cos(args[2])))
    np.testing.assert_allclose(tr.gradients[2], revbench.grad(outer, loss="L")(*args)[2])
    at_call = tr.state_at(calls[0].index)
    assert at_call.var("u_new").changed  # ~pstep restored it, in that one step
    assert at_call.var("u").adjoint_changed
    # the traced function itself: its whole reverse sweep is that one step
    top = revbench.trace(ns["pstep"], *args[1:], loss=("u_new", 0))
    back = [s for s in top if s.direction == "backward" and s.kind != "turn"]
    assert [s.kind for s in back] == ["call"]
    np.testing.assert_allclose(top.gradients[1], [0.5 * (1 + 0.5 * np.cos(0.1)), 0, 0])


# --- mistakes get clear errors --------------------------------------------------------
@pytest.mark.parametrize("backend", ["numba", "python"])
def test_wrong_results_are_named(backend):
    scale = revbench.define("""
def scale(y, x, c):
    for i in range(len(x)):
        y[i] += c * x[i]
""", {"__name__": MODULE}, backend=backend)["scale"]
    args = (np.zeros(3), np.ones(3), 2.0)
    x_before = args[1].copy()

    def too_few(y, x, c, yb, xb, cb):
        return yb, xb

    def bad_shape(y, x, c, yb, xb, cb):
        return yb, xb[:2], cb

    revbench.custom_adjoint(scale, too_few)
    with pytest.raises((ReversibilityError, ReversibilityTypeError),
                       match=r"custom adjoint too_few .*(returned 2|returns 2).*3 float"):
        revbench.grad(scale, loss=("y", 0))(*args)
    revbench.custom_adjoint(scale, bad_shape)
    with pytest.raises(ReversibilityError, match=r"bad_shape returned an adjoint of `x` whose shape"):
        revbench.grad(scale, loss=("y", 0))(*args)
    np.testing.assert_array_equal(args[1], x_before)  # the caller's data is untouched


def test_an_adjoint_numba_cannot_compile_is_named():
    scale = revbench.define("""
def scale2(y, x, c):
    for i in range(len(x)):
        y[i] += c * x[i]
""", {"__name__": MODULE})["scale2"]

    def uses_a_dict(y, x, c, yb, xb, cb):
        d = {"a": object()}
        return yb, xb + c * yb + len(d), cb

    revbench.custom_adjoint(scale, uses_a_dict)
    with pytest.raises(ReversibilityTypeError,
                       match=r"custom adjoint uses_a_dict of scale2 cannot be compiled by Numba"):
        revbench.grad(scale, loss=("y", 0))(np.zeros(2), np.ones(2), 2.0)


def test_second_derivatives_refuse_a_custom_adjoint():
    revbench.custom_adjoint(step, step_adjoint)

    @reversible
    def total(L, u_new, u, t, dt):
        step(u_new, u, t, dt)
        for i in range(len(u)):
            L += u_new[i] * u_new[i]

    args = (0.0, np.zeros(2), np.ones(2), 0, 0.1)
    with pytest.raises(ReversibilityTypeError, match=r"custom adjoint.*first derivatives only"):
        revbench.hvp(total, loss="L", wrt="u")(*args, np.ones(2))


def test_registration_mistakes():
    with pytest.raises(ValueError, match="not of its inverse"):
        revbench.custom_adjoint(~step, step_adjoint)
    with pytest.raises(TypeError, match="must be a function"):
        revbench.custom_adjoint(step, 3.0)
    with pytest.raises(TypeError, match="needs a reversible function"):
        revbench.custom_adjoint(np.sin, step_adjoint)
    with pytest.raises(TypeError, match="not the reversible function"):
        revbench.custom_adjoint(step, energy)
    assert not any(k[0] == MODULE for k in ADJOINTS)  # nothing registered by the mistakes


def test_explain_says_the_sweep_is_the_users():
    revbench.custom_adjoint(step, step_adjoint)
    text = str(step.explain(np.zeros(2), np.ones(2), 0, 0.1))
    assert "custom adjoint, step_adjoint" in " ".join(text.split())
