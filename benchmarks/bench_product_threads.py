#!/usr/bin/env python
"""From what size a matrix product pays for more threads (``revbench.backends.blas``).

Run it as::

    python benchmarks/bench_product_threads.py [--quick] [--threads N] [--out PATH]

The routine ``rb_matmul`` shares a product's 64 x 64 blocks of outputs among up to
``revbench.threads`` threads of its own pool, one more thread for every
``blas.THREAD_WORK`` multiply-adds.  Here every product is given all of them
(``blas.knobs.thread_work = 1``), and each shape -- squares, and a dense layer's
forward and weight-gradient products -- is timed on one thread and on ``--threads``
(default: every core), called from Numba-compiled code, the two interleaved sample by
sample.  Each sample is a compiled loop of ``C += P; C -= P`` updates of about 20 ms;
the table gives the median time per update and ``1 thread / N threads`` (above 1: the
threads win), and the smallest ``m*n*k / N`` from which they win for every larger shape
measured: what ``THREAD_WORK`` should be on this machine.  The bits are the same either
way (``tests/test_blas.py``).  Results: ``benchmarks/results/bench_product_threads.json``.
"""

from __future__ import annotations

import os

# OpenBLAS single-threaded (the routine's tiles run on one thread each anyway), before
# NumPy/SciPy/Numba are imported; the routine's own threads are set below.
for _var in ("NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
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

import numpy as np  # noqa: E402
from bench_blas_threshold import make_runner  # noqa: E402

from revbench.backends import blas  # noqa: E402

#: (m, n, k): squares, then a layer's forward X @ W (batch x out x in) and its weight
#: gradient X^T @ dH (in x out x batch)
SHAPES = ((64, 64, 64), (96, 96, 96), (128, 128, 128), (192, 192, 192), (256, 256, 256),
          (384, 384, 384), (2000, 64, 32), (32, 64, 2000), (128, 128, 32), (512, 256, 64),
          (1024, 256, 128))
QUICK = ((64, 64, 64), (128, 128, 128), (256, 256, 256), (2000, 64, 32))
TARGET_S = 0.02


def sample(run, C, A, B, reps: int) -> float:
    t = time.perf_counter()
    run(C, A, B, reps)
    return (time.perf_counter() - t) / (2 * reps)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="four shapes, 3 samples (smoke run)")
    ap.add_argument("--threads", type=int, default=blas.default_threads(),
                    help="the threads to compare with one (default: every core)")
    ap.add_argument("--samples", type=int, default=None, help="samples per side (default 9)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "bench_product_threads.json")
    args = ap.parse_args(argv)
    samples = args.samples or (3 if args.quick else 9)
    n_threads = max(2, args.threads)
    run = make_runner()
    rng = np.random.default_rng(0)
    rows, work = [], blas.knobs.thread_work
    load_start = _common.loadavg()
    blas.knobs.thread_work = 1
    try:
        for m, n, k in QUICK if args.quick else SHAPES:
            A, B, C = rng.standard_normal((m, k)), rng.standard_normal((k, n)), np.zeros((m, n))
            run(C, A, B, 1)
            t = time.perf_counter()
            run(C, A, B, 4)
            reps = max(1, int(4 * TARGET_S / max(time.perf_counter() - t, 1e-9)))
            times: dict[int, list[float]] = {1: [], n_threads: []}
            for _ in range(samples):
                for threads in times:
                    with blas.threads(threads):
                        times[threads].append(sample(run, C, A, B, reps))
            one, many = statistics.median(times[1]), statistics.median(times[n_threads])
            rows.append({"shape": [m, n, k], "mnk": m * n * k, "reps": reps,
                         "one_s": one, "many_s": many, "speedup": one / many,
                         "times_s": {str(t): v for t, v in times.items()}})
            print(f"[{m}x{n}x{k}] 1 / {n_threads} threads {one / many:.2f}", file=sys.stderr,
                  flush=True)
    finally:
        blas.knobs.thread_work = work
    rows.sort(key=lambda r: r["mnk"])
    suggested = None
    for r in rows:
        if all(q["speedup"] > 1.0 for q in rows if q["mnk"] >= r["mnk"]):
            suggested = r["mnk"] // n_threads
            break
    print(f"product threads: 1 against {n_threads}  (THREAD_WORK in use: {work}; suggested: "
          f"{suggested}, multiply-adds per thread from which the threads win everywhere)")
    print(f"{'m':>5} {'n':>5} {'k':>5} {'m*n*k':>10} {'1 thread us':>12} "
          f"{str(n_threads) + ' threads us':>12} {'speedup':>8}")
    for r in rows:
        m, n, k = r["shape"]
        print(f"{m:>5} {n:>5} {k:>5} {r['mnk']:>10} {r['one_s'] * 1e6:12.1f} "
              f"{r['many_s'] * 1e6:12.1f} {r['speedup']:8.2f}")
    results = {
        "benchmark": "bench_product_threads",
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick, "threads": n_threads, "thread_work_in_use": work,
        "suggested_thread_work": suggested,
        "machine": _common.machine_info("scipy", "llvmlite"),
        "settings": {"samples": samples, "sample_target_s": TARGET_S, "statistic": "median",
                     "caller": "numba.njit", "update": "C += A @ B then C -= A @ B"},
        "rows": rows,
        "load_average": {"start": load_start, "end": _common.loadavg()} if load_start else None,
    }
    _common.write_results(results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
