"""GMM (revbench.workloads.gmm): data files and generator, the reversible log-posterior
against plain NumPy and hand-written Numba, its inverse, and its gradients against a
gradient derived by hand in NumPy (itself checked against finite differences).

Compiling the programs is most of the time (about 25 s with an empty revbench cache, a
few seconds with a warm one); the variants that mostly add compilation -- the single
program's reverse sweep, the checked split gradient, the unchecked objective -- are
``slow``."""

from __future__ import annotations

import math

import numpy as np
import pytest

import revbench
from revbench.workloads import gmm

#: (D, K, N) of the small problems the gradients are checked on (D = 1 included)
SMALL = [(1, 3, 5), (2, 4, 7), (5, 3, 6)]


@pytest.fixture(scope="module", params=SMALL, ids=lambda p: "d{}_k{}_n{}".format(*p))
def data(request) -> gmm.GMMData:
    d, k, n = request.param
    return gmm.generate_gmm(d, k, n, seed=11, gamma=1.3, m=2)


def _rel(a, b) -> float:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return float(np.max(np.abs(a - b)) / max(1.0, float(np.max(np.abs(b)))))


# -- data files and generator ----------------------------------------------------------------


ADBENCH_TEXT = """2 3 4
0.5
-1.25
0.75
0.1 0.2
0.3 0.4
0.5 0.6
0.1 0.2 0.3
-0.1 -0.2 -0.3
0.0 0.5 1.0
1.0 2.0
-1.0 0.5
0.25 0.75
3.0 -2.0
1.0 0
"""


def test_read_adbench_text(tmp_path):
    path = tmp_path / "gmm_d2_K3.txt"
    path.write_text(ADBENCH_TEXT)
    d = gmm.read_gmm(path)
    assert (d.d, d.k, d.n) == (2, 3, 4)
    np.testing.assert_array_equal(d.alpha, [0.5, -1.25, 0.75])
    np.testing.assert_array_equal(d.means, [[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]])
    np.testing.assert_array_equal(d.icf[1], [-0.1, -0.2, -0.3])
    np.testing.assert_array_equal(d.x[3], [3.0, -2.0])
    assert d.gamma == 1.0 and d.m == 0 and isinstance(d.m, int)
    np.testing.assert_array_equal(d.q, d.icf[:, :2])
    np.testing.assert_array_equal(d.l, d.icf[:, 2:])


def test_read_replicated_point(tmp_path):
    lines = ADBENCH_TEXT.splitlines()
    text = "\n".join(lines[:10] + [lines[10]] + [lines[-1]]) + "\n"   # one point, N = 4
    path = tmp_path / "gmm_rep.txt"
    path.write_text(text)
    d = gmm.read_gmm(path, replicate_point=True)
    assert d.x.shape == (4, 2)
    np.testing.assert_array_equal(d.x, [[1.0, 2.0]] * 4)


def test_read_refuses_a_short_file(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("\n".join(ADBENCH_TEXT.splitlines()[:8]) + "\n")
    with pytest.raises(ValueError, match="lines"):
        gmm.read_gmm(path)


def test_write_read_round_trip(tmp_path):
    d = gmm.generate_gmm(4, 3, 9, seed=5, gamma=0.7, m=3)
    path = tmp_path / "gmm.txt"
    gmm.write_gmm(path, d)
    header = path.read_text().splitlines()[0]
    assert header == "4 3 9"
    back = gmm.read_gmm(path)
    for name in ("alpha", "means", "icf", "x"):
        np.testing.assert_array_equal(getattr(back, name), getattr(d, name))
    assert (back.gamma, back.m) == (0.7, 3)


def test_generator_is_seeded_and_distributed_like_adbench():
    a = gmm.generate_gmm(3, 4, 50, seed=7)
    b = gmm.generate_gmm(3, 4, 50, seed=7)
    c = gmm.generate_gmm(3, 4, 50, seed=8)
    for name in ("alpha", "means", "icf", "x"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
        assert not np.array_equal(getattr(a, name), getattr(c, name))
    assert a.icf.shape == (4, 3 + 3) and a.x.shape == (50, 3)
    assert (a.gamma, a.m) == (1.0, 0)
    assert 0.0 <= a.means.min() and a.means.max() < 1.0           # uniform [0, 1)
    big = gmm.generate_gmm(10, 50, 1000, seed=1)                  # the rest standard normal
    assert abs(big.x.mean()) < 0.05 and abs(big.x.std() - 1.0) < 0.05
    assert big.means.min() >= 0.0 and abs(big.means.mean() - 0.5) < 0.05


def test_data_validation():
    d = gmm.generate_gmm(2, 3, 4)
    with pytest.raises(ValueError, match="icf"):
        gmm.GMMData(d.alpha, d.means, d.icf[:, :2], d.x)
    with pytest.raises(ValueError, match="m must be"):
        gmm.GMMData(d.alpha, d.means, d.icf, d.x, 1.0, -1)


# -- the references ----------------------------------------------------------------------------


def test_numpy_objective_is_the_log_posterior():
    """Straight from the densities: log( prod_i sum_k phi_k N(x_i | mu_k, (Q^T Q)^-1) *
    prod_k Wishart(Q^T Q | n = D + m + 1, V = I / gamma^2) )."""
    d = gmm.generate_gmm(3, 2, 4, seed=3, gamma=0.8, m=1)
    D, K = d.d, d.k
    Q = gmm.lower_triangular_q(d.icf, D)
    phi = np.exp(d.alpha) / np.exp(d.alpha).sum()
    like = 0.0
    for x in d.x:
        p = 0.0
        for k in range(K):
            P = Q[k].T @ Q[k]
            r = x - d.means[k]
            p += phi[k] * math.exp(-0.5 * r @ P @ r) * math.sqrt(np.linalg.det(P) / (2 * math.pi) ** D)
        like += math.log(p)
    n = D + d.m + 1
    prior = 0.0
    for k in range(K):
        P = Q[k].T @ Q[k]
        Vinv = d.gamma ** 2 * np.eye(D)
        prior += ((n - D - 1) / 2 * math.log(np.linalg.det(P)) - np.trace(Vinv @ P) / 2
                  - n * D / 2 * math.log(2) + n / 2 * math.log(np.linalg.det(Vinv))
                  - gmm.multigammaln(n / 2, D))
    assert gmm.objective_numpy(d) == pytest.approx(like + prior, rel=1e-12)


def test_column_major_order_of_l():
    # icf row: q (D numbers), then Q[1,0], Q[2,0], Q[2,1] for D = 3
    icf = np.array([[0.0, 0.0, 0.0, 1.0, 2.0, 3.0]])
    Q = gmm.lower_triangular_q(icf, 3)[0]
    np.testing.assert_array_equal(Q, [[1.0, 0, 0], [1.0, 1.0, 0], [2.0, 3.0, 1.0]])


def test_multigammaln():
    # log Gamma_1(a) = lgamma(a); Gamma_2(a) = pi^(1/2) Gamma(a) Gamma(a - 1/2)
    assert gmm.multigammaln(2.5, 1) == pytest.approx(math.lgamma(2.5))
    assert gmm.multigammaln(3.0, 2) == pytest.approx(0.5 * math.log(math.pi) + math.lgamma(3.0)
                                                      + math.lgamma(2.5))


def test_numpy_gradient_against_finite_differences():
    d = gmm.generate_gmm(3, 3, 5, seed=4, gamma=1.2, m=1)
    grads = gmm.gradient_numpy(d)
    eps = 1e-6
    for name, g in zip(("alpha", "means", "icf"), grads):
        arr = getattr(d, name)
        fd = np.zeros_like(arr)
        for idx in np.ndindex(arr.shape):
            old = arr[idx]
            arr[idx] = old + eps
            up = gmm.objective_numpy(d)
            arr[idx] = old - eps
            down = gmm.objective_numpy(d)
            arr[idx] = old
            fd[idx] = (up - down) / (2 * eps)
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-6, err_msg=name)


def test_njit_objective(data):
    assert gmm.objective_njit(*gmm._args(data)) == pytest.approx(gmm.objective_numpy(data),
                                                                 rel=1e-12)


# -- the reversible program ----------------------------------------------------------------


def test_reversible_objective(data):
    assert gmm.objective(data) == pytest.approx(gmm.objective_numpy(data), rel=1e-12)


@pytest.mark.slow
def test_reversible_objective_unchecked(data):
    assert gmm.objective(data, check=False) == pytest.approx(gmm.objective_numpy(data), rel=1e-12)


def test_python_backend_runs_the_same_program():
    d = gmm.generate_gmm(2, 3, 3, seed=2, gamma=1.1, m=1)
    f = revbench.reversible(backend="python")(gmm.gmm_objective.__wrapped__)
    out = f(*gmm._args(d), 0.0)[-1]
    assert out == pytest.approx(gmm.objective_numpy(d), rel=1e-12)
    inv = (~f)(*gmm._args(d), out)[-1]
    assert abs(inv) < 1e-9


def test_objective_inverse(data):
    out = revbench.check_inverse(gmm.gmm_objective, *gmm._args(data), 0.25)[-1]
    assert out == pytest.approx(0.25 + gmm.objective_numpy(data), rel=1e-12)


def test_pieces_and_their_inverses():
    d = gmm.generate_gmm(3, 4, 6, seed=9)
    alpha, means, icf, x, _, _ = gmm._args(d)
    g = gmm.n_features(d.d)
    assert g == 1 + 3 + 6
    W = np.zeros((d.k, g))
    revbench.check_inverse(gmm.gmm_weights, alpha, means, icf, W)
    gmm.gmm_weights(alpha, means, icf, W)
    # the features, points in columns (reversible) and in rows and columns (@njit fillers)
    block = 8                                              # wider than the 6 points
    xt = np.zeros((d.d, block))
    xt[:, :d.n] = x.T
    Zt = np.zeros((g, block))
    revbench.check_inverse(gmm.gmm_features_t, xt, Zt, d.n)
    gmm.gmm_features_t(xt, Zt, d.n)
    assert not Zt[:, d.n:].any()                           # unused columns stay zero
    Zt_njit = np.full((g, block), 7.0)
    gmm.point_features_t(x, Zt_njit)                       # zeroes the unused columns
    np.testing.assert_array_equal(Zt_njit, Zt)
    Z = np.zeros((d.n, g))
    gmm.point_features(x, Z)
    np.testing.assert_array_equal(Z, Zt[:, :d.n].T)
    # the inner terms, both ways
    Vref, _, _, _ = gmm._inner_terms(d)
    V = np.zeros((d.n, d.k))
    revbench.check_inverse(gmm.gmm_dots, W, Z, V)
    gmm.gmm_dots(W, Z, V)
    np.testing.assert_allclose(V, Vref, rtol=1e-12, atol=1e-12)
    Vt = np.zeros((d.k, block))
    revbench.check_inverse(gmm.gmm_dots_t, W, Zt, Vt)
    gmm.gmm_dots_t(W, Zt, Vt)
    np.testing.assert_allclose(Vt[:, :d.n].T, Vref, rtol=1e-12, atol=1e-12)
    assert not Vt[:, d.n:].any()                           # zero features, zero terms
    C = np.zeros(d.n)
    revbench.check_inverse(gmm.gmm_row_max, V, C)
    gmm.gmm_row_max(V, C)
    np.testing.assert_array_equal(C, V.max(axis=1))


@pytest.mark.parametrize("g", [3, 8, 9, 17])
def test_dots_t_remainder_features(g):
    """gmm_dots_t takes eight features per statement, then the remainder one by one."""
    rng = np.random.default_rng(g)
    W, Zt = rng.standard_normal((3, g)), rng.standard_normal((g, 5))
    Vt = np.zeros((3, 5))
    gmm.gmm_dots_t(W, Zt, Vt)
    np.testing.assert_allclose(Vt, W @ Zt, rtol=1e-13, atol=1e-13)


def test_dots_needs_zero_output():
    d = gmm.generate_gmm(2, 2, 3, seed=1)
    g = gmm.n_features(d.d)
    W = np.ones((d.k, g))
    Z = np.ones((d.n, g))
    with pytest.raises(revbench.ReversibilityError, match="`v`"):
        gmm.gmm_dots(W, Z, np.ones((d.n, d.k)))


# -- gradients -------------------------------------------------------------------------------


def _check_gradient(data, **kw):
    value, grads = gmm.gmm_gradient(data, **kw)
    assert value == pytest.approx(gmm.objective_numpy(data), rel=1e-12)
    for name, g, ref in zip(("alpha", "means", "icf"), grads, gmm.gradient_numpy(data)):
        assert g.shape == ref.shape
        assert _rel(g, ref) < 1e-10, name


def test_gradient_against_numpy(data):
    _check_gradient(data)                             # the default: split, check=False


@pytest.mark.slow
def test_gradient_with_checks_against_numpy(data):
    _check_gradient(data, check=True)


@pytest.mark.slow
@pytest.mark.parametrize("check", [False, True])
def test_single_program_gradient_against_numpy(data, check):
    _check_gradient(data, check=check, method="grad")


def test_gradient_with_far_points():
    """Points far from the means: huge features and inner terms."""
    d = gmm.generate_gmm(2, 3, 5, seed=6)
    d.x *= 3e9
    value, grads = gmm.gmm_gradient(d)
    assert value == pytest.approx(gmm.objective_numpy(d), rel=1e-12)
    for g, ref in zip(grads, gmm.gradient_numpy(d)):
        assert _rel(g, ref) < 1e-10


def test_gradient_workspace_is_reused_and_checked():
    d = gmm.generate_gmm(3, 4, gmm.point_block(3) + 5, seed=8)   # a full and a partial block
    ws = gmm.SplitWorkspace.new(d.d, d.k, d.n)
    first = gmm.gmm_gradient(d, workspace=ws)
    again = gmm.gmm_gradient(d, workspace=ws)                  # stale work arrays are reset
    assert again[0] == first[0]
    for a, b, ref in zip(again[1], first[1], gmm.gradient_numpy(d)):
        np.testing.assert_array_equal(a, b)
        assert _rel(a, ref) < 1e-10
    other = gmm.SplitWorkspace.new(d.d, d.k + 1, d.n)
    with pytest.raises(ValueError, match=rf"SplitWorkspace.new\(3, 4, {d.n}\)"):
        gmm.gmm_gradient(d, workspace=other)


def test_gradient_at_a_benchmark_size():
    d = gmm.generate_gmm(10, 5, 200, seed=0)
    value, grads = gmm.gmm_gradient(d)
    assert value == pytest.approx(gmm.objective_njit(*gmm._args(d)), rel=1e-12)
    for g, ref in zip(grads, gmm.gradient_numpy(d)):
        assert _rel(g, ref) < 1e-9


@pytest.mark.slow
def test_check_grad_of_the_whole_program():
    """revbench's own finite-difference check, every float argument (x and gamma too)."""
    d = gmm.generate_gmm(2, 2, 3, seed=12, gamma=0.9, m=1)
    revbench.check_grad(gmm.gmm_objective, *gmm._args(d), 0.0, loss="out",
                        rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", [3, 4, 9])
def test_dots_groups_of_four_points_and_remainder(n):
    """gmm_dots takes four points per pass over the features, then the remainder; its
    reverse sweep (what the gradient runs) gives dL/dW = gV^T Z."""
    rng = np.random.default_rng(n)
    W, Z = rng.standard_normal((3, 7)), rng.standard_normal((n, 7))
    V = np.zeros((n, 3))
    gmm.gmm_dots(W, Z, V)
    np.testing.assert_allclose(V, Z @ W.T, rtol=1e-13, atol=1e-13)
    gV = rng.standard_normal((n, 3))
    kernel = gmm.gmm_dots_unchecked.kernel("backward", W, Z, V, wrt=("W",))
    out = kernel(W, Z, V.copy(), np.zeros_like(W), gV.copy(), 1e-8, 1e-8)
    np.testing.assert_allclose(out[3], gV.T @ Z, rtol=1e-12, atol=1e-12)
