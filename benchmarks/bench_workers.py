#!/usr/bin/env python
"""``batch=`` on every CPU core: one worker against all of them (``workers=``).

Run it as::

    python benchmarks/bench_workers.py [--n N] [--reps R] [--out PATH]

Times ``jacobian(ba_residual, ..., batch=...)`` -- the natural bundle-adjustment program of
``natural_programs.py``, its 2 x 15 Jacobian per observation -- and the summed gradient of a
shared-parameter loss (``reduce="sum"``), with ``workers=1`` and with every core, checks on
and off.  Medians of ``--reps`` calls after a warm-up; the speed-up is one worker's time
over all cores'.  Per-item results must be identical across worker counts (checked).
Results go to ``results/bench_workers.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import loadavg, machine_info, write_results  # noqa: E402
from bench_gpu import tanh_loss, tanh_loss_fast  # noqa: E402
from natural_programs import ba_residual, ba_residual_fast  # noqa: E402

import revbench  # noqa: E402
from revbench.ad.batch import default_workers  # noqa: E402


def median_time(fn, reps: int) -> tuple[float, object]:
    out = fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "bench_workers.json")
    opts = ap.parse_args()
    n, cores = opts.n, default_workers()
    rng = np.random.default_rng(0)
    cams = rng.normal(size=(n, 11)) * 0.1
    cams[:, 5] += 5.0
    cams[:, 6] = 1.0
    X, w, feat = rng.normal(size=(n, 3)), rng.random(n), rng.normal(size=(n, 2))
    theta, x, y = rng.normal(size=16) / 4, rng.normal(size=(n, 16)), rng.normal(size=n)
    rows = []
    cases = [("ba_jacobian", f, lambda f, k: revbench.jacobian(
                f, "r", ("cam", "X", "w"), batch=("r", "cam", "X", "w", "feat"), workers=k)(
                np.zeros((n, 2)), cams, X, w, feat)) for f in (ba_residual, ba_residual_fast)]
    cases += [("tanh_loss_sum d=16", f, lambda f, k: revbench.grad(
                f, "l", batch=("l", "x", "y"), reduce="sum", workers=k)(np.zeros(n), theta, x, y))
              for f in (tanh_loss, tanh_loss_fast)]
    for name, f, call in cases:
        t1, out1 = median_time(lambda f=f, call=call: call(f, 1), opts.reps)
        tn, outn = median_time(lambda f=f, call=call: call(f, None), opts.reps)
        same = all((a is None and b is None) or np.allclose(a, b, rtol=1e-12, atol=0)
                   for a, b in zip(out1, outn))
        rows.append({"case": name + ("" if f._program.check else " check=False"), "n": n,
                     "one_worker_ms": 1e3 * t1, "all_cores_ms": 1e3 * tn, "cores": cores,
                     "speedup": t1 / tn, "same_results": bool(same)})
    print(f"{'case':32} {'n':>8} {'1 worker ms':>12} {'all ms':>9} {'cores':>6} {'speed-up':>9}")
    for r in rows:
        print(f"{r['case']:32} {r['n']:>8} {r['one_worker_ms']:12.1f} {r['all_cores_ms']:9.1f} "
              f"{r['cores']:>6} {r['speedup']:9.2f}" + ("" if r["same_results"] else "  DIFFERENT"))
    write_results({"machine": machine_info("numba"), "load": loadavg(), "rows": rows}, opts.out)


if __name__ == "__main__":
    main()
