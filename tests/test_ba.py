"""Bundle adjustment (revbench.workloads.ba): data files, the reversible objective against
plain NumPy and hand-written Numba, its inverse, and the sparse Jacobian built from reverse
sweeps against finite differences and an AD-independent forward-mode computation."""

from __future__ import annotations

import numpy as np
import pytest

import revbench
from revbench.workloads import ba


@pytest.fixture(scope="module")
def data() -> ba.BAData:
    """Varied data (every camera, point, weight and feature its own), with camera 0 at
    zero rotation so that ADBench's small-angle branch is taken by some observations."""
    d = ba.generate_ba(4, 7, 23, seed=3, replicate=False)
    d.cams[0, ba.ROT_IDX:ba.ROT_IDX + 3] = 0.0
    assert (d.obs[:, 0] == 0).any() and (d.obs[:, 0] != 0).any()
    return d


def _njit_objective(d: ba.BAData):
    err = np.zeros((d.p, 2))
    werr = np.zeros(d.p)
    ba.objective_njit(d.cams, d.X, d.w, d.feats, d.obs, err, werr)
    return err, werr


# -- data files -----------------------------------------------------------------------------


def test_sizes_are_adbench_files():
    assert ba.BA_SIZES["ba1"] == (49, 7776, 31843)
    assert ba.BA_SIZES["ba4"] == (372, 47423, 204472)
    assert ba.BA_SIZES["ba10"] == (1197, 126327, 563734)


def test_read_adbench_text(tmp_path):
    path = tmp_path / "ba_test.txt"
    path.write_text("3 4 10\n"
                    "0.1 0.1 0.1 0.2 0.1 0.3 1.2 0.01 0.03 0.009 1.2e-4 \n"
                    "0.03 0.11 -0.7\n"
                    "1\n"
                    "-0.25 0.5\n")
    d = ba.read_ba(path)
    assert (d.n, d.m, d.p) == (3, 4, 10)
    assert d.cams.shape == (3, 11) and (d.cams == d.cams[0]).all()
    assert d.cams[0, ba.RAD_IDX + 1] == 1.2e-4 and d.cams[2, ba.F_IDX] == 1.2
    assert d.X.shape == (4, 3) and d.X[3].tolist() == [0.03, 0.11, -0.7]
    assert d.w.tolist() == [1.0] * 10
    assert d.feats.shape == (10, 2) and d.feats[9].tolist() == [-0.25, 0.5]
    i = np.arange(10)
    assert d.obs.dtype == np.int64
    assert (d.obs[:, 0] == i % 3).all() and (d.obs[:, 1] == i % 4).all()


def test_round_trip(tmp_path):
    d = ba.generate_ba(5, 8, 40, seed=11)
    assert d.is_replicated()
    path = tmp_path / "ba.txt"
    ba.write_ba(path, d)
    lines = path.read_text().splitlines()
    assert lines[0] == "5 8 40" and len(lines) == 5
    assert [len(line.split()) for line in lines[1:]] == [11, 3, 1, 2]
    back = ba.read_ba(path)
    for name in ("cams", "X", "w", "feats", "obs"):
        assert np.array_equal(getattr(back, name), getattr(d, name)), name  # exact floats


def test_write_refuses_what_the_format_cannot_hold(tmp_path, data):
    with pytest.raises(ValueError, match="replicated"):
        ba.write_ba(tmp_path / "x.txt", data)


def test_read_refuses_a_short_file(tmp_path):
    path = tmp_path / "short.txt"
    path.write_text("1 1 1\n0 0 0\n")
    with pytest.raises(ValueError, match="numbers"):
        ba.read_ba(path)


def test_generator_is_deterministic():
    for replicate in (True, False):
        a = ba.generate_ba(6, 9, 31, seed=5, replicate=replicate)
        b = ba.generate_ba(6, 9, 31, seed=5, replicate=replicate)
        c = ba.generate_ba(6, 9, 31, seed=6, replicate=replicate)
        for name in ("cams", "X", "w", "feats", "obs"):
            assert np.array_equal(getattr(a, name), getattr(b, name))
        assert not np.array_equal(a.cams, c.cams)
    d = ba.generate_ba(6, 9, 31, seed=5, replicate=False)
    assert not d.is_replicated()
    assert set(d.obs[:, 0]) == set(range(6)) and set(d.obs[:, 1]) == set(range(9))
    # points in front of the cameras: the projection is far from its singularity
    err, _ = ba.objective_numpy(d)
    assert np.isfinite(err).all()


def test_bad_shapes_are_refused():
    d = ba.generate_ba(2, 3, 4)
    with pytest.raises(ValueError, match="shape"):
        ba.BAData(d.cams[:, :10], d.X, d.w, d.feats, d.obs)
    with pytest.raises(ValueError, match="out of range"):
        ba.BAData(d.cams, d.X, d.w, d.feats, d.obs + 5)


# -- the objective ------------------------------------------------------------------------


def test_adbench_reference_values():
    # ADBench's own test camera and point (Rodrigues general branch), one observation
    cam = [0.1, 0.1, 0.1, 0.2, 0.1, 0.3, 1.2, 0.01, 0.03, 0.009, 1.2e-4]
    d = ba.BAData(np.array([cam]), np.array([[0.03, 0.11, -0.7]]), np.array([1.0]),
                  np.zeros((1, 2)), np.zeros((1, 2), dtype=np.int64))
    err, werr = ba.objective_numpy(d)
    # the same numbers written out by hand, as ADBench writes them
    rot = np.array(cam[:3])
    X = np.array([0.03, 0.11, -0.7]) - np.array(cam[3:6])
    theta = np.sqrt(rot @ rot)
    axis = rot / theta
    Xc = X * np.cos(theta) + np.cross(axis, X) * np.sin(theta) + axis * (axis @ X) * (1 - np.cos(theta))
    proj = Xc[:2] / Xc[2]
    r2 = proj @ proj
    expect = proj * (1 + cam[9] * r2 + cam[10] * r2 * r2) * cam[6] + np.array(cam[7:9])
    assert err[0] == pytest.approx(expect, rel=1e-14)
    assert werr[0] == 0.0


@pytest.mark.parametrize("check", [True, False])
def test_reversible_objective_matches_numpy_and_njit(data, check):
    ref_err, ref_w = ba.objective_numpy(data)
    err, werr = ba.objective(data, check=check)
    nj_err, nj_w = _njit_objective(data)
    np.testing.assert_allclose(err, ref_err, rtol=1e-13, atol=1e-11)
    np.testing.assert_allclose(nj_err, ref_err, rtol=1e-13, atol=1e-11)
    np.testing.assert_array_equal(werr, ref_w)
    np.testing.assert_array_equal(nj_w, ref_w)


def test_small_angle_branch_is_adbenchs(data):
    # zero rotation: the projection of X + rot x X with rot = 0, i.e. of X - C itself
    i = np.flatnonzero(data.obs[:, 0] == 0)[0]
    cam, X = data.cams[0], data.X[data.obs[i, 1]]
    Xc = X - cam[ba.C_IDX:ba.C_IDX + 3]
    u = Xc[:2] / Xc[2]
    r2 = u @ u
    proj = u * (1 + cam[ba.RAD_IDX] * r2 + cam[ba.RAD_IDX + 1] * r2 * r2) * cam[ba.F_IDX]
    expect = data.w[i] * (proj + cam[ba.X0_IDX:ba.X0_IDX + 2] - data.feats[i])
    assert ba.objective(data)[0][i] == pytest.approx(expect, rel=1e-13)


def test_replicated_data_from_generator():
    d = ba.generate_ba(3, 5, 17, seed=2)
    err, werr = ba.objective(d, check=False)
    ref_err, ref_w = ba.objective_numpy(d)
    np.testing.assert_allclose(err, ref_err, rtol=1e-13)
    assert (err == err[0]).all() and np.array_equal(werr, ref_w)


def test_inverse_round_trips(data):
    args = (np.zeros((data.p, 2)), np.zeros(data.p), data.cams.copy(), data.X.copy(),
            data.w.copy(), data.feats.copy(), data.obs.copy())
    err, *_ = revbench.check_inverse(ba.ba_objective, *args)
    np.testing.assert_allclose(err, ba.objective_numpy(data)[0], rtol=1e-13, atol=1e-11)
    # one observation, both branches of the rotation, starting from nonzero residuals
    for c in (0, 1):
        cam = tuple(float(v) for v in data.cams[c])
        x = tuple(float(v) for v in data.X[2])
        revbench.check_inverse(ba.ba_reproj, 0.5, -1.5, *cam, *x, 0.9, 3.0, -4.0)
    revbench.check_inverse(ba.ba_weight, 0.25, 1.3)


def test_gradient_of_one_residual(data):
    for c in (0, 1):  # small-angle branch and general branch
        args = (0.0, 0.0, *(float(v) for v in data.cams[c]), *(float(v) for v in data.X[1]),
                1.1, 2.0, -3.0)
        for loss in ("e0", "e1"):
            revbench.check_grad(ba.ba_reproj, *args, loss=loss, rtol=1e-5, atol=1e-6)


# -- the Jacobian -------------------------------------------------------------------------------


def _flat(d: ba.BAData) -> np.ndarray:
    return np.concatenate([d.cams.ravel(), d.X.ravel(), d.w])


def _with(d: ba.BAData, v: np.ndarray) -> ba.BAData:
    n, m = d.n, d.m
    return ba.BAData(v[:11 * n].reshape(n, 11), v[11 * n:11 * n + 3 * m].reshape(m, 3),
                     v[11 * n + 3 * m:], d.feats, d.obs)


def _finite_differences(d: ba.BAData) -> np.ndarray:
    def residuals(v):
        err, werr = ba.objective_numpy(_with(d, v))
        return np.concatenate([err.ravel(), werr])

    v = _flat(d)
    J = np.empty((3 * d.p, v.size))
    for k in range(v.size):
        h = 1e-6 * max(1.0, abs(v[k]))
        up, down = v.copy(), v.copy()
        up[k] += h
        down[k] -= h
        J[:, k] = (residuals(up) - residuals(down)) / (2 * h)
    return J


def test_jacobian_layout(data):
    J = ba.jacobian(data)
    n, m, p = data.n, data.m, data.p
    assert J.shape == (3 * p, 11 * n + 3 * m + p)
    assert J.nnz == 31 * p
    assert np.array_equal(J.indptr, np.r_[15 * np.arange(2 * p + 1), 30 * p + np.arange(1, p + 1)])
    for i in (0, 5, p - 1):
        c, q = data.obs[i]
        want = np.r_[11 * c + np.arange(11), 11 * n + 3 * q + np.arange(3), 11 * n + 3 * m + i]
        for row in (2 * i, 2 * i + 1):
            assert np.array_equal(J.indices[J.indptr[row]:J.indptr[row + 1]], want)
        assert J.indices[J.indptr[2 * p + i]] == 11 * n + 3 * m + i
        assert J[2 * p + i, 11 * n + 3 * m + i] == pytest.approx(-2 * data.w[i])
    assert J.has_canonical_format


def test_jacobian_against_finite_differences():
    d = ba.generate_ba(2, 3, 5, seed=9, replicate=False)
    d.cams[1, :3] = 0.0  # the small-angle branch
    J = ba.jacobian(d).toarray()
    fd = _finite_differences(d)
    scale = np.abs(fd).max(axis=1, keepdims=True)
    assert np.abs(J - fd).max() / scale.max() < 1e-7
    np.testing.assert_allclose(J, fd, rtol=1e-5, atol=1e-6 * scale.max())


@pytest.mark.parametrize("check", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_jacobian_against_independent_forward_mode(data, check):
    J = ba.jacobian(data, check=check)
    ref = ba.jacobian_numpy(data)
    assert np.array_equal(J.indptr, ref.indptr) and np.array_equal(J.indices, ref.indices)
    np.testing.assert_allclose(J.data, ref.data, rtol=1e-10, atol=1e-10 * np.abs(ref.data).max())


def test_independent_jacobian_against_finite_differences():
    d = ba.generate_ba(2, 3, 5, seed=4, replicate=False)
    d.cams[0, :3] = 0.0
    np.testing.assert_allclose(ba.jacobian_numpy(d).toarray(), _finite_differences(d),
                               rtol=1e-5, atol=1e-4)


def test_jacobian_residuals_and_replicated_data():
    d = ba.generate_ba(3, 4, 29, seed=1)
    err, werr, _, _, vals = ba.jacobian_arrays(d)
    ref_err, ref_w = ba.objective_numpy(d)
    np.testing.assert_allclose(err, ref_err, rtol=1e-13)
    np.testing.assert_allclose(werr, ref_w, rtol=1e-13)
    ref = ba.jacobian_numpy(d)
    np.testing.assert_allclose(vals, ref.data, rtol=1e-10, atol=1e-10 * np.abs(ref.data).max())


def test_jacobian_against_revbench_dense_jacobian(data):
    # the dense jacobian() of the whole reversible objective (calls' reverse sweeps)
    small = ba.BAData(data.cams[:2], data.X[:3], data.w[:4], data.feats[:4],
                      np.array([[0, 0], [1, 1], [0, 2], [1, 0]]))
    args = (np.zeros((4, 2)), np.zeros(4), small.cams, small.X, small.w, small.feats, small.obs)
    J = ba.jacobian(small).toarray()
    n, m = small.n, small.m
    Jc = revbench.jacobian(ba.ba_objective, outputs="reproj_err", wrt="cams")(*args)
    JX = revbench.jacobian(ba.ba_objective, outputs="reproj_err", wrt="X")(*args)
    np.testing.assert_allclose(J[:8, :11 * n], Jc, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(J[:8, 11 * n:11 * n + 3 * m], JX, rtol=1e-12, atol=1e-9)


def test_checked_jacobian_reports_a_failed_check(data):
    bad = data.copy()
    bad.X[0, 0] = np.nan  # an ancilla computed from NaN cannot be checked back
    with pytest.raises(revbench.ReversibilityError):
        ba.jacobian(bad, check=True)
    assert np.isnan(ba.jacobian(bad, check=False).data).any()
