#!/usr/bin/env python
"""ADBench's GMM and BA in one run: revbench against hand-written Numba, JAX and PyTorch.

Run it as::

    python benchmarks/adbench.py [--quick] [--gmm 2x5,64x10|none] [--ba ba1,ba4|none]
                                 [--peers jax,torch|none] [--budget S] [--out PATH]

Single-threaded (Numba, BLAS, XLA and PyTorch pinned to one thread before they are
imported), in one process, for

* GMM (the log-posterior of ``revbench.workloads.gmm``) at ``(D, K)`` in
  ``GMM_SIZES`` with ``N = 1000`` points: the hand-written ``@numba.njit`` objective
  (the reference), revbench's objective (``check=False``) and its gradient (the split
  reverse sweeps, :func:`revbench.workloads.gmm.gmm_gradient`, with a workspace
  allocated once, as ADBench's tools do in ``prepare``);
* BA (``revbench.workloads.ba``) at the sizes of ADBench's ba1, ba4 and ba10 (data from
  the seeded generator, replicated as ADBench's files are): the hand-written ``@njit``
  objective (the reference), revbench's objective and its sparse Jacobian (the
  reverse-sweep driver filling preallocated CSR arrays);
* when importable (``benchmarks/adbench_peers.py``): JAX's jitted objective and
  gradient / Jacobian, and PyTorch's (eager, ``torch.func``).  BA Jacobians of the
  peers: ``vmap`` of ``jacfwd`` and of ``jacrev`` over the observations, both timed.

Every gradient and Jacobian -- revbench's and the peers' -- is checked against the
NumPy oracle (``gradient_numpy``, ``jacobian_numpy``) before it is timed; a peer that
disagrees is reported and left out.  Times are medians of repetitions interleaved
across the variants of one size, each variant repeated until it has used ``--budget``
seconds (at least 3, at most 201 times); the first call (compilation, tracing, cache
loading) is timed on its own.  Ratios are to the ``@njit`` objective of the same size,
measured in the same run.  Results go to ``benchmarks/results/adbench.json``.
"""

from __future__ import annotations

import os

# Single-threaded, before NumPy, Numba, JAX or PyTorch are imported.
for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"
_XLA_ONE_THREAD = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
if _XLA_ONE_THREAD not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _XLA_ONE_THREAD).strip()

import argparse  # noqa: E402
import datetime  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _common  # noqa: E402
import adbench_peers  # noqa: E402

REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from revbench.config import get_tolerance  # noqa: E402
from revbench.workloads import ba as BA  # noqa: E402
from revbench.workloads import gmm as GMM  # noqa: E402

GOALS = {
    "gmm_gradient_ratio_max": 3.0,        # revbench gradient / njit objective, every size
    "gmm_gradient_faster_than_jax": True,  # revbench gradient < JAX jitted gradient, every size
    "ba_jacobian_ratio_max": 4.0,          # revbench Jacobian / njit objective, every size
    "ba_jacobian_speedup_vs_jax_min": 5.0,  # JAX jitted Jacobian / revbench Jacobian
}
GMM_N = 1000
SEED = 0
QUICK = {"gmm": ((2, 5), (10, 5)), "gmm_n": 100, "ba": ("tiny",), "budget": 0.05}
TINY_BA = (10, 50, 200)                   # --quick: (n, m, p)
MIN_REPS, MAX_REPS = 3, 201
#: the oracle's memory grows with p (about 5 KB per observation): BA validation uses at
#: most this many leading observations (all of ba1 and ba4)
BA_VALIDATE_MAX_P = 250_000


# --------------------------------------------------------------------------- #
# Timing
# --------------------------------------------------------------------------- #
def time_interleaved(fns: dict[str, Callable[[], object]], budget: float,
                     min_reps: int = MIN_REPS, max_reps: int = MAX_REPS) -> dict:
    """Median/min of each callable, repetitions interleaved (one of each per round, the
    order rotating) so that a noisy machine's drifts hit all alike; a callable drops out
    once it has run ``min_reps`` times and used ``budget`` seconds, or ``max_reps``."""
    names = list(fns)
    times: dict[str, list[float]] = {n: [] for n in names}
    spent = dict.fromkeys(names, 0.0)
    perf = time.perf_counter
    rnd = 0
    while True:
        active = [n for n in names if len(times[n]) < max_reps
                  and (len(times[n]) < min_reps or spent[n] < budget)]
        if not active:
            break
        k = rnd % len(active)
        for n in active[k:] + active[:k]:
            t0 = perf()
            fns[n]()
            dt = perf() - t0
            times[n].append(dt)
            spent[n] += dt
        rnd += 1
    return {n: {"median_s": statistics.median(ts), "min_s": min(ts), "reps": len(ts)}
            for n, ts in times.items()}


def first_call(fn: Callable[[], object]) -> tuple[object, float]:
    """The result and time of a first call (compilation or tracing included)."""
    t0 = time.perf_counter()
    res = fn()
    return res, time.perf_counter() - t0


def _rel_err(got, ref) -> float:
    got, ref = np.asarray(got, dtype=float), np.asarray(ref, dtype=float)
    if got.shape != ref.shape:
        return float("inf")
    return float(np.max(np.abs(got - ref), initial=0.0) / max(1.0, float(np.max(np.abs(ref), initial=0.0))))


# --------------------------------------------------------------------------- #
# GMM
# --------------------------------------------------------------------------- #
def gmm_variants(data: GMM.GMMData, peers: dict, log: Callable) -> tuple[dict, dict, dict]:
    """``(callables, first_call_s, verification)`` for one GMM size: revbench's and
    each peer's, the gradients checked against ``gradient_numpy`` (rel. error 1e-8)."""
    args = GMM._args(data)
    ws = GMM.SplitWorkspace.new(data.d, data.k, data.n)
    ref_value, ref_grad = GMM.objective_numpy(data), GMM.gradient_numpy(data)
    fns: dict[str, Callable] = {
        "njit_objective": lambda: GMM.objective_njit(*args),
        "revbench_objective": lambda: GMM.objective(data, check=False),
        "revbench_gradient": lambda: GMM.gmm_gradient(data, workspace=ws),
    }
    first, checks = {}, {}
    for name in list(fns):
        res, first[name] = first_call(fns[name])
        if name == "revbench_gradient":
            checks[name] = max([_rel_err(res[0], ref_value)]
                               + [_rel_err(g, r) for g, r in zip(res[1], ref_grad)])
        else:
            checks[name] = _rel_err(res, ref_value)
    for pname, peer in peers.items():
        try:
            prepared = peer.gmm(data)
            value, first[f"{pname}_objective"] = first_call(prepared.objective)
            grads, first[f"{pname}_gradient"] = first_call(prepared.gradient)
            checks[f"{pname}_objective"] = _rel_err(prepared.to_numpy(value), ref_value)
            checks[f"{pname}_gradient"] = max(_rel_err(g, r) for g, r in
                                              zip(prepared.to_numpy(grads), ref_grad))
        except Exception as exc:  # a peer that fails is reported, not fatal
            log(f"  {pname}: FAILED to run: {exc!r}")
            checks[f"{pname}_objective"] = checks[f"{pname}_gradient"] = f"error: {exc!r}"
            continue
        fns[f"{pname}_objective"] = prepared.objective
        fns[f"{pname}_gradient"] = prepared.gradient
    return fns, first, checks


# --------------------------------------------------------------------------- #
# BA
# --------------------------------------------------------------------------- #
def ba_subproblem(data: BA.BAData, p: int) -> BA.BAData:
    """The first ``p`` observations (all cameras and points kept)."""
    return BA.BAData(data.cams, data.X, data.w[:p], data.feats[:p], data.obs[:p])


def ba_vals_head(vals: np.ndarray, p_all: int, p: int) -> np.ndarray:
    """The Jacobian values of the first ``p`` of ``p_all`` observations (CSR order:
    ``2 * 15`` per observation, then one per weight row)."""
    head = 2 * BA.BA_ROW_NNZ
    return np.concatenate([vals[:head * p], vals[head * p_all:head * p_all + p]])


def ba_variants(data: BA.BAData, peers: dict, log: Callable) -> tuple[dict, dict, dict]:
    """``(callables, first_call_s, verification)`` for one BA size; every Jacobian
    checked against ``jacobian_numpy`` on the first ``BA_VALIDATE_MAX_P`` observations."""
    p = data.p
    pv = min(p, BA_VALIDATE_MAX_P)
    sub = data if pv == p else ba_subproblem(data, pv)
    ref_J = BA.jacobian_numpy(sub).data
    ref_r, ref_w = BA.objective_numpy(sub)
    reproj, w_err = np.zeros((p, 2)), np.zeros(p)
    reproj2, w_err2 = np.zeros((p, 2)), np.zeros(p)
    nnz = (2 * BA.BA_ROW_NNZ + 1) * p
    cols, vals = np.empty(nnz, dtype=np.int32), np.empty(nnz)
    atol, rtol = get_tolerance()
    driver = BA.jacobian_driver(False)
    cargs = (data.cams, data.X, data.w, data.feats, data.obs)

    def revbench_objective():
        reproj2.fill(0.0)
        w_err2.fill(0.0)
        return BA.ba_objective_unchecked(reproj2, w_err2, *cargs)

    fns: dict[str, Callable] = {
        "njit_objective": lambda: BA.objective_njit(*cargs, reproj, w_err),
        "revbench_objective": revbench_objective,
        "revbench_jacobian": lambda: driver(*cargs, reproj, w_err, cols, vals, atol, rtol),
    }
    first, checks = {}, {}

    def objective_error(r, w) -> float:
        return max(_rel_err(r[:pv], ref_r), _rel_err(w[:pv], ref_w))

    _, first["njit_objective"] = first_call(fns["njit_objective"])
    checks["njit_objective"] = objective_error(reproj, w_err)
    _, first["revbench_objective"] = first_call(fns["revbench_objective"])
    checks["revbench_objective"] = objective_error(reproj2, w_err2)
    _, first["revbench_jacobian"] = first_call(fns["revbench_jacobian"])
    checks["revbench_jacobian"] = max(_rel_err(ba_vals_head(vals, p, pv), ref_J),
                                      objective_error(reproj, w_err))
    for pname, peer in peers.items():
        try:
            for mode in peer.modes:
                prepared = peer.ba(data, mode)
                if mode == peer.modes[0]:
                    res, first[f"{pname}_objective"] = first_call(prepared.objective)
                    r, w = prepared.to_numpy(res)
                    checks[f"{pname}_objective"] = objective_error(r, w)
                    fns[f"{pname}_objective"] = prepared.objective
                res, first[f"{pname}_{mode}"] = first_call(prepared.jacobian)
                checks[f"{pname}_{mode}"] = _rel_err(ba_vals_head(prepared.to_numpy(res), p, pv),
                                                     ref_J)
                fns[f"{pname}_{mode}"] = prepared.jacobian
                del res
        except Exception as exc:
            log(f"  {pname}: FAILED to run: {exc!r}")
            checks[f"{pname}_error"] = f"error: {exc!r}"
    return fns, first, checks


# --------------------------------------------------------------------------- #
# One size: verify, time, ratios
# --------------------------------------------------------------------------- #
TOLERANCE = 1e-8


def run_size(label: str, fns: dict, first: dict, checks: dict, budget: float, log) -> dict:
    """Drop what failed verification, time the rest, and compute the ratios."""
    failed = {n: c for n, c in checks.items()
              if isinstance(c, str) or not c <= TOLERANCE}
    for n, c in failed.items():
        msg = c if isinstance(c, str) else f"relative error {c:.2e} > {TOLERANCE:g}"
        log(f"  VALIDATION FAILED: {label}: {n} disagrees with the NumPy oracle ({msg}); "
            "not timed")
        fns.pop(n, None)
    if any(n.startswith("revbench") or n.startswith("njit") for n in failed):
        raise SystemExit(f"{label}: revbench or the reference disagrees with the oracle: {failed}")
    log(f"  timing {', '.join(fns)} ...")
    load = _common.loadavg()
    timings = time_interleaved(fns, budget)
    ref = timings["njit_objective"]["median_s"]
    ratios = {n: t["median_s"] / ref for n, t in timings.items()}
    return {"verification": {"max_rel_error": checks, "tolerance": TOLERANCE,
                             "ok": not failed, "failed": sorted(failed)},
            "first_call_s": first, "timings": timings, "ratios": ratios,
            "load_average_before": load}


def gmm_goals(row: dict) -> dict:
    t = row["timings"]
    goals = {"gradient_ratio": row["ratios"]["revbench_gradient"] <= GOALS["gmm_gradient_ratio_max"]}
    if "jax_gradient" in t:
        goals["faster_than_jax"] = t["revbench_gradient"]["median_s"] < t["jax_gradient"]["median_s"]
    return goals


def _best(t: dict, prefix: str) -> str | None:
    names = [n for n in t if n.startswith(prefix + "_jac")]
    return min(names, key=lambda n: t[n]["median_s"]) if names else None


def ba_goals(row: dict) -> dict:
    t = row["timings"]
    goals = {"jacobian_ratio": row["ratios"]["revbench_jacobian"] <= GOALS["ba_jacobian_ratio_max"]}
    best = _best(t, "jax")
    if best:
        goals["5x_faster_than_jax"] = (t[best]["median_s"] / t["revbench_jacobian"]["median_s"]
                                       >= GOALS["ba_jacobian_speedup_vs_jax_min"])
    return goals


# --------------------------------------------------------------------------- #
# Reporting
# --------------------------------------------------------------------------- #
def _ms(t: dict, name: str | None) -> str:
    return f"{t[name]['median_s'] * 1e3:9.3f}" if name and name in t else f"{'-':>9}"


def _x(t: dict, num: str | None, den: str) -> str:
    if not num or num not in t or den not in t:
        return f"{'-':>6}"
    return f"{t[num]['median_s'] / t[den]['median_s']:6.2f}"


def _goal_text(goals: dict) -> str:
    return " ".join(f"{k}:{'ok' if v else 'MISSED'}" for k, v in goals.items())


def print_table(results: dict) -> None:
    p = print
    m = results["machine"]
    p(f"revbench ADBench (GMM, BA)  {results['timestamp']}  {'(quick)' if results['quick'] else ''}")
    versions = ", ".join(f"{k} {m[k]}" for k in ("python", "numba", "numpy", "jax", "torch") if k in m)
    p(f"{versions}; {m['cpu']} ({m['cpus_usable']} usable CPUs), single-threaded")
    for name, why in results["peers"]["missing"].items():
        p(f"peer {name}: {why}")
    load = results.get("load_average")
    if load:
        p(f"load average at start {load['start'][0]:.2f}, at end {load['end'][0]:.2f}")
    s = results["settings"]
    p(f"times in ms: medians of interleaved repetitions ({s['budget_s']} s per variant, "
      f">= {MIN_REPS} reps); x = time / hand-written @njit objective; 'vs' = peer time / "
      "revbench gradient or Jacobian (> 1: revbench faster)")
    if results["gmm"]:
        p("")
        p(f"GMM, N = {s['gmm_n']}: revbench gradient = split reverse sweeps (check=False)")
        hdr = (f"{'D':>3} {'K':>4} | {'njit obj':>9} {'rb obj':>9} {'rb grad':>9} {'x':>6} | "
               f"{'jax obj':>9} {'jax grad':>9} {'vs':>6} | {'torch obj':>9} {'torch grad':>9} "
               f"{'vs':>6} | goals")
        p(hdr)
        p("-" * len(hdr))
        for row in results["gmm"]:
            t = row["timings"]
            p(f"{row['d']:3d} {row['k']:4d} | {_ms(t, 'njit_objective')} {_ms(t, 'revbench_objective')} "
              f"{_ms(t, 'revbench_gradient')} {_x(t, 'revbench_gradient', 'njit_objective')} | "
              f"{_ms(t, 'jax_objective')} {_ms(t, 'jax_gradient')} "
              f"{_x(t, 'jax_gradient', 'revbench_gradient')} | {_ms(t, 'torch_objective')} "
              f"{_ms(t, 'torch_gradient')} {_x(t, 'torch_gradient', 'revbench_gradient')} | "
              f"{_goal_text(row['goals_met'])}")
    if results["ba"]:
        p("")
        p("BA: revbench Jacobian = two-lane reverse sweep per observation into CSR arrays; "
          "peers: vmap over observations of jacfwd (fwd) / jacrev (rev), the faster shown")
        hdr = (f"{'size':>5} {'p':>7} | {'njit obj':>9} {'rb obj':>9} {'rb J':>9} {'x':>6} | "
               f"{'jax obj':>9} {'jax J':>9} {'vs':>6} | {'torch obj':>9} {'torch J':>9} {'vs':>6} "
               "| goals")
        p(hdr)
        p("-" * len(hdr))
        for row in results["ba"]:
            t = row["timings"]
            jb, tb = _best(t, "jax"), _best(t, "torch")
            modes = ", ".join(f"{n.split('_')[0]} {n.split('_')[1]}" for n in (jb, tb) if n)
            p(f"{row['name']:>5} {row['p']:7d} | {_ms(t, 'njit_objective')} "
              f"{_ms(t, 'revbench_objective')} {_ms(t, 'revbench_jacobian')} "
              f"{_x(t, 'revbench_jacobian', 'njit_objective')} | {_ms(t, 'jax_objective')} "
              f"{_ms(t, jb)} {_x(t, jb, 'revbench_jacobian')} | {_ms(t, 'torch_objective')} "
              f"{_ms(t, tb)} {_x(t, tb, 'revbench_jacobian')} | {_goal_text(row['goals_met'])}"
              + (f"  ({modes})" if modes else ""))
    p("")
    g = results["goals_met"]
    p("goals: " + ", ".join(f"{k}: {'met' if v else 'MISSED' if v is False else 'not measured'}"
                            for k, v in g.items()))
    if results["quick"]:
        p("(--quick: tiny sizes; the ratios mostly measure per-call overhead)")


# --------------------------------------------------------------------------- #
# main
# --------------------------------------------------------------------------- #
def _parse_gmm(text: str) -> tuple[tuple[int, int], ...]:
    if text == "none":
        return ()
    out = []
    for part in text.split(","):
        try:
            d, k = (int(v) for v in part.lower().split("x"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"GMM sizes are DxK, comma-separated (e.g. 2x5,64x10); "
                                             f"got {part!r}") from None
        if d < 1 or k < 1:
            raise argparse.ArgumentTypeError(f"GMM sizes need D >= 1 and K >= 1, got {part!r}")
        out.append((d, k))
    return tuple(out)


def _parse_ba(text: str) -> tuple[str, ...]:
    if text == "none":
        return ()
    names = tuple(text.split(","))
    known = (*BA.BA_SIZES, "tiny")
    bad = [n for n in names if n not in known]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown BA size(s) {bad}; choose from {', '.join(known)}")
    return names


def _parse_peers(text: str) -> tuple[str, ...]:
    if text == "none":
        return ()
    names = tuple(text.split(","))
    bad = [n for n in names if n not in adbench_peers.PEER_NAMES]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown peer(s) {bad}; choose from "
                                         f"{', '.join(adbench_peers.PEER_NAMES)} or none")
    return names


def summarize(results: dict) -> dict:
    """Each goal over every size: True, False, or None where nothing measured it."""
    def all_of(rows, key):
        vals = [r["goals_met"][key] for r in rows if key in r["goals_met"]]
        return all(vals) if vals else None
    return {
        "gmm_gradient_ratio_le_3": all_of(results["gmm"], "gradient_ratio"),
        "gmm_gradient_faster_than_jax": all_of(results["gmm"], "faster_than_jax"),
        "ba_jacobian_ratio_le_4": all_of(results["ba"], "jacobian_ratio"),
        "ba_jacobian_5x_faster_than_jax": all_of(results["ba"], "5x_faster_than_jax"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="tiny sizes and a short budget (a smoke run); --gmm/--ba still apply")
    ap.add_argument("--gmm", type=_parse_gmm, default=None,
                    help="GMM sizes DxK, comma-separated, or none (default: all seven)")
    ap.add_argument("--gmm-n", type=int, default=None, help=f"GMM points (default {GMM_N})")
    ap.add_argument("--ba", type=_parse_ba, default=None,
                    help="BA sizes (ba1,ba4,ba10; tiny) or none (default: ba1,ba4,ba10)")
    ap.add_argument("--peers", type=_parse_peers, default=adbench_peers.PEER_NAMES,
                    help="peers to run when importable: jax,torch (default) or none")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds of repetitions per variant and size (default 2)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "adbench.json",
                    help="where to write the JSON results (default: benchmarks/results/adbench.json)")
    args = ap.parse_args(argv)
    gmm_sizes = args.gmm if args.gmm is not None else (QUICK["gmm"] if args.quick else GMM.GMM_SIZES)
    ba_sizes = args.ba if args.ba is not None else (QUICK["ba"] if args.quick else tuple(BA.BA_SIZES))
    n_points = args.gmm_n or (QUICK["gmm_n"] if args.quick else GMM_N)
    budget = args.budget if args.budget is not None else (QUICK["budget"] if args.quick else 2.0)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    peers, missing = adbench_peers.load_peers(args.peers)
    for name, why in missing.items():
        log(f"peer {name}: {why}; its columns stay empty")
    results: dict = {
        "benchmark": "adbench",
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "machine": _common.machine_info(*peers),
        "settings": {"budget_s": budget, "min_reps": MIN_REPS, "max_reps": MAX_REPS,
                     "gmm_n": n_points, "seed": SEED, "timer": "time.perf_counter",
                     "statistic": "median", "threads": 1, "xla_flags": os.environ["XLA_FLAGS"],
                     "ba_validate_max_p": BA_VALIDATE_MAX_P, "tolerance": TOLERANCE},
        "goals": GOALS,
        "peers": {"available": {n: p.version for n, p in peers.items()}, "missing": missing},
        "gmm": [],
        "ba": [],
    }
    load_start = _common.loadavg()
    for d, k in gmm_sizes:
        log(f"[gmm D={d} K={k} N={n_points}] compiling and verifying ...")
        data = GMM.generate_gmm(d, k, n_points, seed=SEED)
        fns, first, checks = gmm_variants(data, peers, log)
        row = {"d": d, "k": k, "n": n_points,
               **run_size(f"GMM D={d} K={k}", fns, first, checks, budget, log)}
        row["goals_met"] = gmm_goals(row)
        results["gmm"].append(row)
    for name in ba_sizes:
        n, m, p = TINY_BA if name == "tiny" else BA.BA_SIZES[name]
        log(f"[ba {name}: n={n} m={m} p={p}] compiling and verifying ...")
        data = BA.generate_ba(n, m, p, seed=SEED)
        fns, first, checks = ba_variants(data, peers, log)
        row = {"name": name, "n": n, "m": m, "p": p,
               **run_size(f"BA {name}", fns, first, checks, budget, log)}
        row["goals_met"] = ba_goals(row)
        results["ba"].append(row)
        del fns, data
    results["load_average"] = {"start": load_start, "end": _common.loadavg()} if load_start else None
    results["goals_met"] = summarize(results)
    print_table(results)
    _common.write_results(results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
