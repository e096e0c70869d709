#!/usr/bin/env python
"""revbench's core benchmark: generated code against hand-written ``@numba.njit`` code.

Run it as::

    python benchmarks/bench_core.py [--quick] [--out PATH] [--reps N] [--no-compile]

It measures, in one run and single-threaded:

1. run time (median of several repetitions, after warm-up) of two loop-heavy workloads
   (``core_workloads.py``), forward and inverse, as revbench generates them with checks
   on and with ``check=False``, and as written by hand with ``@numba.njit``; and the
   ratios revbench / hand-written (goals: <= 1.2 with ``check=False``, <= 2 with checks);
2. the per-call overhead of a reversible function (a call doing no work);
3. compile times: the first call in a fresh process with an empty revbench cache (cold),
   and in a second fresh process reusing that cache (cached load; goal: < 0.5 s),
   with and without the time of ``import numba``; hand-written ``@njit`` for scale.

Before timing, it checks that all versions compute the same result and that every
inverse restores the initial state.  Results go to ``benchmarks/results/bench_core.json``
(or ``--out``); the table goes to stdout.  See ``benchmarks/README.md``.
"""

from __future__ import annotations

import os

# Single-threaded, before anything imports numba.
os.environ["NUMBA_NUM_THREADS"] = "1"

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _common  # noqa: E402

REPO = HERE.parent
sys.path.insert(0, str(HERE))
if str(REPO) not in sys.path:
    sys.path.insert(1, str(REPO))

import core_workloads as W  # noqa: E402
import numpy as np  # noqa: E402

GOALS = {"unchecked_ratio_max": 1.2, "checked_ratio_max": 2.0, "cached_load_max_s": 0.5}

FULL = {
    "reps": 15,
    "scalar_n": 2**20,
    "stencil_shape": (512, 512),
    "stencil_sweeps": 20,
    "overhead_calls": 2000,
    "compile_probes": 3,
}
QUICK = {
    "reps": 3,
    "scalar_n": 2**12,
    "stencil_shape": (48, 48),
    "stencil_sweeps": 2,
    "overhead_calls": 200,
    "compile_probes": 1,
}

VARIANTS = ("reference", "unchecked", "checked")
VARIANT_LABEL = {
    "reference": "hand-written @njit",
    "unchecked": "revbench check=False",
    "checked": "revbench (checks on)",
}


# --------------------------------------------------------------------------- #
# Workload instances: initial state, and forward / inverse callables per variant
# --------------------------------------------------------------------------- #
class Workload:
    """One workload at one size: how to make its state and run each variant on it.

    ``state`` is a list of arguments; arrays are updated in place by every version,
    scalars are threaded through (each call returns all arguments' final values).
    """

    def __init__(self, name: str, description: str, params: dict, make_state: Callable[[], list]):
        self.name = name
        self.description = description
        self.params = params
        self.make_state = make_state
        checked, unchecked, ref, ref_inv = W.WORKLOADS[name]
        self.forward = {"reference": ref, "unchecked": unchecked, "checked": checked}
        self.inverse = {"reference": ref_inv, "unchecked": ~unchecked, "checked": ~checked}


def scalar_workload(n: int) -> Workload:
    params = {"x": 0.8, "y": 0.0, "a": 0.01, "b": 1.0, "c": 0.5, "n": n}
    return Workload(
        "scalar_recurrence",
        f"{n} iterations of y -= b*x + c*x*t; x += a*y with ancilla t = x*x computed and "
        "uncomputed each iteration (symplectic Euler, Duffing oscillator)",
        params, lambda: [params[k] for k in ("x", "y", "a", "b", "c", "n")])


def stencil_workload(shape: tuple[int, int], sweeps: int) -> Workload:
    def make() -> list:
        m, n = shape
        ii, jj = np.meshgrid(np.linspace(0.0, 1.0, m), np.linspace(0.0, 1.0, n), indexing="ij")
        u = np.sin(3.0 * np.pi * ii) * np.cos(2.0 * np.pi * jj) + 0.1 * ii * jj
        v = np.cos(np.pi * ii) * np.sin(5.0 * np.pi * jj)
        return [np.ascontiguousarray(u), np.ascontiguousarray(v), 0.1, sweeps]

    return Workload(
        "stencil_2d",
        f"{sweeps} leapfrog sweeps on two {shape[0]}x{shape[1]} float64 arrays: "
        "v += u + c*lap(u), then u -= v + c*lap(v) (5-point Laplacian, interior points)",
        {"shape": list(shape), "sweeps": sweeps, "c": 0.1}, make)


def _state_values(state) -> list:
    return [a.copy() if isinstance(a, np.ndarray) else a for a in state]


def _max_abs_diff(a: list, b: list) -> float:
    worst = 0.0
    for x, y in zip(a, b):
        d = np.max(np.abs(np.asarray(x, dtype=float) - np.asarray(y, dtype=float)))
        worst = max(worst, float(d))
    return worst


def _allclose(a: list, b: list, rtol: float = 1e-9, atol: float = 1e-9) -> bool:
    return all(np.allclose(np.asarray(x, dtype=float), np.asarray(y, dtype=float), rtol=rtol, atol=atol)
               for x, y in zip(a, b))


def verify(w: Workload) -> dict:
    """All versions agree forward and inverse, and every inverse restores the start state.

    Also serves as the warm-up (it compiles every version).  Raises on disagreement.
    """
    initial = w.make_state()
    fwd_out, inv_out = {}, {}
    for v in VARIANTS:
        state = _state_values(initial)
        fwd_out[v] = _state_values(list(w.forward[v](*state)))
        inv_out[v] = _state_values(list(w.inverse[v](*_state_values(fwd_out[v]))))
    ref = fwd_out["reference"]
    report = {"forward_max_abs_diff_vs_reference": {}, "inverse_max_abs_error": {},
              "inverse_of_reference_output_max_abs_diff_vs_reference": {}}
    changed = _max_abs_diff(ref, initial)
    if changed == 0.0:
        raise AssertionError(f"{w.name}: the forward run did not change the state")
    for v in VARIANTS:
        report["forward_max_abs_diff_vs_reference"][v] = _max_abs_diff(fwd_out[v], ref)
        report["inverse_max_abs_error"][v] = _max_abs_diff(inv_out[v], initial)
        if not _allclose(fwd_out[v], ref):
            raise AssertionError(f"{w.name}: {VARIANT_LABEL[v]} forward disagrees with the reference")
        if not _allclose(inv_out[v], initial, rtol=1e-7, atol=1e-7):
            raise AssertionError(f"{w.name}: {VARIANT_LABEL[v]} inverse does not restore the state")
        # the inverses agree with the hand-written inverse on the same input
        out = _state_values(list(w.inverse[v](*_state_values(ref))))
        ref_out = _state_values(list(w.inverse["reference"](*_state_values(ref))))
        report["inverse_of_reference_output_max_abs_diff_vs_reference"][v] = _max_abs_diff(out, ref_out)
        if not _allclose(out, ref_out):
            raise AssertionError(f"{w.name}: {VARIANT_LABEL[v]} inverse disagrees with the reference")
    report["forward_change_max_abs"] = changed
    report["ok"] = True
    return report


def _summary(times: list[float]) -> dict:
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
            "times_s": times}


def _direct(f, state: list) -> Callable | None:
    """Diagnostic: the compiled code of revbench view ``f`` called without ``__call__``'s
    Python work (argument checks, array snapshots, result tuple).  Uses revbench internals
    (``compiled(...).run(*args, atol, rtol)``); ``None`` if they are not as expected."""
    try:
        from revbench.config import get_tolerance

        run = f.compiled(f.signature_of(tuple(state))).run
        atol, rtol = get_tolerance()
        g = lambda *a: run(*a, atol, rtol)
        g(*_state_values(state))
        return g
    except Exception:  # internals changed: skip the diagnostic
        return None


def time_workload(w: Workload, reps: int) -> tuple[dict, dict]:
    """Median times of forward and inverse for every variant, and diagnostics.

    Repetitions are interleaved (rep 1 of every variant, then rep 2, ...) so that slow
    drifts of a noisy machine hit all variants alike.  Each repetition runs forward then
    inverse on the variant's own state, which therefore stays at the initial state.
    The diagnostics time revbench's compiled code called directly (``*_code_only``).
    """
    runners = {v: (w.forward[v], w.inverse[v]) for v in VARIANTS}
    for v in ("unchecked", "checked"):
        state = w.make_state()
        fwd = _direct(w.forward[v], state)
        inv = _direct(w.inverse[v], state)
        if fwd is not None and inv is not None:
            runners[f"{v}_code_only"] = (fwd, inv)
    names = list(runners)
    states = {v: w.make_state() for v in names}
    times = {v: {"forward": [], "inverse": []} for v in names}
    perf = time.perf_counter
    for v in names:  # one more warm-up round on the timed states
        fwd, inv = runners[v]
        states[v] = list(inv(*fwd(*states[v])))
    for rep in range(reps):
        k = rep % len(names)
        for v in names[k:] + names[:k]:
            fwd, inv = runners[v]
            t0 = perf()
            out = fwd(*states[v])
            t1 = perf()
            back = inv(*out)
            t2 = perf()
            states[v] = list(back)
            times[v]["forward"].append(t1 - t0)
            times[v]["inverse"].append(t2 - t1)
    summary = {v: {d: _summary(ts) for d, ts in times[v].items()} for v in names}
    return ({v: summary[v] for v in VARIANTS},
            {v: summary[v] for v in names if v not in VARIANTS})


def ratios(timings: dict, reference: dict, stat: str = "median_s") -> dict:
    """revbench / hand-written, per version in ``timings`` and direction, of statistic ``stat``."""
    return {v: {d: timings[v][d][stat] / reference[d][stat] for d in ("forward", "inverse")}
            for v in timings if v != "reference"}


def call_overhead(calls: int, reps: int) -> dict:
    """Per-call cost of a call that does no work (the scalar workload with n = 0); the
    ``*_numba`` rows make the same calls through Numba's dispatcher instead of revbench's
    own compiled code (``REVBENCH_NATIVE=0``, which every call reads)."""
    args = (0.8, 0.0, 0.01, 1.0, 0.5, 0)
    fns = {"reference": (W.duffing_ref, "1"), "unchecked": (W.duffing_unchecked, "1"),
           "checked": (W.duffing, "1"), "unchecked_inverse": (~W.duffing_unchecked, "1"),
           "unchecked_numba": (W.duffing_unchecked, "0"), "checked_numba": (W.duffing, "0")}
    result = {}
    saved = os.environ.get("REVBENCH_NATIVE")
    try:
        for name, (f, native) in fns.items():
            os.environ["REVBENCH_NATIVE"] = native
            f(*args)
            per_call = []
            for _ in range(max(reps, 5)):
                t0 = time.perf_counter()
                for _ in range(calls):
                    f(*args)
                per_call.append((time.perf_counter() - t0) / calls)
            result[name] = {"median_s": statistics.median(per_call), "min_s": min(per_call)}
    finally:
        if saved is None:
            os.environ.pop("REVBENCH_NATIVE", None)
        else:
            os.environ["REVBENCH_NATIVE"] = saved
    # one array workload: the checked call copies its array arguments first
    u, v = np.zeros((64, 64)), np.zeros((64, 64))
    for name, f in (("reference_arrays_64x64", W.leapfrog_ref),
                    ("unchecked_arrays_64x64", W.leapfrog_unchecked),
                    ("checked_arrays_64x64", W.leapfrog)):
        f(u, v, 0.1, 0)
        per_call = []
        for _ in range(max(reps, 5)):
            t0 = time.perf_counter()
            for _ in range(calls):
                f(u, v, 0.1, 0)
            per_call.append((time.perf_counter() - t0) / calls)
        result[name] = {"median_s": statistics.median(per_call), "min_s": min(per_call)}
    return result


# --------------------------------------------------------------------------- #
# Compile time and cached load, each in a fresh process
# --------------------------------------------------------------------------- #
PROBE = r"""
import json, os, sys, time
T0 = time.perf_counter()
import numba
T1 = time.perf_counter()
sys.path.insert(0, {bench_dir!r})
sys.path.insert(1, {repo_dir!r})
KIND = {kind!r}
if KIND == "revbench":
    from core_workloads import leapfrog as f
else:
    from core_workloads import leapfrog_ref as _ref
    f = numba.njit(cache=True)(_ref.py_func)
T2 = time.perf_counter()
import numpy as np
u, v = np.zeros((64, 64)), np.zeros((64, 64))
u[1:-1, 1:-1] = 1.0
res = {{}}
if KIND == "revbench" and hasattr(f, "compiled") and hasattr(f, "signature_of"):
    # revbench's own share: parse/check/types/codegen, loading the generated module and
    # making the dispatcher (Numba itself compiles or loads lazily, on the first call)
    t = time.perf_counter()
    compiled = f.compiled(f.signature_of((u, v, 0.1, 1)))
    res["revbench_pipeline_s"] = time.perf_counter() - t
else:
    compiled = None
t = time.perf_counter()
out = f(u, v, 0.1, 1)
T3 = time.perf_counter()
res["first_call_s"] = T3 - t
if KIND == "revbench":
    t = time.perf_counter()
    (~f)(*out)
    res["inverse_first_call_s"] = time.perf_counter() - t
    disp = getattr(compiled, "run", None)
else:
    disp = f
stats = getattr(disp, "stats", None)
if stats is not None:
    res["numba_cache_hits"] = sum(dict(stats.cache_hits).values())
    res["numba_cache_misses"] = sum(dict(stats.cache_misses).values())
res["scipy_imported"] = "scipy" in sys.modules
res.update(import_numba_s=T1 - T0, import_function_s=T2 - T1, total_s=T3 - T0,
           total_without_numba_import_s=T3 - T1)
print("BENCH-PROBE " + json.dumps(res))
"""


def _probe(kind: str, env_extra: dict) -> dict:
    """Run PROBE in a fresh interpreter; ``env_extra`` values of ``None`` unset a variable."""
    env = _common.child_env({**env_extra, "NUMBA_NUM_THREADS": "1"})
    code = PROBE.format(bench_dir=str(HERE), repo_dir=str(REPO), kind=kind)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"compile probe ({kind}) failed:\n{proc.stdout}\n{proc.stderr}")
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH-PROBE "))
    res = json.loads(line[len("BENCH-PROBE "):])
    res["process_wall_s"] = wall
    return res


def _median_probe(runs: list[dict]) -> dict:
    """Field-wise median of several probe results (numbers), with every run kept."""
    out: dict = {}
    for k, v in runs[0].items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            out[k] = v
        else:
            out[k] = statistics.median(r[k] for r in runs)
    out["runs"] = runs
    return out


def compile_times(probes: int, with_reference: bool, warm_bytecode: bool = True) -> dict:
    """Cold compile and cached load, ``probes`` times each (fresh cache every time).

    Python's own bytecode cache is kept in a private ``PYTHONPYCACHEPREFIX`` (nothing is
    written beside the sources, even where ``PYTHONDONTWRITEBYTECODE`` is set) and warmed
    first by a throw-away cold + cached pair, so that every probe, cold ones included,
    measures revbench and Numba rather than Python compiling modules to bytecode.
    ``warm_bytecode=False`` (``--quick``) skips that and runs with the environment as it is.
    """
    out = {"function": "core_workloads.leapfrog (forward, checks on; 2-D float64 arrays)",
           "probes": probes,
           "note": "medians over probes; total_s: from before `import numba` to the first call "
                   "returning; total_without_numba_import_s excludes `import numba`; "
                   "process_wall_s adds interpreter start-up and exit",
           "python_bytecode_cache": ("private, warmed first" if warm_bytecode
                                     else "as in the environment")}
    runs: dict[str, list] = {"revbench_cold": [], "revbench_cached": [],
                             "reference_cold": [], "reference_cached": []}
    with tempfile.TemporaryDirectory(prefix="revbench-bench-pyc-") as pyc:
        base = {"PYTHONPYCACHEPREFIX": pyc, "PYTHONDONTWRITEBYTECODE": None} if warm_bytecode else {}
        if warm_bytecode:  # every module that a cold compile and a cached load import
            with tempfile.TemporaryDirectory(prefix="revbench-bench-cache-") as d:
                _probe("revbench", {**base, "REVBENCH_CACHE_DIR": d})
                _probe("revbench", {**base, "REVBENCH_CACHE_DIR": d})
        for _ in range(probes):
            with tempfile.TemporaryDirectory(prefix="revbench-bench-cache-") as d:
                env = {**base, "REVBENCH_CACHE_DIR": d}
                runs["revbench_cold"].append(_probe("revbench", env))
                runs["revbench_cached"].append(_probe("revbench", env))
            if with_reference:
                with tempfile.TemporaryDirectory(prefix="revbench-bench-numba-") as d:
                    env = {**base, "NUMBA_CACHE_DIR": d}
                    runs["reference_cold"].append(_probe("reference", env))
                    runs["reference_cached"].append(_probe("reference", env))
    for k, rs in runs.items():
        out[k] = _median_probe(rs) if rs else None
    return out


# --------------------------------------------------------------------------- #
# Reporting
# --------------------------------------------------------------------------- #
def print_table(results: dict) -> None:
    p = print
    m = results["machine"]
    p(f"revbench core benchmark  {results['timestamp']}  {'(quick)' if results['quick'] else ''}")
    p(f"python {m['python']}, numba {m['numba']}, numpy {m['numpy']}, {m['cpu']} "
      f"({m['cpus_usable']} usable CPUs), NUMBA_NUM_THREADS={m['numba_num_threads']}")
    p(f"median (and min) of {results['settings']['reps']} reps after warm-up; ratio = revbench / "
      f"hand-written, of medians (of mins); goals: <= {GOALS['unchecked_ratio_max']} with "
      f"check=False, <= {GOALS['checked_ratio_max']} with checks")
    load = results.get("load_average")
    if load:
        busy = max(load["start"][0], load["end"][0]) > 0.5 * (m["cpus_usable"] or 1)
        p(f"load average at start {load['start'][0]:.2f}, at end {load['end'][0]:.2f}"
          + ("  -- the machine was busy: medians may be inflated, compare the (min) columns"
             if busy else ""))
    p("")
    hdr = (f"{'workload':<18} {'version':<21} {'forward ms':>10} {'(min)':>7} {'ratio':>5} {'(min)':>6}"
           f"  {'inverse ms':>10} {'(min)':>7} {'ratio':>5} {'(min)':>6}  goal")
    p(hdr)
    p("-" * len(hdr))

    def row(label: str, version: str, t: dict, r: dict | None, rm: dict | None, goal: str) -> None:
        cells = []
        for d in ("forward", "inverse"):
            rr = "1.00" if r is None else f"{r[d]:.2f}"
            rrm = "(1.00)" if rm is None else f"({rm[d]:.2f})"
            cells.append(f"{t[d]['median_s'] * 1e3:10.3f} {t[d]['min_s'] * 1e3:7.3f} {rr:>5} {rrm:>6}")
        p(f"{label:<18} {version:<21} {cells[0]}  {cells[1]}  {goal}")

    for name, wr in results["workloads"].items():
        t, r, rm = wr["timings"], wr["ratios"], wr["ratios_of_min"]
        for i, v in enumerate(VARIANTS):
            goal = "" if v == "reference" else ("ok" if wr["goals_met"][v] else "MISSED")
            row(name if i == 0 else "", VARIANT_LABEL[v], t[v], r.get(v), rm.get(v), goal)
        dg = wr["diagnostics"]
        for v in dg["timings"]:
            lab = "  code only, checked" if v.startswith("checked") else "  code only, check=F"
            row("", lab, dg["timings"][v], dg["ratios"][v], dg["ratios_of_min"][v], "(diagnostic)")
        for line in textwrap.wrap(f"({wr['description']})", 100 - 19):
            p(f"{'':<18} {line}")
    p("  code only: revbench's compiled code called directly, without the Python work of a call")
    if results["quick"]:
        p("  (--quick: sizes are tiny, so the ratios mostly measure per-call overhead)")
    p("")
    oh = results["call_overhead"]
    p("per-call overhead (a call doing no work), microseconds:")
    p("  " + ", ".join(f"{k} {v['median_s'] * 1e6:.2f}" for k, v in oh.items()))
    c = results.get("compile")
    if c:
        p("")
        p(f"compile / load of {c['function']}, each in a fresh process (seconds):")
        h = (f"  {'':<26} {'total':>7} {'w/o numba import':>17} {'import numba':>13} "
             f"{'first call':>11} {'process':>8}")
        p(h)
        for key, label in (("revbench_cold", "revbench cold (empty cache)"),
                           ("revbench_cached", "revbench cached load"),
                           ("reference_cold", "@njit cold"),
                           ("reference_cached", "@njit(cache=True) cached")):
            e = c.get(key)
            if not e:
                continue
            p(f"  {label:<26} {e['total_s']:7.3f} {e['total_without_numba_import_s']:17.3f} "
              f"{e['import_numba_s']:13.3f} {e['first_call_s']:11.3f} {e['process_wall_s']:8.3f}")
        cold, cached = c["revbench_cold"], c["revbench_cached"]
        if "revbench_pipeline_s" in cached:
            p(f"  revbench's own share of the first call (parse..codegen, module load): cold "
              f"{cold['revbench_pipeline_s']:.3f} s, cached {cached['revbench_pipeline_s']:.3f} s; "
              f"inverse first call: cold {cold['inverse_first_call_s']:.3f} s, cached "
              f"{cached['inverse_first_call_s']:.3f} s")
        if cached.get("scipy_imported"):
            p("  (Numba imported scipy.linalg during the first call, to look for BLAS: ~0.1-0.2 s of it)")
        if "numba_cache_hits" in cached:
            p(f"  Numba cache in the second process: {cached['numba_cache_hits']} hit(s), "
              f"{cached['numba_cache_misses']} miss(es)")
        g = results["goals_met"]
        p(f"  goal cached load < {GOALS['cached_load_max_s']} s: with numba import "
          f"{'ok' if g['cached_load_with_numba_import'] else 'MISSED'}, without "
          f"{'ok' if g['cached_load_without_numba_import'] else 'MISSED'}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, few reps (a smoke run)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "bench_core.json",
                    help="where to write the JSON results (default: benchmarks/results/bench_core.json)")
    ap.add_argument("--reps", type=int, default=None, help="repetitions per measurement")
    ap.add_argument("--no-compile", action="store_true",
                    help="skip the compile-time and cached-load measurements (fresh processes)")
    args = ap.parse_args(argv)

    cfg = dict(QUICK if args.quick else FULL)
    if args.reps is not None:
        cfg["reps"] = max(1, args.reps)
    results: dict = {
        "benchmark": "bench_core",
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "machine": _common.machine_info('llvmlite'),
        "settings": {**cfg, "stencil_shape": list(cfg["stencil_shape"]), "timer": "time.perf_counter",
                     "statistic": "median"},
        "goals": GOALS,
        "workloads": {},
    }
    load_start = _common.loadavg()
    workloads = [scalar_workload(cfg["scalar_n"]),
                 stencil_workload(cfg["stencil_shape"], cfg["stencil_sweeps"])]
    for w in workloads:
        print(f"[{w.name}] compiling and verifying ...", file=sys.stderr, flush=True)
        ver = verify(w)
        print(f"[{w.name}] timing {cfg['reps']} reps ...", file=sys.stderr, flush=True)
        timings, diagnostics = time_workload(w, cfg["reps"])
        ref = timings["reference"]
        rat = ratios(timings, ref)
        results["workloads"][w.name] = {
            "description": w.description,
            "params": w.params,
            "verification": ver,
            "timings": timings,
            "ratios": rat,
            "ratios_of_min": ratios(timings, ref, "min_s"),
            "diagnostics": {"timings": diagnostics, "ratios": ratios(diagnostics, ref),
                            "ratios_of_min": ratios(diagnostics, ref, "min_s")},
            "goals_met": {
                "unchecked": max(rat["unchecked"].values()) <= GOALS["unchecked_ratio_max"],
                "checked": max(rat["checked"].values()) <= GOALS["checked_ratio_max"],
            },
        }
    print("[call overhead] ...", file=sys.stderr, flush=True)
    results["call_overhead"] = call_overhead(cfg["overhead_calls"], cfg["reps"])
    if not args.no_compile:
        print("[compile] fresh processes ...", file=sys.stderr, flush=True)
        c = compile_times(cfg["compile_probes"], with_reference=not args.quick,
                          warm_bytecode=not args.quick)
        results["compile"] = c
        goal = GOALS["cached_load_max_s"]
        results["goals_met"] = {
            "cached_load_with_numba_import": c["revbench_cached"]["total_s"] < goal,
            "cached_load_without_numba_import": c["revbench_cached"]["total_without_numba_import_s"] < goal,
        }
    else:
        results["compile"] = None
        results["goals_met"] = {}
    results["load_average"] = {"start": load_start, "end": _common.loadavg()} if load_start else None
    print_table(results)
    _common.write_results(results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
