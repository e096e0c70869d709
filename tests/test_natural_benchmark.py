"""The natural-code benchmark (benchmarks/natural.py): its programs' gradients are right,
and a ``--quick`` run writes every workload.  Timings are never asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import revbench

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

import natural as N  # noqa: E402
import natural_programs as P  # noqa: E402
import natural_reference as R  # noqa: E402


def fd_grad(f, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """Central differences of the scalar ``f`` w.r.t. every element of ``x`` (in place)."""
    g = np.empty_like(x)
    flat, gflat = x.reshape(-1), g.reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + h
        up = f()
        flat[i] = old - h
        down = f()
        flat[i] = old
        gflat[i] = (up - down) / (2 * h)
    return g


@pytest.mark.slow  # compiles the hand-written @njit references
def test_gmm_hand_gradient_matches_finite_differences_and_revbench():
    g = N.gmm_data(3, 4, 12, seed=1)
    args = (g["alphas"], g["means"], g["icf"], g["x"], g["gamma"], g["m"])
    val, dal, dmu, dicf = R.gmm_value_and_grad(*args)
    assert np.isclose(val, R.gmm_objective(*args))
    for name, got in (("alphas", dal), ("means", dmu), ("icf", dicf)):
        fd = fd_grad(lambda: R.gmm_objective(*args), g[name])
        np.testing.assert_allclose(got, fd, rtol=1e-5, atol=1e-6, err_msg=name)
    assert np.isclose(N.rb_gmm_objective(P.gmm_objective, g), val)
    for fn in (P.gmm_objective, P.gmm_objective_fast, P.gmm_objective_fastmath):
        got = N.rb_gmm_value_and_grad(fn)(g)
        for a, b in zip(got, (val, dal, dmu, dicf), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


@pytest.mark.slow  # compiles the hand-written @njit references
def test_ba_jacobians_match_finite_differences():
    b = N.ba_data(20, seed=2)
    bargs = (b["cams"], b["points"], b["weights"], b["feats"], b["cam_idx"], b["pt_idx"])
    want = R.ba_jacobian(*bargs)
    np.testing.assert_allclose(want[:4], N.ba_fd_jacobian(b, 4), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(N.rb_ba_residuals(P.ba_residual, b), R.ba_residuals(*bargs),
                               rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(N.rb_ba_jacobian(P.ba_residual)(b), want, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(N.rb_ba_kernel_jacobian(P.ba_residual_fast, b)(b), want,
                               rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(N.rb_ba_batched_jacobian(P.ba_residual)(b), want,
                               rtol=1e-9, atol=1e-12)


def test_ba_zero_rotation_branch():
    """The `else` branch of the Rodrigues rotation (theta = 0): revbench against FD."""
    cam = np.zeros(11)
    cam[6] = 1.0
    X = np.array([0.3, -0.2, 4.0])
    feat = np.array([0.1, 0.0])
    r, *_ = P.ba_residual(np.zeros(2), cam, X, 1.5, feat)
    assert np.allclose(r, 1.5 * (X[:2] / X[2] - feat))
    J = revbench.jacobian(P.ba_residual, outputs="r", wrt="cam")(np.zeros(2), cam, X, 1.5, feat)
    fd = np.empty((2, 11))
    for q in range(11):
        e = np.zeros(11)
        e[q] = 1e-6
        up = P.ba_residual(np.zeros(2), cam + e, X, 1.5, feat)[0]
        down = P.ba_residual(np.zeros(2), cam - e, X, 1.5, feat)[0]
        fd[:, q] = (up - down) / 2e-6
    np.testing.assert_allclose(J, fd, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("kind", ["bilinear", "sqnorm"])
def test_sparse_gradients_match_reference_and_finite_differences(kind):
    s = N.sparse_data(30, 3, seed=3)
    csr = (s["data"], s["indices"], s["indptr"])
    if kind == "bilinear":
        want = R.csr_bilinear_grad(s["x"], *csr, s["y"])
        def value():
            return R.csr_bilinear_value(s["x"], *csr, s["y"])
        progs = (P.sparse_bilinear_lib, P.sparse_bilinear_loop, P.sparse_bilinear_loop_fast)
    else:
        want = R.csr_sqnorm_grad(s["x"], *csr)
        def value():
            return R.csr_sqnorm_value(s["x"], *csr)
        progs = (P.sparse_sqnorm_lib, P.sparse_sqnorm_loop, P.sparse_sqnorm_lib_fast)
    assert np.isclose(want[0], value())
    np.testing.assert_allclose(want[1], fd_grad(value, s["x"]), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(want[2], fd_grad(value, s["data"]), rtol=1e-6, atol=1e-7)
    for fn in progs:
        assert np.isclose(N.rb_sparse_objective(fn, kind, s), want[0])
        got = N.rb_sparse(fn, kind)(s)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def test_heat_gradients_match_reference_and_finite_differences():
    h = N.heat_data(12, 6, seed=4)
    val, du0, dc = R.heat_value_and_grad(h["u0"], h["c"], h["n_steps"])
    assert np.isclose(val, R.heat_value(h["u0"], h["c"], h["n_steps"]))
    np.testing.assert_allclose(
        du0, fd_grad(lambda: R.heat_value(h["u0"], h["c"], h["n_steps"]), h["u0"]),
        rtol=1e-6, atol=1e-7)
    eps = 1e-6
    fd_c = (R.heat_value(h["u0"], h["c"] + eps, h["n_steps"])
            - R.heat_value(h["u0"], h["c"] - eps, h["n_steps"])) / (2 * eps)
    assert np.isclose(dc, fd_c, rtol=1e-6)
    assert np.isclose(N.rb_heat_objective(P.heat, h), val)
    runs = (N.rb_heat_value_and_grad(P.heat), N.rb_heat_value_and_grad(P.heat_fast),
            N.rb_heat_timeloop(P.heat_step, P.heat_loss, h["n_steps"]))
    for run in runs:
        for a, b in zip(run(h), (val, du0, dc), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def test_mlp_gradients_match_reference_and_finite_differences():
    args = N.mlp_data(9, 3, 5, 2, seed=2)
    val, *grads = R.mlp_value_and_grad(*args)
    assert np.isclose(val, R.mlp_value(*args))
    for k, g in enumerate(grads):  # the hand-written backpropagation, against differences
        np.testing.assert_allclose(g, fd_grad(lambda: R.mlp_value(*args), args[k]),
                                   rtol=1e-6, atol=1e-7)
    for fn in (P.mlp, P.mlp_fast):  # the natural program, written with `@`
        outs, got = revbench.value_and_grad(fn, loss="loss", wrt=("W1", "b1", "W2", "b2"))(
            0.0, *args)
        assert np.isclose(outs[0], val, rtol=1e-12)
        for a, b in zip(got[1:5], grads, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_check_close_fails_loudly():
    with pytest.raises(N.Mismatch, match="does not match"):
        N.check_close("x", np.ones(3), np.zeros(3))


@pytest.mark.slow
def test_quick_run_writes_every_workload(tmp_path):
    out = tmp_path / "natural.json"
    proc = subprocess.run([sys.executable, str(BENCH / "natural.py"), "--quick", "--out",
                           str(out)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads(out.read_text())
    assert set(results["workloads"]) == set(N.WORKLOADS)
    seen = {row["workload"].split()[0] for row in results["rows"]}
    assert seen == set(N.WORKLOADS)
    assert "gmm D=2 K=5 N=1000" in results["checked"]
    assert out.with_suffix(".csv").exists()
    for row in results["rows"]:
        assert row["median_s"] > 0
