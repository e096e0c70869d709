"""Shared fixtures: every language test runs on both backends."""

from __future__ import annotations

import os
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
