#!/usr/bin/env python
"""Compile latency: how long a user waits for the first results of a real program.

Run it as::

    python benchmarks/compile_time.py [--quick] [--reps N] [--only CASE ...] [--out PATH]

Every measurement is one *fresh Python process* with an *empty* compile cache (its own
``REVBENCH_CACHE_DIR`` and ``NUMBA_CACHE_DIR``), then a second process on the cache the
first filled ("warm").  The programs are written as a user writes them from ``docs/``:
``natural_programs.gmm_objective`` (the GMM log-posterior, 40 lines with its callee) and
``compile_programs`` (a hand-tracking-like model of ~150 lines with callees; a 12-line MLP;
the README's five-line example, whose warm first call is what a user feels most often),
and ``natural_programs.ba_residual`` batched over 1,000 observations (``ba_batch``: the
batched driver and the kernels it calls).

Each revbench case is measured twice:

* ``compiled``: tiering off (``REVBENCH_TIERED=0``, a script's default): the first call
  compiles (revbench's native code generator, Numba for what it does not cover), then runs;
* ``tiered``: tiering on (a notebook's default, ``REVBENCH_TIERED=1``): the first call runs
  interpreted while the compiled code is built in the background (:mod:`revbench.tiering`);
  the column ``compiled_s`` says when the compiled code was ready;
* ``numba`` (with ``--numba``): compiled first, by Numba instead of revbench's native code
  generator (``REVBENCH_NATIVE=0``, :mod:`revbench.backends.native`).

``gmm_edit`` runs the GMM gradient in a real IPython shell's cell, waits for it to compile,
then edits one character of the cell and times running it again (the edited function is
new code: it compiles anew).

The references, each in a fresh process too: the hand-written ``@njit`` GMM gradient of the
same loops (``natural_reference.gmm_value_and_grad``, the cost of compiling those loops
without revbench) and JAX's ``jit`` of the same functions where JAX is installed.
``ratio`` is each first result's time over the reference's.  Results go to
``results/compile_time.json``.  Numbers are medians over ``--reps`` processes (default 1:
a cold compile takes seconds, and this machine is noisy; the load average is recorded).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import loadavg, machine_info, write_results  # noqa: E402

#: the setup every case's process runs: data of the sizes the issue names
_SETUP = textwrap.dedent("""
    import json, os, sys, time
    t0 = time.perf_counter()
    import numpy as np
    sys.path.insert(0, {here!r})
    rng = np.random.default_rng(0)
    d, k, n = 10, 5, 100
    gmm_args = (0.0, rng.normal(size=k), rng.normal(size=(k, d)),
                0.3 * rng.normal(size=(k, d * (d + 1) // 2)), rng.normal(size=(n, d)), 1.0, 0)
""")

#: name -> (what it measures, code run after _SETUP that sets `first` (seconds to the
#: first result), and `value` (a number to compare across processes))
REVBENCH_CASES = {
    "gmm_grad": ("GMM first value_and_grad (D=10, K=5, N=100), checks on", """
        import revbench, natural_programs as P
        t_import = time.perf_counter() - t0
        args = (*gmm_args, P.wishart_constant(1.0, 0, d))
        vg = revbench.value_and_grad(P.gmm_objective, loss="err", wrt=("alphas", "means", "icf"))
        t = time.perf_counter(); (out, grads) = vg(*args); first = time.perf_counter() - t
        value = out[0]
    """),
    "gmm_grad_unchecked": ("GMM first value_and_grad, check=False", """
        import revbench, natural_programs as P
        t_import = time.perf_counter() - t0
        args = (*gmm_args, P.wishart_constant(1.0, 0, d))
        vg = revbench.value_and_grad(P.gmm_objective_fast, loss="err",
                                     wrt=("alphas", "means", "icf"))
        t = time.perf_counter(); (out, grads) = vg(*args); first = time.perf_counter() - t
        value = out[0]
    """),
    "ht_forward": ("hand-tracking-like model (~150 lines), first forward, checks on", """
        import revbench, compile_programs as C
        t_import = time.perf_counter() - t0
        data = C.ht_data()
        t = time.perf_counter(); out = C.ht_objective(0.0, *data); first = time.perf_counter() - t
        value = out[0]
    """),
    "ht_jacobian": ("hand-tracking-like model, first Jacobian of the residuals, checks on", """
        import revbench, compile_programs as C
        t_import = time.perf_counter() - t0
        data = C.ht_data()
        jac = revbench.jacobian(C.ht_residuals, "r", "pose")
        t = time.perf_counter(); J = jac(np.zeros((data[2].shape[0], 3)), *data)
        first = time.perf_counter() - t
        value = float(np.abs(J).sum())
    """),
    "readme": ("the README's five-line example: first forward, inverse and gradient", """
        import revbench, compile_programs as C
        t_import = time.perf_counter() - t0
        t = time.perf_counter()
        C.poly(0.0, 2.0)
        (~C.poly)(14.0, 2.0)
        value = revbench.grad(C.poly, loss="y")(0.0, 2.0)[1]
        first = time.perf_counter() - t
    """),
    "gmm_edit": ("GMM in an IPython cell: one character edited, the cell run again", """
        import inspect, revbench, natural_programs as P
        from IPython.core.interactiveshell import InteractiveShell
        t_import = time.perf_counter() - t0
        shell = InteractiveShell.instance()
        shell.user_ns.update(np=np, P=P, gmm_args=gmm_args)
        body = inspect.getsource(P.gmm_objective_src)
        cell = ("import math\\nimport revbench\\nfrom revbench import reversible, routine\\n"
                "from revbench.lib import logsumexp\\n@reversible\\n" + body +
                "vg = revbench.value_and_grad(gmm_objective_src, loss='err', "
                "wrt=('alphas', 'means', 'icf'))\\n"
                "(out, grads) = vg(*gmm_args, P.wishart_constant(1.0, 0, 10))\\n")
        assert shell.run_cell(cell).success
        revbench.tiering.wait()           # the user looked at the result; it compiled
        edited = cell.replace("- 0.5 * np.dot(qx, qx)", "- 0.6 * np.dot(qx, qx)")
        assert edited != cell
        t = time.perf_counter(); ran = shell.run_cell(edited); first = time.perf_counter() - t
        assert ran.success
        value = shell.user_ns["out"][0]
    """),
    "mlp_grad": ("12-line MLP loss, first forward then value_and_grad, checks on", """
        import revbench, compile_programs as C
        t_import = time.perf_counter() - t0
        data = C.mlp_data()
        t = time.perf_counter()
        C.mlp_loss(0.0, *data)
        (out, grads) = revbench.value_and_grad(C.mlp_loss, loss="loss", wrt=("W1", "W2"))(0.0, *data)
        first = time.perf_counter() - t
        value = out[0]
    """),
    "mlp_matrix_grad": ("the matrix MLP (N = 2000, 32-64-8), its first value_and_grad, checks on", """
        import revbench, compile_programs as C
        t_import = time.perf_counter() - t0
        data = C.mlp_matrix_data()
        t = time.perf_counter()
        (out, grads) = revbench.value_and_grad(C.mlp_matrix_loss, loss="loss",
                                               wrt=("W1", "b1", "W2", "b2"))(0.0, *data)
        first = time.perf_counter() - t
        value = out[0]
    """),
    "complex_grad": ("complex spectrum power, first forward then value_and_grad, checks on", """
        import revbench, compile_programs as C
        t_import = time.perf_counter() - t0
        data = C.spectrum_data()
        t = time.perf_counter()
        C.spectrum_power(0.0, *data)
        (out, grads) = revbench.value_and_grad(C.spectrum_power, loss="power", wrt="c")(0.0, *data)
        first = time.perf_counter() - t
        value = out[0]
    """),
    "ba_batch": ("BA residual, first jacobian(batch=) of 1,000 observations, checks on", """
        import revbench, natural_programs as P
        t_import = time.perf_counter() - t0
        n_obs = 1000
        ba_args = (np.zeros((n_obs, 2)), rng.normal(size=(n_obs, 11)),
                   rng.normal(size=(n_obs, 3)), np.ones(n_obs), rng.normal(size=(n_obs, 2)))
        jac = revbench.jacobian(P.ba_residual, "r", ("cam", "X"),
                                batch=("r", "cam", "X", "w", "feat"))
        t = time.perf_counter(); J = jac(*ba_args); first = time.perf_counter() - t
        value = float(np.abs(J[0][0]).sum() + np.abs(J[0][1]).sum())
    """),
}

_REVBENCH_TAIL = textwrap.dedent("""
    from revbench import tiering
    t = time.perf_counter(); tiering.wait(); waited = time.perf_counter() - t
    print(json.dumps({"import_s": t_import, "first_s": first, "compiled_s": first + waited,
                      "value": float(value), "stats": tiering.stats}))
""")

REFERENCE_CASES = {
    "gmm_grad": ("njit (hand) GMM gradient", """
        import natural_reference as R
        t_import = time.perf_counter() - t0
        t = time.perf_counter(); v = R.gmm_value_and_grad(*gmm_args[1:]); first = time.perf_counter() - t
    """),
    "jax:gmm_grad": ("JAX jit(value_and_grad) GMM", """
        import natural_reference as R
        J = R.jax_versions()
        if J is None:
            print(json.dumps(None)); sys.exit(0)
        rows, cols = R.gmm_lower_indices(d)
        t_import = time.perf_counter() - t0
        t = time.perf_counter()
        v = J["gmm_value_and_grad"](*gmm_args[1:], 0.0, rows, cols)
        v[0].block_until_ready()
        first = time.perf_counter() - t
    """),
    "jax:ht_jacobian": ("JAX jit(jacrev) of the same hand-tracking residuals", """
        try:
            import jax, jax.numpy as jnp
        except ImportError:
            print(json.dumps(None)); sys.exit(0)
        jax.config.update("jax_enable_x64", True)
        import compile_programs as C
        t_import = time.perf_counter() - t0

        def rodrigues(a):
            th = jnp.sqrt(a @ a)
            k = a / th
            K = jnp.array([[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]])
            return jnp.eye(3) + jnp.sin(th) * K + (1.0 - jnp.cos(th)) * K @ K

        def residuals(pose, base, verts, weights, targets):
            absT, prev = [], None
            for b in range(pose.shape[0]):
                rel = jnp.eye(4).at[:3, :3].set(rodrigues(pose[b])) @ base[b]
                prev = rel if prev is None else prev @ rel
                absT.append(prev)
            absT = jnp.stack(absT)
            homo = jnp.concatenate([verts, jnp.ones((verts.shape[0], 1))], axis=1)
            moved = jnp.einsum("bij,vj->vbi", absT[:, :3, :], homo)
            return (jnp.einsum("vb,vbi->vi", weights, moved) - targets).ravel()

        data = C.ht_data()
        jac = jax.jit(jax.jacrev(residuals))
        t = time.perf_counter(); J = jac(*data); J.block_until_ready()
        first = time.perf_counter() - t
    """),
    "jax:mlp_matrix_grad": ("JAX jit(value_and_grad) of the same matrix MLP", """
        try:
            import jax, jax.numpy as jnp
        except ImportError:
            print(json.dumps(None)); sys.exit(0)
        jax.config.update("jax_enable_x64", True)
        import compile_programs as C
        t_import = time.perf_counter() - t0

        def loss(W1, b1, W2, b2, X, Y):
            H = jnp.tanh(X @ W1.T + b1)
            return jnp.sum((H @ W2.T + b2 - Y) ** 2)

        data = C.mlp_matrix_data()
        vg = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3)))
        t = time.perf_counter(); v = vg(*data); v[0].block_until_ready()
        first = time.perf_counter() - t
    """),
}

_REFERENCE_TAIL = textwrap.dedent("""
    print(json.dumps({"import_s": t_import, "first_s": first}))
""")

#: which reference each case is compared with
REFERENCE_OF = {"gmm_grad": "gmm_grad", "gmm_grad_unchecked": "gmm_grad",
                "ht_jacobian": "jax:ht_jacobian", "mlp_matrix_grad": "jax:mlp_matrix_grad"}


#: how each revbench case runs: compiled first (a script), tiered (a notebook), and with
#: ``--numba`` compiled first by Numba rather than the native code generator
MODES = {"compiled": {"REVBENCH_TIERED": "0"}, "tiered": {"REVBENCH_TIERED": "1"},
         "numba": {"REVBENCH_TIERED": "0", "REVBENCH_NATIVE": "0"}}


def _run(script: str, env: dict) -> dict | None:
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark process failed:\n{proc.stderr[-4000:]}")
    # the last line that is the record (an IPython shell may print status lines after it)
    for line in reversed(proc.stdout.strip().splitlines()):
        if line.strip() == "null":
            return None
        if '{"' in line:
            return json.loads(line[line.index('{"'):])
    raise RuntimeError(f"benchmark process printed no record:\n{proc.stdout[-4000:]}")


def _processes(script: str, extra_env: dict[str, str], reps: int) -> dict | None:
    """``reps`` cold processes (each on a new empty cache) and, after each, a warm one."""
    cold, warm = [], []
    for _ in range(reps):
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, REVBENCH_CACHE_DIR=cache, NUMBA_CACHE_DIR=cache, **extra_env)
            first = _run(script, env)
            if first is None:
                return None
            cold.append(first)
            warm.append(_run(script, env))

    def median(runs: list, key: str) -> float | None:
        values = [r[key] for r in runs if key in r]
        return statistics.median(values) if values else None

    return {"first_s": median(cold, "first_s"), "compiled_s": median(cold, "compiled_s"),
            "warm_first_s": median(warm, "first_s"), "import_s": median(cold, "import_s"),
            "values": sorted({r.get("value") for r in cold + warm if "value" in r}),
            "runs": {"cold": cold, "warm": warm}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    ap.add_argument("--quick", action="store_true", help="the GMM and MLP cases only")
    ap.add_argument("--reps", type=int, default=1, help="cold processes per case (median)")
    ap.add_argument("--only", nargs="+", choices=sorted(REVBENCH_CASES), default=None)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "compile_time.json")
    ap.add_argument("--numba", action="store_true",
                    help="also compile with Numba instead of revbench's native code generator "
                         "(REVBENCH_NATIVE=0: what every call did before it)")
    args = ap.parse_args(argv)
    cases = args.only or (["gmm_grad", "gmm_grad_unchecked", "gmm_edit", "mlp_grad"] if args.quick
                          else list(REVBENCH_CASES))
    setup = _SETUP.format(here=str(HERE))
    started = time.perf_counter()
    results: dict = {"machine": machine_info(), "load_before": loadavg(), "cases": {},
                     "references": {}}
    for ref in sorted({REFERENCE_OF[c] for c in cases if c in REFERENCE_OF} | {"jax:gmm_grad"}):
        what, code = REFERENCE_CASES[ref]
        print(f"reference {ref}: {what} ...", flush=True)
        results["references"][ref] = dict(
            what=what, **(_processes(setup + textwrap.dedent(code) + _REFERENCE_TAIL, {},
                                     args.reps) or {"first_s": None}))
    for case in cases:
        what, code = REVBENCH_CASES[case]
        script = setup + textwrap.dedent(code) + _REVBENCH_TAIL
        for mode, env in MODES.items():
            if mode == "numba" and not args.numba:
                continue
            print(f"{case} [{mode}]: {what} ...", flush=True)
            results["cases"][f"{case} [{mode}]"] = dict(what=what, **_processes(script, env,
                                                                                args.reps))
    results["load_after"] = loadavg()
    results["seconds"] = time.perf_counter() - started

    print(f"\n{'case':34s} {'first result':>13s} {'compiled':>10s} {'warm':>8s} "
          f"{'reference':>22s} {'ratio':>7s}")
    for name, r in results["cases"].items():
        case = name.split(" ")[0]
        ref_name = REFERENCE_OF.get(case)
        ref = results["references"].get(ref_name, {}) if ref_name else {}
        ref_s = ref.get("first_s")
        ratio = f"{r['first_s'] / ref_s:7.2f}" if ref_s else f"{'':7s}"
        ref_text = f"{ref_name} {ref_s:.2f} s" if ref_s else ""
        print(f"{name:34s} {r['first_s']:11.2f} s {r['compiled_s']:8.2f} s "
              f"{r['warm_first_s']:6.2f} s {ref_text:>22s} {ratio}")
    for name, r in results["references"].items():
        if r.get("first_s") is not None:
            print(f"{'reference ' + name:34s} {r['first_s']:11.2f} s")
    write_results(results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
