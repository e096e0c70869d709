#!/usr/bin/env python
"""What the JAX and PyTorch exports cost per call, against calling revbench directly.

Run it as::

    python benchmarks/bench_interop.py [--quick] [--out PATH]

The workload is small on purpose (``n = 10``): the kernels take about a microsecond,
so what is measured is the exports' overhead -- argument conversion, JAX's callback or
PyTorch's dispatcher and autograd, the copies that keep the caller's arrays intact::

    def wsum(y, x, w):
        for i in range(len(x)):
            y += w[i] * x[i] * x[i]

Timed per call (the median of several repeats of a loop of calls, after a warm-up that
compiles), in one run:

* revbench directly: ``f(*args)`` (forward), ``value_and_grad(f, loss="y")`` and
  ``vjp(f, ...)`` + ``pullback(1.0)`` (forward + backward);
* JAX (when installed): ``jax.jit(to_jax(f))`` and ``jax.jit(jax.value_and_grad(...))``,
  results waited for; the eager call of the export (no transformation: f is run
  directly); and, for scale, a trivial jitted ``jnp`` function (JAX's own dispatch floor)
  and a jitted ``jax.pure_callback`` that computes nothing (the public callback's floor,
  which the export's own host call avoids);
* PyTorch (when installed): ``to_torch(f)`` under ``torch.no_grad()`` and forward +
  ``torch.autograd.grad``.

Printed: each time, its ratio to revbench's direct call of the same kind and the
difference (the export's overhead), against the goal of 50 µs per call.  The JSON goes
to ``benchmarks/results/interop.json`` (or ``--out``).  Nothing is asserted.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import loadavg, machine_info, write_results

import revbench

SOURCE = """
def wsum(y, x, w):
    for i in range(len(x)):
        y += w[i] * x[i] * x[i]
"""
GOAL_US = 50.0


def per_call(fn, number: int, repeats: int) -> float:
    """Seconds per call: the median of ``repeats`` loops of ``number`` calls (this
    machine is shared and noisy: a median, not a best case)."""
    fn()  # warm-up (compiles, traces)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number)
    return float(np.median(times))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer calls (a smoke test)")
    ap.add_argument("--out", type=Path,
                    default=Path(__file__).resolve().parent / "results" / "interop.json")
    opts = ap.parse_args()
    number, repeats = (50, 3) if opts.quick else (2000, 7)
    n = 10
    f = revbench.define(SOURCE)["wsum"]
    rng = np.random.default_rng(0)
    x, w = rng.normal(size=n), rng.normal(size=n)
    expected_g = (2 * w * x, x * x)

    t: dict[str, float] = {}
    vg = revbench.value_and_grad(f, loss="y", wrt=("x", "w"))
    t["revbench_forward"] = per_call(lambda: f(0.0, x, w), number, repeats)
    t["revbench_value_and_grad"] = per_call(lambda: vg(0.0, x, w), number, repeats)

    def rb_vjp():
        return revbench.vjp(f, 0.0, x, w, outputs="y", wrt=("x", "w"))[1](1.0)

    t["revbench_vjp"] = per_call(rb_vjp, number, repeats)
    modules = []
    checks = {}

    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        print("jax is not installed: its rows are left out")
    else:
        modules.append("jax")
        jax.config.update("jax_enable_x64", True)
        from revbench.interop import to_jax

        jf = to_jax(f, outputs="y")
        xj, wj = jnp.asarray(x), jnp.asarray(w)
        fwd = jax.jit(jf)
        both = jax.jit(jax.value_and_grad(jf, argnums=(1, 2)))
        floor = jax.jit(lambda y, x, w: y + jnp.sum(w * x * x))
        _, g = both(0.0, xj, wj)
        checks["jax"] = all(np.allclose(a, b) for a, b in zip(g, expected_g))
        t["jax_forward_jit"] = per_call(lambda: fwd(0.0, xj, wj).block_until_ready(), number, repeats)
        t["jax_forward_eager"] = per_call(lambda: jf(0.0, xj, wj), number, repeats)
        t["jax_value_and_grad_jit"] = per_call(
            lambda: jax.block_until_ready(both(0.0, xj, wj)), number, repeats)
        t["jax_floor_jnp_jit"] = per_call(lambda: floor(0.0, xj, wj).block_until_ready(),
                                          number, repeats)
        # what JAX's public callback costs by itself, one argument, nothing computed
        one = np.float64(1.0)
        sds = jax.ShapeDtypeStruct((), np.float64)
        public = jax.jit(lambda y, x, w: jax.pure_callback(
            lambda b: one, sds, jnp.concatenate([jnp.ravel(y), x, w])))
        t["jax_floor_pure_callback_jit"] = per_call(
            lambda: public(0.0, xj, wj).block_until_ready(), number, repeats)

    try:
        import torch
    except ImportError:
        print("torch is not installed: its rows are left out")
    else:
        modules.append("torch")
        from revbench.interop import to_torch

        tf = to_torch(f, outputs="y")
        xt = torch.tensor(x, requires_grad=True)
        wt = torch.tensor(w, requires_grad=True)

        def torch_forward():
            with torch.no_grad():
                return tf(0.0, xt, wt)

        def torch_both():
            y = tf(0.0, xt, wt)
            return torch.autograd.grad(y, (xt, wt))

        checks["torch"] = all(np.allclose(a.numpy(), b) for a, b in zip(torch_both(), expected_g))
        t["torch_forward"] = per_call(torch_forward, number, repeats)
        t["torch_forward_backward"] = per_call(torch_both, number, repeats)

    reference = {"jax_forward_jit": "revbench_forward", "jax_forward_eager": "revbench_forward",
                 "jax_value_and_grad_jit": "revbench_value_and_grad",
                 "torch_forward": "revbench_forward",
                 "torch_forward_backward": "revbench_value_and_grad"}
    rows = {}
    print(f"\nper call, n = {n} (median of {repeats} x {number} calls); goal: overhead < {GOAL_US:g} µs")
    print(f"{'':28s} {'µs/call':>9s} {'against':>24s} {'ratio':>6s} {'overhead µs':>12s}")
    for name, sec in t.items():
        ref = reference.get(name)
        if ref is None:
            print(f"{name:28s} {sec * 1e6:9.1f}")
            continue
        over = (sec - t[ref]) * 1e6
        rows[name] = {"against": ref, "ratio": sec / t[ref], "overhead_us": over,
                      "goal_met": over < GOAL_US}
        print(f"{name:28s} {sec * 1e6:9.1f} {ref:>24s} {sec / t[ref]:6.2f} {over:12.1f}"
              + ("" if over < GOAL_US else "   (over the goal)"))
    results = {
        "benchmark": "bench_interop",
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "quick": opts.quick,
        "machine": machine_info(*modules),
        "loadavg": loadavg(),
        "settings": {"n": n, "number": number, "repeats": repeats, "goal_overhead_us": GOAL_US},
        "gradients_agree": checks,
        "per_call_s": t,
        "exports": rows,
    }
    write_results(results, opts.out)


if __name__ == "__main__":
    main()
