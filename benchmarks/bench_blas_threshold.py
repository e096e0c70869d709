#!/usr/bin/env python
"""Where BLAS starts to pay in revbench's matrix-product update (``revbench.backends.blas``).

Run it as::

    python benchmarks/bench_blas_threshold.py [--quick] [--out PATH] [--samples N]

The routine ``rb_matmul`` computes ``C += A @ B`` (A m x k, B k x n) by a plain loop
below ``MATMUL_THRESHOLD`` (``m*n*k``) and by SciPy's BLAS at or above it.  For square
shapes from 1^3 to 256^3, MLP-like shapes (a layer's forward ``X @ W``: batch x out x in,
and its weight gradient ``X^T @ dH``: in x out x batch) and matrix-vector shapes (one
column, one row), it times, single-threaded, the routine called from Numba-compiled code
with each path forced (the routine's benchmark knobs, ``blas.knobs``):

* ``loop``: the plain loop (threshold set past every size);
* ``blas``: BLAS as the routine calls it, with ``dgemv`` for one row or column (``gemv`` 2),
  else ``dgemm``;
* ``gemm``: BLAS with ``dgemm`` for every shape (the vector shapes only; ``gemv`` 0).

(The routine's default, ``blas.GEMV``, is what these columns decided: ``dgemv`` for one
column, ``dgemm`` for one row.)

Each sample is a compiled loop of ``C += P; C -= P`` updates long enough to take about
20 ms; the median time per update is reported, and ``loop / blas`` (above 1: BLAS is
faster).  The smallest ``m*n*k`` from which BLAS is faster for every measured shape is
the suggested threshold.  Results go to ``benchmarks/results/bench_blas_threshold.json``
(or ``--out``).
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

from revbench.backends import blas  # noqa: E402

SQUARE = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64, 96, 128, 192, 256)
#: (batch, out, in): a dense layer's forward product X @ W, and (in, out, batch) its
#: weight gradient X^T @ dH
LAYERS = ((1, 16, 16), (4, 16, 16), (8, 32, 32), (16, 64, 64), (32, 64, 64), (32, 128, 128),
          (64, 128, 784), (128, 256, 256), (32, 10, 128), (8, 256, 64))
VECTOR_SIZES = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
QUICK_SQUARE = (1, 2, 4, 8, 16, 32, 64)
TARGET_S = 0.02  # one sample's length


def shapes(quick: bool) -> list[tuple[str, tuple[int, int, int]]]:
    out: list[tuple[str, tuple[int, int, int]]] = []
    for s in (QUICK_SQUARE if quick else SQUARE):
        out.append(("square", (s, s, s)))
    if not quick:
        for b, o, i in LAYERS:
            out.append(("layer", (b, o, i)))
            out.append(("layer grad", (i, o, b)))
    for s in (VECTOR_SIZES[:5] if quick else VECTOR_SIZES):
        out.append(("matvec", (s, 1, s)))   # A @ x
        out.append(("vecmat", (1, s, s)))   # x @ A
        if not quick:
            out.append(("matvec", (4 * s, 1, s)))
            out.append(("vecmat", (1, 4 * s, s)))
    seen, unique = set(), []
    for kind, shape in out:
        if shape not in seen:
            seen.add(shape)
            unique.append((kind, shape))
    return sorted(unique, key=lambda ks: (ks[1][0] * ks[1][1] * ks[1][2], ks[1]))


def make_runner():
    update = blas.numba_matmul_update

    @numba.njit
    def run(C, A, B, reps):
        r = 0
        for _ in range(reps):
            r += update(C, A, B, 0, 0, 0, 1)
            r += update(C, A, B, 0, 0, 1, 1)
        return r

    return run


def time_path(run, C, A, B, samples: int) -> dict:
    """The median seconds of one update (a sample: ``reps`` pairs of updates)."""
    run(C, A, B, 1)  # (compiled already; warms the caches)
    reps, elapsed = 1, 0.0
    while True:  # reps for a sample of about TARGET_S
        t = time.perf_counter()
        run(C, A, B, reps)
        elapsed = time.perf_counter() - t
        if elapsed >= TARGET_S / 4 or reps >= 1 << 22:
            break
        reps *= 4
    reps = max(1, int(reps * TARGET_S / max(elapsed, 1e-9)))
    times = []
    for _ in range(samples):
        t = time.perf_counter()
        run(C, A, B, reps)
        times.append((time.perf_counter() - t) / (2 * reps))
    return {"median_s": statistics.median(times), "min_s": min(times), "reps": reps,
            "times_s": times}


def suggest(rows: list[dict]) -> int:
    """The smallest m*n*k from which BLAS is faster than the loop for every shape."""
    mnks = sorted({r["mnk"] for r in rows})
    for t in mnks:
        if all(r["loop_over_blas"] > 1.0 for r in rows if r["mnk"] >= t):
            return t
    return mnks[-1] + 1


def print_table(results: dict) -> None:
    print(f"revbench BLAS threshold benchmark  {results['timestamp']}  "
          f"{'(quick)' if results['quick'] else ''}")
    print(f"threshold in use: {results['threshold_in_use']}; suggested: "
          f"{results['suggested_threshold']} (smallest m*n*k from which BLAS wins everywhere)")
    print(f"{'kind':<11} {'m':>5} {'n':>5} {'k':>5} {'m*n*k':>10} {'loop us':>10} {'blas us':>10} "
          f"{'gemm us':>10} {'loop/blas':>9}")
    for r in results["rows"]:
        m, n, k = r["shape"]
        gemm = f"{r['gemm']['median_s'] * 1e6:10.3f}" if "gemm" in r else f"{'':>10}"
        print(f"{r['kind']:<11} {m:>5} {n:>5} {k:>5} {r['mnk']:>10} "
              f"{r['loop']['median_s'] * 1e6:10.3f} {r['blas']['median_s'] * 1e6:10.3f} {gemm} "
              f"{r['loop_over_blas']:9.2f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="few shapes, 3 samples (smoke run)")
    ap.add_argument("--samples", type=int, default=None, help="samples per path (default 7)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "bench_blas_threshold.json")
    args = ap.parse_args(argv)
    samples = args.samples or (3 if args.quick else 7)

    run = make_runner()
    knobs = blas.knobs
    in_use, gemv_in_use = knobs.threshold, knobs.gemv
    rng = np.random.default_rng(0)
    rows = []
    load_start = _common.loadavg()
    try:
        with blas.blas_threads(1):
            for kind, (m, n, k) in shapes(args.quick):
                A, B, C = rng.standard_normal((m, k)), rng.standard_normal((k, n)), np.zeros((m, n))
                row = {"kind": kind, "shape": [m, n, k], "mnk": m * n * k}
                run(C, A, B, 1)  # (compiles for these types once)
                knobs.threshold, knobs.gemv = 2**63 - 1, 2
                row["loop"] = time_path(run, C, A, B, samples)
                knobs.threshold = 0
                row["blas"] = time_path(run, C, A, B, samples)
                if m == 1 or n == 1:
                    knobs.gemv = 0
                    row["gemm"] = time_path(run, C, A, B, samples)
                    knobs.gemv = 2
                row["loop_over_blas"] = row["loop"]["median_s"] / row["blas"]["median_s"]
                rows.append(row)
                print(f"[{kind} {m}x{n}x{k}] loop/blas {row['loop_over_blas']:.2f}",
                      file=sys.stderr, flush=True)
    finally:
        knobs.threshold, knobs.gemv = in_use, gemv_in_use
    results = {
        "benchmark": "bench_blas_threshold",
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "machine": _common.machine_info("scipy", "llvmlite"),
        "settings": {"samples": samples, "sample_target_s": TARGET_S, "timer": "time.perf_counter",
                     "statistic": "median", "threads": 1, "caller": "numba.njit",
                     "update": "C += A @ B then C -= A @ B, A, B, C C-contiguous, standard normal"},
        "threshold_in_use": in_use,
        "suggested_threshold": suggest(rows),
        "rows": rows,
        "load_average": {"start": load_start, "end": _common.loadavg()} if load_start else None,
    }
    print_table(results)
    _common.write_results(results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
