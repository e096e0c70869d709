#!/usr/bin/env python
"""Sparse workload benchmark: revbench's gradients of ``x^T A y`` and ``y = A x`` vs SciPy.

Run it as::

    python benchmarks/bench_sparse.py [--quick] [--out PATH] [--reps N]

``A`` is a CSR matrix, 1000 x 1000 with density 0.05 (50 000 stored values), float64
with int64 index arrays (``revbench.workloads.sparse.make_csr``).  Single-threaded, in
one run, with repetitions of all variants interleaved, it measures the median time of

* the reference: SciPy's forward computation, ``x @ (A @ y)`` and ``A @ x``;
* for scale: the gradients from their closed forms with SciPy (``A @ y``, ``A.T @ x``, the
  sampled outer product), and a hand-written one-pass ``@numba.njit`` adjoint;
* revbench's forward run (checks on and ``check=False``);
* revbench's gradient (value and gradients with respect to ``A.data``, ``x`` and ``y``,
  the ``A`` gradient as a CSR matrix with ``A``'s pattern), by reverse computing, three
  ways (``revbench.workloads.sparse.gradients``): ``grad`` (``revbench.value_and_grad``),
  ``kernels`` (forward run + reverse sweep through the compiled code) and ``sweep`` (the
  reverse sweep alone, started at the input: valid because the output only accumulates).

Ratios are time / SciPy forward time; the goal is a gradient **<= 2.5x**.  Before timing
every gradient is checked against the closed forms.  Results go to
``benchmarks/results/bench_sparse.json`` (or ``--out``); see ``benchmarks/README.md``.
"""

from __future__ import annotations

import os

# Single-threaded, before NumPy/SciPy/Numba are imported.
for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import datetime  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _common  # noqa: E402

REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numba  # noqa: E402
import numpy as np  # noqa: E402

from revbench.workloads import sparse as S  # noqa: E402

GOAL_RATIO = 2.5
FULL = {"n": S.N, "density": S.DENSITY, "seed": S.SEED, "reps": 201}
QUICK = {"n": 200, "density": S.DENSITY, "seed": S.SEED, "reps": 5}


# --------------------------------------------------------------------------- #
# Hand-written one-pass adjoints (for scale: what a fused hand-written gradient costs)
# --------------------------------------------------------------------------- #
@numba.njit
def bilinear_grad_njit(x, data, indices, indptr, y, gx, gdata, gy):
    s = 0.0
    for i in range(len(indptr) - 1):
        t = 0.0
        xi = x[i]
        for k in range(indptr[i], indptr[i + 1]):
            j = indices[k]
            t += data[k] * y[j]
            gdata[k] += xi * y[j]
            gy[j] += xi * data[k]
        gx[i] += t
        s += xi * t
    return s


@numba.njit
def matvec_grad_njit(yo, data, indices, indptr, x, w, gdata, gx):
    for i in range(len(indptr) - 1):
        t = 0.0
        wi = w[i]
        for k in range(indptr[i], indptr[i + 1]):
            j = indices[k]
            t += data[k] * x[j]
            gdata[k] += wi * x[j]
            gx[j] += wi * data[k]
        yo[i] += t


def hand_written(kind: str, A, x, y, w):
    data, indices, indptr = S.csr_arrays(A)
    if kind == "bilinear":
        def run():
            gx, gdata, gy = np.zeros(x.shape[0]), np.zeros(data.shape[0]), np.zeros(y.shape[0])
            s = bilinear_grad_njit(x, data, indices, indptr, y, gx, gdata, gy)
            return S.Gradients(s, S.with_data(A, gdata), gx, gy)
    else:
        def run():
            yo, gdata, gx = y.copy(), np.zeros(data.shape[0]), np.zeros(x.shape[0])
            matvec_grad_njit(yo, data, indices, indptr, x, w, gdata, gx)
            return S.Gradients(yo, S.with_data(A, gdata), gx, w.copy())
    return run


# --------------------------------------------------------------------------- #
# The variants of one workload
# --------------------------------------------------------------------------- #
def variants(kind: str, A, x, y, w) -> dict:
    """name -> (label, callable, is_gradient)."""
    data, indices, indptr = S.csr_arrays(A)
    out: dict = {"scipy_forward": ("SciPy forward (reference)",
                                   lambda: S.scipy_forward(A, x, y, kind), False)}
    out["scipy_gradient"] = ("SciPy gradient, closed forms",
                             lambda: S.oracle_gradients(A, x, y, kind=kind, w=w), True)
    out["njit_gradient"] = ("hand-written @njit 1-pass grad", hand_written(kind, A, x, y, w), True)
    for checked in (True, False):
        tag = "checked" if checked else "unchecked"
        f = S.PROGRAMS[kind, checked]
        if kind == "bilinear":
            fwd = lambda f=f: f(0.0, x, data, indices, indptr, y)
        else:
            yo = np.zeros(A.shape[0])
            fwd = lambda f=f, yo=yo: f(yo, data, indices, indptr, x)
        label = "checks on" if checked else "check=False"
        out[f"revbench_forward_{tag}"] = (f"revbench forward, {label}", fwd, False)
        for method in S.METHODS:
            out[f"revbench_gradient_{method}_{tag}"] = (
                f"revbench gradient '{method}', {label}",
                lambda c=checked, m=method: S.gradients(A, x, y, kind=kind, w=w, checked=c, method=m),
                True)
    return out


def verify(kind: str, vs: dict, A, x, y, w) -> dict:
    """Every gradient variant agrees with the closed forms (raises otherwise); warms up."""
    ref = S.oracle_gradients(A, x, y, kind=kind, w=w)
    report = {}
    for name, (label, fn, is_grad) in vs.items():
        res = fn()
        if not is_grad:
            continue
        errs = {
            "value": float(np.max(np.abs(np.asarray(res.value) - np.asarray(ref.value)))),
            "A": float(np.max(np.abs(res.A.data - ref.A.data))),
            "x": float(np.max(np.abs(res.x - ref.x))),
            "y": float(np.max(np.abs(res.y - ref.y))),
        }
        if res.A.indices is not A.indices and not np.array_equal(res.A.indices, A.indices):
            raise AssertionError(f"{kind}: {label}: the A gradient lost A's sparsity pattern")
        scale = max(1.0, float(np.max(np.abs(ref.x))), float(np.max(np.abs(np.asarray(ref.value)))))
        if max(errs.values()) > 1e-9 * scale:
            raise AssertionError(f"{kind}: {label} disagrees with the closed forms: {errs}")
        report[name] = errs
    return {"max_abs_error": report, "ok": True}


def _summary(times: list[float]) -> dict:
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
            "times_s": times}


def time_variants(vs: dict, reps: int) -> dict:
    """Median times; repetitions interleaved (rep 1 of every variant, then rep 2, ...)."""
    names = list(vs)
    times: dict[str, list[float]] = {n: [] for n in names}
    perf = time.perf_counter
    for rep in range(reps):
        k = rep % len(names)
        for n in names[k:] + names[:k]:
            fn = vs[n][1]
            t0 = perf()
            fn()
            times[n].append(perf() - t0)
    return {n: _summary(ts) for n, ts in times.items()}


# --------------------------------------------------------------------------- #
# Reporting
# --------------------------------------------------------------------------- #
def print_table(results: dict) -> None:
    p = print
    m = results["machine"]
    p(f"revbench sparse benchmark  {results['timestamp']}  {'(quick)' if results['quick'] else ''}")
    p(f"python {m['python']}, numba {m['numba']}, numpy {m['numpy']}, scipy {m['scipy']}, "
      f"{m['cpu']} ({m['cpus_usable']} usable CPUs), single-threaded")
    s = results["settings"]
    p(f"A: {s['n']}x{s['n']} CSR, density {s['density']}, nnz {results['nnz']}, int64 indices; "
      f"median (and min) of {s['reps']} interleaved reps; ratio = time / SciPy forward "
      f"(of medians, of mins); goal: gradient <= {GOAL_RATIO}x")
    load = results.get("load_average")
    if load:
        p(f"load average at start {load['start'][0]:.2f}, at end {load['end'][0]:.2f}")
    for kind, wr in results["workloads"].items():
        p("")
        p(f"{kind}: {wr['description']}")
        hdr = f"  {'variant':<44} {'median us':>10} {'min us':>9} {'ratio':>6} {'(min)':>7}  goal"
        p(hdr)
        p("  " + "-" * (len(hdr) - 2))
        for name, t in wr["timings"].items():
            label = wr["labels"][name]
            r, rm = wr["ratios"][name], wr["ratios_of_min"][name]
            goal = ""
            if name.startswith("revbench_gradient"):
                goal = "ok" if r <= GOAL_RATIO else "MISSED"
            p(f"  {label:<44} {t['median_s'] * 1e6:10.1f} {t['min_s'] * 1e6:9.1f} {r:6.2f} "
              f"({rm:5.2f})  {goal}")
    p("")
    p("  grad: revbench.value_and_grad (copies the arguments, forward run, reverse sweep);")
    p("  kernels: forward run + reverse sweep through the compiled code (ReversibleFunction.kernel);")
    p("  sweep: the reverse sweep alone from the input state (the output only accumulates, so")
    p("         the sweep's adjoints do not depend on it; it yields the value as well).")
    if results["quick"]:
        p("  (--quick: tiny sizes; the ratios mostly measure per-call overhead)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, few reps (a smoke run)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "bench_sparse.json",
                    help="where to write the JSON results (default: benchmarks/results/bench_sparse.json)")
    ap.add_argument("--reps", type=int, default=None, help="repetitions per measurement")
    args = ap.parse_args(argv)
    cfg = dict(QUICK if args.quick else FULL)
    if args.reps is not None:
        cfg["reps"] = max(1, args.reps)

    A, x, y = S.make_problem(cfg["n"], cfg["density"], cfg["seed"])
    w = np.random.default_rng([cfg["seed"], 2]).standard_normal(A.shape[0])
    results: dict = {
        "benchmark": "bench_sparse",
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "machine": _common.machine_info('scipy'),
        "settings": {**cfg, "timer": "time.perf_counter", "statistic": "median",
                     "index_dtype": str(A.indices.dtype)},
        "nnz": int(A.nnz),
        "goals": {"gradient_ratio_max": GOAL_RATIO},
        "workloads": {},
    }
    load_start = _common.loadavg()
    descriptions = {
        "bilinear": "s = x^T A y; gradients wrt A.data (pattern of A), x, y; reference x @ (A @ y)",
        "matvec": "y_out = y + A x with cotangent w (the VJP); gradients wrt A.data, x, y; "
                  "reference A @ x",
    }
    for kind in S.KINDS:
        print(f"[{kind}] compiling and verifying ...", file=sys.stderr, flush=True)
        vs = variants(kind, A, x, y if kind == "bilinear" else np.zeros(A.shape[0]), w)
        ver = verify(kind, vs, A, x, y if kind == "bilinear" else np.zeros(A.shape[0]), w)
        print(f"[{kind}] timing {cfg['reps']} reps ...", file=sys.stderr, flush=True)
        timings = time_variants(vs, cfg["reps"])
        ref = timings["scipy_forward"]
        ratios = {n: t["median_s"] / ref["median_s"] for n, t in timings.items()}
        ratios_min = {n: t["min_s"] / ref["min_s"] for n, t in timings.items()}
        grads = {n: r for n, r in ratios.items() if n.startswith("revbench_gradient")}
        results["workloads"][kind] = {
            "description": descriptions[kind],
            "labels": {n: v[0] for n, v in vs.items()},
            "verification": ver,
            "timings": timings,
            "ratios": ratios,
            "ratios_of_min": ratios_min,
            "goals_met": {n: r <= GOAL_RATIO for n, r in grads.items()},
            "best_gradient": min(grads, key=grads.get),
        }
    results["load_average"] = {"start": load_start, "end": _common.loadavg()} if load_start else None
    print_table(results)
    _common.write_results(results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
