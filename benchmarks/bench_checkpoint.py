#!/usr/bin/env python
"""The cost of the space-time knob: revbench.checkpoint against hand-written loops and peers.

Run it as::

    python benchmarks/bench_checkpoint.py [--quick] [--out PATH] [--parts overhead,memory,heat,wave]

Four parts, each printing ratios against a reference measured in the same run:

``overhead``
    ``StoreAll()`` (out-of-place step) and ``Reverse()`` (in-place leapfrog step) against
    a hand-written ``@numba.njit`` loop that runs the same T forward steps, the loss and
    T step adjoints, calling the step's own compiled kernels (``ReversibleFunction.kernel``)
    -- T = 10^4, state of 1,000 floats; then the per-step driver overhead for a state of
    10 floats, (revbench - hand-written) / (2 T).  Steps with checks on and off.
``memory``
    ``Reverse()`` and ``Revolve(snapshots=10)``: the peak memory the gradient call adds,
    measured by the operating system (``VmHWM`` after ``/proc/self/clear_refs``, which sees
    Numba's allocations), each in a fresh process, for T = 10^3 ... 10^6; and StoreAll's
    for contrast (up to 10^5).
``heat``
    The heat equation (``experiments.WORKLOADS["heat"]``, n = 100) at T = 10^5 (10^3 with
    ``--quick``): Revolve and Bennett against JAX's ``lax.scan`` (and PyTorch) where
    installed, through ``revbench.experiments.compare``; then Revolve with as many snapshots
    as fit in the memory JAX's checkpointed scan measured (the same memory, so about the
    same recomputation: the comparison of the step kernels).
``wave``
    The in-place wave equation at T = 10^5 (10^3 with ``--quick``): ``Reverse()``, reverse
    computing with two states, against JAX's ``lax.scan``, which keeps every state.

Results go to ``benchmarks/results/bench_checkpoint.json`` (or ``--out``).  Timings are
medians; the machine is shared and noisy, and its load average is recorded.
"""

from __future__ import annotations

import os

for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _common  # noqa: E402
import checkpoint_workloads as cw  # noqa: E402

REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from revbench.checkpoint import Bennett, Reverse, Revolve, StoreAll, TimeLoop  # noqa: E402


def median_time(fn, reps: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


# --------------------------------------------------------------------------- #
# overhead: revbench's driver against a hand-written loop over the same kernels
# --------------------------------------------------------------------------- #
def overhead_case(inplace: bool, n: int, T: int, check: bool, reps: int) -> dict:
    import numba

    step, loss = cw.steps(inplace, check)
    state, params = cw.initial(inplace, n)
    S = len(state)
    if inplace:
        loop = TimeLoop(step, T, loss=loss, n_state=S, inplace=True)
        strategy = Reverse()
        ex_step = (*[np.zeros_like(s) for s in state], 0, *params)
    else:
        loop = TimeLoop(step, T, loss=loss)
        strategy = StoreAll()
        ex_step = (np.zeros_like(state[0]), np.zeros_like(state[0]), 0, *params)
    ex_loss = (0.0, *[np.zeros_like(s) for s in state], *params)
    fwd = step.kernel("forward", *ex_step)
    bwd = step.kernel("backward", *ex_step)
    lossf = loss.kernel("forward", *ex_loss)
    lossb = loss.kernel("backward", *ex_loss)
    atol, rtol = 1e-8, 1e-8

    if inplace:
        @numba.njit
        def hand(q0, p0, k, h, T):
            q = q0.copy()
            p = p0.copy()
            for t in range(T):
                fwd(q, p, t, k, h, atol, rtol)
            v = lossf(0.0, q, p, k, h, atol, rtol)[0]
            aq = np.zeros_like(q)
            ap = np.zeros_like(p)
            r = lossb(v, q, p, k, h, 1.0, aq, ap, 0.0, 0.0, atol, rtol)
            gk, gh = r[-2], r[-1]
            for t in range(T - 1, -1, -1):
                r = bwd(q, p, t, k, h, aq, ap, gk, gh, atol, rtol)
                gk, gh = r[-2], r[-1]
            return v, aq, ap, gk, gh

        def run_hand():
            return hand(state[0], state[1], params[0], params[1], T)
    else:
        @numba.njit
        def hand(u0, dt, T):
            n = u0.shape[0]
            states = np.zeros((T + 1, n))
            states[0] = u0
            for t in range(T):
                fwd(states[t + 1], states[t], t, dt, atol, rtol)
            v = lossf(0.0, states[T], dt, atol, rtol)[0]
            adj = np.zeros((2, n))
            r = lossb(v, states[T], dt, 1.0, adj[T % 2], 0.0, atol, rtol)
            gdt = r[-1]
            for t in range(T - 1, -1, -1):
                r = bwd(states[t + 1], states[t], t, dt, adj[(t + 1) % 2], adj[t % 2], gdt,
                        atol, rtol)
                gdt = r[-1]
                adj[(t + 1) % 2][:] = 0.0
            return v, adj[0].copy(), gdt

        def run_hand():
            return hand(state[0], params[0], T)

    def run_rb():
        return loop.value_and_grad(*state, *params, strategy=strategy)

    ref = run_hand()
    got = run_rb()
    ok = bool(np.isclose(ref[0], got[0], rtol=1e-12)
              and np.allclose(ref[1], got[1][0], rtol=1e-10, atol=1e-14))
    t_hand, hand_times = median_time(run_hand, reps)
    t_rb, rb_times = median_time(run_rb, reps)
    return {"inplace": inplace, "strategy": strategy.label, "n": n, "T": T, "check": check,
            "verified": ok, "hand_median_s": t_hand, "revbench_median_s": t_rb,
            "ratio": t_rb / t_hand, "overhead_per_step_us": (t_rb - t_hand) / (2 * T) * 1e6,
            "hand_times_s": hand_times, "revbench_times_s": rb_times}


def part_overhead(quick: bool) -> dict:
    T = 1000 if quick else 10_000
    reps = 3 if quick else 15
    rows = []
    for check in (False, True):
        for inplace in (False, True):
            rows.append(overhead_case(inplace, 1000, T, check, reps))
    T_small = 10_000 if quick else 100_000
    for check in (False, True):
        for inplace in (False, True):
            rows.append(overhead_case(inplace, 10, T_small, check, reps))
    print("\n== overhead: revbench.checkpoint against a hand-written @njit loop over the same "
          "kernels (median times) ==")
    print(f"{'strategy':<12} {'n':>5} {'T':>7} {'checks':>6} {'hand (ms)':>10} {'revbench (ms)':>14} "
          f"{'ratio':>6} {'overhead/step (us)':>19} ok")
    for r in rows:
        print(f"{r['strategy']:<12} {r['n']:>5} {r['T']:>7} {r['check']!s:>6} "
              f"{r['hand_median_s'] * 1e3:>10.3f} {r['revbench_median_s'] * 1e3:>14.3f} "
              f"{r['ratio']:>6.2f} {r['overhead_per_step_us']:>19.3f} {r['verified']}")
    return {"rows": rows,
            "goal_ratio_1000": max(r["ratio"] for r in rows if r["n"] == 1000),
            "goal_overhead_10_us": max(r["overhead_per_step_us"] for r in rows if r["n"] == 10)}


# --------------------------------------------------------------------------- #
# memory: flat in T for Reverse and Revolve, measured in fresh processes
# --------------------------------------------------------------------------- #
CHILD = r"""
import os, sys, json
for v in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[v] = "1"
sys.path.insert(0, {here!r}); sys.path.insert(0, {repo!r})
import numpy as np
import checkpoint_workloads as cw
from revbench.checkpoint import TimeLoop, Reverse, Revolve, StoreAll
from revbench.experiments.memory import peak_during
inplace = {inplace!r}
strategy = {strategy}
step, loss = cw.steps(inplace, True)
state, params = cw.initial(inplace, {n})
def loop(T):
    return TimeLoop(step, T, loss=loss, n_state=len(state), inplace=inplace)
loop(10).value_and_grad(*state, *params, strategy=strategy)   # compile, load the schedule library
lp = loop({T})
(_, peak) = peak_during(lambda: lp.value_and_grad(*state, *params, strategy=strategy))
s = lp.stats
print(json.dumps({{"measured_peak_bytes": peak, "peak_states": s.peak_states,
                   "peak_bytes": s.peak_bytes, "forward_steps": s.forward_steps,
                   "seconds": s.seconds}}))
"""


def part_memory(quick: bool) -> dict:
    n = 100
    Ts = [1000, 10_000] if quick else [1000, 10_000, 100_000, 1_000_000]
    cases = [(True, "Reverse()"), (True, "Revolve(snapshots=10)"), (False, "Revolve(snapshots=10)"),
             (False, "StoreAll()"), (True, "StoreAll()")]
    rows = []
    print(f"\n== memory: peak memory the gradient adds, each in a fresh process (state of {n} floats) ==")
    print(f"{'step':<13} {'strategy':<22} {'T':>9} {'states':>7} {'exact (MB)':>11} "
          f"{'measured (MB)':>14} {'seconds':>8}")
    for inplace, strategy in cases:
        for T in Ts:
            if strategy == "StoreAll()" and T > 100_000:
                continue
            src = CHILD.format(here=str(HERE), repo=str(REPO), inplace=inplace, strategy=strategy,
                               n=n, T=T)
            proc = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True,
                                  timeout=1200)
            if proc.returncode != 0:
                raise SystemExit(f"memory child failed:\n{proc.stderr}")
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            r.update(inplace=inplace, strategy=strategy, T=T, n=n)
            rows.append(r)
            kind = "in-place" if inplace else "out-of-place"
            print(f"{kind:<13} {strategy:<22} {T:>9} {r['peak_states']:>7} "
                  f"{r['peak_bytes'] / 2**20:>11.3f} {r['measured_peak_bytes'] / 2**20:>14.3f} "
                  f"{r['seconds']:>8.3f}")
    flat = {}
    for inplace, strategy in cases[:3]:
        ms = [r["measured_peak_bytes"] for r in rows if r["inplace"] == inplace
              and r["strategy"] == strategy]
        flat[f"{'in-place' if inplace else 'out-of-place'} {strategy}"] = {
            "min_MB": min(ms) / 2**20, "max_MB": max(ms) / 2**20}
    return {"rows": rows, "flat": flat}


# --------------------------------------------------------------------------- #
# heat: the experiment, with JAX / PyTorch where installed
# --------------------------------------------------------------------------- #
def part_heat(quick: bool) -> dict:
    from revbench import experiments

    T = 1000 if quick else 100_000
    strategies = [StoreAll(), Revolve(snapshots=20), Revolve(snapshots=100), Bennett(k=16),
                  Bennett(k=64)]
    r = experiments.compare("heat", n_steps=[T], strategies=strategies, repeats=1 if quick else 3,
                            progress=False)
    df = r.table
    print(f"\n== heat equation, n = 100, T = {T:,} (one gradient; median of the repeats) ==")
    from revbench.experiments.__main__ import format_table

    print(format_table(df))
    ref = df[df["framework"] != "revbench"]
    out = {"rows": json.loads(df.to_json(orient="records"))}
    jax_scan = ref[(ref["framework"] == "jax") & (ref["strategy"] == "lax.scan")]
    if len(jax_scan):
        jm, jt = float(jax_scan["measured_peak_bytes"].iloc[0]), float(jax_scan["seconds"].iloc[0])
        ratios = {}
        for _, row in df[df["framework"] == "revbench"].iterrows():
            label = f"{row['strategy']}({row['knob']})"
            ratios[label] = {"memory_jax_over_revbench": jm / max(row["measured_peak_bytes"], 1),
                             "time_revbench_over_jax": row["seconds"] / jt}
            print(f"  {label:<24} memory: JAX lax.scan / revbench = "
                  f"{ratios[label]['memory_jax_over_revbench']:8.1f}x   time: revbench / JAX = "
                  f"{ratios[label]['time_revbench_over_jax']:6.2f}x")
        ckpt = ref[(ref["framework"] == "jax") & (ref["strategy"] == "lax.scan+jax.checkpoint")]
        if len(ckpt):
            ct, cm = float(ckpt["seconds"].iloc[0]), float(ckpt["measured_peak_bytes"].iloc[0])
            for label, row in ((f"{r['strategy']}({r['knob']})", r)
                               for _, r in df[df["framework"] == "revbench"].iterrows()):
                ratios[label]["time_revbench_over_jax_checkpoint"] = row["seconds"] / ct
                ratios[label]["memory_revbench_over_jax_checkpoint"] = \
                    row["measured_peak_bytes"] / max(cm, 1)
                print(f"  {label:<24} against lax.scan + jax.checkpoint: time "
                      f"{row['seconds'] / ct:6.2f}x, memory "
                      f"{ratios[label]['memory_revbench_over_jax_checkpoint']:6.2f}x")
        out["vs_jax"] = ratios
        if len(ckpt):
            out["at_jax_memory"] = revolve_at_jax_memory(T, quick, ct, cm)
    else:
        print("  (JAX is not installed: pip install 'jax[cpu]' to add it)")
    out["model"] = {f"{r['strategy']}({r['knob']})": {"time_overhead": r["time_overhead"],
                                                      "memory_overhead_bytes":
                                                          r["memory_overhead_bytes"]}
                    for _, r in df[df["framework"] == "revbench"].iterrows()}
    out["step_seconds"] = r.info["step_seconds"]
    out["in_language"] = in_language_heat(T, 1 if quick else 3)
    return out


def revolve_at_jax_memory(T: int, quick: bool, jax_seconds: float, jax_bytes: float) -> dict:
    """Revolve given the memory JAX's checkpointed scan measured, no more: as many
    snapshots as fit in it (Revolve(c) holds at most c + 2 states).  With that memory both
    recompute about as much, so the time ratio compares the step kernels and the drivers."""
    from revbench import experiments
    from revbench.experiments import WORKLOADS

    state_bytes = WORKLOADS["heat"].args(T)[0].nbytes
    c = int(jax_bytes // state_bytes) - 2
    if c < 3:  # (a short loop: JAX's memory is then below a page or two, the resolution)
        why = (f"JAX's checkpointed scan measured {jax_bytes / 1e6:.3f} MB, less than five "
               f"states of {state_bytes:,} bytes: too little to size a Revolve by")
        print(f"\n== Revolve in the memory JAX's checkpointed scan took: skipped ({why}) ==")
        return {"skipped": why}
    r = experiments.compare("heat", n_steps=[T], strategies=[Revolve(snapshots=c)],
                            repeats=1 if quick else 3, progress=False, peers=False)
    row = r.table.iloc[0]
    out = {"snapshots": c, "seconds": float(row["seconds"]),
           "measured_peak_bytes": float(row["measured_peak_bytes"]),
           "forward_steps": int(row["forward_steps"]), "model_seconds": float(row["model_seconds"]),
           "time_over_jax_checkpoint": float(row["seconds"]) / jax_seconds,
           "memory_over_jax_checkpoint": float(row["measured_peak_bytes"]) / max(jax_bytes, 1)}
    print(f"\n== Revolve in the memory JAX's checkpointed scan took ({jax_bytes / 1e6:.2f} MB): "
          f"snapshots={c} ==\n  {out['seconds']:.3f} s ({out['forward_steps']:,} forward steps, "
          f"model {out['model_seconds']:.3f} s): time {out['time_over_jax_checkpoint']:.2f}x, "
          f"memory {out['memory_over_jax_checkpoint']:.2f}x JAX lax.scan + jax.checkpoint")
    return out


def part_wave(quick: bool) -> dict:
    """Reverse computing itself: the in-place leapfrog wave equation run backwards by
    ``Reverse()`` (two states, no checkpoints) against JAX's ``lax.scan`` (every state kept)."""
    from revbench import experiments

    T = 1000 if quick else 100_000
    r = experiments.compare("wave", n_steps=[T], strategies=[Reverse()],
                            repeats=1 if quick else 3, progress=False)
    df = r.table
    from revbench.experiments.__main__ import format_table

    print(f"\n== wave equation, T = {T:,}: Reverse() against the peers ==")
    print(format_table(df))
    out = {"rows": json.loads(df.to_json(orient="records"))}
    ours = df[df["framework"] == "revbench"].iloc[0]
    scan = df[(df["framework"] == "jax") & (df["strategy"] == "lax.scan")]
    if len(scan):
        out["time_reverse_over_jax_scan"] = float(ours["seconds"]) / float(scan["seconds"].iloc[0])
        out["memory_jax_scan_over_reverse"] = (float(scan["measured_peak_bytes"].iloc[0])
                                               / max(float(ours["measured_peak_bytes"]), 1))
        print(f"  Reverse() / JAX lax.scan: time {out['time_reverse_over_jax_scan']:.2f}x; "
              f"JAX's memory / Reverse()'s: {out['memory_jax_scan_over_reverse']:.0f}x")
    return out


IN_LANGUAGE_HEAT = """
from revbench.checkpoint import Revolve, checkpointed
from revbench.experiments.workloads import heat_step, heat_loss


@reversible
def heat(out, uT, u0, data, indices, indptr, f, kappa, dt, n):
    for t in checkpointed(range(n), Revolve(snapshots=20), new=uT, old=u0):
        heat_step(uT, u0, t, data, indices, indptr, f, kappa, dt)
    heat_loss(out, uT, data, indices, indptr, f, kappa, dt)
"""


def in_language_heat(T: int, reps: int) -> dict:
    """The same gradient written as a reversible function with a checkpointed loop (the
    statement, ``for t in checkpointed(...)``) against ``TimeLoop`` with the same strategy:
    the statement's kernels against the loop driver's, in this run."""
    import revbench
    from revbench.experiments import WORKLOADS

    w = WORKLOADS["heat"]
    u0, *params = w.args(T)
    f = revbench.define(IN_LANGUAGE_HEAT, {"reversible": revbench.reversible})["heat"]
    g = revbench.grad(f, loss="out")
    call = (0.0, np.zeros_like(u0), u0, *params, T)
    g(*call)  # compile
    statement, _ = median_time(lambda: g(*call), reps)
    loop = w.loop(T)
    loop.value_and_grad(u0, *params, strategy=Revolve(snapshots=20))
    timeloop, _ = median_time(lambda: loop.value_and_grad(u0, *params,
                                                          strategy=Revolve(snapshots=20)), reps)
    a = g(*call)[2]
    b = loop.grad(u0, *params, strategy=Revolve(snapshots=20))[0]
    print(f"\n== the same gradient as a checkpointed loop statement, Revolve(snapshots=20), T = {T:,} ==\n"
          f"  statement {statement:.3f} s, TimeLoop {timeloop:.3f} s: statement / TimeLoop = "
          f"{statement / timeloop:.2f}x; gradients agree to {np.max(np.abs(a - b)) / np.max(np.abs(b)):.1e}")
    return {"statement_seconds": statement, "timeloop_seconds": timeloop,
            "ratio": statement / timeloop}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "bench_checkpoint.json")
    ap.add_argument("--parts", default="overhead,memory,heat,wave")
    ns = ap.parse_args()
    parts = [p.strip() for p in ns.parts.split(",") if p.strip()]
    unknown = set(parts) - {"overhead", "memory", "heat", "wave"}
    if unknown:
        ap.error(f"unknown parts: {', '.join(sorted(unknown))}")
    results = {"benchmark": "bench_checkpoint", "quick": ns.quick,
               "timestamp": datetime.datetime.now().isoformat(timespec="seconds"),
               "machine": _common.machine_info("checkpoint_schedules"),
               "loadavg_start": _common.loadavg()}
    if "overhead" in parts:
        results["overhead"] = part_overhead(ns.quick)
    if "memory" in parts:
        results["memory"] = part_memory(ns.quick)
    if "heat" in parts:
        results["heat"] = part_heat(ns.quick)
    if "wave" in parts:
        results["wave"] = part_wave(ns.quick)
    results["loadavg_end"] = _common.loadavg()
    _common.write_results(results, ns.out)


if __name__ == "__main__":
    main()
