#!/usr/bin/env python
"""What a derivative inside reversible code costs: a best-response (saddle-point) loss whose
gradient goes through a gradient, against JAX's ``jit(grad)`` of the same function written
with ``jax.grad`` inside, in one run.

Run it as::

    python benchmarks/bench_nested.py [--quick] [--out PATH]

The workload is ``docs/ad.md`` §11 as written there (natural code, checks on), with ``K``
steps of gradient ascent on ``y`` out of place, then the payoff at the result::

    y1 += y0;  y1 += lr * revbench.grad(payoff, loss="v", wrt="y")(0.0, x, y0)
    ...        payoff(v, x, yK)

Timed per call (the median of several repeats, after a warm-up call that compiles; the
first call's time, compilation included, is reported too):

* ``value``: the function itself (each step: ``payoff``'s forward run and reverse sweep);
* ``grad``: ``revbench.grad`` of it, the outer gradient (each step's reverse sweep is a
  Hessian-vector product of ``payoff``, forward over reverse);
* ``jax_value`` / ``jax_grad``: ``jax.jit`` of the same, JAX on the CPU in float64.

Ratios against JAX are printed; the JSON goes to ``benchmarks/results/bench_nested.json``
(or ``--out``).  Nothing is asserted: the gradients are compared with JAX's and the largest
relative difference is reported.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import loadavg, machine_info, write_results

import revbench

SOURCE = '''
@reversible
def payoff(v, x, y):
    for i in range(len(y)):
        v += x[i] * y[i] - 0.5 * y[i] ** 2 + 0.1 * np.sin(x[i] * y[i])


@reversible
def best_response(v, x, y0, lr):
    """Two steps of gradient ascent on y, then the payoff there."""
    with routine:
        y1 = np.zeros_like(y0)
        y1 += y0
        y1 += lr * revbench.grad(payoff, loss="v", wrt="y")(0.0, x, y0)
        y2 = np.zeros_like(y0)
        y2 += y1
        y2 += lr * revbench.grad(payoff, loss="v", wrt="y")(0.0, x, y1)
    payoff(v, x, y2)
    ~routine
'''


def timed(fn, repeats: int) -> tuple[float, float]:
    """(first call, compilation included; median of ``repeats`` later calls)."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return first, statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"
                                         / "bench_nested.json"))
    opts = ap.parse_args()
    f = revbench.define(SOURCE, {"np": np, "revbench": revbench})["best_response"]
    sizes = [100, 10_000] if opts.quick else [100, 10_000, 1_000_000]
    repeats = 3 if opts.quick else 7
    peers = jax_peers()
    g = revbench.grad(f, loss="v", wrt=["x", "y0"])
    rng = np.random.default_rng(0)
    rows = [measure(n, f, g, rng, repeats, peers) for n in sizes]
    table(rows)
    write_results({"benchmark": "bench_nested", "quick": opts.quick,
                   "machine": machine_info(*(["jax"] if peers is not None else [])),
                   "loadavg": loadavg(), "rows": rows}, Path(opts.out))


def jax_peers():
    """``(jnp, jit(best_response), jit(grad(best_response)))`` with ``jax.grad`` inside,
    in float64; None without JAX."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)

    def payoff(x, y):
        return jnp.sum(x * y - 0.5 * y ** 2 + 0.1 * jnp.sin(x * y))

    def best_response(x, y0, lr):
        y1 = y0 + lr * jax.grad(payoff, argnums=1)(x, y0)
        y2 = y1 + lr * jax.grad(payoff, argnums=1)(x, y1)
        return payoff(x, y2)

    return jnp, jax.jit(best_response), jax.jit(jax.grad(best_response, argnums=(0, 1)))


def measure(n: int, f, g, rng, repeats: int, peers) -> dict:
    """One row: the timings at size ``n``, and the largest difference from JAX."""
    x, y0 = rng.normal(size=n), 0.1 * rng.normal(size=n)
    row: dict = {"n": n}
    row["value_first_s"], row["value_s"] = timed(lambda: f(0.0, x, y0, 0.1), repeats)
    row["grad_first_s"], row["grad_s"] = timed(lambda: g(0.0, x, y0, 0.1), repeats)
    if peers is None:
        return row
    jnp, jvalue, jgrad = peers
    xj, yj = jnp.asarray(x), jnp.asarray(y0)
    row["jax_value_first_s"], row["jax_value_s"] = timed(
        lambda: jvalue(xj, yj, 0.1).block_until_ready(), repeats)
    row["jax_grad_first_s"], row["jax_grad_s"] = timed(
        lambda: jgrad(xj, yj, 0.1)[0].block_until_ready(), repeats)
    ours = g(0.0, x, y0, 0.1)[1:3]
    row["max_rel_diff_vs_jax"] = max(
        float(np.max(np.abs(a - np.asarray(b))) / np.max(np.abs(np.asarray(b))))
        for a, b in zip(ours, jgrad(xj, yj, 0.1)))
    return row


def table(rows: list[dict]) -> None:
    print(f"{'n':>9} {'value':>10} {'grad':>10} {'jax value':>10} {'jax grad':>10} "
          f"{'value/jax':>9} {'grad/jax':>8} {'grad/value':>10}")
    for r in rows:
        jv, jg = r.get("jax_value_s"), r.get("jax_grad_s")
        print(f"{r['n']:>9} {r['value_s'] * 1e3:>8.3f}ms {r['grad_s'] * 1e3:>8.3f}ms "
              + (f"{jv * 1e3:>8.3f}ms {jg * 1e3:>8.3f}ms {r['value_s'] / jv:>9.2f} "
                 f"{r['grad_s'] / jg:>8.2f}" if jv else f"{'n/a':>10} {'n/a':>10} {'':>9} {'':>8}")
              + f" {r['grad_s'] / r['value_s']:>10.2f}")
    first = rows[0]
    print(f"first calls (compilation included), n={first['n']}: value "
          f"{first['value_first_s']:.1f}s, grad {first['grad_first_s']:.1f}s"
          + (f"; JAX {first['jax_value_first_s']:.2f}s, {first['jax_grad_first_s']:.2f}s"
             if "jax_value_first_s" in first else ""))


if __name__ == "__main__":
    main()
