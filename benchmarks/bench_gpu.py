#!/usr/bin/env python
"""Batched derivatives on the GPU (``device="cuda"``) against the CPU and JAX.

Run it as::

    python benchmarks/bench_gpu.py [--quick] [--reps N] [--out PATH]

on a machine with an NVIDIA GPU and ``pip install 'revbench[cuda]'`` (``--quick``:
small sizes, for the CUDA simulator, ``NUMBA_ENABLE_CUDASIM=1``, where it checks the
script, not the speed).  The programs are written as ``docs/gpu.md`` shows, checks on
unless a row says ``check=False``:

* **BA**: the bundle-adjustment reprojection residual of ``natural_programs.ba_residual``
  (Rodrigues rotation, radial distortion), its 2 x 15 Jacobian per observation, for 10^4 to
  10^6 observations sharing cameras and points through index arrays (the rows are
  gathered on the GPU once, as JAX's ``vmap`` gathers them);
* **shared-parameter loss**: ``sum_i (tanh(theta . x_i) - y_i)^2`` over 10^6 items,
  ``theta`` of 64 and 16 numbers, its gradient with ``reduce="sum"`` (both modes);
* **GMM**: a Gaussian mixture log-likelihood per point (D = 10, K = 5; D = 3, K = 2 with
  ``--quick``), its gradient with respect to the shared parameters over 10^6 points.

Each result is compared with revbench's CPU ``batch=`` path on a slice of the items
(``max_rel``); the CPU path is timed on up to 10^5 items, on one core and on all
(``workers=``), and scaled to n.  JAX's
``jit(vmap(jacrev))`` / ``jit(grad)`` of the same functions run on the same GPU where JAX
with CUDA is installed.  Times are medians of ``--reps`` calls after one warm-up call
(the first call's time, compiling, is reported as ``first_s``).  Results go to
``results/bench_gpu.json``.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import machine_info, write_results  # noqa: E402

import revbench  # noqa: E402
from revbench import reversible  # noqa: E402
from revbench.ad.batch import default_workers  # noqa: E402


def per_point_gmm_src(ll, alphas, means, icf, x):
    """log sum_k exp(alpha_k + sum(log diag L_k) - |L_k (x - mu_k)|^2 / 2), for one point."""
    d = x.shape[0]
    k_comp = alphas.shape[0]
    with routine as terms_of_x:                            # noqa: F821
        terms = np.zeros(k_comp)
        for k in range(k_comp):
            with routine as qx_of_k:                       # noqa: F821
                xc = np.zeros(d)
                xc += x - means[k]
                qx = np.zeros(d)
                qx += np.exp(icf[k, :d]) * xc
                p = d
                for l in range(d):                         # noqa: E741
                    for j in range(l + 1, d):
                        qx[j] += icf[k, p] * xc[l]
                        p += 1
            terms[k] += alphas[k] + np.sum(icf[k, :d]) - 0.5 * np.dot(qx, qx)
            ~qx_of_k
    revbench.lib.logsumexp(ll, terms)
    ~terms_of_x


def tanh_loss_src(l, theta, x, y):  # noqa: E741 - l: the loss, as in docs/gpu.md
    with routine as z_of_x:                                # noqa: F821
        z = 0.0
        for j in range(len(theta)):
            z += theta[j] * x[j]
        t = math.tanh(z)
    l += (t - y) * (t - y)  # noqa: E741
    ~z_of_x


per_point_gmm = reversible(per_point_gmm_src)
tanh_loss = reversible(tanh_loss_src)
tanh_loss_fast = reversible(check=False)(tanh_loss_src)


def timed(fn, reps: int) -> tuple[float, float]:
    """(first call's seconds, median of ``reps`` later calls)."""
    t = time.perf_counter()
    fn()
    first = time.perf_counter() - t
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return first, statistics.median(times)


def max_rel(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    scale = np.maximum(np.abs(b), 1e-300)
    return float(np.max(np.abs(a - b) / np.maximum(scale, np.max(np.abs(b)) * 1e-12)))


def jax_or_none():
    try:
        import jax

        jax.config.update("jax_enable_x64", True)
        return jax if any(d.platform == "gpu" for d in jax.devices()) else None
    except Exception:  # no JAX, or no JAX for CUDA: the column stays empty
        return None


def ba_rows(n: int, reps: int, quick: bool, rows: list[dict]) -> None:
    from natural_programs import ba_residual, ba_residual_fast
    from numba import cuda

    rng = np.random.default_rng(0)
    ncams, npts = max(2, n // 1000), max(2, n // 10)
    cams = rng.normal(size=(ncams, 11)) * 0.1
    cams[:, 3:6] = rng.normal(size=(ncams, 3))
    cams[:, 6] = 500.0
    pts = rng.normal(size=(npts, 3)) + np.array([0.0, 0.0, 8.0])
    ci, pi = rng.integers(0, ncams, n), rng.integers(0, npts, n)
    w, feat = rng.uniform(0.5, 1.5, n), rng.normal(size=(n, 2))
    dev = [cuda.to_device(a) for a in (np.zeros((n, 2)), cams[ci], pts[pi], w, feat)]
    batch = ("r", "cam", "X", "w", "feat")
    m = min(n, 10**5)  # the CPU's slice (timed; its first 2000 items checked)
    host = (np.zeros((m, 2)), cams[ci[:m]], pts[pi[:m]], w[:m], feat[:m])
    for f in (ba_residual, ba_residual_fast):
        label = "ba_jacobian" + ("" if f is ba_residual else " check=False")
        gpu = revbench.jacobian(f, "r", ("cam", "X", "w"), batch=batch, device="cuda")
        first, t_gpu = timed(lambda gpu=gpu: gpu(*dev), reps)
        got = [b.copy_to_host()[:2000] for b in gpu(*dev)]
        row = {"case": label, "n": n, "gpu_ms": 1e3 * t_gpu, "first_s": first}
        for key, workers in (("cpu_one_core_ms", 1), ("cpu_all_cores_ms", None)):
            cpu = revbench.jacobian(f, "r", ("cam", "X", "w"), batch=batch, workers=workers)
            row[key] = 1e3 * timed(lambda cpu=cpu: cpu(*host), 3)[1] * n / m
            ref = [b[:2000] for b in cpu(*host)]
        row["cores"] = default_workers()
        row["max_rel"] = max(max_rel(g, r) for g, r in zip(got, ref))
        rows.append(row)
    jax = jax_or_none()
    if jax is not None and not quick:
        import jax.numpy as jnp

        def res(cam, X, w, feat):
            theta = jnp.sqrt(jnp.sum(cam[:3] ** 2))
            k = cam[:3] / theta
            xc = X - cam[3:6]
            c, s = jnp.cos(theta), jnp.sin(theta)
            xr = xc * c + jnp.cross(k, xc) * s + k * jnp.dot(k, xc) * (1 - c)
            p = xr[:2] / xr[2]
            rsq = jnp.sum(p * p)
            dist = 1 + cam[9] * rsq + cam[10] * rsq * rsq
            return w * (p * dist * cam[6] + cam[7:9] - feat)

        jf = jax.jit(jax.vmap(jax.jacrev(res, argnums=(0, 1, 2))))
        args = [jnp.asarray(a) for a in (cams[ci], pts[pi], w, feat)]
        _, t_jax = timed(lambda: jax.block_until_ready(jf(*args)), reps)
        for r in rows[-2:]:
            r["jax_ms"] = 1e3 * t_jax
            r["speedup_vs_jax"] = t_jax / (r["gpu_ms"] / 1e3)


def loss_rows(n: int, d: int, reps: int, quick: bool, rows: list[dict]) -> None:
    from numba import cuda

    rng = np.random.default_rng(1)
    theta, x, y = rng.normal(size=d) / math.sqrt(d), rng.normal(size=(n, d)), rng.normal(size=n)
    dev = [cuda.to_device(a) for a in (np.zeros(n), theta, x, y)]
    m = min(n, 5000)
    ref = revbench.grad(tanh_loss, "l", batch=("l", "x", "y"), reduce="sum")(
        np.zeros(m), theta, x[:m], y[:m])[1]
    for f, det in ((tanh_loss, False), (tanh_loss, True), (tanh_loss_fast, False)):
        g = revbench.grad(f, "l", batch=("l", "x", "y"), reduce="sum", device="cuda",
                          deterministic=det)
        first, t = timed(lambda g=g: g(*dev), reps)
        got = g(np.zeros(m), theta, x[:m], y[:m])[1]
        rows.append({"case": f"tanh_loss d={d}" + (" deterministic" if det else "")
                     + ("" if f is tanh_loss else " check=False"), "n": n, "gpu_ms": 1e3 * t,
                     "first_s": first, "max_rel": max_rel(got, ref)})
    jax = jax_or_none()
    if jax is not None and not quick:
        import jax.numpy as jnp

        jg = jax.jit(jax.grad(lambda th, x, y: jnp.sum((jnp.tanh(x @ th) - y) ** 2)))
        args = [jnp.asarray(a) for a in (theta, x, y)]
        _, t_jax = timed(lambda: jax.block_until_ready(jg(*args)), reps)
        for r in rows[-3:]:
            r["jax_ms"] = 1e3 * t_jax
            r["speedup_vs_jax"] = t_jax / (r["gpu_ms"] / 1e3)


def gmm_rows(n: int, reps: int, quick: bool, rows: list[dict]) -> None:
    from numba import cuda

    rng = np.random.default_rng(2)
    d, k = (3, 2) if quick else (10, 5)
    alphas, means = rng.normal(size=k), rng.normal(size=(k, d))
    icf = rng.normal(size=(k, d + d * (d - 1) // 2)) * 0.1
    x = rng.normal(size=(n, d))
    dev = [cuda.to_device(a) for a in (np.zeros(n), alphas, means, icf, x)]
    m = min(n, 2000)
    ref = revbench.grad(per_point_gmm, "ll", batch=("ll", "x"), reduce="sum")(
        np.zeros(m), alphas, means, icf, x[:m])
    for det in (False, True):
        g = revbench.grad(per_point_gmm, "ll", batch=("ll", "x"), reduce="sum", device="cuda",
                          deterministic=det)
        first, t = timed(lambda g=g: g(*dev), reps)
        got = g(np.zeros(m), alphas, means, icf, x[:m])
        rows.append({"case": "gmm_loglik_grad" + (" deterministic" if det else ""), "n": n,
                     "gpu_ms": 1e3 * t, "first_s": first,
                     "max_rel": max(max_rel(a, b) for a, b in zip(got[1:4], ref[1:4]))})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (the CUDA simulator)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "bench_gpu.json")
    opts = ap.parse_args()
    quick = opts.quick or os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
    reps = 1 if quick else opts.reps
    rows: list[dict] = []
    for n in ((16,) if quick else (10**4, 10**5, 10**6)):
        ba_rows(n, reps, quick, rows)
        print(f"ba n={n} done", flush=True)
    for d in (64, 16):
        loss_rows(32 if quick else 10**6, d, reps, quick, rows)
        print(f"loss d={d} done", flush=True)
    gmm_rows(4 if quick else 10**6, reps, quick, rows)
    print(f"{'case':36} {'n':>8} {'gpu ms':>9} {'first s':>8} {'cpu 1 core ms':>14} "
          f"{'cpu all ms':>11} {'jax ms':>8} {'vs jax':>7} {'max rel':>9}")
    for r in rows:
        def col(k, fmt, r=r):  # (a missing figure: a dash, right-aligned like the others)
            return format(r[k], fmt) if k in r else "-".rjust(int(fmt.split(".")[0]))
        print(f"{r['case']:36} {r['n']:>8} {col('gpu_ms', '9.3f')} {col('first_s', '8.2f')} "
              f"{col('cpu_one_core_ms', '14.1f')} {col('cpu_all_cores_ms', '11.1f')} "
              f"{col('jax_ms', '8.3f')} "
              f"{col('speedup_vs_jax', '7.2f')} {col('max_rel', '9.1e')}")
    write_results({"machine": machine_info("numba", "numba_cuda", "jax"), "quick": quick,
                   "rows": rows}, opts.out)


if __name__ == "__main__":
    main()
