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

Also measured: the first call in a new process, cold and from the disk cache (with the
import and the CUDA context apart); with ``--profile``, where a small call's time goes on
the host; with ``--launch-shapes``, 64 and 256 threads per block.  On an H200 machine with
numba-cuda, NumPy, SciPy and JAX already installed, the whole run with ``--profile`` took
about 2.5 minutes; revbench ran from the repository (``PYTHONPATH``), with
``checkpoint_schedules`` carried as a wheel (``REVBENCH_CACHE_DIR`` on a fresh folder,
``NUMBA_ENABLE_CUDASIM=0``), and ``pytest -n 8 tests/test_gpu.py`` ran the GPU tests on the
card in 30 s.
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
    """(first call's seconds, median of ``reps`` later calls), each call waited for to the
    end of the last kernel it launched."""
    sync = lambda: None
    if "numba.cuda" in sys.modules:
        from numba import cuda

        sync = cuda.synchronize
    t = time.perf_counter()
    fn()
    sync()
    first = time.perf_counter() - t
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync()
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
        # revbench called with JAX's arrays (read through DLPack, results back as JAX's)
        gpu = revbench.jacobian(ba_residual, "r", ("cam", "X", "w"), batch=batch, device="cuda")
        jargs = [jnp.zeros((n, 2)), *args]
        _, t_in_jax = timed(lambda: jax.block_until_ready(gpu(*jargs)), reps)
        got = gpu(*jargs)
        assert all(isinstance(b, jax.Array) for b in got)
        ref = [b.copy_to_host() for b in
               revbench.jacobian(ba_residual, "r", ("cam", "X", "w"), batch=batch,
                                 device="cuda")(*dev)]
        rows[-2]["jax_arrays_ms"] = 1e3 * t_in_jax
        rows[-2]["jax_arrays_max_rel"] = max(max_rel(np.asarray(g), r) for g, r in zip(got, ref))


def loss_rows(n: int, d: int, reps: int, quick: bool, rows: list[dict]) -> None:
    from numba import cuda

    rng = np.random.default_rng(1)
    theta, x, y = rng.normal(size=d) / math.sqrt(d), rng.normal(size=(n, d)), rng.normal(size=n)
    dev = [cuda.to_device(a) for a in (np.zeros(n), theta, x, y)]
    m = min(n, 5000)
    # the gradient with respect to theta alone, as JAX's below (wrt=: no per-item
    # gradient of x, n x d numbers, is computed or written)
    ref = revbench.grad(tanh_loss, "l", "theta", batch=("l", "x", "y"), reduce="sum")(
        np.zeros(m), theta, x[:m], y[:m])[1]
    for f, det in ((tanh_loss, False), (tanh_loss, True), (tanh_loss_fast, False)):
        g = revbench.grad(f, "l", "theta", batch=("l", "x", "y"), reduce="sum", device="cuda",
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
    wrt = ("alphas", "means", "icf")
    ref = revbench.grad(per_point_gmm, "ll", wrt, batch=("ll", "x"), reduce="sum")(
        np.zeros(m), alphas, means, icf, x[:m])
    for det in (False, True):
        g = revbench.grad(per_point_gmm, "ll", wrt, batch=("ll", "x"), reduce="sum",
                          device="cuda", deterministic=det)
        first, t = timed(lambda g=g: g(*dev), reps)
        got = g(np.zeros(m), alphas, means, icf, x[:m])
        rows.append({"case": "gmm_loglik_grad" + (" deterministic" if det else ""), "n": n,
                     "gpu_ms": 1e3 * t, "first_s": first,
                     "max_rel": max(max_rel(a, b) for a, b in zip(got[1:4], ref[1:4]))})
    jax = jax_or_none()
    if jax is not None and not quick:
        import jax.numpy as jnp

        lower = [(j, c) for c in range(d) for j in range(c + 1, d)]
        rows_, cols_ = np.array([j for j, _ in lower]), np.array([c for _, c in lower])

        def total(alphas, means, icf, x):
            low = jnp.zeros((k, d, d)).at[:, rows_, cols_].set(icf[:, d:])

            def one(xi):
                xc = xi[None, :] - means                                  # (k, d)
                qx = jnp.exp(icf[:, :d]) * xc + jnp.einsum("kjl,kl->kj", low, xc)
                terms = alphas + jnp.sum(icf[:, :d], axis=1) - 0.5 * jnp.sum(qx * qx, axis=1)
                return jax.scipy.special.logsumexp(terms)

            return jnp.sum(jax.vmap(one)(x))

        jg = jax.jit(jax.grad(total, argnums=(0, 1, 2)))
        args = [jnp.asarray(a) for a in (alphas, means, icf, x)]
        _, t_jax = timed(lambda: jax.block_until_ready(jg(*args)), reps)
        same = jg(*[jnp.asarray(a) for a in (alphas, means, icf, x[:m])])
        for r in rows[-2:]:
            r["jax_ms"] = 1e3 * t_jax
            r["speedup_vs_jax"] = t_jax / (r["gpu_ms"] / 1e3)
            r["jax_max_rel"] = max(max_rel(np.asarray(a), b) for a, b in zip(same, ref[1:4]))


def host_profile(rows: list[dict], n: int = 10**4, reps: int = 200) -> None:
    """Where a small call's time goes on the host: cProfile of 50 BA Jacobians of 10^4
    device-resident observations (the GPU's part is a few microseconds of it)."""
    import cProfile
    import io
    import pstats

    from natural_programs import ba_residual
    from numba import cuda

    rng = np.random.default_rng(0)
    cam = rng.normal(size=(n, 11)) * 0.1
    cam[:, 5], cam[:, 6] = -8.0, 500.0
    dev = [cuda.to_device(a) for a in (np.zeros((n, 2)), cam, rng.normal(size=(n, 3)),
                                       rng.uniform(0.5, 1.5, n), rng.normal(size=(n, 2)))]
    jac = revbench.jacobian(ba_residual, "r", ("cam", "X", "w"),
                            batch=("r", "cam", "X", "w", "feat"), device="cuda")
    jac(*dev)
    cuda.synchronize()
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    for _ in range(50):
        jac(*dev)
    cuda.synchronize()
    prof.disable()
    per_call = (time.perf_counter() - t) / 50
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(40)
    print(f"host profile: {1e3 * per_call:.3f} ms per call (profiled)")
    print(text.getvalue()[-9000:])

    # the same call in parts, unprofiled: the kernel alone (launched as the call launches
    # it, with the same arrays), the launch without waiting, the whole call
    bat = next(c.cell_contents for c in jac.__closure__ if hasattr(c.cell_contents, "_drivers"))
    drv = next(iter(bat._drivers.values()))
    seeds = next(iter(drv._seeds.values()))
    blocks = [cuda.device_array((n, 2, s)) for s in (11, 3, 1)]
    grid, tpb = drv.shape_of_launch(n)

    def launch():
        drv.kernel[grid, tpb](*dev, *seeds, *blocks, drv.status, 0, n, 0, 1e-10, 1e-10,
                              1e-10, 1e-10)

    def median_ms(fn, sync=True):
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            if sync:
                cuda.synchronize()
            times.append(time.perf_counter() - t)
        return 1e3 * statistics.median(times)

    parts = {"whole call": median_ms(lambda: jac(*dev)),
             "kernel launched and waited for": median_ms(launch),
             "kernel launch alone (not waited for)": median_ms(launch, sync=False),
             "3 device_array allocations": median_ms(
                 lambda: [cuda.device_array((n, 2, s)) for s in (11, 3, 1)], sync=False),
             "status in and out": median_ms(lambda: (drv.status.copy_to_device(drv.status_host),
                                                     drv.status.copy_to_host(drv.status_host)))}
    for what, ms in parts.items():
        print(f"  {what:40} {ms:8.3f} ms")
        rows.append({"case": f"ba_jacobian n=1e4 host: {what}", "n": n, "gpu_ms": ms})


def first_call_probe(n: int) -> None:
    """In a fresh process: the seconds to import revbench and to the first BA Jacobian on
    the GPU (compiling, or loading from the disk cache), printed as JSON."""
    import json

    t0 = time.perf_counter()
    from natural_programs import ba_residual
    from numba import cuda

    t_import = time.perf_counter() - t0
    t0 = time.perf_counter()
    cuda.current_context()  # (the CUDA context: what every GPU program pays once)
    t_context = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    cam = rng.normal(size=(n, 11)) * 0.1
    cam[:, 5], cam[:, 6] = -8.0, 500.0
    args = (np.zeros((n, 2)), cam, rng.normal(size=(n, 3)), rng.uniform(0.5, 1.5, n),
            rng.normal(size=(n, 2)))
    jac = revbench.jacobian(ba_residual, "r", ("cam", "X", "w"),
                            batch=("r", "cam", "X", "w", "feat"), device="cuda")
    t1 = time.perf_counter()
    jac(*args)
    cuda.synchronize()
    print(json.dumps({"import_s": t_import, "context_s": t_context,
                      "first_s": time.perf_counter() - t1}))


def first_call_rows(n: int, rows: list[dict]) -> None:
    """The first call in a new process: with an empty cache, then loading what the first
    process left in it (both revbench's folder and Numba's)."""
    import json
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, REVBENCH_CACHE_DIR=cache, NUMBA_CACHE_DIR=cache)
        for label in ("first_call cold cache", "first_call from disk cache"):
            t = time.perf_counter()
            out = subprocess.run([sys.executable, __file__, "--probe-first-call", str(n)],
                                 env=env, capture_output=True, text=True, timeout=600)
            wall = time.perf_counter() - t
            if out.returncode != 0:
                print(out.stderr[-3000:], file=sys.stderr)
                continue
            probe = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append({"case": f"ba_jacobian {label}", "n": n, "first_s": probe["first_s"],
                         "import_s": probe["import_s"], "context_s": probe["context_s"],
                         "process_s": wall})
            print(f"{label}: import {probe['import_s']:.2f} s, CUDA context "
                  f"{probe['context_s']:.2f} s, first call {probe['first_s']:.2f} s", flush=True)


def launch_shape_rows(reps: int, rows: list[dict]) -> None:
    """BA at 10^6 and the summed d = 64 loss, at other block sizes (the tuning knob)."""
    from revbench.ad import gpu

    default = gpu.THREADS_PER_BLOCK
    for tpb in (64, 256):
        gpu.THREADS_PER_BLOCK = tpb
        sub: list[dict] = []
        ba_rows(10**6, reps, True, sub)
        loss_rows(10**6, 64, reps, True, sub)
        for r in sub:
            r["case"] += f" tpb={tpb}"
            for key in ("cpu_one_core_ms", "cpu_all_cores_ms"):
                r.pop(key, None)
        rows.extend(sub)
    gpu.THREADS_PER_BLOCK = default


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (the CUDA simulator)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "bench_gpu.json")
    ap.add_argument("--launch-shapes", action="store_true",
                    help="also time BA and the d = 64 loss at 64 and 256 threads per block")
    ap.add_argument("--profile", action="store_true",
                    help="also profile where a small call's time goes on the host")
    ap.add_argument("--probe-first-call", type=int, metavar="N", help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.probe_first_call:
        first_call_probe(opts.probe_first_call)
        return
    quick = opts.quick or os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
    reps = 1 if quick else opts.reps
    rows: list[dict] = []
    if not quick:
        first_call_rows(10**4, rows)
        print("first calls done", flush=True)
    for n in ((16,) if quick else (10**4, 10**5, 10**6)):
        ba_rows(n, reps, quick, rows)
        print(f"ba n={n} done", flush=True)
    for d in (64, 16):
        loss_rows(32 if quick else 10**6, d, reps, quick, rows)
        print(f"loss d={d} done", flush=True)
    gmm_rows(4 if quick else 10**6, reps, quick, rows)
    print("gmm done", flush=True)
    if opts.launch_shapes and not quick:
        launch_shape_rows(reps, rows)
    if opts.profile and not quick:
        host_profile(rows)
    print(f"{'case':36} {'n':>8} {'gpu ms':>9} {'first s':>8} {'cpu 1 core ms':>14} "
          f"{'cpu all ms':>11} {'jax ms':>8} {'vs jax':>7} {'max rel':>9}")
    for r in rows:
        def col(k, fmt, r=r):  # (a missing figure: a dash, right-aligned like the others)
            return format(r[k], fmt) if k in r else "-".rjust(int(fmt.split(".")[0]))
        print(f"{r['case']:36} {r['n']:>8} {col('gpu_ms', '9.3f')} {col('first_s', '8.2f')} "
              f"{col('cpu_one_core_ms', '14.1f')} {col('cpu_all_cores_ms', '11.1f')} "
              f"{col('jax_ms', '8.3f')} "
              f"{col('speedup_vs_jax', '7.2f')} {col('max_rel', '9.1e')}")
    for r in rows:
        if "jax_arrays_ms" in r:
            print(f"{r['case']}, n={r['n']}, called with JAX arrays (DLPack): "
                  f"{r['jax_arrays_ms']:.3f} ms, max rel to Numba's arrays "
                  f"{r['jax_arrays_max_rel']:.1e}")
    info = machine_info("numba", "numba_cuda", "jax")
    try:
        from numba import cuda

        info["gpu"] = str(cuda.get_current_device().name)
    except Exception:  # the simulator, or no GPU
        info["gpu"] = None
    print(f"GPU: {info['gpu']}, CPU: {info['cpu']} ({info['cpus_usable']} usable)")
    write_results({"machine": info, "quick": quick,
                   "rows": rows}, opts.out)


if __name__ == "__main__":
    main()
