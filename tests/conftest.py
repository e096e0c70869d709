"""Shared fixtures: every language test runs on both backends."""

from __future__ import annotations

import textwrap

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
