#!/usr/bin/env python
"""Past one machine: an experiment sweep and a summed gradient on a Dask ``LocalCluster``.

Run it as::

    python benchmarks/bench_dask.py [--quick] [--workers 2] [--repeats 3] [--out PATH]

1. **A sweep of 16 configurations** (the heat workload, four strategies x four loop
   lengths, ``revbench.experiments.compare``) run serially in this process, then as one
   task per configuration on a cluster of ``--workers`` processes of one thread each
   (``compare(..., client=)``): the wall time of each, their ratio, and whether the
   tables are the same (every column but the times).
2. **A gradient summed over 10^7 items** in 8 chunks (``grad(..., batch=, reduce="sum",
   deterministic=True)`` of Dask arrays, made on the workers by Dask's seeded generator, as
   a cluster's data is read where it lies) on the cluster, then on a cluster of one
   worker: the wall times, their ratio, and whether the result is bit-identical to the
   local call over the same chunks (``workers=8``).

Each timing is the median of ``--repeats`` runs after a warm-up run (the workers compile
or load the code then: compiling is not what is measured).  The clusters start before
the clock.  Results: ``benchmarks/results/bench_dask.json``.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _common  # noqa: E402

# one thread per process for BLAS and Numba (the cores are the workers'), before they load
_common.prepare(one_thread=True)

import numpy as np  # noqa: E402

import revbench  # noqa: E402
from revbench.checkpoint import Periodic, Revolve, StoreAll, TwoLevel  # noqa: E402
from revbench.experiments import compare  # noqa: E402
from revbench.workloads.regression import model  # noqa: E402

SAME = ["workload", "framework", "strategy", "knob", "n_steps", "forward_steps",
        "inverse_steps", "reverse_steps", "peak_states", "peak_bytes", "grad_error", "value",
        "error"]


def median_time(fn, repeats: int) -> tuple[float, object]:
    out = fn()  # (the warm-up: compiled, or loaded from the cache, by every process)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="10^6 items, shorter loops")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "bench_dask.json")
    args = ap.parse_args(argv)
    import dask.array as da
    from distributed import Client, LocalCluster

    steps = [500, 1000, 2000, 4000] if not args.quick else [200, 400, 800, 1600]
    strategies = [StoreAll(), Revolve(snapshots=8), Periodic(32), TwoLevel(period=64,
                                                                           snapshots=4)]
    sweep = dict(n_steps=steps, strategies=strategies, repeats=3, peers=False, progress=False)
    n = 10_000_000 if not args.quick else 1_000_000
    chunk = n // 8
    w = np.random.default_rng(0).normal(size=4)
    # the data made where it is used, chunk by chunk (as a cluster's data is read there):
    # Dask's generator, seeded, gives the same numbers on any number of workers
    X = da.random.default_rng(1).normal(size=(n, 4), chunks=(chunk, 4))
    Y = da.random.default_rng(2).normal(size=n, chunks=chunk)
    g = revbench.grad(model, loss="loss", wrt="w", batch=("loss", "x", "y"), reduce="sum",
                      deterministic=True)

    def on_dask():
        return g(da.zeros(n, chunks=chunk), w, X, Y)[1]

    load_start = _common.loadavg()
    serial_s, serial = median_time(lambda: compare("heat", **sweep), args.repeats)
    local_grad = revbench.grad(model, loss="loss", wrt="w", batch=("loss", "x", "y"),
                               reduce="sum", workers=8)(np.zeros(n), w, X.compute(),
                                                        Y.compute())[1]
    timings = {}
    for workers in (args.workers, 1):
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            if workers == args.workers:
                cluster_s, remote = median_time(lambda: compare("heat", client=client,
                                                                **sweep), args.repeats)
            grad_s, got = median_time(on_dask, args.repeats)
            timings[workers] = grad_s
            if workers == args.workers:
                grad_bits = bool(np.array_equal(got, local_grad))
    same_table = bool(remote.table[SAME].equals(serial.table[SAME]))
    print(f"sweep of {len(steps) * len(strategies)} configurations: serial {serial_s:.2f} s, "
          f"{args.workers} workers {cluster_s:.2f} s, {serial_s / cluster_s:.2f}x; "
          f"tables identical (times aside): {same_table}")
    print(f"gradient summed over {n:.0e} items in 8 chunks: 1 worker {timings[1]:.2f} s, "
          f"{args.workers} workers {timings[args.workers]:.2f} s, "
          f"{timings[1] / timings[args.workers]:.2f}x; bit-identical to the local call over "
          f"the same chunks: {grad_bits}")
    results = {"benchmark": "bench_dask",
               "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(
                   timespec="seconds"),
               "quick": args.quick, "workers": args.workers, "repeats": args.repeats,
               "sweep": {"configurations": len(steps) * len(strategies), "serial_s": serial_s,
                         "cluster_s": cluster_s, "speedup": serial_s / cluster_s,
                         "same_table": same_table},
               "summed_gradient": {"items": n, "chunks": 8, "one_worker_s": timings[1],
                                   "cluster_s": timings[args.workers],
                                   "speedup": timings[1] / timings[args.workers],
                                   "bit_identical": grad_bits},
               "machine": _common.machine_info("dask", "distributed"),
               "load_average": {"start": load_start, "end": _common.loadavg()}}
    _common.write_results(results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
