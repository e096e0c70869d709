"""CSR sparse functions (revbench.lib.sparse) and the sparse workload
(revbench.workloads.sparse): forward vs SciPy, inverses, gradients vs finite differences
and the closed forms, the sparsity pattern of the A gradient, both backends."""

from __future__ import annotations

import numpy as np
import pytest

scipy_sparse = pytest.importorskip("scipy.sparse")

import revbench  # noqa: E402
from revbench import check_grad, check_inverse, grad, jacobian, lib  # noqa: E402
from revbench.workloads import sparse as S  # noqa: E402


def small_csr(m=5, n=7, density=0.35, seed=3, duplicates=False):
    """A small CSR matrix with int64 indices, at least one empty row, maybe duplicates."""
    A = S.make_csr(n, density, seed, m=m).tolil()
    A[1, :] = 0.0  # an empty row
    A = A.tocsr()
    A.eliminate_zeros()
    data, indices, indptr = A.data.copy(), A.indices.astype(np.int64), A.indptr.astype(np.int64)
    if duplicates:  # repeat the first stored value of row 0 (same column twice)
        k = int(indptr[0])
        data = np.insert(data, k + 1, 0.5)
        indices = np.insert(indices, k + 1, indices[k])
        indptr = indptr.copy()
        indptr[1:] += 1
    B = scipy_sparse.csr_matrix((data, indices, indptr), shape=(m, n))
    return B, data, indices, indptr


RNG = np.random.default_rng(7)
A0, D0, I0, P0 = small_csr()
XM, XN = RNG.standard_normal(5), RNG.standard_normal(7)


# --------------------------------------------------------------------------- #
# lib.sparse: forward, inverse, gradients
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("duplicates", [False, True])
def test_csr_functions_match_scipy(duplicates):
    A, d, ind, ptr = small_csr(duplicates=duplicates)
    y0m, y0n = RNG.standard_normal(5), RNG.standard_normal(7)
    y = y0m.copy()
    lib.csr_matvec(y, d, ind, ptr, XN)
    np.testing.assert_allclose(y, y0m + A @ XN, rtol=1e-14, atol=1e-14)
    y = y0n.copy()
    lib.csr_matvec_t(y, d, ind, ptr, XM)
    np.testing.assert_allclose(y, y0n + A.T @ XM, rtol=1e-14, atol=1e-14)
    s = lib.csr_bilinear(0.25, XM, d, ind, ptr, XN)[0]
    assert s == pytest.approx(0.25 + XM @ (A @ XN), rel=1e-13)
    D = np.ones((5, 7))
    lib.csr_todense(D, d, ind, ptr)
    np.testing.assert_allclose(D, 1.0 + A.toarray(), rtol=1e-14)
    assert lib.sparse_dot(0.0, d, ind, XN)[0] == pytest.approx(d @ XN[ind], rel=1e-13)


CSR_CASES = {
    "csr_matvec": (lib.csr_matvec, (RNG.standard_normal(5), D0, I0, P0, XN), ("y", 2)),
    "csr_matvec_t": (lib.csr_matvec_t, (RNG.standard_normal(7), D0, I0, P0, XM), ("y", 3)),
    "csr_bilinear": (lib.csr_bilinear, (0.5, XM, D0, I0, P0, XN), "s"),
    "csr_todense": (lib.csr_todense, (np.zeros((5, 7)), D0, I0, P0), ("D", (0, int(I0[0])))),
    "sparse_dot": (lib.sparse_dot, (0.5, D0, I0, XN), "s"),
}


def _copy(args):
    return tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)


@pytest.mark.parametrize("name", sorted(CSR_CASES))
def test_csr_inverse_and_finite_differences(name):
    f, args, loss = CSR_CASES[name]
    out = check_inverse(f, *_copy(args))
    for a, o in zip(args[1:], out[1:]):
        np.testing.assert_array_equal(o, a)  # only the first argument changes
    g = check_grad(f, *_copy(args), loss=loss, rtol=1e-6, atol=1e-8)
    for a, gi in zip(args, g):  # index arrays carry no gradient
        if isinstance(a, np.ndarray) and a.dtype == np.int64:
            assert gi is None


@pytest.mark.parametrize("backend", ["python"])
@pytest.mark.parametrize("name", sorted(CSR_CASES))
def test_csr_through_a_python_backend_caller(make, name):
    f, args, loss = CSR_CASES[name]
    params = ", ".join(f.params)
    caller = make(f"""
        def caller({params}):
            {f.__name__}({params})
    """, namespace={f.__name__: f})
    expected = f(*_copy(args))[0]
    np.testing.assert_allclose(caller(*_copy(args))[0], expected, rtol=1e-14)
    check_grad(caller, *_copy(args), loss=loss, rtol=1e-6, atol=1e-8)


def test_csr_jacobians_are_the_matrix():
    A, d, ind, ptr = small_csr(duplicates=True)
    J = jacobian(lib.csr_matvec, outputs="y", wrt="x")(np.zeros(5), d, ind, ptr, XN)
    np.testing.assert_allclose(J, A.toarray())
    J = jacobian(lib.csr_matvec_t, outputs="y", wrt="x")(np.zeros(7), d, ind, ptr, XM)
    np.testing.assert_allclose(J, A.toarray().T)


def test_csr_bilinear_gradient_closed_forms():
    A, d, ind, ptr = small_csr(duplicates=True)
    gs, gx, gd, gi, gp, gy = grad(lib.csr_bilinear, loss="s")(0.0, XM, d, ind, ptr, XN)
    assert gs == 1.0 and gi is None and gp is None
    rows = S.row_of(A)
    np.testing.assert_allclose(gx, A @ XN, rtol=1e-13)
    np.testing.assert_allclose(gy, A.T @ XM, rtol=1e-13)
    np.testing.assert_allclose(gd, XM[rows] * XN[ind], rtol=1e-13)


# --------------------------------------------------------------------------- #
# the workload
# --------------------------------------------------------------------------- #
def test_make_csr_is_seeded_int64_and_has_the_density():
    A = S.make_csr(300, 0.05, seed=11)
    assert A.shape == (300, 300) and A.format == "csr"
    assert A.data.dtype == np.float64
    assert A.indices.dtype == np.int64 and A.indptr.dtype == np.int64
    assert A.nnz == round(0.05 * 300 * 300)
    assert A.has_sorted_indices
    B = S.make_csr(300, 0.05, seed=11)
    np.testing.assert_array_equal(A.data, B.data)
    np.testing.assert_array_equal(A.indices, B.indices)
    C = S.make_csr(300, 0.05, seed=12)
    assert not np.array_equal(A.indices, C.indices)
    R = S.make_csr(30, 0.2, seed=1, m=20)
    assert R.shape == (20, 30)
    A, x, y = S.make_problem(50, 0.1, 4)
    assert x.shape == (50,) and y.shape == (50,)


def test_oracle_against_finite_differences():
    A, x, y = S.make_problem(12, 0.3, 5)
    w = RNG.standard_normal(12)
    for kind in S.KINDS:
        o = S.oracle_gradients(A, x, y, kind=kind, w=w)

        def loss(data, x, y, kind=kind):
            B = S.with_data(A, data)
            return float(x @ (B @ y)) if kind == "bilinear" else float(w @ (y + B @ x))

        eps = 1e-6
        for name, v, g in (("data", A.data, o.A.data), ("x", x, o.x), ("y", y, o.y)):
            fd = np.empty_like(v)
            for k in range(v.size):
                args = {"data": A.data, "x": x, "y": y}
                for sgn, store in ((1, "p"), (-1, "m")):
                    vv = v.copy()
                    vv[k] += sgn * eps
                    args[name] = vv
                    if store == "p":
                        fp = loss(**args)
                    else:
                        fm = loss(**args)
                fd[k] = (fp - fm) / (2 * eps)
            np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8, err_msg=f"{kind} d/d{name}")


@pytest.mark.parametrize("kind", S.KINDS)
@pytest.mark.parametrize("method", S.METHODS)
@pytest.mark.parametrize("checked", [True, False])
def test_workload_gradients_match_the_closed_forms(kind, method, checked):
    A, x, y = S.make_problem(200, 0.05, 1)
    w = RNG.standard_normal(200)
    before = (A.data.copy(), x.copy(), y.copy())
    g = S.gradients(A, x, y, kind=kind, w=w, checked=checked, method=method)
    o = S.oracle_gradients(A, x, y, kind=kind, w=w)
    np.testing.assert_allclose(g.value, o.value, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(g.x, o.x, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(g.y, o.y, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(g.A.data, o.A.data, rtol=1e-12, atol=1e-13)
    # the A gradient keeps A's sparsity pattern: the same index arrays
    assert scipy_sparse.issparse(g.A) and g.A.format == "csr" and g.A.shape == A.shape
    assert g.A.indices is A.indices and g.A.indptr is A.indptr
    # the inputs are untouched
    for a, b in zip(before, (A.data, x, y)):
        np.testing.assert_array_equal(a, b)


def test_workload_programs_against_finite_differences():
    A, x, y = S.make_problem(8, 0.4, 2)
    d, ind, ptr = S.csr_arrays(A)
    check_grad(S.bilinear, 0.0, x, d, ind, ptr, y, loss="s")
    w = RNG.standard_normal(8)
    check_grad(S.matvec_loss, 0.0, np.zeros(8), d, ind, ptr, x, w, loss="L")
    check_inverse(S.matvec, np.zeros(8), d, ind, ptr, x)


def test_matvec_default_cotangent_and_rectangular_matrices():
    A = S.make_csr(9, 0.3, seed=4, m=6)  # 6 x 9
    x, y = RNG.standard_normal(9), RNG.standard_normal(6)
    g = S.gradients(A, x, y, kind="matvec")
    np.testing.assert_allclose(g.value, y + A @ x)
    np.testing.assert_allclose(g.x, A.T @ np.ones(6))
    np.testing.assert_allclose(g.y, np.ones(6))
    xb, yb = RNG.standard_normal(6), RNG.standard_normal(9)
    g = S.gradients(A, xb, yb, kind="bilinear", method="sweep")
    assert g.value == pytest.approx(xb @ (A @ yb))
    np.testing.assert_allclose(g.y, A.T @ xb)


def test_int32_matrices_are_accepted():
    A = scipy_sparse.random(20, 20, density=0.2, format="csr", random_state=np.random.default_rng(0))
    assert A.indices.dtype == np.int32
    x, y = RNG.standard_normal(20), RNG.standard_normal(20)
    g = S.gradients(A, x, y)
    o = S.oracle_gradients(A, x, y)
    np.testing.assert_allclose(g.A.data, o.A.data)
    np.testing.assert_allclose(g.x, o.x)


def test_workload_argument_errors():
    A, x, y = S.make_problem(10, 0.3, 0)
    with pytest.raises(ValueError, match="length"):
        S.gradients(A, x[:5], y)
    with pytest.raises(ValueError, match="kind"):
        S.gradients(A, x, y, kind="nope")
    with pytest.raises(ValueError, match="method"):
        S.gradients(A, x, y, method="nope")
    with pytest.raises(TypeError, match="CSR"):
        S.gradients(A.tocoo(), x, y)
    with pytest.raises(ValueError, match="w must"):
        S.gradients(A, x, y, kind="matvec", w=np.ones(3))


def test_checked_kernels_report_failures_as_reversibility_errors():
    # a NaN in x makes the `del xi` check of csr_bilinear fail (nan != nan)
    A, x, y = S.make_problem(10, 0.3, 0)
    x[3] = np.nan
    with pytest.raises(revbench.ReversibilityError, match="xi"):
        S.gradients(A, x, y, checked=True, method="kernels")


def test_csr_size_mismatches_are_clear_assertion_errors():
    with pytest.raises(AssertionError, match="one element per row"):
        lib.csr_matvec(np.zeros(4), D0, I0, P0, XN)
    with pytest.raises(AssertionError, match="same length"):
        lib.csr_bilinear(0.0, XM, D0[:-1].copy(), I0, P0, XN)
    with pytest.raises(revbench.ReversibilityTypeError, match="int32"):
        lib.csr_matvec(np.zeros(5), D0, I0.astype(np.int32), P0, XN)
