"""The built-in workloads of ``revbench.experiments`` (``experiments.md`` §8).

Each workload's reversible step is checked against its NumPy forward loop; each NumPy
reference gradient (a hand-derived adjoint loop) against central finite differences of
that NumPy forward; revbench's gradient of one step against the reference; and, when
``revbench.checkpoint`` is there, ``TimeLoop.value_and_grad`` against the reference.
Small sizes throughout, so the whole file is quick once compiled.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from revbench import grad, reversible
from revbench.experiments.workloads import (
    WORKLOADS,
    Workload,
    heat_loss,
    heat_step,
    laplacian_2d,
    revnet_loss,
    revnet_step,
    rnn_loss,
    rnn_step,
    wave_loss,
    wave_step,
)

NAMES = ["heat", "wave", "rnn", "revnet"]
SMALL = {"heat": {"m": 4}, "wave": {"m": 4}, "rnn": {"d": 5, "d_in": 3}, "revnet": {"batch": 3, "d": 4}}
INPLACE = [n for n in NAMES if WORKLOADS[n].inplace]


def small_args(name: str, n_steps: int, seed: int = 0) -> tuple:
    return WORKLOADS[name].args(n_steps, seed=seed, **SMALL[name])


def is_float(x) -> bool:
    return isinstance(x, float) or (isinstance(x, np.ndarray) and x.dtype == np.float64)


def assert_close(actual, expected, rtol=1e-8, what=""):
    """Elementwise, relative to the largest entry of ``expected`` (gradients span many scales)."""
    expected = np.asarray(expected, dtype=np.float64)
    scale = float(np.max(np.abs(expected))) if expected.size else 0.0
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * max(scale, 1e-300),
                               err_msg=what)


def run_steps(w: Workload, n_steps: int, args: tuple) -> list[tuple[np.ndarray, ...]]:
    """The states ``s_0 .. s_T``, by calling the reversible step in a Python loop."""
    S = w.n_state
    state = tuple(np.array(a) for a in args[:S])
    params = args[S:]
    states = [tuple(s.copy() for s in state)]
    for t in range(n_steps):
        if w.inplace:
            w.step(*state, t, *params)
        else:
            new = tuple(np.zeros_like(s) for s in state)
            w.step(*new, *state, t, *params)
            state = new
        states.append(tuple(s.copy() for s in state))
    return states


# --------------------------------------------------------------------------- #
# the registry and the arguments
# --------------------------------------------------------------------------- #
def test_registry():
    assert list(WORKLOADS) == NAMES
    expect = {"heat": ("sparse", False, 1), "wave": ("sparse", True, 2),
              "rnn": ("ML", False, 1), "revnet": ("ML", True, 2)}
    for name, w in WORKLOADS.items():
        assert isinstance(w, Workload) and w.name == name
        assert (w.kind, w.inplace, w.n_state) == expect[name]
        assert w.description and "\n" not in w.description
        assert w.sizes and all(isinstance(v, int) and v >= 1 for v in w.sizes.values())


def test_import_is_light():
    code = ("import sys, revbench.experiments.workloads\n"
            "bad = [m for m in ('numba', 'matplotlib', 'pandas') if m in sys.modules]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("name", NAMES)
def test_args(name):
    w = WORKLOADS[name]
    a, b, c = w.args(7), w.args(7), w.args(7, seed=1)
    S = w.n_state
    for x, y in zip(a, b):
        assert type(x) is type(y)
        if isinstance(x, np.ndarray):
            assert x is not y and x.flags.c_contiguous and x.dtype in (np.float64, np.int64)
            np.testing.assert_array_equal(x, y)
        else:
            assert x == y
    assert any(not np.array_equal(x, z) for x, z in zip(a, c))
    for s in a[:S]:
        assert isinstance(s, np.ndarray) and s.dtype == np.float64 and s.ndim in (1, 2)
    if name == "rnn":
        assert a[-1].shape == (7, w.sizes["d_in"])
    big = w.args(3, **{k: v + 1 for k, v in w.sizes.items()})
    assert big[0].size > a[0].size


def test_size_errors():
    with pytest.raises(TypeError, match="no size knob 'n'"):
        WORKLOADS["heat"].args(3, n=5)
    with pytest.raises(ValueError, match="must be an int >= 1"):
        WORKLOADS["rnn"].args(3, d=0)
    with pytest.raises(ValueError, match="n_steps"):
        WORKLOADS["wave"].args(0)
    h0, W, U, b, X = small_args("rnn", 3)
    with pytest.raises(ValueError, match="fewer than"):
        WORKLOADS["rnn"].reference(4, (h0, W, U, b, X))


def test_laplacian():
    data, indices, indptr, h = laplacian_2d(3)
    assert indices.dtype == indptr.dtype == np.int64 and data.dtype == np.float64
    n = 9
    L = np.zeros((n, n))
    for i in range(n):
        for k in range(indptr[i], indptr[i + 1]):
            L[i, indices[k]] += data[k]
    np.testing.assert_allclose(L, L.T)
    np.testing.assert_allclose(np.diag(L), -4.0 / h**2)
    assert L[4].sum() == 0.0 and L[0].sum() == pytest.approx(-2.0 / h**2)  # centre; corner
    assert np.all(np.linalg.eigvalsh(L) < 0) and np.all(np.linalg.eigvalsh(L) > -8.0 / h**2)


# --------------------------------------------------------------------------- #
# the reversible steps against the NumPy forward
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("name", NAMES)
def test_step_matches_numpy_forward(name):
    w, T = WORKLOADS[name], 5
    args = small_args(name, T)
    ours = run_steps(w, T, args)
    ref = w.trajectory(T, args)
    assert len(ref) == T + 1
    for k in range(T + 1):
        for a, b in zip(ours[k], ref[k]):
            assert_close(a, b, rtol=1e-12, what=f"{name}: step {k}")
    value = w.loss(0.0, *ours[-1], *args[w.n_state:])[0]
    assert value == pytest.approx(w.reference(T, args)[0], rel=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_steps_are_reversible(name):
    """``(~step)(*step(...))`` gives the arguments back: in place, the state; out of place,
    the new state goes back to zero (Bennett's uncomputation relies on that)."""
    w = WORKLOADS[name]
    args = small_args(name, 4)
    S, params = w.n_state, args[w.n_state:]
    state = tuple(a.copy() for a in args[:S])
    if w.inplace:
        for t in range(4):
            w.step(*state, t, *params)
        assert max(np.abs(s - a).max() for s, a in zip(state, args)) > 1e-3
        for t in reversed(range(4)):
            out = (~w.step)(*w.step(*state, t, *params))
            assert all(o is s for o, s in zip(out, state))
            (~w.step)(*state, t, *params)
        for s, a in zip(state, args):
            np.testing.assert_allclose(s, a, rtol=0, atol=1e-12)
    else:
        new = tuple(np.zeros_like(s) for s in state)
        w.step(*new, *state, 2, *params)
        assert max(np.abs(s).max() for s in new) > 1e-3
        (~w.step)(*new, *state, 2, *params)
        for s in new:
            np.testing.assert_allclose(s, 0.0, rtol=0, atol=1e-12)
        for s, a in zip(state, args):
            np.testing.assert_array_equal(s, a)


# --------------------------------------------------------------------------- #
# the NumPy reference gradient against finite differences
# --------------------------------------------------------------------------- #
def perturbed(args: tuple, i: int, delta) -> tuple:
    return tuple(a + delta if j == i else a for j, a in enumerate(args))


@pytest.mark.parametrize("name", NAMES)
def test_reference_matches_finite_differences(name):
    w, T = WORKLOADS[name], 6
    args = small_args(name, T)
    value, grads = w.reference(T, args)
    assert len(grads) == len(args)
    assert value == pytest.approx(sum(float(np.sum(s * s)) for s in w.trajectory(T, args)[-1]))
    rng = np.random.default_rng(7)

    def J(a):
        return w.reference(T, a)[0]

    for i, (a, g) in enumerate(zip(args, grads)):
        if not is_float(a):
            assert g is None, f"{name}: argument {i} is not float, its gradient must be None"
            continue
        assert np.shape(g) == np.shape(a) and is_float(g)
        scale = float(np.max(np.abs(a))) or 1.0
        directions = [rng.standard_normal(np.shape(a)) for _ in range(2)]
        if isinstance(a, np.ndarray):
            e = np.zeros(a.shape)
            e[tuple(rng.integers(0, n) for n in a.shape)] = 1.0
            directions.append(e)
        eps = 1e-5 * scale
        for d in directions:
            fd = (J(perturbed(args, i, eps * d)) - J(perturbed(args, i, -eps * d))) / (2 * eps)
            exact = float(np.sum(g * d))
            gscale = float(np.sqrt(np.sum(np.square(g)) * np.sum(np.square(d))))
            roundoff = 1e-14 * abs(value) / eps
            assert fd == pytest.approx(exact, rel=1e-6, abs=1e-7 * gscale + roundoff), (
                f"{name}: argument {i}")


# --------------------------------------------------------------------------- #
# revbench's gradient of one step against the reference
# --------------------------------------------------------------------------- #
@reversible
def heat_one(out, u_new, u, t, data, indices, indptr, f, kappa, dt):
    heat_step(u_new, u, t, data, indices, indptr, f, kappa, dt)
    heat_loss(out, u_new, data, indices, indptr, f, kappa, dt)


@reversible
def wave_one(out, u, v, t, data, indices, indptr, c2, dt):
    wave_step(u, v, t, data, indices, indptr, c2, dt)
    wave_loss(out, u, v, data, indices, indptr, c2, dt)


@reversible
def rnn_one(out, h_new, h, t, W, U, b, X):
    rnn_step(h_new, h, t, W, U, b, X)
    rnn_loss(out, h_new, W, U, b, X)


@reversible
def revnet_one(out, x1, x2, t, W1, b1, W2, b2):
    revnet_step(x1, x2, t, W1, b1, W2, b2)
    revnet_loss(out, x1, x2, W1, b1, W2, b2)


ONE_STEP = {"heat": heat_one, "wave": wave_one, "rnn": rnn_one, "revnet": revnet_one}


@pytest.mark.parametrize("name", NAMES)
def test_one_step_grad_matches_reference(name):
    w = WORKLOADS[name]
    args = small_args(name, 1)
    S, state, params = w.n_state, args[:w.n_state], args[w.n_state:]
    lead = state if w.inplace else (*(np.zeros_like(s) for s in state), *state)
    g = grad(ONE_STEP[name], loss="out")(0.0, *lead, 0, *params)
    ours = g[1 + len(lead) - S: 1 + len(lead)] + g[2 + len(lead):]
    ref = w.reference(1, args)[1]
    assert len(ours) == len(ref)
    for i, (a, b) in enumerate(zip(ours, ref)):
        if b is None:
            assert a is None
        else:
            assert_close(a, b, what=f"{name}: gradient {i}")


# --------------------------------------------------------------------------- #
# TimeLoop against the reference
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("name", NAMES)
def test_loop_matches_reference(name):
    checkpoint = pytest.importorskip("revbench.checkpoint")
    w, T = WORKLOADS[name], 12
    args = small_args(name, T)
    keep = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    loop = w.loop(T, **SMALL[name])
    assert isinstance(loop, checkpoint.TimeLoop)
    assert (loop.n_steps, loop.n_state, loop.inplace) == (T, w.n_state, w.inplace)
    ref_value, ref_grads = w.reference(T, args)
    other = checkpoint.Reverse() if w.inplace else checkpoint.Bennett(k=2)
    for strategy in (None, other):
        value, grads = loop.value_and_grad(*args, strategy=strategy)
        assert value == pytest.approx(ref_value, rel=1e-10)
        assert len(grads) == len(ref_grads)
        for i, (a, b) in enumerate(zip(grads, ref_grads)):
            if b is None:
                assert a is None
            else:
                assert_close(a, b, what=f"{name} with {strategy}: gradient {i}")
    for a, k in zip(args, keep):
        np.testing.assert_array_equal(a, k)
    final = loop.run(*args)
    for a, b in zip(final, w.trajectory(T, args)[-1]):
        assert_close(a, b, rtol=1e-12)
