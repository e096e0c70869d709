#!/usr/bin/env python
"""revbench in GradBench's evals, beside JAX measured in the same run and beside the
published nightly figures.

Run it as::

    python benchmarks/gradbench.py [--quick] [--only EVAL ...] [--seconds S] [--out PATH]

For each eval revbench's tool has (``revbench/gradbench``), at GradBench's sizes up to the
largest that fit this machine in a few minutes (``SIZES`` below says which; ``--quick``:
the smallest), it generates the input as GradBench's eval does
(:mod:`revbench.gradbench.driver`), evaluates the primal and the derivative through the
tool's own protocol handler (``define`` compiles first; each ``evaluate`` runs until
``--seconds`` and at least 3 runs, as GradBench's ``min_runs``/``min_seconds`` ask; the
median run), and times ``jax.jit`` of the same functions written as a JAX user writes them
(float64, the first call -- compilation -- reported on its own, then the median of runs
lasting as long).  Every revbench answer is checked against JAX's first
(:func:`revbench.gradbench.driver.mismatches`, GradBench's comparison).

The table gives, per workload: revbench's primal and derivative times, derivative/primal;
JAX's; revbench's derivative time over JAX's; and the best derivative/primal published in
GradBench's nightly of 2026-03-14 at its largest workload.  One thread for both
(``XLA_FLAGS``, ``OMP_NUM_THREADS`` set before anything is imported).  The nested evals
(``particle``, ``saddle``) have four functions and no primal: their columns are ``fr``
(forward over reverse, the mode JAX can run: JAX differentiates a ``while_loop`` forward
only) and ``rr``, JAX's ``fr`` beside the first.  PyTorch's eager functions
(``benchmarks/gradbench_torch.py``) are timed beside them, on one thread, for every eval
but the nested two.
Results: ``benchmarks/results/gradbench.json``.
"""

from __future__ import annotations

import os

for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"
os.environ["XLA_FLAGS"] = ("--xla_cpu_multi_thread_eigen=false "
                           "intra_op_parallelism_threads=1")

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _common  # noqa: E402

REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
from gradbench_torch import torch_programs  # noqa: E402

from revbench.gradbench import driver  # noqa: E402
from revbench.gradbench.protocol import Server  # noqa: E402

#: the workloads timed (GradBench's, the largest left out where a run would take minutes here)
SIZES = {
    "lse": driver.SIZES["lse"][::3],
    "llsq": driver.SIZES["llsq"][::3],
    "det": driver.SIZES["det"][:5],                 # ell 5..9
    "kmeans": driver.SIZES["kmeans"][:4],           # k = 10, 100 with n = 1000
    "ode": driver.SIZES["ode"][:4],                 # up to n = 10000, s = 1 and 10
    "gmm": [s for s in driver.SIZES["gmm"] if (s["d"], s["k"]) in
            ((2, 5), (10, 10), (20, 25), (64, 100))],
    "lstm": driver.SIZES["lstm"][:1],               # l = 2, c = 1024
    "ba": driver.SIZES["ba"][:2],                   # ba1, ba2
    "ht": driver.SIZES["ht"],                       # every workload (the models drawn here)
    "particle": driver.SIZES["particle"],
    "saddle": driver.SIZES["saddle"],
}

#: what the table's two columns time for the nested evals, which have four functions and no
#: primal: ``fr`` (forward outside, reverse inside: what JAX can run, as a ``while_loop``
#: differentiates forward only) and ``rr``; the other two are in the JSON
NESTED = {"particle": ("fr", "rr"), "saddle": ("fr", "rr")}

#: the evals whose PyTorch results are checked against the reference, flattened (their
#: outputs are arrays in GradBench's layout; ba's and gmm's are in other layouts)
TORCH_CHECKED = {"lse", "llsq", "det", "kmeans", "ode", "ht"}


def _flat_json(value) -> list:
    return np.ravel(np.asarray(value, dtype=float)).tolist()


#: the best derivative / primal at the largest workload, GradBench's nightly of 2026-03-14
PUBLISHED = {"gmm": ("JAX", 1.28), "ba": ("manual", 7.76), "lstm": ("CoDiPack", 2.12),
             "ode": ("JAX", 1.59), "lse": ("JAX", 1.17), "kmeans": ("manual", 1.09),
             "det": ("ad-hpp", 3.51)}


def jax_programs(module: str, raw: dict):
    """``{function: (jitted, args)}``: the eval's two functions in JAX, as a JAX user
    writes them."""
    import jax
    import jax.numpy as jnp
    import jax.scipy.special as sp

    from revbench.gradbench import reference

    jax.config.update("jax_enable_x64", True)
    if module == "lse":
        def lse(x):
            a = jnp.max(x)
            return a + jnp.log(jnp.sum(jnp.exp(x - a)))
        x = jnp.asarray(raw["x"])
        return {"primal": (jax.jit(lse), (x,)), "gradient": (jax.jit(jax.grad(lse)), (x,))}
    if module == "llsq":
        n = raw["n"]

        def llsq(x):
            t = -1.0 + jnp.arange(n) * 2.0 / (n - 1)
            return 0.5 * jnp.sum((jnp.sign(t) - (t[:, None] ** jnp.arange(x.size)) @ x) ** 2)
        x = jnp.asarray(raw["x"])
        return {"primal": (jax.jit(llsq), (x,)), "gradient": (jax.jit(jax.grad(llsq)), (x,))}
    if module == "det":
        A = jnp.asarray(raw["A"]).reshape(raw["ell"], raw["ell"])
        return {"primal": (jax.jit(jnp.linalg.det), (A,)),
                "gradient": (jax.jit(jax.grad(jnp.linalg.det)), (A,))}
    if module == "kmeans":
        P = jnp.asarray(raw["points"])

        def cost(C, P):
            return jnp.sum(jnp.min(jnp.sum((P[:, None, :] - C[None]) ** 2, axis=2), axis=1))

        def direction(C, P):
            g = jax.grad(cost)(C, P)
            return g / jax.jvp(lambda c: jax.grad(cost)(c, P), (C,), (jnp.ones_like(C),))[1]
        C = jnp.asarray(raw["centroids"])
        return {"cost": (jax.jit(cost), (C, P)), "dir": (jax.jit(direction), (C, P))}
    if module == "ode":
        s = raw["s"]

        def solve(x):
            def rhs(y):
                return jnp.concatenate([x[:1], x[1:] * y[:-1]])

            def step(y, _):
                return reference.rk4_step(rhs, y, 2.0 / s), None
            return jax.lax.scan(step, jnp.zeros_like(x), None, length=s)[0]
        x = jnp.asarray(raw["x"])
        return {"primal": (jax.jit(solve), (x,)),
                "gradient": (jax.jit(jax.grad(lambda x: solve(x)[-1])), (x,))}
    if module == "gmm":
        d, k, n, m, gamma = raw["d"], raw["k"], raw["n"], raw["m"], raw["gamma"]
        rows, cols = np.tril_indices(d, -1)
        order = np.lexsort((rows, cols))
        rows, cols = rows[order], cols[order]
        nw = d + m + 1
        C = nw * d * (np.log(gamma) - 0.5 * np.log(2.0)) - float(sp.multigammaln(nw / 2, d))

        def objective(alpha, mu, q, lower, x):
            Q = jax.vmap(lambda qc, lc: jnp.diag(jnp.exp(qc)).at[rows, cols].set(lc))(q, lower)
            Qx = jnp.einsum("kij,nkj->nki", Q, x[:, None, :] - mu[None])
            main = alpha + jnp.sum(q, axis=1) - 0.5 * jnp.sum(Qx ** 2, axis=2)
            prior = k * C - jnp.sum(0.5 * gamma ** 2 * (jnp.sum(jnp.exp(q) ** 2, axis=1)
                                                        + jnp.sum(lower ** 2, axis=1))
                                    - m * jnp.sum(q, axis=1))
            return (-n * d / 2 * np.log(2 * np.pi) + jnp.sum(sp.logsumexp(main, axis=1))
                    - n * sp.logsumexp(alpha) + prior)
        args = tuple(jnp.asarray(raw[key]) for key in ("alpha", "mu", "q", "l", "x"))
        return {"objective": (jax.jit(objective), args),
                "jacobian": (jax.jit(jax.grad(objective, argnums=(0, 1, 2, 3))), args)}
    if module == "lstm":
        seq, state = jnp.asarray(raw["sequence"]), jnp.asarray(raw["state"])
        c, b = seq.shape
        layers = state.shape[0] // 2

        def objective(main, extra, state, seq):
            def step(carry, t):
                hs, cs = carry
                x, new_h, new_c = seq[t] * extra[0], [], []
                for i in range(layers):
                    w, bias = main[2 * i], main[2 * i + 1]
                    cell = (cs[i] * jax.nn.sigmoid(x * w[:b] + bias[:b])
                            + jax.nn.sigmoid(hs[i] * w[b:2 * b] + bias[b:2 * b])
                            * jnp.tanh(hs[i] * w[3 * b:] + bias[3 * b:]))
                    x = jax.nn.sigmoid(x * w[2 * b:3 * b] + bias[2 * b:3 * b]) * jnp.tanh(cell)
                    new_h.append(x)
                    new_c.append(cell)
                y = x * extra[1] + extra[2]
                return ((jnp.stack(new_h), jnp.stack(new_c)),
                        jnp.sum(seq[t + 1] * (y - jnp.log(jnp.sum(jnp.exp(y)) + 2.0))))
            _, totals = jax.lax.scan(step, (state[0::2], state[1::2]), jnp.arange(c - 1))
            return -jnp.sum(totals) / ((c - 1) * b)
        args = (jnp.asarray(raw["main_params"]), jnp.asarray(raw["extra_params"]), state, seq)
        return {"objective": (jax.jit(objective), args),
                "jacobian": (jax.jit(jax.grad(objective, argnums=(0, 1))), args)}
    if module == "ba":
        n, m, p = raw["n"], raw["m"], raw["p"]
        cams = jnp.tile(jnp.asarray(raw["cam"]), (n, 1))
        X = jnp.tile(jnp.asarray(raw["x"]), (m, 1))
        w = jnp.full(p, raw["w"])
        feats = jnp.tile(jnp.asarray(raw["feat"]), (p, 1))
        ci, pi = jnp.arange(p) % n, jnp.arange(p) % m

        def project(cam, X, w, feat):
            r, xo = cam[:3], X - cam[3:6]
            theta = jnp.sqrt(jnp.sum(r * r))
            k = r / theta
            xr = (xo * jnp.cos(theta) + jnp.cross(k, xo) * jnp.sin(theta)
                  + k * jnp.dot(k, xo) * (1 - jnp.cos(theta)))
            uv = xr[:2] / xr[2]
            rsq = jnp.sum(uv * uv)
            return w * (uv * (1 + cam[9] * rsq + cam[10] * rsq * rsq) * cam[6] + cam[7:9] - feat)

        def objective(cams, X, w, feats):
            return jax.vmap(project)(cams[ci], X[pi], w, feats), 1.0 - w * w

        def jacobian(cams, X, w, feats):
            return jax.vmap(jax.jacobian(project, argnums=(0, 1, 2)))(cams[ci], X[pi], w, feats)
        args = (cams, X, w, feats)
        return {"objective": (jax.jit(objective), args), "jacobian": (jax.jit(jacobian), args)}
    if module == "ht":
        objective, jacobian, args = reference.ht_functions(jax, raw)
        return {"objective": (jax.jit(objective), args), "jacobian": (jax.jit(jacobian), args)}
    if module in NESTED:
        start = jnp.asarray(raw["w"] if module == "particle" else raw["start"])
        return {"fr": (jax.jit(reference.nested_solver(jax, module)), (start,))}
    return {}


def time_torch(fn, args, seconds: float) -> dict:
    """As :func:`time_jax`, for eager PyTorch (no compilation: ``first_s`` is one call)."""
    t = time.perf_counter()
    out = fn(*args)
    first = time.perf_counter() - t
    runs = []
    while len(runs) < 3 or sum(runs) < seconds:
        t = time.perf_counter()
        fn(*args)
        runs.append(time.perf_counter() - t)
    return {"first_s": first, "median_s": statistics.median(runs), "runs": len(runs),
            "value": out}


def _plain(value) -> object:
    """A peer's result as GradBench's JSON output would hold it (tuples of tensors ->
    lists), for the comparison with the reference."""
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return np.asarray(value.detach() if hasattr(value, "detach") else value).tolist()


def time_jax(fn, args, seconds: float) -> dict:
    import jax

    t = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t
    runs = []
    while len(runs) < 3 or sum(runs) < seconds:
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        runs.append(time.perf_counter() - t)
    return {"first_s": first, "median_s": statistics.median(runs), "runs": len(runs),
            "value": out}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="the smallest workload of each eval")
    ap.add_argument("--only", nargs="+", choices=sorted(SIZES), default=None)
    ap.add_argument("--seconds", type=float, default=0.5,
                    help="how long each function runs (GradBench's min_seconds; default 0.5)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "gradbench.json")
    args = ap.parse_args(argv)
    try:
        import jax
    except ImportError:
        jax = None
    try:
        import torch
    except ImportError:
        torch = None
    server, rows = Server(), []
    load_start = _common.loadavg()
    for module in args.only or sorted(SIZES):
        sizes = SIZES[module][:1] if args.quick else SIZES[module]
        t = time.perf_counter()
        define = server.answer(json.dumps({"id": 0, "kind": "define", "module": module}))
        compile_s = time.perf_counter() - t
        assert define["success"], define
        primal, derivative = NESTED.get(module, driver.FUNCTIONS[module])
        for description, raw in driver.inputs(module, sizes, 3, args.seconds):
            row = {"eval": module, "workload": description, "compile_s": compile_s,
                   "functions": [primal, derivative]}
            peers = jax_programs(module, raw) if jax is not None else {}
            torch_peers = torch_programs(module, raw) if torch is not None else {}
            timed_functions = [("primal", primal), ("derivative", derivative)]
            timed_functions += [(f, f) for f in driver.FUNCTIONS[module]
                                if module in NESTED and f not in (primal, derivative)]
            for kind, function in timed_functions:
                reply = server.answer(json.dumps({"id": 1, "kind": "evaluate", "module": module,
                                                  "function": function, "input": raw}))
                assert reply["success"], reply.get("error")
                row[f"rb_{kind}_s"] = statistics.median(
                    t["nanoseconds"] / 1e9 for t in reply["timings"])
                expected = driver.reference(module, function, raw) if jax is not None else None
                row[f"{kind}_mismatches"] = (driver.mismatches(expected, reply["output"])[:3]
                                             if expected is not None else None)
                if function in peers:
                    timed = time_jax(*peers[function], args.seconds)
                    row[f"jax_{kind}_s"], row[f"jax_{kind}_first_s"] = (timed["median_s"],
                                                                        timed["first_s"])
                if function in torch_peers:
                    timed = time_torch(*torch_peers[function], args.seconds)
                    row[f"torch_{kind}_s"] = timed["median_s"]
                    if expected is not None and module in TORCH_CHECKED:
                        row[f"torch_{kind}_mismatches"] = driver.mismatches(
                            _flat_json(expected), _flat_json(_plain(timed["value"])))[:3]
            rows.append(row)
            print(f"[{module} {description}] rb {row['rb_primal_s'] * 1e3:.3f} / "
                  f"{row['rb_derivative_s'] * 1e3:.3f} ms", file=sys.stderr, flush=True)
    print(f"\n{'eval':7s} {'workload':22s} {'rb primal':>10s} {'rb deriv':>10s} {'rb d/p':>7s} "
          f"{'jax primal':>10s} {'jax deriv':>10s} {'jax d/p':>7s} {'rb/jax d':>8s} "
          f"{'torch deriv':>11s} {'rb/torch d':>10s} {'published best d/p':>20s}")
    for r in rows:
        jp, jd = r.get("jax_primal_s"), r.get("jax_derivative_s")
        pub = PUBLISHED.get(r["eval"])
        if r["eval"] in NESTED:  # (fr and rr; JAX's fr beside revbench's: "rb/jax" is fr's)
            jax_text = (f"{jp * 1e3:8.3f}ms {'-':>10s} {'-':>7s} {r['rb_primal_s'] / jp:8.2f} "
                        if jp else f"{'':39s}")
        else:
            jax_text = (f"{jp * 1e3:8.3f}ms {jd * 1e3:8.3f}ms {jd / jp:7.2f} "
                        f"{r['rb_derivative_s'] / jd:8.2f} " if jp and jd else f"{'':39s}")
        td = r.get("torch_derivative_s")
        torch_text = (f"{td * 1e3:9.3f}ms {r['rb_derivative_s'] / td:10.2f} " if td
                      else f"{'':22s}")
        print(f"{r['eval']:7s} {r['workload']:22s} {r['rb_primal_s'] * 1e3:8.3f}ms "
              f"{r['rb_derivative_s'] * 1e3:8.3f}ms {r['rb_derivative_s'] / r['rb_primal_s']:7.2f} "
              + jax_text + torch_text + (f"{pub[1]:>12.2f} ({pub[0]})" if pub else ""))
        bad = [m for k in ("primal_mismatches", "derivative_mismatches") for m in (r[k] or [])]
        if bad:
            print(f"        MISMATCH against JAX: {bad}")
        bad = [m for k in ("torch_primal_mismatches", "torch_derivative_mismatches")
               for m in (r.get(k) or [])]
        if bad:
            print(f"        PyTorch MISMATCH against JAX: {bad}")
    results = {"benchmark": "gradbench",
               "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(
                   timespec="seconds"),
               "quick": args.quick, "seconds": args.seconds, "published": PUBLISHED,
               "machine": _common.machine_info("jax", "llvmlite"), "rows": rows,
               "load_average": {"start": load_start, "end": _common.loadavg()}}
    _common.write_results(results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
