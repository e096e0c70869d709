#!/usr/bin/env python
"""What a second derivative costs: ``revbench.hvp`` and ``revbench.hessian`` against
``revbench.grad`` and, where JAX is installed, JAX's forward-over-reverse, in one run.

Run it as::

    python benchmarks/bench_hessian.py [--quick] [--out PATH]

The workload is a chained Rosenbrock-like energy over ``x`` of size ``n``::

    @reversible
    def energy(e, x):
        for i in range(len(x) - 1):
            e += 100.0 * (x[i + 1] - x[i] * x[i]) ** 2 + (1.0 - x[i]) ** 2

compiled with ``check=False`` (at large ``n`` the sum's round-off, undone backwards,
exceeds the default tolerance of the recovery check).  Timed per call (the best of
several repeats, after a warm-up call that compiles):

* ``grad``: ``revbench.grad`` (a forward run and one reverse sweep);
* ``hvp``: ``revbench.hvp`` (one pass of the compiled forward-over-reverse program);
* ``fd_hvp``: the central difference of two ``grad`` calls (what an ``hvp`` costs
  without second-order AD; it is also the check that the figures mean something);
* ``hessian`` at a small ``n`` (``n`` passes of ``hvp``);
* ``jax_hvp`` / ``jax_hessian``: ``jax.jit`` of ``jvp(grad(f))`` and of
  ``jax.hessian(f)`` on the same energy (JAX on the CPU, float64), when installed.

Ratios are printed against ``grad`` and against JAX, measured in the same run; the JSON
goes to ``benchmarks/results/bench_hessian.json`` (or ``--out``).  Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import loadavg, machine_info

import revbench

SOURCE = """
def energy(e, x):
    for i in range(len(x) - 1):
        e += 100.0 * (x[i + 1] - x[i] * x[i]) ** 2 + (1.0 - x[i]) ** 2
"""


def best(fn, repeats: int) -> float:
    fn()  # warm-up (compiles)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"
                                         / "bench_hessian.json"))
    opts = ap.parse_args()
    # checks off: at large n, running the sum backwards leaves more round-off in e than
    # the default tolerance allows (a ReversibilityError); the speed is what is measured
    energy = revbench.define(SOURCE, {"np": np}, check=False)["energy"]
    sizes = [100, 10_000] if opts.quick else [100, 10_000, 1_000_000]
    hess_n = 30
    repeats = 3 if opts.quick else 7
    try:
        import jax
        import jax.numpy as jnp

        jax.config.update("jax_enable_x64", True)

        def jenergy(x):
            return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)

        jhvp = jax.jit(lambda x, v: jax.jvp(jax.grad(jenergy), (x,), (v,))[1])
        jhess = jax.jit(jax.hessian(jenergy))
    except ImportError:
        jax = None
    rng = np.random.default_rng(0)
    g = revbench.grad(energy, loss="e")
    h = revbench.hvp(energy, loss="e", wrt="x")
    eps = 1e-6

    def fd_hvp(x: np.ndarray, v: np.ndarray) -> np.ndarray:
        return (g(0.0, x + eps * v)[1] - g(0.0, x - eps * v)[1]) / (2 * eps)

    def measure(n: int) -> dict:
        x, v = rng.normal(size=n), rng.normal(size=n)
        t = {"grad": best(lambda: g(0.0, x), repeats),
             "hvp": best(lambda: h(0.0, x, v), repeats),
             "fd_hvp": best(lambda: fd_hvp(x, v), repeats)}
        ad = h(0.0, x, v)
        row = {"n": n, "timings_s": t,
               "max_rel_diff_vs_fd": float(np.max(np.abs(ad - fd_hvp(x, v))) / np.max(np.abs(ad)))}
        if jax is not None:
            xj, vj = jnp.asarray(x), jnp.asarray(v)
            t["jax_hvp"] = best(lambda: jhvp(xj, vj).block_until_ready(), repeats)
            row["max_rel_diff_vs_jax"] = float(np.max(np.abs(ad - np.asarray(jhvp(xj, vj))))
                                               / np.max(np.abs(ad)))
        return row

    rows = [measure(n) for n in sizes]
    x = rng.normal(size=hess_n)
    H = revbench.hessian(energy, loss="e", wrt="x")
    hess = {"n": hess_n, "timings_s": {"hessian": best(lambda: H(0.0, x), repeats)}}
    if jax is not None:
        xj = jnp.asarray(x)
        hess["timings_s"]["jax_hessian"] = best(lambda: jhess(xj).block_until_ready(), repeats)
        hess["max_abs_diff_vs_jax"] = float(np.max(np.abs(H(0.0, x) - np.asarray(jhess(xj)))))
    print(f"{'n':>9} {'grad':>10} {'hvp':>10} {'fd_hvp':>10} {'jax_hvp':>10} "
          f"{'hvp/grad':>9} {'hvp/fd':>7} {'hvp/jax':>8}")
    for row in rows:
        t = row["timings_s"]
        jx = t.get("jax_hvp")
        jax_time = f"{jx * 1e6:8.1f}us" if jx else "n/a"
        jax_ratio = f"{t['hvp'] / jx:.2f}" if jx else "n/a"
        print(f"{row['n']:>9} {t['grad'] * 1e6:>8.1f}us {t['hvp'] * 1e6:>8.1f}us "
              f"{t['fd_hvp'] * 1e6:>8.1f}us {jax_time:>10} "
              f"{t['hvp'] / t['grad']:>9.2f} {t['hvp'] / t['fd_hvp']:>7.2f} {jax_ratio:>8}")
    ht = hess["timings_s"]
    line = f"hessian, n={hess_n}: {ht['hessian'] * 1e6:.1f}us"
    if "jax_hessian" in ht:
        line += (f"; jax.hessian {ht['jax_hessian'] * 1e6:.1f}us "
                 f"(ratio {ht['hessian'] / ht['jax_hessian']:.2f})")
    print(line)
    out = {"machine": machine_info(*(["jax"] if jax is not None else [])),
           "loadavg": loadavg(), "hvp": rows, "hessian": hess}
    Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.out).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
