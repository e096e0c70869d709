"""revbench.lib: forward vs NumPy, inverse round trips, gradients vs finite differences and
closed forms; every function also through a caller on each backend (tiny sizes)."""

from __future__ import annotations

import numpy as np
import pytest

import revbench
from revbench import check_grad, check_inverse, grad, jacobian, lib

RNG = np.random.default_rng(20261121)


def _vec(n, scale=1.0):
    return scale * RNG.standard_normal(n)


def _softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


def _lse(x):
    m = x.max()
    return m + np.log(np.exp(x - m).sum())


# name -> (function, args, expected final value of the first argument, loss for check_grad)
X5, Y5, Z3 = _vec(5), _vec(5), _vec(3)
A35, B54, C34 = RNG.standard_normal((3, 5)), RNG.standard_normal((5, 4)), RNG.standard_normal((3, 4))
CASES = {
    "dot": (lib.dot, (0.5, X5, Y5), 0.5 + X5 @ Y5, "s"),
    "sumsq": (lib.sumsq, (0.5, X5), 0.5 + X5 @ X5, "s"),
    "total": (lib.total, (0.5, X5), 0.5 + X5.sum(), "s"),
    "axpy": (lib.axpy, (Y5, 1.5, X5), Y5 + 1.5 * X5, ("y", 3)),
    "scale": (lib.scale, (X5, -2.5), -2.5 * X5, ("x", 1)),
    "matvec": (lib.matvec, (Z3, A35, X5), Z3 + A35 @ X5, ("y", 1)),
    "matvec_t": (lib.matvec_t, (Y5, A35, Z3), Y5 + A35.T @ Z3, ("y", 4)),
    "outer": (lib.outer, (A35, Z3, X5), A35 + np.outer(Z3, X5), ("A", (2, 1))),
    "matmul": (lib.matmul, (C34, A35, B54), C34 + A35 @ B54, ("C", (1, 2))),
    "logsumexp": (lib.logsumexp, (0.25, X5), 0.25 + _lse(X5), "out"),
    "logaddexp": (lib.logaddexp, (0.25, 0.7, -1.3), 0.25 + np.logaddexp(0.7, -1.3), "out"),
    "softmax": (lib.softmax, (Y5, X5), Y5 + _softmax(X5), ("p", 2)),
    "log_softmax": (lib.log_softmax, (Y5, X5), Y5 + X5 - _lse(X5), ("p", 0)),
}


def _copy(args):
    return tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_matches_numpy(name):
    f, args, expected, _ = CASES[name]
    out = f(*_copy(args))
    np.testing.assert_allclose(out[0], expected, rtol=1e-12, atol=1e-12)
    for a, o in zip(args[1:], out[1:]):  # everything else is only read
        np.testing.assert_array_equal(o, a)


@pytest.mark.parametrize("name", sorted(CASES))
def test_inverse_round_trip(name):
    f, args, expected, _ = CASES[name]
    out = check_inverse(f, *_copy(args))
    np.testing.assert_allclose(out[0], expected, rtol=1e-12, atol=1e-12)
    # ~f subtracts what f adds
    back = (~f)(*_copy(out))
    np.testing.assert_allclose(back[0], args[0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_vs_finite_differences(name):
    f, args, _, loss = CASES[name]
    check_grad(f, *_copy(args), loss=loss, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("backend", ["python"])  # numba: the direct calls above
@pytest.mark.parametrize("name", sorted(CASES))
def test_through_a_caller_on_the_python_backend(make, name):
    """The library called from user code runs on the caller's backend: here plain Python."""
    f, args, expected, loss = CASES[name]
    params = ", ".join(f.params)
    caller = make(f"""
        def caller({params}):
            {f.__name__}({params})
    """, namespace={f.__name__: f})
    out = caller(*_copy(args))
    np.testing.assert_allclose(out[0], expected, rtol=1e-12, atol=1e-12)
    check_inverse(caller, *_copy(args))
    check_grad(caller, *_copy(args), loss=loss, rtol=1e-6, atol=1e-8)


# --------------------------------------------------------------------------- #
# gradients against closed forms
# --------------------------------------------------------------------------- #
def test_dot_sumsq_total_gradients():
    x, y = _vec(7), _vec(7)
    gs, gx, gy = grad(lib.dot, loss="s")(0.0, x, y)
    assert gs == 1.0
    np.testing.assert_allclose(gx, y)
    np.testing.assert_allclose(gy, x)
    np.testing.assert_allclose(grad(lib.sumsq, loss="s")(0.0, x)[1], 2 * x)
    np.testing.assert_allclose(grad(lib.total, loss="s")(0.0, x)[1], np.ones(7))


def test_matvec_family_jacobians():
    A, x, z = RNG.standard_normal((4, 6)), _vec(6), _vec(4)
    np.testing.assert_allclose(jacobian(lib.matvec, outputs="y", wrt="x")(np.zeros(4), A, x), A)
    np.testing.assert_allclose(jacobian(lib.matvec_t, outputs="y", wrt="x")(np.zeros(6), A, z), A.T)
    # d (A x)_i / dA[k, j] = [i == k] x[j]
    J = jacobian(lib.matvec, outputs="y", wrt="A")(np.zeros(4), A, x)
    np.testing.assert_allclose(J, np.kron(np.eye(4), x[None, :]))
    # outer: d A_out[i, j] / dx[k] = [i == k] y[j]
    J = jacobian(lib.outer, outputs="A", wrt="x")(np.zeros((4, 6)), z, x)
    np.testing.assert_allclose(J, np.kron(np.eye(4), x[:, None]))
    # matmul: d C[i, j] / dA[k, p] = [i == k] B[p, j]
    B = RNG.standard_normal((6, 3))
    J = jacobian(lib.matmul, outputs="C", wrt="A")(np.zeros((4, 3)), A, B)
    np.testing.assert_allclose(J, np.kron(np.eye(4), B.T))


def test_logsumexp_gradient_is_softmax_and_softmax_jacobian():
    x = _vec(8, 3.0)
    np.testing.assert_allclose(grad(lib.logsumexp, loss="out")(0.0, x)[1], _softmax(x), atol=1e-15)
    p = _softmax(x)
    J = jacobian(lib.softmax, outputs="p", wrt="x")(np.zeros(8), x)
    np.testing.assert_allclose(J, np.diag(p) - np.outer(p, p), atol=1e-15)
    J = jacobian(lib.log_softmax, outputs="p", wrt="x")(np.zeros(8), x)
    np.testing.assert_allclose(J, np.eye(8) - p[None, :], atol=1e-14)


def test_logaddexp_gradient_is_sigmoid():
    _, ga, gb = grad(lib.logaddexp, loss="out")(0.0, 0.4, -1.1)
    sig = 1.0 / (1.0 + np.exp(-(0.4 - -1.1)))
    assert ga == pytest.approx(sig) and gb == pytest.approx(1.0 - sig)


# --------------------------------------------------------------------------- #
# numerical robustness of the stable functions
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("shift", [1000.0, -1000.0, 1e6])
def test_logsumexp_does_not_overflow(shift):
    x = _vec(10) + shift
    out, _ = lib.logsumexp(0.0, x)
    assert np.isfinite(out) and out == pytest.approx(_lse(x), rel=1e-14)
    g = grad(lib.logsumexp, loss="out")(0.0, x)[1]
    assert np.all(np.isfinite(g))
    np.testing.assert_allclose(g, _softmax(x), atol=1e-13)
    check_inverse(lib.logsumexp, 0.0, x)
    p = lib.softmax(np.zeros(10), x)[0]
    np.testing.assert_allclose(p, _softmax(x), atol=1e-14)


def test_logsumexp_ties_single_element_and_large_arrays():
    x = np.full(6, 2.5)  # every element is the maximum
    assert lib.logsumexp(0.0, x)[0] == pytest.approx(2.5 + np.log(6))
    np.testing.assert_allclose(grad(lib.logsumexp, loss="out")(0.0, x)[1], np.full(6, 1 / 6))
    assert lib.logsumexp(1.0, np.array([-3.0]))[0] == pytest.approx(-2.0)
    # the sum is uncomputed within the ancilla check's tolerance even for long arrays
    x = _vec(200_000, 30.0)
    out = check_inverse(lib.logsumexp, 0.0, x)[0]
    assert out == pytest.approx(_lse(x), rel=1e-13)


def test_logaddexp_large_arguments():
    assert lib.logaddexp(0.0, 1000.0, 999.0)[0] == pytest.approx(np.logaddexp(1000.0, 999.0))
    assert lib.logaddexp(0.0, -1000.0, -2000.0)[0] == pytest.approx(-1000.0)
    g = grad(lib.logaddexp, loss="out")(0.0, 1000.0, 1000.0)
    assert g[1:] == pytest.approx((0.5, 0.5))


# --------------------------------------------------------------------------- #
# conventions and errors
# --------------------------------------------------------------------------- #
def test_scale_by_zero_is_refused():
    x = np.array([1.0, 2.0])
    with pytest.raises(revbench.ReversibilityError, match="zero"):
        lib.scale(x, 0.0)
    np.testing.assert_array_equal(x, [1.0, 2.0])


def test_aliased_arguments_are_refused():
    x = _vec(4)
    with pytest.raises(revbench.ReversibilityError, match="share memory"):
        lib.dot(0.0, x, x)


def test_unchecked_caller_runs_the_library_unchecked():
    fns = revbench.define("""
@reversible(check=False)
def fast(s, x, y):
    dot(s, x, y)
    sumsq(s, x)
""", {"dot": lib.dot, "sumsq": lib.sumsq, "np": np})
    x, y = _vec(5), _vec(5)
    assert fns["fast"](0.0, x, y)[0] == pytest.approx(x @ y + x @ x)
    assert "_RbCheckFailed(" not in fns["fast"].source("forward", 0.0, x, y)
    check_grad(fns["fast"], 0.0, x, y, loss="s")


def test_every_function_is_documented_and_exported():
    for name in lib.__all__:
        f = getattr(lib, name)
        assert isinstance(f, revbench.ReversibleFunction), name
        assert f.__doc__ and "Cost" in f.__doc__, name


def test_size_mismatches_are_clear_assertion_errors():
    with pytest.raises(AssertionError, match="same length"):
        lib.dot(0.0, _vec(3), _vec(4))
    with pytest.raises(AssertionError, match="matvec"):
        lib.matvec(np.zeros(2), np.zeros((3, 3)), np.zeros(3))
    with pytest.raises(AssertionError, match="matmul"):
        lib.matmul(np.zeros((2, 2)), np.zeros((2, 3)), np.zeros((2, 2)))
    with pytest.raises(AssertionError, match="must not be empty"):
        lib.logsumexp(0.0, np.zeros(0))
    with pytest.raises(AssertionError, match="same length"):
        lib.softmax(np.zeros(2), _vec(3))
