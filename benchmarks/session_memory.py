#!/usr/bin/env python
"""A long notebook session: memory per redefinition, and how soon Ctrl-C stops a loop.

Run it as::

    python benchmarks/session_memory.py [--runs 200] [--out PATH]

Each part runs in a fresh process on an empty compile cache (``REVBENCH_CACHE_DIR`` on a
new folder), the way a notebook session starts:

``same``    one cell run again and again: the same definition (forward and gradient each
            run), a new function object each time -- what a user does all day;
``edited``  a new edit each run (a different constant): new code, compiled each time;
``plain``   the reference: a plain ``@numba.njit`` function redefined with a new constant
            each time, what Numba itself keeps per compilation.

Memory is the process's resident set (``/proc/self/statm``, which sees Numba's and LLVM's
allocations; tracemalloc does not), after ``gc.collect()`` and ``malloc_trim``, measured
after the 5th run and after the last; the table gives the growth per run and the ratio of
the last to the 5th.  ``interrupt`` times a SIGINT sent to a compiled loop (outer loop
around an inner one) until the ``KeyboardInterrupt`` reaches Python, median of 5.

Results go to ``benchmarks/results/session_memory.json`` (or ``--out``) and a table to
stdout.  Nothing here is asserted by the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, loadavg, machine_info

SESSION = """
import ctypes, gc, os, sys, numpy as np

def rss_mb():
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6

mode, runs = sys.argv[1], int(sys.argv[2])
if mode != "plain":
    import revbench
else:
    import numba
first = None
for k in range(runs):
    c = 1.5 if mode == "same" else k + 0.5
    src = f'''
def step(y, x):
    for i in range(len(x)):
        t = 0.0
        t += x[i] * x[i]
        y[i] += {c} * t + x[i]
        t -= x[i] * x[i]
        del t
'''
    if mode == "plain":
        ns = {}
        exec(src.replace("del t", "pass"), ns)
        f = numba.njit(ns["step"])
        f(np.zeros(3), np.ones(3))
    else:
        f = revbench.define(src, {})["step"]
        f(np.zeros(3), np.ones(3))
        revbench.grad(f, loss=("y", 0))(np.zeros(3), np.ones(3))
    del f
    if k == 4:
        first = rss_mb()
print(first, rss_mb())
"""

#: a compiled loop (outer loop around an inner one) stopped by SIGINT: prints when the
#: interrupt arrived, what was raised and the caller's array (restored); argv: the backend
INTERRUPT = """
import json, sys, time, numpy as np, revbench
f = revbench.define('''
def spin(y, x, n):
    for k in range(n):
        for i in range(x.shape[0]):
            y[i] += x[i] * 1e-9
''', {}, backend=sys.argv[1])["spin"]
f(np.zeros(3), np.ones(3), 10)  # compiled
y = np.arange(3.0)
print("ready", flush=True)
try:
    f(y, np.ones(3), 10 ** 15)
    print("finished")
except BaseException as exc:
    print(time.perf_counter(), type(exc).__module__, type(exc).__name__,
          json.dumps(y.tolist()).replace(" ", ""), flush=True)
"""


def _env(cache: str) -> dict:
    return {**os.environ, "REVBENCH_CACHE_DIR": cache, "PYTHONUNBUFFERED": "1"}


def session(mode: str, runs: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="rb_session_") as cache:
        out = subprocess.run([sys.executable, "-c", SESSION, mode, str(runs)], env=_env(cache),
                             capture_output=True, text=True, timeout=3600, check=True)
    first, last = map(float, out.stdout.split())
    return {"mode": mode, "runs": runs, "rss_after_5_mb": round(first, 1),
            "rss_after_last_mb": round(last, 1),
            "growth_per_run_kb": round((last - first) / (runs - 5) * 1000, 1),
            "last_over_fifth": round(last / first, 3)}


def interrupt_latency(repeats: int = 5) -> dict:
    delays = []
    with tempfile.TemporaryDirectory(prefix="rb_session_") as cache:
        for _ in range(repeats):
            p = subprocess.Popen([sys.executable, "-c", INTERRUPT, "numba"], env=_env(cache),
                                 text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            assert p.stdout.readline().strip() == "ready"
            time.sleep(0.5)
            sent = time.perf_counter()
            p.send_signal(signal.SIGINT)
            out, err = p.communicate(timeout=60)
            fields = out.split()
            if p.returncode != 0 or fields[2:3] != ["KeyboardInterrupt"]:
                raise RuntimeError(f"the loop was not interrupted: {out}{err[-2000:]}")
            delays.append(float(fields[0]) - sent)
    return {"median_s": round(statistics.median(delays), 4),
            "max_s": round(max(delays), 4), "repeats": repeats}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "session_memory.json"))
    a = ap.parse_args()
    rows = []
    for mode in ("same", "edited", "plain"):
        print(f"... {mode}", file=sys.stderr)
        rows.append(session(mode, a.runs))
    print("... interrupt", file=sys.stderr)
    latency = interrupt_latency()
    plain = rows[-1]["growth_per_run_kb"]
    print(f"{'session':8} {'runs':>5} {'RSS at 5 (MB)':>14} {'at end (MB)':>12} "
          f"{'kB per run':>11} {'end/5th':>8} {'kB/run vs plain Numba':>22}")
    for r in rows:
        ratio = r["growth_per_run_kb"] / plain if plain > 0 else float("nan")
        print(f"{r['mode']:8} {r['runs']:5d} {r['rss_after_5_mb']:14.1f} "
              f"{r['rss_after_last_mb']:12.1f} {r['growth_per_run_kb']:11.1f} "
              f"{r['last_over_fifth']:8.3f} {ratio:22.2f}")
    print(f"Ctrl-C to KeyboardInterrupt in a compiled loop: median {latency['median_s'] * 1e3:.1f} ms, "
          f"max {latency['max_s'] * 1e3:.1f} ms ({latency['repeats']} runs)")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({"machine": machine_info(), "loadavg": loadavg(),
                                       "sessions": rows, "interrupt": latency}, indent=2) + "\n")


if __name__ == "__main__":
    main()
