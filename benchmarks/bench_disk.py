#!/usr/bin/env python
"""RAM against disk: ``TwoLevel`` (every k-th state on disk, Revolve in RAM) and
``Multistage`` (checkpoint_schedules' binomial schedule with snapshots on disk) against
``Revolve`` with the same RAM, on the heat equation.

Run it as::

    python benchmarks/bench_disk.py [--quick] [--out PATH]

For T = 10^4 (10^3 with ``--quick``) steps of the heat equation (a 32 x 32 grid, 8 kB a
state): ``Revolve(snapshots=6)`` (RAM only: 8 states) and ``TwoLevel(period=k,
snapshots=4)`` (at most 8 states in RAM, about T / k on disk) for k = T/10, T/100, T/1000,
and ``Multistage(disk=d, snapshots=6)`` (at most 8 states in RAM, d on disk) for d = 10,
100, 1000, through ``revbench.experiments.compare``: each row's median time, its forward steps, RAM
(model and measured by the operating system) and disk bytes, and its time and forward
steps as ratios to Revolve's measured in the same run.  The cost model counts steps only,
so the time of the disk shows in ``time_overhead``.

Results go to ``benchmarks/results/bench_disk.json`` (or ``--out``).  Timings are medians of
3; the machine is shared and noisy, and its load average is recorded.
"""

from __future__ import annotations

import os

for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _common  # noqa: E402

REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from revbench.checkpoint import Multistage, Revolve, TwoLevel  # noqa: E402
from revbench.experiments import compare  # noqa: E402

COLUMNS = ["strategy", "knob", "seconds", "time_ratio", "forward_steps", "steps_ratio",
           "peak_bytes", "measured_peak_bytes", "disk_bytes", "time_overhead", "grad_error"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="T = 10^3 instead of 10^4")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "bench_disk.json")
    opts = ap.parse_args()
    T = 1000 if opts.quick else 10_000
    disks = (10, 100, 1000)
    strategies = ([Revolve(snapshots=6)]
                  + [TwoLevel(period=max(1, T // d), snapshots=4) for d in disks]
                  + [Multistage(disk=d, snapshots=6) for d in disks])
    result = compare("heat", [T], strategies, repeats=3, progress=False, peers=False, m=32)
    table = result.table.copy()
    ref = table[table.strategy == "Revolve"].iloc[0]
    table["time_ratio"] = table.seconds / ref.seconds
    table["steps_ratio"] = table.forward_steps / ref.forward_steps
    print(f"heat equation, 32 x 32 grid, T = {T}: ratios against Revolve(snapshots=6), same run")
    print(table[COLUMNS].to_string(index=False))
    _common.write_results({"T": T, "machine": _common.machine_info("numba", "numpy"),
                           "loadavg": _common.loadavg(),
                           "rows": table[COLUMNS].to_dict(orient="records")}, opts.out)


if __name__ == "__main__":
    main()
