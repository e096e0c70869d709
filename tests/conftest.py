"""Shared fixtures: every language test runs on both backends."""

from __future__ import annotations

import os
import re
import textwrap

# GPU tests (device="cuda") run in Numba's CUDA simulator unless told otherwise
# (NUMBA_ENABLE_CUDASIM=0 on a machine with a GPU): set before numba.cuda is imported
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import numpy as np
import pytest

import revbench


@pytest.fixture(params=["numba", "python"])
def backend(request) -> str:
    return request.param


@pytest.fixture
def make(backend):
    """Compile reversible source text on the test's backend; returns the last function
    defined (or a dict of all of them with ``all=True``)."""

    def _make(source: str, all: bool = False, namespace: dict | None = None, **options):
        ns = {"np": np, "math": __import__("math")}
        if namespace:
            ns.update(namespace)
        fns = revbench.define(textwrap.dedent(source), ns, backend=backend, **options)
        return fns if all else list(fns.values())[-1]

    return _make


@pytest.fixture(autouse=True)
def _tiering_as_in_use(request, monkeypatch):
    """Tiered execution as users meet it: on in a notebook (the ``ip`` shell's tests), off
    in scripts.  (Once a test created the shell, ``get_ipython()`` finds it in every later
    test of the process: ``auto`` alone would make the order of tests matter.)"""
    from revbench import tiering

    mode = "auto" if "ip" in request.fixturenames else "off"
    monkeypatch.setitem(tiering._state, "mode", mode)


#: what the native code generator leaves to Numba on purpose: user code written in Python
#: (a registered function, an ``external`` function, a custom adjoint), which Numba compiles
USER_PYTHON = re.compile(r"call of _rb_(user_|external|adjoint)")
@pytest.fixture(autouse=True)
def _no_native_refusals(request):
    """A kernel of revbench's language that the native code generator refuses runs on
    Numba: another compiler, slower to compile, and another semantics.  Such a refusal
    (or an argument it cannot take) fails the test, unless it is user Python
    (:data:`USER_PYTHON`) or the test says it makes it (``@pytest.mark.native_refusal``)."""
    from revbench.backends.native import engine

    before = dict(engine.refused)
    yield
    new = {k: v - before.get(k, 0) for k, v in engine.refused.items() if v != before.get(k, 0)}
    meant = [re.compile(m.args[0]) for m in request.node.iter_markers("native_refusal")]
    unexpected = [k for k in new
                  if not (USER_PYTHON.search(k) or any(m.search(k) for m in meant))]
    assert not unexpected, f"the native code generator refused: {unexpected}"


@pytest.fixture(autouse=True)
def _no_native_defects():
    """The native code generator falls back to Numba when LLVM rejects what it lowered,
    so users never see its defects; the tests do: any test that causes one fails."""
    from revbench.backends.native import engine

    before = len(engine.errors)
    yield
    assert len(engine.errors) == before, f"native lowering defects: {engine.errors[before:]}"


@pytest.fixture
def untiered(monkeypatch):
    """Compiled code from the first call, also inside IPython (where tiering is on by
    default): for tests of what compiled code itself does."""
    from revbench import tiering

    monkeypatch.setitem(tiering._state, "mode", "off")


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """This process compiles into an empty cache folder of the test's own."""
    from revbench.backends import loader

    monkeypatch.setattr(loader, "_state", loader._State())
    monkeypatch.setenv("REVBENCH_CACHE_DIR", str(tmp_path))
    return loader.cache_dir()


# -- the order in which pytest-xdist hands out test files --------------------------------------
#: Seconds each file's quick and slow tests took on the 2-core machine, cold cache (the
#: heaviest only; measured with a per-file timer, rounded).  Only the order matters: with
#: ``--dist loadfile`` each file runs whole on one worker, and xdist hands files out in the
#: order collected (``--no-loadscope-reorder``), so the longest go first and the short ones
#: fill in at the end (longest-processing-time-first), instead of a 3-minute browser test
#: starting last.
FILE_SECONDS: dict[str, tuple[float, float]] = {
    "test_jupyterlab.py": (0, 204), "test_native.py": (41, 110), "test_property.py": (33, 111),
    "test_benchmarks.py": (0, 100), "test_notebooks.py": (3, 78),
    "test_fuzz_mutations.py": (16, 49), "test_docs.py": (26, 34),
    "test_natural_benchmark.py": (13, 51), "test_gmm.py": (20, 28),
    "test_experiment_peers.py": (4, 37), "test_checkpoint.py": (13, 27),
    "test_property_grad.py": (6, 28), "test_custom_adjoint.py": (34, 0),
    "test_experiments.py": (21, 12), "test_batch.py": (16, 14), "test_checkpointed.py": (25, 0),
    "test_gpu.py": (10, 15), "test_nilang_ports.py": (23, 0), "test_nested_grad.py": (14, 9),
    "test_cache.py": (6, 16), "test_statements.py": (17, 0), "test_external.py": (3, 12),
    "test_checkpoint_disk.py": (14, 0), "test_interop_jax.py": (7, 5),
    "test_numeric_semantics.py": (11, 0), "test_debugger.py": (0, 10),
    "test_sweep_passes.py": (8, 0), "test_reliability.py": (8, 0), "test_ba.py": (8, 0),
    "test_sparse.py": (8, 0), "test_plots.py": (8, 0), "test_site.py": (0, 7),
}


@pytest.hookimpl(trylast=True)  # after ``-m`` has deselected what this run leaves out
def pytest_collection_modifyitems(config, items) -> None:
    runs: dict[str, set[bool]] = {}  # file -> whether its quick / slow tests run
    for item in items:
        runs.setdefault(item.path.name, set()).add(item.get_closest_marker("slow") is not None)
    seconds = {name: sum(FILE_SECONDS[name][slow] for slow in kinds)
               for name, kinds in runs.items() if name in FILE_SECONDS}
    items.sort(key=lambda item: -seconds.get(item.path.name, 0.0))  # (stable: files stay whole)
