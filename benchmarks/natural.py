#!/usr/bin/env python
"""Natural revbench code against hand-written Numba, JAX and PyTorch, in one run (issue 10).

Run it as::

    python benchmarks/natural.py [--quick] [--out PATH] [--reps N] [--only NAME ...]
                                 [--no-compile] [--no-peers]

The revbench programs (``natural_programs.py``) are written from the documentation only,
the way a new user writes them: the formula as it stands, plain loops, the documented
``revbench.lib``.  The references (``natural_reference.py``) are hand-written
``@numba.njit`` objectives and hand-written ``@njit`` reverse-mode gradients of the same
loops, and JAX / PyTorch versions where installed.

Workloads:

* ``gmm``: the ADBench GMM log-posterior, N = 1000 points, the 7 ADBench (D, K) sizes
  (2 with ``--quick``); ``objective`` and ``value_and_grad`` (w.r.t. alphas, means, icf);
* ``ba``: bundle adjustment, the 2 x 15 Jacobian of each observation's reprojection
  residual: ``revbench.jacobian`` per observation (Python loop), the documented batched
  call ``jacobian(..., batch=...)`` (one compiled loop), and the compiled forward and
  reverse-sweep kernels (``f.kernel``) driven from a hand-written ``@njit`` loop;
  10,000 observations (1,000 with ``--quick``);
* ``sparse``: ``x^T A y`` and ``|A x|^2`` for a CSR ``A`` (n = 100,000, 10 values per row),
  gradient w.r.t. ``x`` and ``A``'s values, with ``revbench.lib`` and with plain loops;
* ``heat``: T explicit steps of the 1-D heat equation, loss ``|u_T|^2``, gradient w.r.t.
  ``u_0`` and the coefficient, as one reversible function over the trajectory and as a
  documented ``TimeLoop`` (``StoreAll()``);
* ``dot``: ``s += np.dot(x, y)`` for n = 1,000,000 (100,000 with ``--quick``), exact and
  with ``fastmath=True`` (sums reassociated, docs/performance.md section 4);
* ``mlp``: a two-layer network's squared error over N samples, written with matrix
  products as the formula reads (``h += np.tanh(W1 @ X[s] + b1)``,
  ``loss += np.sum((W2 @ h + b2 - Y[s]) ** 2)``), gradient w.r.t. the weights and biases;
  N = 2000, 32 inputs, 64 hidden, 8 outputs (200, 16, 32, 4 with ``--quick``);
* ``compile``: the cold first gradient of the ~45-line GMM objective in a fresh process
  (empty revbench cache), then again in a second fresh process (cache filled); checks on
  and ``check=False`` (checks on only with ``--quick``); the ratio is to the cold compile
  of the hand-written ``@njit`` gradient of the same loops in a fresh process.

``--quick`` takes about 50 s once revbench's on-disk cache holds the programs (about
3 minutes the very first time, compiling every program).

Every gradient is checked against the hand-written reference (``np.allclose``) before
timing; a mismatch stops the run with an error.  Then each case is warmed up (compile
excluded) and repeated, the repetitions of a workload's cases interleaved; the table
gives medians and the ratio to the hand-written ``@njit`` reference of the same row
group, measured in the same run.  Single-threaded (Numba, JAX, PyTorch).  Results go to
``benchmarks/results/natural.json`` and ``.csv`` (or ``--out``).
"""

from __future__ import annotations

import os

# Single-threaded, before NumPy / Numba / JAX / PyTorch are imported (only when run as a
# script: the tests import this module for its data and helpers, and leave the
# environment of their process alone).
if __name__ == "__main__":
    for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                 "MKL_NUM_THREADS"):
        os.environ[_var] = "1"
    os.environ.setdefault("XLA_FLAGS",
                          "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse
import datetime
import json
import math
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for _p in (str(HERE), str(REPO)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import _common  # noqa: E402
import natural_programs as P  # noqa: E402
import natural_reference as R  # noqa: E402
import numba  # noqa: E402
import numpy as np  # noqa: E402

from revbench import jacobian, value_and_grad  # noqa: E402
from revbench.checkpoint import StoreAll, TimeLoop  # noqa: E402

WORKLOADS = ("gmm", "ba", "sparse", "heat", "dot", "mlp", "compile")
GMM_SIZES = [(2, 5), (10, 5), (2, 10), (10, 10), (20, 50), (64, 5), (64, 10)]
FULL = {"gmm_n": 1000, "gmm_sizes": GMM_SIZES, "ba_n": 10_000, "sparse_n": 100_000,
        "sparse_per_row": 10, "heat_n": 1000, "heat_steps": 1000, "dot_n": 1_000_000,
        "mlp": (2000, 32, 64, 8), "reps": 7}
QUICK = {"gmm_n": 1000, "gmm_sizes": [(2, 5), (10, 5)], "ba_n": 1000, "sparse_n": 10_000,
         "sparse_per_row": 10, "heat_n": 200, "heat_steps": 200, "dot_n": 100_000,
         "mlp": (200, 16, 32, 4), "reps": 3,
         "compile_checked_only": True}
RTOL, ATOL = 1e-7, 1e-9
REF = "njit (hand)"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------
# Data (seeded)
# ---------------------------------------------------------------------------------------


def gmm_data(d: int, k: int, n: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "alphas": rng.normal(size=k),
        "means": rng.uniform(size=(k, d)),
        "icf": rng.normal(scale=0.3, size=(k, d * (d + 1) // 2)),
        "x": rng.uniform(size=(n, d)),
        "gamma": 1.0,
        "m": 0,
    }


def ba_data(n_obs: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    n_cams = max(2, n_obs // 200)
    n_pts = max(2, n_obs // 5)
    cams = np.empty((n_cams, 11))
    cams[:, 0:3] = rng.normal(scale=0.2, size=(n_cams, 3))        # rotation (Rodrigues)
    cams[:, 3:6] = rng.normal(scale=0.1, size=(n_cams, 3))        # center
    cams[:, 6] = rng.uniform(0.8, 1.2, size=n_cams)               # focal length
    cams[:, 7:9] = rng.normal(scale=0.05, size=(n_cams, 2))       # principal point
    cams[:, 9:11] = rng.normal(scale=0.01, size=(n_cams, 2))      # radial distortion
    points = np.empty((n_pts, 3))
    points[:, 0:2] = rng.uniform(-1.0, 1.0, size=(n_pts, 2))
    points[:, 2] = rng.uniform(3.0, 6.0, size=n_pts)              # in front of the cameras
    cam_idx = rng.integers(0, n_cams, size=n_obs).astype(np.int64)
    pt_idx = rng.integers(0, n_pts, size=n_obs).astype(np.int64)
    return {
        "cams": cams, "points": points,
        "weights": rng.uniform(0.5, 1.5, size=n_obs),
        "feats": rng.normal(scale=0.2, size=(n_obs, 2)),
        "cam_idx": cam_idx, "pt_idx": pt_idx,
    }


def sparse_data(n: int, per_row: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    indices = np.sort(rng.integers(0, n, size=(n, per_row)), axis=1).reshape(-1)
    indptr = np.arange(0, n * per_row + 1, per_row, dtype=np.int64)
    return {
        "data": rng.normal(size=n * per_row),
        "indices": indices.astype(np.int64),
        "indptr": indptr,
        "rows": np.repeat(np.arange(n, dtype=np.int64), per_row),
        "x": rng.normal(size=n),
        "y": rng.normal(size=n),
    }


def heat_data(n: int, n_steps: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    grid = np.linspace(0.0, 1.0, n)
    return {"u0": np.sin(math.pi * grid) + 0.1 * rng.normal(size=n), "c": 0.2,
            "n_steps": n_steps}


# ---------------------------------------------------------------------------------------
# The revbench calls a user writes (shared with the tests)
# ---------------------------------------------------------------------------------------


def rb_gmm_objective(fn, g: dict) -> float:
    wc = P.wishart_constant(g["gamma"], g["m"], g["x"].shape[1])
    return fn(0.0, g["alphas"], g["means"], g["icf"], g["x"], g["gamma"], g["m"], wc)[0]


def rb_gmm_value_and_grad(fn):
    vg = value_and_grad(fn, loss="err", wrt=("alphas", "means", "icf"))

    def run(g: dict):
        wc = P.wishart_constant(g["gamma"], g["m"], g["x"].shape[1])
        outs, grads = vg(0.0, g["alphas"], g["means"], g["icf"], g["x"], g["gamma"], g["m"], wc)
        return outs[0], grads[1], grads[2], grads[3]

    return run


def rb_ba_residuals(fn, b: dict) -> np.ndarray:
    """A Python loop over the observations, one call each (no row views as arguments in
    a reversible loop, see natural_programs)."""
    n = len(b["cam_idx"])
    r = np.zeros((n, 2))
    for o in range(n):
        fn(r[o], b["cams"][b["cam_idx"][o]], b["points"][b["pt_idx"][o]], b["weights"][o],
           b["feats"][o])
    return r


def rb_ba_jacobian(fn):
    """``revbench.jacobian`` per observation: one call gives the blocks for the camera,
    the point and the weight, placed side by side in the 2 x 15 block."""
    jac = jacobian(fn, outputs="r", wrt=("cam", "X", "w"))

    def run(b: dict) -> np.ndarray:
        n = len(b["cam_idx"])
        J = np.empty((n, 2, 15))
        r0 = np.zeros(2)
        for o in range(n):
            args = (r0, b["cams"][b["cam_idx"][o]], b["points"][b["pt_idx"][o]],
                    b["weights"][o], b["feats"][o])
            J[o, :, 0:11], J[o, :, 11:14], J[o, :, 14:15] = jac(*args)
        return J

    return run


def rb_ba_batched_jacobian(fn):
    """The documented call (docs/ad.md, section 3): ``jacobian(..., batch=...)`` over the
    observations, one compiled loop; timed with the gathers of each observation's camera
    and point and the joining of the three blocks, as a user writes it."""
    jac = jacobian(fn, outputs="r", wrt=("cam", "X", "w"), batch=("r", "cam", "X", "w", "feat"))

    def run(b: dict) -> np.ndarray:
        n = len(b["cam_idx"])
        Jc, JX, Jw = jac(np.zeros((n, 2)), b["cams"][b["cam_idx"]], b["points"][b["pt_idx"]],
                         b["weights"], b["feats"])
        return np.concatenate((Jc, JX, Jw), axis=2)

    return run


def rb_ba_kernel_jacobian(fn, b: dict):
    """The documented fast way (docs/ad.md, section 8): the compiled forward run and
    reverse sweep (two lanes: one per residual), driven from an ``@njit`` loop."""
    ex = (np.zeros(2), b["cams"][0], b["points"][0], 1.0, b["feats"][0])
    fwd = fn.kernel("forward", *ex)
    bwd = fn.kernel("backward", *ex, lanes=2, wrt=("cam", "X", "w"))
    atol, rtol = 1e-8, 1e-8

    @numba.njit
    def driver(cams, points, weights, feats, cam_idx, pt_idx):
        n = len(cam_idx)
        J = np.empty((n, 2, 15))
        for o in range(n):
            cam = cams[cam_idx[o]]
            X = points[pt_idx[o]]
            feat = feats[o]
            r = np.zeros(2)
            out = fwd(r, cam, X, weights[o], feat, atol, rtol)
            e0 = np.zeros(2)
            e0[0] = 1.0
            e1 = np.zeros(2)
            e1[1] = 1.0
            res = bwd(out[0], cam, X, out[3], feat,
                      e0, np.zeros(11), np.zeros(3), 0.0,
                      e1, np.zeros(11), np.zeros(3), 0.0, atol, rtol)
            J[o, 0, 0:11] = res[6]
            J[o, 0, 11:14] = res[7]
            J[o, 0, 14] = res[8]
            J[o, 1, 0:11] = res[10]
            J[o, 1, 11:14] = res[11]
            J[o, 1, 14] = res[12]
        return J

    def run(bb: dict) -> np.ndarray:
        return driver(bb["cams"], bb["points"], bb["weights"], bb["feats"], bb["cam_idx"],
                      bb["pt_idx"])

    return run


def rb_sparse(fn, kind: str):
    vg = value_and_grad(fn, loss="s", wrt=("x", "data"))

    def run(s: dict):
        if kind == "bilinear":
            outs, grads = vg(0.0, s["x"], s["data"], s["indices"], s["indptr"], s["y"])
        else:
            outs, grads = vg(0.0, s["x"], s["data"], s["indices"], s["indptr"])
        return outs[0], grads[1], grads[2]

    return run


def rb_sparse_objective(fn, kind: str, s: dict) -> float:
    if kind == "bilinear":
        return fn(0.0, s["x"], s["data"], s["indices"], s["indptr"], s["y"])[0]
    return fn(0.0, s["x"], s["data"], s["indices"], s["indptr"])[0]


def heat_trajectory(h: dict) -> np.ndarray:
    u = np.zeros((h["n_steps"] + 1, len(h["u0"])))
    u[0] = h["u0"]
    return u


def rb_heat_objective(fn, h: dict) -> float:
    return fn(0.0, heat_trajectory(h), h["c"])[0]


def rb_heat_value_and_grad(fn):
    vg = value_and_grad(fn, loss="loss", wrt=("u", "c"))

    def run(h: dict):
        outs, grads = vg(0.0, heat_trajectory(h), h["c"])
        return outs[0], grads[1][0], grads[2]

    return run


def rb_heat_timeloop(step, loss, n_steps: int):
    loop = TimeLoop(step, n_steps=n_steps, loss=loss)

    def run(h: dict):
        value, (du0, dc) = loop.value_and_grad(h["u0"], h["c"], strategy=StoreAll())
        return value, du0, dc

    return run


# ---------------------------------------------------------------------------------------
# Checking and timing
# ---------------------------------------------------------------------------------------


class Mismatch(AssertionError):
    pass


def check_close(what: str, got, want, rtol: float = RTOL, atol: float = ATOL) -> None:
    got = np.asarray(got, dtype=float)
    want = np.asarray(want, dtype=float)
    if got.shape != want.shape or not np.allclose(got, want, rtol=rtol, atol=atol):
        err = np.max(np.abs(got - want)) if got.shape == want.shape else "shape"
        raise Mismatch(f"{what}: does not match the hand-written reference "
                       f"(shapes {got.shape} vs {want.shape}, max abs diff {err})")


def check_all(what: str, got: tuple, want: tuple, **tol) -> None:
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        check_close(f"{what}, output {i}", a, b, **tol)


def time_cases(cases: dict, reps: int, warmup: int = 1) -> dict:
    """Median/min seconds of each zero-argument callable, repetitions interleaved."""
    for fn in cases.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(reps):
        for name, fn in cases.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return times


def add_rows(rows: list, workload: str, size: str, op: str, times: dict) -> None:
    ref = statistics.median(times[REF]) if REF in times else None
    ref_min = min(times[REF]) if REF in times else None
    for impl, ts in times.items():
        med = statistics.median(ts)
        rows.append({
            "workload": workload, "size": size, "op": op, "impl": impl,
            "median_s": med, "min_s": min(ts), "max_s": max(ts), "reps": len(ts),
            "ratio": med / ref if ref else None,
            "ratio_min": min(ts) / ref_min if ref_min else None,
        })


# ---------------------------------------------------------------------------------------
# The workloads
# ---------------------------------------------------------------------------------------


def bench_gmm(cfg: dict, peers: dict, rows: list, checks: list) -> None:
    jx, th = peers.get("jax"), peers.get("torch")
    for d, k in cfg["gmm_sizes"]:
        size = f"D={d} K={k} N={cfg['gmm_n']}"
        log(f"gmm {size}")
        g = gmm_data(d, k, cfg["gmm_n"])
        args = (g["alphas"], g["means"], g["icf"], g["x"], g["gamma"], g["m"])
        want_val = R.gmm_objective(*args)
        want = R.gmm_value_and_grad(*args)
        check_close(f"gmm {size}: hand gradient value", want[0], want_val)
        fns = {"revbench": P.gmm_objective, "revbench check=False": P.gmm_objective_fast,
               "revbench fastmath": P.gmm_objective_fastmath}
        obj = {REF: lambda args=args: R.gmm_objective(*args)}
        vg = {REF: lambda args=args: R.gmm_value_and_grad(*args)}
        for name, fn in fns.items():
            run = rb_gmm_value_and_grad(fn)
            check_all(f"gmm {size}: {name} value_and_grad", run(g), want)
            check_close(f"gmm {size}: {name} objective", rb_gmm_objective(fn, g), want_val)
            obj[name] = lambda g=g, fn=fn: rb_gmm_objective(fn, g)
            vg[name] = lambda g=g, run=run: run(g)
        if jx is not None:
            import jax.numpy as jnp
            rows_, cols_ = R.gmm_lower_indices(d)
            jargs = tuple(jnp.asarray(a) for a in args[:4]) + (
                g["gamma"], float(g["m"]), P.wishart_constant(g["gamma"], g["m"], d),
                jnp.asarray(rows_), jnp.asarray(cols_))
            jv, (ja, jm, ji) = jx["gmm_value_and_grad"](*jargs)
            check_all(f"gmm {size}: jax", (float(jv), ja, jm, ji), want, rtol=1e-6)
            obj["jax"] = lambda jargs=jargs: jx["gmm_objective"](*jargs).block_until_ready()
            vg["jax"] = lambda jargs=jargs: jax_block(jx["gmm_value_and_grad"](*jargs))
        if th is not None:
            torch = th["torch"]
            rows_, cols_ = R.gmm_lower_indices(d)
            targs = tuple(torch.from_numpy(a) for a in args[:4]) + (
                g["gamma"], float(g["m"]), P.wishart_constant(g["gamma"], g["m"], d),
                torch.from_numpy(rows_), torch.from_numpy(cols_))
            tv, (ta, tm, ti) = th["gmm_value_and_grad"](*targs)
            check_all(f"gmm {size}: torch", (tv, ta, tm, ti), want, rtol=1e-6)

            def torch_obj(targs=targs, torch=torch):
                with torch.no_grad():
                    return th["gmm_objective"](*targs)

            obj["torch"] = torch_obj
            vg["torch"] = lambda targs=targs: th["gmm_value_and_grad"](*targs)
        checks.append(f"gmm {size}")
        add_rows(rows, "gmm", size, "objective", time_cases(obj, cfg["reps"]))
        add_rows(rows, "gmm", size, "value_and_grad", time_cases(vg, cfg["reps"]))


def jax_block(out):
    import jax
    return jax.block_until_ready(out)


def bench_ba(cfg: dict, peers: dict, rows: list, checks: list) -> None:
    n = cfg["ba_n"]
    size = f"n_obs={n}"
    log(f"ba {size}")
    b = ba_data(n)
    bargs = (b["cams"], b["points"], b["weights"], b["feats"], b["cam_idx"], b["pt_idx"])
    want_r = R.ba_residuals(*bargs)
    want_J = R.ba_jacobian(*bargs)
    # the hand Jacobian against central differences on a few observations
    check_close("ba: hand Jacobian vs finite differences", want_J[:5], ba_fd_jacobian(b, 5),
                rtol=1e-5, atol=1e-7)
    obj = {REF: lambda: R.ba_residuals(*bargs)}
    jac = {REF: lambda: R.ba_jacobian(*bargs)}
    for name, fn in (("revbench", P.ba_residual), ("revbench check=False", P.ba_residual_fast)):
        check_close(f"ba: {name} residuals (Python loop)", rb_ba_residuals(fn, b), want_r)
        obj[f"{name}, Python loop"] = lambda fn=fn: rb_ba_residuals(fn, b)
        run = rb_ba_jacobian(fn)
        check_close(f"ba: {name} jacobian (Python loop)", run(b), want_J)
        jac[f"{name} jacobian(), Python loop"] = lambda run=run: run(b)
        brun = rb_ba_batched_jacobian(fn)
        check_close(f"ba: {name} jacobian(batch=)", brun(b), want_J)
        jac[f"{name} jacobian(batch=)"] = lambda brun=brun: brun(b)
        krun = rb_ba_kernel_jacobian(fn, b)
        check_close(f"ba: {name} kernels (@njit loop)", krun(b), want_J)
        jac[f"{name} kernels, @njit loop"] = lambda krun=krun: krun(b)
    jx = peers.get("jax")
    if jx is not None:
        import jax.numpy as jnp
        jargs = (jnp.asarray(b["cams"][b["cam_idx"]]), jnp.asarray(b["points"][b["pt_idx"]]),
                 jnp.asarray(b["weights"]), jnp.asarray(b["feats"]))
        check_close("ba: jax residuals", np.asarray(jx["ba_residuals"](*jargs)), want_r)
        check_close("ba: jax jacobian", np.asarray(jx["ba_jacobian"](*jargs)), want_J)
        obj["jax vmap"] = lambda: jx["ba_residuals"](*jargs).block_until_ready()
        jac["jax vmap(jacrev)"] = lambda: jx["ba_jacobian"](*jargs).block_until_ready()
    checks.append(f"ba {size}")
    add_rows(rows, "ba", size, "residuals", time_cases(obj, cfg["reps"]))
    add_rows(rows, "ba", size, "jacobian", time_cases(jac, cfg["reps"]))


def ba_fd_jacobian(b: dict, n_obs: int, h: float = 1e-6) -> np.ndarray:
    J = np.empty((n_obs, 2, 15))
    for o in range(n_obs):
        cam = b["cams"][b["cam_idx"][o]].copy()
        X = b["points"][b["pt_idx"][o]].copy()
        p = np.concatenate([cam, X, [b["weights"][o]]])

        def res(p, o=o):
            r = np.empty(2)
            R._ba_project(p[:11].copy(), p[11:14].copy(), p[14], b["feats"][o], r)
            return r

        for q in range(15):
            e = np.zeros(15)
            e[q] = h
            J[o, :, q] = (res(p + e) - res(p - e)) / (2 * h)
    return J


def bench_sparse(cfg: dict, peers: dict, rows: list, checks: list) -> None:
    n = cfg["sparse_n"]
    size = f"n={n} nnz={n * cfg['sparse_per_row']}"
    log(f"sparse {size}")
    s = sparse_data(n, cfg["sparse_per_row"])
    csr = (s["data"], s["indices"], s["indptr"])
    jx, th = peers.get("jax"), peers.get("torch")
    for kind in ("bilinear", "sqnorm"):
        if kind == "bilinear":
            want_val = R.csr_bilinear_value(s["x"], *csr, s["y"])
            want = R.csr_bilinear_grad(s["x"], *csr, s["y"])
            ref_obj = lambda: R.csr_bilinear_value(s["x"], *csr, s["y"])
            ref_grad = lambda: R.csr_bilinear_grad(s["x"], *csr, s["y"])
            progs = {"revbench lib": (P.sparse_bilinear_lib, P.sparse_bilinear_lib_fast),
                     "revbench loops": (P.sparse_bilinear_loop, P.sparse_bilinear_loop_fast)}
            fastmath = P.sparse_bilinear_loop_fastmath
        else:
            want_val = R.csr_sqnorm_value(s["x"], *csr)
            want = R.csr_sqnorm_grad(s["x"], *csr)
            ref_obj = lambda: R.csr_sqnorm_value(s["x"], *csr)
            ref_grad = lambda: R.csr_sqnorm_grad(s["x"], *csr)
            progs = {"revbench lib": (P.sparse_sqnorm_lib, P.sparse_sqnorm_lib_fast),
                     "revbench loops": (P.sparse_sqnorm_loop, P.sparse_sqnorm_loop_fast)}
            fastmath = P.sparse_sqnorm_loop_fastmath
        check_close(f"sparse {kind}: hand gradient value", want[0], want_val)
        obj = {REF: ref_obj}
        vg = {REF: ref_grad}
        for label, (checked, fast) in progs.items():
            variants = [(label, checked), (f"{label} check=False", fast)]
            if label == "revbench loops":
                variants.append((f"{label} fastmath", fastmath))
            for name, fn in variants:
                check_close(f"sparse {kind}: {name} objective",
                            rb_sparse_objective(fn, kind, s), want_val)
                run = rb_sparse(fn, kind)
                check_all(f"sparse {kind}: {name} value_and_grad", run(s), want)
                obj[name] = lambda fn=fn, kind=kind: rb_sparse_objective(fn, kind, s)
                vg[name] = lambda run=run: run(s)
        if jx is not None:
            import jax.numpy as jnp
            if kind == "bilinear":
                ja = (jnp.asarray(s["x"]), jnp.asarray(s["data"]), jnp.asarray(s["rows"]),
                      jnp.asarray(s["indices"]), jnp.asarray(s["y"]))
            else:
                ja = (jnp.asarray(s["x"]), jnp.asarray(s["data"]), jnp.asarray(s["rows"]),
                      jnp.asarray(s["indices"]), n)
            jfn = jx[f"{kind}_value_and_grad"]
            jv, (jgx, jgd) = jfn(*ja)
            check_all(f"sparse {kind}: jax", (float(jv), jgx, jgd), want, rtol=1e-6)
            vg["jax"] = lambda jfn=jfn, ja=ja: jax_block(jfn(*ja))
        if th is not None:
            torch = th["torch"]
            if kind == "bilinear":
                ta = (torch.from_numpy(s["x"]), torch.from_numpy(s["data"]),
                      torch.from_numpy(s["rows"]), torch.from_numpy(s["indices"]),
                      torch.from_numpy(s["y"]))
            else:
                ta = (torch.from_numpy(s["x"]), torch.from_numpy(s["data"]),
                      torch.from_numpy(s["rows"]), torch.from_numpy(s["indices"]), n)
            tfn = th[f"{kind}_value_and_grad"]
            tv, (tgx, tgd) = tfn(*ta)
            check_all(f"sparse {kind}: torch", (tv, tgx, tgd), want, rtol=1e-6)
            vg["torch"] = lambda tfn=tfn, ta=ta: tfn(*ta)
        checks.append(f"sparse {kind} {size}")
        add_rows(rows, f"sparse {kind}", size, "objective", time_cases(obj, cfg["reps"]))
        add_rows(rows, f"sparse {kind}", size, "value_and_grad", time_cases(vg, cfg["reps"]))


def bench_dot(cfg: dict, peers: dict, rows: list, checks: list) -> None:
    """``s += np.dot(x, y)``: one reduction, exact (``check=False``) and reassociated
    (``fastmath=True``), against the hand-written loop (which Numba keeps in order too)."""
    n = cfg["dot_n"]
    size = f"n={n}"
    log(f"dot {size}")
    rng = np.random.default_rng(7)
    x, y = rng.normal(size=n), rng.normal(size=n)
    want_val = float(R.dot_value(x, y))
    want = R.dot_value_and_grad(x, y)
    obj = {REF: lambda: R.dot_value(x, y)}
    vg = {REF: lambda: R.dot_value_and_grad(x, y)}
    for name, fn in (("revbench", P.dot), ("revbench check=False", P.dot_fast),
                     ("revbench fastmath", P.dot_fastmath)):
        check_close(f"dot: {name} objective", fn(0.0, x, y)[0], want_val, rtol=1e-10)
        run = value_and_grad(fn, loss="s", wrt=("x", "y"))
        outs, grads = run(0.0, x, y)
        check_all(f"dot: {name} value_and_grad", (outs[0], grads[1], grads[2]), want, rtol=1e-10)
        obj[name] = lambda fn=fn: fn(0.0, x, y)
        vg[name] = lambda run=run: run(0.0, x, y)
    jx = peers.get("jax")
    if jx is not None:
        import jax.numpy as jnp
        jxy = (jnp.asarray(x), jnp.asarray(y))
        jv, (jgx, jgy) = jx["dot_value_and_grad"](*jxy)
        check_all("dot: jax", (float(jv), jgx, jgy), want, rtol=1e-10)
        vg["jax"] = lambda: jax_block(jx["dot_value_and_grad"](*jxy))
    checks.append(f"dot {size}")
    add_rows(rows, "dot", size, "objective", time_cases(obj, cfg["reps"]))
    add_rows(rows, "dot", size, "value_and_grad", time_cases(vg, cfg["reps"]))


def mlp_data(n: int, n_in: int, n_hidden: int, n_out: int, seed: int = 11) -> tuple:
    """Weights (scaled so tanh is not saturated), biases, inputs and targets."""
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n_hidden, n_in)) / np.sqrt(n_in), rng.normal(size=n_hidden) * 0.1,
            rng.normal(size=(n_out, n_hidden)) / np.sqrt(n_hidden), rng.normal(size=n_out) * 0.1,
            rng.normal(size=(n, n_in)), rng.normal(size=(n, n_out)))


def bench_mlp(cfg: dict, peers: dict, rows: list, checks: list) -> None:
    """A dense network written with ``@``: the lowered loops against hand-written
    backpropagation in ``@njit`` and JAX's ``value_and_grad`` of the array expression."""
    n, n_in, n_hidden, n_out = cfg["mlp"]
    size = f"N={n} {n_in}-{n_hidden}-{n_out}"
    log(f"mlp {size}")
    args = mlp_data(n, n_in, n_hidden, n_out)
    want_val = float(R.mlp_value(*args))
    want = R.mlp_value_and_grad(*args)
    check_close("mlp: hand gradient value", want[0], want_val)
    obj = {REF: lambda: R.mlp_value(*args)}
    vg = {REF: lambda: R.mlp_value_and_grad(*args)}
    for name, fn in (("revbench", P.mlp), ("revbench check=False", P.mlp_fast)):
        check_close(f"mlp: {name} objective", fn(0.0, *args)[0], want_val, rtol=1e-10)
        run = value_and_grad(fn, loss="loss", wrt=("W1", "b1", "W2", "b2"))
        outs, grads = run(0.0, *args)
        check_all(f"mlp: {name} value_and_grad", (outs[0], *grads[1:5]), want, rtol=1e-10)
        obj[name] = lambda fn=fn: fn(0.0, *args)
        vg[name] = lambda run=run: run(0.0, *args)
    jx = peers.get("jax")
    if jx is not None:
        import jax.numpy as jnp
        ja = tuple(jnp.asarray(a) for a in args)
        jv, jg = jx["mlp_value_and_grad"](*ja)
        check_all("mlp: jax", (float(jv), *jg), want, rtol=1e-9)
        vg["jax"] = lambda: jax_block(jx["mlp_value_and_grad"](*ja))
    checks.append(f"mlp {size}")
    add_rows(rows, "mlp", size, "objective", time_cases(obj, cfg["reps"]))
    add_rows(rows, "mlp", size, "value_and_grad", time_cases(vg, cfg["reps"]))


def bench_heat(cfg: dict, peers: dict, rows: list, checks: list) -> None:
    h = heat_data(cfg["heat_n"], cfg["heat_steps"])
    size = f"n={cfg['heat_n']} T={cfg['heat_steps']}"
    log(f"heat {size}")
    hargs = (h["u0"], h["c"], h["n_steps"])
    want_val = R.heat_value(*hargs)
    want = R.heat_value_and_grad(*hargs)
    check_close("heat: hand gradient value", want[0], want_val)
    obj = {REF: lambda: R.heat_value(*hargs)}
    vg = {REF: lambda: R.heat_value_and_grad(*hargs)}
    for name, fn in (("revbench", P.heat), ("revbench check=False", P.heat_fast)):
        check_close(f"heat: {name} objective", rb_heat_objective(fn, h), want_val)
        run = rb_heat_value_and_grad(fn)
        check_all(f"heat: {name} value_and_grad", run(h), want)
        obj[name] = lambda fn=fn: rb_heat_objective(fn, h)
        vg[name] = lambda run=run: run(h)
    for name, step, loss in (("revbench TimeLoop StoreAll", P.heat_step, P.heat_loss),
                             ("revbench TimeLoop StoreAll check=False", P.heat_step_fast,
                              P.heat_loss_fast)):
        run = rb_heat_timeloop(step, loss, h["n_steps"])
        check_all(f"heat: {name}", run(h), want)
        vg[name] = lambda run=run: run(h)
    jx, th = peers.get("jax"), peers.get("torch")
    if jx is not None:
        import jax.numpy as jnp
        ja = (jnp.asarray(h["u0"]), h["c"], h["n_steps"])
        jv, (jg, jc) = jx["heat_value_and_grad"](*ja)
        check_all("heat: jax", (float(jv), jg, jc), want, rtol=1e-6)
        vg["jax lax.scan"] = lambda: jax_block(jx["heat_value_and_grad"](*ja))
    if th is not None:
        torch = th["torch"]
        ta = (torch.from_numpy(h["u0"]), h["c"], h["n_steps"])
        tv, (tg, tc) = th["heat_value_and_grad"](*ta)
        check_all("heat: torch", (tv, tg, tc), want, rtol=1e-6)
        vg["torch"] = lambda: th["heat_value_and_grad"](*ta)
    checks.append(f"heat {size}")
    add_rows(rows, "heat", size, "objective", time_cases(obj, cfg["reps"]))
    add_rows(rows, "heat", size, "value_and_grad", time_cases(vg, cfg["reps"]))


# ---------------------------------------------------------------------------------------
# Cold compile in fresh processes
# ---------------------------------------------------------------------------------------

_COMPILE_SCRIPT = textwrap.dedent("""
    import json, sys, time
    t0 = time.perf_counter()
    import numpy as np
    import revbench
    sys.path.insert(0, {here!r})
    import natural_programs as P
    t1 = time.perf_counter()
    rng = np.random.default_rng(0)
    d, k, n = 3, 4, 10
    args = (0.0, rng.normal(size=k), rng.normal(size=(k, d)),
            0.3 * rng.normal(size=(k, d * (d + 1) // 2)), rng.normal(size=(n, d)), 1.0, 0,
            P.wishart_constant(1.0, 0, d))
    vg = revbench.value_and_grad(P.{fn}, loss="err", wrt=("alphas", "means", "icf"))
    t2 = time.perf_counter()
    vg(*args)
    t3 = time.perf_counter()
    vg(*args)
    t4 = time.perf_counter()
    print(json.dumps({{"import_s": t1 - t0, "first_grad_s": t3 - t2, "second_grad_s": t4 - t3}}))
""")


#: the reference: the hand-written ``@njit`` GMM gradient of the same loops, compiled cold
#: in a fresh process (what the same gradient costs to compile without revbench)
_REFERENCE_COMPILE_SCRIPT = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    sys.path.insert(0, {here!r})
    import natural_reference as R
    rng = np.random.default_rng(0)
    d, k, n = 3, 4, 10
    args = (rng.normal(size=k), rng.normal(size=(k, d)),
            0.3 * rng.normal(size=(k, d * (d + 1) // 2)), rng.normal(size=(n, d)), 1.0, 0)
    t0 = time.perf_counter()
    R.gmm_value_and_grad(*args)
    t1 = time.perf_counter()
    print(json.dumps({{"first_grad_s": t1 - t0}}))
""")


def _fresh_process(script: str, env: dict) -> dict:
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"compile subprocess failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench_compile(cfg: dict, peers: dict, rows: list, checks: list, results: dict) -> None:
    log("compile: cold first gradient of gmm_objective in fresh processes")
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        ref = _fresh_process(_REFERENCE_COMPILE_SCRIPT.format(here=str(HERE)), env)
    out["njit (hand) gmm_value_and_grad"] = [dict(ref, label="cold (empty cache)")]
    rows.append({"workload": "compile", "size": "gmm_value_and_grad", "op": "cold (empty cache)",
                 "impl": "njit (hand)", "median_s": ref["first_grad_s"],
                 "min_s": ref["first_grad_s"], "max_s": ref["first_grad_s"], "reps": 1,
                 "ratio": 1.0, "ratio_min": 1.0})
    for fn in ("gmm_objective",) if cfg.get("compile_checked_only") else (
            "gmm_objective", "gmm_objective_fast"):
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, REVBENCH_CACHE_DIR=cache, NUMBA_CACHE_DIR=cache)
            script = _COMPILE_SCRIPT.format(here=str(HERE), fn=fn)
            runs = []
            for label in ("cold (empty cache)", "second process (cache filled)"):
                t0 = time.perf_counter()
                rec = _fresh_process(script, env)
                rec["process_s"] = time.perf_counter() - t0
                rec["label"] = label
                runs.append(rec)
                rows.append({"workload": "compile", "size": fn, "op": label,
                             "impl": "revbench", "median_s": rec["first_grad_s"],
                             "min_s": rec["first_grad_s"], "max_s": rec["first_grad_s"],
                             "reps": 1, "ratio": rec["first_grad_s"] / ref["first_grad_s"],
                             "ratio_min": None})
            out[fn] = runs
    results["compile"] = out
    checks.append("compile")


# ---------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------


def print_table(rows: list) -> None:
    print(f"{'workload':18s} {'size':24s} {'op':16s} {'impl':44s} {'median':>10s} "
          f"{'ratio':>8s} {'(min)':>8s}")
    for r in rows:
        med = r["median_s"]
        t = f"{med * 1e3:9.3f}ms" if med < 10 else f"{med:9.2f} s"
        ratio = f"{r['ratio']:8.2f}" if r["ratio"] is not None else f"{'':8s}"
        rmin = f"{r['ratio_min']:8.2f}" if r["ratio_min"] is not None else f"{'':8s}"
        print(f"{r['workload']:18s} {r['size']:24s} {r['op']:16s} {r['impl']:44s} {t:>10s} "
              f"{ratio} {rmin}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke run, < 2 min)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "natural.json")
    ap.add_argument("--reps", type=int, default=None, help="repetitions per case")
    ap.add_argument("--only", nargs="+", choices=WORKLOADS, default=None,
                    help="run only these workloads")
    ap.add_argument("--no-compile", action="store_true", help="skip the fresh-process part")
    ap.add_argument("--no-peers", action="store_true", help="leave out JAX and PyTorch")
    args = ap.parse_args(argv)
    cfg = dict(QUICK if args.quick else FULL)
    if args.reps is not None:
        cfg["reps"] = args.reps
    todo = list(args.only or WORKLOADS)
    if args.no_compile and "compile" in todo:
        todo.remove("compile")

    peers = {}
    if not args.no_peers:
        log("loading JAX / PyTorch (where installed)")
        for name, make in (("jax", R.jax_versions), ("torch", R.torch_versions)):
            v = make()
            if v is not None:
                peers[name] = v
    started = time.perf_counter()
    load_start = _common.loadavg()
    rows: list = []
    checks: list = []
    results = {
        "benchmark": "natural",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "config": {k: v for k, v in cfg.items()},
        "machine": _common.machine_info(*(["jax"] if "jax" in peers else []),
                                        *(["torch"] if "torch" in peers else [])),
        "reference": REF,
        "workloads": todo,
    }
    for w in todo:
        if w == "compile":
            bench_compile(cfg, peers, rows, checks, results)
        else:
            {"gmm": bench_gmm, "ba": bench_ba, "sparse": bench_sparse,
             "heat": bench_heat, "dot": bench_dot, "mlp": bench_mlp}[w](cfg, peers, rows, checks)
    results["checked"] = checks
    results["rows"] = rows
    results["seconds"] = time.perf_counter() - started
    results["loadavg"] = {"start": load_start, "end": _common.loadavg()}
    print_table(rows)
    print(f"\nload average: start {load_start}, end {results['loadavg']['end']}; "
          f"{results['seconds']:.0f} s; single-threaded; medians of {cfg['reps']} "
          f"interleaved repetitions; ratio = median / median of '{REF}' in the same group")
    _common.write_results(results, args.out)
    try:
        import pandas as pd
        pd.DataFrame(rows).to_csv(args.out.with_suffix(".csv"), index=False)
    except ImportError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
