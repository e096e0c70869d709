"""External functions (``revbench.external``): a plain function made reversible as
``out += g(*inputs)``, differentiated by its custom adjoint, on both backends.

Oracles: NumPy's own solve, the implicit-function theorem derived by hand, central
finite differences (``check_grad``), and the Jacobian ``A^-1``.
"""

from __future__ import annotations

import numpy as np
import pytest

import revbench
from revbench import ReversibilityError, ReversibilityTypeError
from revbench.rules.adjoints import ADJOINTS

MODULE = __name__


@pytest.fixture(autouse=True)
def _clean_registry():
    yield
    for key in [k for k in ADJOINTS if k[0] == MODULE]:
        del ADJOINTS[key]
    revbench.rules.functions.REGISTRY_VERSION[0] += 1


def solve_adjoint(out, A, b, out_bar, A_bar, b_bar):
    """x = A^-1 b: b_bar += A^-T out_bar, A_bar -= lam x^T."""
    lam = np.linalg.solve(A.T, out_bar)
    return out_bar, A_bar - np.outer(lam, np.linalg.solve(A, b)), b_bar + lam


PROGRAMS = """
def loss(L, x, A, b, w):
    solve(x, A, b)
    for i in range(len(x)):
        L += w[i] * x[i] * x[i]

def uncomputed(L, x, A, b, w):
    with routine:
        solve(x, A, b)
    for i in range(len(x)):
        L += w[i] * x[i] * x[i]
    ~routine
"""


@pytest.fixture(params=["numba", "python"])
def programs(request):
    backend = request.param

    def solve(A, b):
        return np.linalg.solve(A, b)

    ns = {"__name__": MODULE, "np": np}
    ns["solve"] = revbench.external(solve, adjoint=solve_adjoint, backend=backend)
    revbench.define(PROGRAMS, ns, backend=backend)
    return ns


def system(n=3, seed=1):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, n)) + 4 * np.eye(n), rng.normal(size=n), np.arange(1.0, n + 1)


def test_runs_forward_and_backward(programs):
    solve = programs["solve"]
    A, b, _ = system()
    assert solve.params == ("out", "A", "b")
    x = solve(np.zeros(3), A, b)[0]
    np.testing.assert_allclose(x, np.linalg.solve(A, b), rtol=1e-14)
    back = (~solve)(x, A, b)[0]
    np.testing.assert_allclose(back, 0.0, atol=1e-16)
    revbench.check_inverse(solve, np.ones(3), A, b)


# an external function's kernels are compiled by Numba (12 s)
@pytest.mark.parametrize("programs", [pytest.param("numba", marks=pytest.mark.slow), "python"],
                         indirect=True)
def test_gradients_through_it(programs):
    A, b, w = system()
    args = (0.0, np.zeros(3), A, b, w)
    x = np.linalg.solve(A, b)
    lam = np.linalg.solve(A.T, 2 * w * x)
    for name in ("loss", "uncomputed"):  # the second runs ~solve in its reverse sweep
        g = revbench.grad(programs[name], loss="L")(*args)
        np.testing.assert_allclose(g[3], lam, rtol=1e-12)
        np.testing.assert_allclose(g[2], -np.outer(lam, x), rtol=1e-12, atol=1e-15)
        revbench.check_grad(programs[name], *args, loss="L")
    J = revbench.jacobian(programs["solve"], outputs="out", wrt="b")(np.zeros(3), A, b)
    np.testing.assert_allclose(J, np.linalg.inv(A), rtol=1e-12, atol=1e-15)
    # the inverse's own reverse sweep: d(out - A^-1 b)/db = -A^-1
    Ji = revbench.jacobian(~programs["solve"], outputs="out", wrt="b")(np.ones(3), A, b)
    np.testing.assert_allclose(Ji, -np.linalg.inv(A), rtol=1e-12, atol=1e-15)


def test_scalar_output_and_the_debugger():
    def dot(x, y):
        return np.dot(x, y)

    def dot_adjoint(out, x, y, out_bar, x_bar, y_bar):
        return out_bar, x_bar + out_bar * y, y_bar + out_bar * x

    ns = {"__name__": MODULE, "np": np}
    ns["dot"] = revbench.external(dot, adjoint=dot_adjoint, backend="python")
    revbench.define("""
def energy(E, x, y):
    dot(E, x, y)
    E *= 2.0
""", ns, backend="python")
    x, y = np.array([1.0, 2.0]), np.array([3.0, -1.0])
    assert ns["energy"](0.0, x, y)[0] == 2.0
    tr = revbench.trace(ns["energy"], 0.0, x, y, loss="E")
    calls = [s for s in tr if s.kind == "call"]
    assert [s.direction for s in calls] == ["forward", "backward"]
    assert "external: out += dot(x, y)" in calls[0].action
    assert "custom adjoint dot_adjoint" in calls[1].action
    np.testing.assert_allclose(tr.gradients[1], 2 * y)
    np.testing.assert_allclose(tr.gradients[2], 2 * x)


def test_mistakes_are_named():
    def solve(A, b):
        return np.linalg.solve(A, b)

    ns = {"__name__": MODULE, "np": np}
    plain = revbench.external(solve, backend="python")
    A, b, _ = system()
    with pytest.raises(ReversibilityTypeError, match="solve has no adjoint"):
        revbench.grad(plain, loss=("out", 0))(np.zeros(3), A, b)
    with pytest.raises(ReversibilityError, match="returned a value whose shape is not `out`'s"):
        plain(np.zeros(4), A, b)
    out = np.zeros(3)
    with pytest.raises(ReversibilityError, match="infinite or nan"):
        plain(out, np.zeros((3, 3)) * np.nan, b)
    np.testing.assert_array_equal(out, 0.0)  # the caller's array is untouched
    with pytest.raises(ReversibilityTypeError, match="must be a float"):
        plain(0, A, b)
    def clash(out, b):
        return b

    def star(*b):
        return b

    with pytest.raises(TypeError, match="named `out`"):
        revbench.external(clash)
    with pytest.raises(TypeError, match="plain positional"):
        revbench.external(star)
    with pytest.raises(TypeError, match="plain Python function"):
        revbench.external(lambda b: b)
    ns["solve"] = revbench.external(solve, adjoint=solve_adjoint)
    revbench.define(PROGRAMS, ns)
    with pytest.raises(ReversibilityTypeError, match="first derivatives only"):
        revbench.hvp(ns["loss"], loss="L", wrt="b")(0.0, np.zeros(3), A, b, np.ones(3), np.ones(3))


def test_a_function_numba_cannot_compile_is_named():
    def uses_a_set(b):
        s = {object()}
        return b * len(s)

    f = revbench.external(uses_a_set)
    with pytest.raises(ReversibilityTypeError,
                       match="the external function uses_a_set cannot be compiled by Numba"):
        f(np.zeros(2), np.ones(2))


def test_explain_and_source_of_an_external_function():
    def solve(A, b):
        return np.linalg.solve(A, b)

    ext = revbench.external(solve, adjoint=solve_adjoint, backend="python")
    A, b, _ = system()
    text = " ".join(str(ext.explain(np.zeros(3), A, b)).split())
    assert "solve is an external function: out += solve(A, b)" in text
    assert "its custom adjoint solve_adjoint" in text
    assert "out -= solve(A, b)" in ext.source("inverse", np.zeros(3), A, b)


@pytest.mark.parametrize("backend", ["numba", "python"])
def test_complex_values_into_a_real_output_are_refused(backend):
    def rotate(x):
        return x * 1j

    out = np.zeros(2)
    with pytest.raises(TypeError, match="returned complex values, but `out` is real"):
        revbench.external(rotate, backend=backend)(out, np.ones(2))
    np.testing.assert_array_equal(out, 0.0)
    z = revbench.external(rotate, backend=backend)(np.zeros(2, dtype=complex), np.ones(2))[0]
    np.testing.assert_array_equal(z, [1j, 1j])
