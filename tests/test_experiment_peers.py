"""JAX / PyTorch rows of the experiments (``revbench.experiments.peers``): optional peers.

Each framework's tests skip cleanly when it is not installed.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from revbench.experiments import WORKLOADS, peers

KEYS = {"workload", "framework", "strategy", "knob", "n_steps", "seconds",
        "measured_peak_bytes", "value", "grad", "error"}
STRATEGIES = {"jax": ["lax.scan", "lax.scan+jax.checkpoint"],
              "torch": ["autograd", "autograd+checkpoint"]}


def test_import_does_not_load_the_frameworks():
    code = ("import sys, revbench.experiments, revbench.experiments.peers as p; "
            "p.available(); p.variants('heat'); "
            "print(sorted(m for m in ('jax', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_available_and_variants_agree():
    have = peers.available()
    assert set(have) <= {"jax", "torch"}
    labels = peers.variants("heat")
    assert len(labels) == 2 * len(have)
    assert all(label.split()[0] in have for label in labels)
    assert peers.variants("no such workload") == []
    assert peers.measure("no such workload", 3, (), 1) == []


@pytest.mark.parametrize("T", [1, 2, 7, 9, 10, 16, 17])
def test_segments_cover_the_loop(T):
    n_seg, length, rem = peers.segments(T)
    assert (n_seg - (rem > 0)) * length + rem == T
    assert 0 <= rem < length
    assert abs(length - math.sqrt(T)) <= 1


def _check_rows(name, T, args, rows, framework):
    ref_value, ref_grads = WORKLOADS[name].reference(T, args)
    assert [r["strategy"] for r in rows] == STRATEGIES[framework]
    for row in rows:
        assert KEYS <= set(row)
        assert row["workload"] == name and row["n_steps"] == T
        assert row["framework"] == framework
        assert row["error"] == "", row["error"]
        assert row["knob"] == ("" if "checkpoint" not in row["strategy"]
                               else f"segments={peers.segments(T)[0]}")
        assert math.isfinite(row["seconds"]) and row["seconds"] >= 0
        assert isinstance(row["measured_peak_bytes"], int) and row["measured_peak_bytes"] >= 0
        assert isinstance(row["value"], float)
        assert row["value"] == pytest.approx(ref_value, rel=1e-12)
        grad = row["grad"]
        assert len(grad) == len(args)
        for a, g, r in zip(args, grad, ref_grads):
            if r is None:
                assert g is None
                continue
            if np.ndim(a) == 0:
                assert isinstance(g, float)
            else:
                assert isinstance(g, np.ndarray) and g.dtype == np.float64
                assert g.shape == np.shape(a)
            scale = float(np.max(np.abs(r)))
            np.testing.assert_allclose(g, r, rtol=1e-9, atol=1e-12 * scale)


def _rows_for(name, framework, T):
    args = WORKLOADS[name].args(T, seed=0)
    rows = [r for r in peers.measure(name, T, args, 1) if r["framework"] == framework]
    return args, rows


def _one_quick(names) -> list:
    """The heat equation in the quick suite, the other workloads in the slow one: each row
    is mostly the framework's own compilation (4-5 s), the same code path for each."""
    return [n if n == "heat" else pytest.param(n, marks=pytest.mark.slow) for n in names]


@pytest.mark.slow  # runs JAX or PyTorch
@pytest.mark.parametrize("name", _one_quick(WORKLOADS))
def test_jax_rows_match_the_reference(name):
    pytest.importorskip("jax")
    T = 10
    args, rows = _rows_for(name, "jax", T)
    _check_rows(name, T, args, rows, "jax")


@pytest.mark.slow  # runs JAX or PyTorch
@pytest.mark.parametrize("name", _one_quick(WORKLOADS))
def test_torch_rows_match_the_reference(name):
    pytest.importorskip("torch")
    T = 11                                   # not a multiple of the segment length
    args, rows = _rows_for(name, "torch", T)
    _check_rows(name, T, args, rows, "torch")


@pytest.mark.slow  # runs JAX or PyTorch
def test_jax_remainder_segment():
    pytest.importorskip("jax")
    T = 7                                    # segments of 3: 3 + 3 + 1
    args, rows = _rows_for("rnn", "jax", T)
    _check_rows("rnn", T, args, rows, "jax")


def test_a_failing_variant_is_a_row(monkeypatch):
    have = peers.available()
    if not have:
        pytest.skip("neither jax nor torch installed")

    def boom(*a, **k):
        raise MemoryError("out of memory\nmore detail")

    monkeypatch.setattr(peers, "_jax_runner", boom)
    monkeypatch.setattr(peers, "_torch_runner", boom)
    rows = peers.measure("heat", 4, WORKLOADS["heat"].args(4), 1)
    assert len(rows) == len(peers.variants("heat"))
    for row in rows:
        assert row["error"] == "MemoryError: out of memory"
        assert math.isnan(row["seconds"]) and row["grad"] is None


@pytest.mark.slow  # runs JAX or PyTorch
def test_compare_includes_the_peer_rows():
    have = peers.available()
    if not have:
        pytest.skip("neither jax nor torch installed")
    from revbench.checkpoint import StoreAll
    from revbench.experiments import compare

    r = compare("heat", n_steps=[10], strategies=[StoreAll()], repeats=1, progress=False)
    table = r.table
    assert "framework" in table.columns
    peer_rows = table[table["framework"] != "revbench"]
    assert sorted(set(peer_rows["framework"])) == sorted(have)
    assert len(peer_rows) == len(peers.variants("heat"))
    assert (peer_rows["error"] == "").all()
    assert np.isfinite(peer_rows["grad_error"]).all()
    assert (peer_rows["grad_error"] < 1e-8).all()
    assert (table["framework"] == "revbench").sum() == 1
