#!/usr/bin/env python
"""No tape: the memory of a revbench gradient does not grow with the number of steps.

Run it as::

    python benchmarks/bench_memory.py [--quick] [--out PATH] [--steps T [T ...]]

The program is a loop of ``T`` steps of a scalar recurrence, all in place (two
shears, so every step is exactly invertible; nothing grows with ``T``)::

    @reversible
    def recurrence(x, y, h, n):
        for _i in range(n):
            x += h * sin(y)
            y -= h * sin(x)

and its gradient ``d x_T / d (x_0, y_0, h)`` is computed with ``revbench.grad``, which
runs the loop forward, then backward (the inverse loop, carrying the adjoints), for
``T`` = 10^3 ... 10^7 (``--quick``: up to 10^5).  For contrast, a *store-all tape*
baseline computes the same gradient the usual way: an ``@numba.njit`` forward pass that
records every state ``(x_t, y_t)`` in two arrays of length ``T``, then a reverse pass
reading them back -- 16 bytes per step.

Every measurement runs in a **fresh Python process**: it imports everything, compiles
and runs the gradient once on ``T = 10`` (warm-up), resets the kernel's peak-RSS mark
(``/proc/self/clear_refs``) and notes the resident set size, runs the gradient at ``T``,
and reports the new peak minus the resident size before the call (the peak extra
memory of the gradient call).  Numba's allocations are invisible to ``tracemalloc``,
hence the OS counters; where ``clear_refs`` is unavailable the increase of
``getrusage(RUSAGE_SELF).ru_maxrss`` across the call is used instead.

At small ``T`` the two gradients are checked against each other and against central
finite differences.  The table goes to stdout, the JSON to
``benchmarks/results/bench_memory.json`` (or ``--out``).
"""

from __future__ import annotations

import os

for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
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

import revbench  # noqa: E402
from revbench import reversible  # noqa: E402

FULL_STEPS = [10**3, 10**4, 10**5, 10**6, 10**7]
QUICK_STEPS = [10**3, 10**4, 10**5]
METHODS = ("revbench", "tape")
X0, Y0, H = 0.3, -0.2, 0.01
#: a run counts as flat if its peak extra memory stays under this, at every T
FLAT_LIMIT_MB = 2.0


# --------------------------------------------------------------------------- #
# The program, and the store-all tape baseline
# --------------------------------------------------------------------------- #
@reversible
def recurrence(x, y, h, n):
    for _i in range(n):
        x += h * math.sin(y)
        y -= h * math.sin(x)


@numba.njit
def _tape_forward(x, y, h, n, xs, ys):
    for i in range(n):
        xs[i] = x
        ys[i] = y
        x += h * math.sin(y)
        y -= h * math.sin(x)
    return x, y


@numba.njit
def _tape_backward(xs, ys, h, n, gx, gy):
    """Adjoints of (x_0, y_0, h) from those of (x_n, y_n), reading the recorded states."""
    gh = 0.0
    for i in range(n - 1, -1, -1):
        x0 = xs[i]
        y0 = ys[i]
        x1 = x0 + h * math.sin(y0)
        # y1 = y0 - h sin(x1)
        gx -= h * math.cos(x1) * gy
        gh -= math.sin(x1) * gy
        # x1 = x0 + h sin(y0)
        gy += h * math.cos(y0) * gx
        gh += math.sin(y0) * gx
    return gx, gy, gh


def tape_grad(x: float, y: float, h: float, n: int) -> tuple[float, float, float, int]:
    """d x_n / d (x_0, y_0, h) with a store-all tape: (dx, dy, dh, n)."""
    xs = np.empty(n)
    ys = np.empty(n)
    _tape_forward(x, y, h, n, xs, ys)
    gx, gy, gh = _tape_backward(xs, ys, h, n, 1.0, 0.0)
    return gx, gy, gh, n


def revbench_grad(x: float, y: float, h: float, n: int):
    return revbench.grad(recurrence, loss="x")(x, y, h, n)


GRADS = {"revbench": revbench_grad, "tape": tape_grad}


# --------------------------------------------------------------------------- #
# One measurement, in this (fresh) process
# --------------------------------------------------------------------------- #
def _status_kb(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _maxrss_kb() -> int:
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r // 1024 if sys.platform == "darwin" else r  # bytes on macOS, KiB on Linux


def measure(method: str, steps: int) -> dict:
    """Warm up on T = 10, then the peak extra memory and the time of one gradient at T."""
    import gc

    fn = GRADS[method]
    fn(X0, Y0, H, 10)
    fn(X0, Y0, H, 10)
    gc.collect()
    maxrss_before = _maxrss_kb()
    reset = _reset_peak()
    rss_before = _status_kb("VmRSS")
    t0 = time.perf_counter()
    g = fn(X0, Y0, H, steps)
    elapsed = time.perf_counter() - t0
    hwm = _status_kb("VmHWM")
    rss_after = _status_kb("VmRSS")
    maxrss_after = _maxrss_kb()
    if reset and hwm is not None and rss_before is not None:
        extra_kb, how = hwm - rss_before, "VmHWM after clear_refs - VmRSS before"
    else:
        extra_kb, how = maxrss_after - maxrss_before, "ru_maxrss after - ru_maxrss before"
    return {"method": method, "steps": steps, "peak_extra_mb": extra_kb / 1024.0,
            "measured_as": how, "rss_before_mb": None if rss_before is None else rss_before / 1024,
            "rss_after_mb": None if rss_after is None else rss_after / 1024,
            "ru_maxrss_before_mb": maxrss_before / 1024, "ru_maxrss_after_mb": maxrss_after / 1024,
            "time_s": elapsed, "gradient": [float(v) for v in g[:3]]}


def measure_in_fresh_process(method: str, steps: int) -> dict:
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", method, str(steps)],
                          capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"measurement {method} T={steps} failed:\n{proc.stdout}\n{proc.stderr}")
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH-MEMORY "))
    return json.loads(line[len("BENCH-MEMORY "):])


# --------------------------------------------------------------------------- #
# Sanity checks (in the parent process, small T)
# --------------------------------------------------------------------------- #
def verify(steps: int = 1000) -> dict:
    """revbench's gradient = the tape's = central finite differences, at small T."""
    rb = revbench_grad(X0, Y0, H, steps)[:3]
    tp = tape_grad(X0, Y0, H, steps)[:3]
    eps = 1e-6
    fd = []
    for k in range(3):
        args_p = [X0, Y0, H]
        args_m = [X0, Y0, H]
        args_p[k] += eps
        args_m[k] -= eps
        fd.append((recurrence(*args_p, steps)[0] - recurrence(*args_m, steps)[0]) / (2 * eps))
    err_tape = max(abs(a - b) for a, b in zip(rb, tp))
    err_fd = max(abs(a - b) / max(1.0, abs(b)) for a, b in zip(rb, fd))
    ok = err_tape <= 1e-9 * max(1.0, max(abs(v) for v in tp)) and err_fd <= 1e-5
    report = {"steps": steps, "revbench": list(rb), "tape": list(tp), "finite_differences": fd,
              "max_abs_diff_revbench_tape": err_tape, "max_rel_diff_revbench_fd": err_fd, "ok": ok}
    if not ok:
        raise AssertionError(f"gradients disagree: {report}")
    return report


# --------------------------------------------------------------------------- #
# Reporting
# --------------------------------------------------------------------------- #
def print_table(results: dict) -> None:
    p = print
    m = results["machine"]
    p(f"revbench memory benchmark (no tape)  {results['timestamp']}  "
      f"{'(quick)' if results['quick'] else ''}")
    p(f"python {m['python']}, numba {m['numba']}, numpy {m['numpy']}, {m['cpu']}")
    p("gradient of x_T wrt (x_0, y_0, h) for T steps of x += h sin(y); y -= h sin(x);")
    p("peak extra memory of the gradient call, each in a fresh process after warm-up (MB):")
    p("")
    hdr = (f"  {'T':>10}  {'revbench MB':>11} {'time s':>8}   {'tape MB':>9} {'time s':>8}"
           f"   {'tape bytes/step':>15}  {'rel. diff rb/tape':>17}")
    p(hdr)
    p("  " + "-" * (len(hdr) - 2))
    for row in results["table"]:
        rb, tp = row["revbench"], row["tape"]
        per = tp["peak_extra_mb"] * 2**20 / row["steps"]
        p(f"  {row['steps']:>10}  {rb['peak_extra_mb']:11.2f} {rb['time_s']:8.3f}   "
          f"{tp['peak_extra_mb']:9.2f} {tp['time_s']:8.3f}   {per:15.1f}  "
          f"{row['max_rel_diff_revbench_tape']:17.1e}")
    s = results["summary"]
    p("")
    p(f"  revbench: peak extra memory {s['revbench_min_mb']:.2f} .. {s['revbench_max_mb']:.2f} MB "
      f"over T = {results['steps'][0]} .. {results['steps'][-1]}: "
      f"{'flat' if s['revbench_flat'] else 'NOT flat'} (limit {FLAT_LIMIT_MB} MB)")
    p(f"  tape:     {s['tape_min_mb']:.2f} .. {s['tape_max_mb']:.2f} MB, "
      f"{s['tape_bytes_per_step_at_largest_T']:.1f} bytes/step at the largest T (16 expected)")
    p(f"  measured as: {results['table'][0]['revbench']['measured_as']}")
    p("  rel. diff: max |g_revbench - g_tape| / max |g_tape| (revbench recovers the states by")
    p("  running the loop backwards, so rounding makes them differ slightly at large T)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="T up to 10^5 (a smoke run)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "bench_memory.json",
                    help="where to write the JSON results (default: benchmarks/results/bench_memory.json)")
    ap.add_argument("--steps", type=int, nargs="+", default=None, help="the values of T")
    ap.add_argument("--child", nargs=2, metavar=("METHOD", "T"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child:  # one measurement, in this fresh process
        method, steps = args.child[0], int(args.child[1])
        print("BENCH-MEMORY " + json.dumps(measure(method, steps)), flush=True)
        return 0

    steps = args.steps or (QUICK_STEPS if args.quick else FULL_STEPS)
    print("[verify] gradients at T = 1000 ...", file=sys.stderr, flush=True)
    ver = verify()
    table = []
    for t in steps:
        row: dict = {"steps": t}
        for method in METHODS:
            print(f"[{method}] T = {t} in a fresh process ...", file=sys.stderr, flush=True)
            row[method] = measure_in_fresh_process(method, t)
        g_rb, g_tp = row["revbench"]["gradient"], row["tape"]["gradient"]
        row["max_rel_diff_revbench_tape"] = (max(abs(a - b) for a, b in zip(g_rb, g_tp))
                                             / max(abs(b) for b in g_tp))
        table.append(row)
    rb = [r["revbench"]["peak_extra_mb"] for r in table]
    tp = [r["tape"]["peak_extra_mb"] for r in table]
    results = {
        "benchmark": "bench_memory",
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "machine": _common.machine_info(),
        "settings": {"x0": X0, "y0": Y0, "h": H, "warm_up_steps": 10,
                     "program": "for _i in range(n): x += h * sin(y); y -= h * sin(x)",
                     "loss": "x", "flat_limit_mb": FLAT_LIMIT_MB},
        "steps": steps,
        "verification": ver,
        "table": table,
        "summary": {
            "revbench_min_mb": min(rb), "revbench_max_mb": max(rb),
            "revbench_flat": max(rb) <= FLAT_LIMIT_MB,
            "tape_min_mb": min(tp), "tape_max_mb": max(tp),
            "tape_bytes_per_step_at_largest_T": tp[-1] * 2**20 / steps[-1],
        },
    }
    print_table(results)
    _common.write_results(results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
