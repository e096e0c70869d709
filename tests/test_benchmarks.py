"""Smoke test of the core benchmark: it runs, verifies itself and writes its JSON.

Timings are never asserted on (they depend on the machine); only that the script
works end to end (``--quick``) and that its results file has the documented shape.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_core.py"


@pytest.mark.slow  # a benchmark script's smoke run, in a process of its own
def test_bench_core_quick_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "ratio" in proc.stdout  # the table was printed

    data = json.loads(out.read_text())
    for key in ("benchmark", "timestamp", "quick", "machine", "settings", "goals", "workloads",
                "call_overhead", "compile", "goals_met"):
        assert key in data, key
    assert data["quick"] is True
    for key in ("python", "numba", "numpy", "cpu_count"):
        assert key in data["machine"], key

    assert set(data["workloads"]) == {"scalar_recurrence", "stencil_2d"}
    for name, w in data["workloads"].items():
        assert w["verification"]["ok"] is True, name
        for variant in ("reference", "unchecked", "checked"):
            for direction in ("forward", "inverse"):
                t = w["timings"][variant][direction]
                assert t["median_s"] > 0 and len(t["times_s"]) == data["settings"]["reps"]
        for variant in ("unchecked", "checked"):
            assert set(w["ratios"][variant]) == {"forward", "inverse"}
        assert set(w["goals_met"]) == {"unchecked", "checked"}

    c = data["compile"]
    for key in ("revbench_cold", "revbench_cached"):
        for field in ("total_s", "total_without_numba_import_s", "import_numba_s", "first_call_s"):
            assert c[key][field] > 0, (key, field)
    assert set(data["goals_met"]) == {"cached_load_with_numba_import",
                                      "cached_load_without_numba_import"}


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.slow  # a benchmark script's smoke run, in a process of its own
def test_bench_sparse_quick_writes_json(tmp_path):
    out = tmp_path / "bench_sparse.json"
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "bench_sparse.py"), "--quick", "--out",
                           str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "ratio" in proc.stdout and "goal" in proc.stdout  # the table was printed

    data = json.loads(out.read_text())
    for key in ("benchmark", "timestamp", "quick", "machine", "settings", "nnz", "goals", "workloads"):
        assert key in data, key
    assert data["quick"] is True and data["settings"]["index_dtype"] == "int64"
    assert set(data["workloads"]) == {"bilinear", "matvec"}
    for name, w in data["workloads"].items():
        assert w["verification"]["ok"] is True, name
        assert w["ratios"]["scipy_forward"] == 1.0
        for variant, t in w["timings"].items():
            assert t["median_s"] > 0 and len(t["times_s"]) == data["settings"]["reps"], (name, variant)
        grads = {v for v in w["timings"] if v.startswith("revbench_gradient")}
        assert grads == {f"revbench_gradient_{m}_{c}" for m in ("grad", "kernels", "sweep")
                         for c in ("checked", "unchecked")}
        assert set(w["goals_met"]) == grads and w["best_gradient"] in grads


@pytest.mark.slow  # a benchmark script's smoke run, in a process of its own
def test_bench_memory_quick_writes_json(tmp_path):
    out = tmp_path / "bench_memory.json"
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "bench_memory.py"), "--quick", "--out",
                           str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "revbench MB" in proc.stdout and "tape MB" in proc.stdout

    data = json.loads(out.read_text())
    assert data["quick"] is True and data["steps"] == [10**3, 10**4, 10**5]
    assert data["verification"]["ok"] is True
    assert [row["steps"] for row in data["table"]] == data["steps"]
    for row in data["table"]:
        for method in ("revbench", "tape"):
            m = row[method]
            assert m["steps"] == row["steps"] and m["time_s"] >= 0
            assert isinstance(m["peak_extra_mb"], float)
    for key in ("revbench_max_mb", "revbench_flat", "tape_max_mb"):
        assert key in data["summary"], key
    # the claim itself (memory, not time): no tape, so nothing grows with T
    assert data["summary"]["revbench_flat"] is True, data["summary"]


def _run_adbench(tmp_path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "adbench.json"
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "adbench.py"), "--quick", "--out",
                           str(out), *extra], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc, json.loads(out.read_text())


def _check_adbench_rows(data: dict, gradient: str, jacobian: str) -> None:
    for section, deriv in (("gmm", gradient), ("ba", jacobian)):
        for row in data[section]:
            assert row["verification"]["ok"] is True, row["verification"]
            t = row["timings"]
            for name in ("njit_objective", "revbench_objective", deriv):
                assert t[name]["median_s"] > 0 and t[name]["reps"] >= data["settings"]["min_reps"]
                assert row["first_call_s"][name] > 0
            assert row["ratios"]["njit_objective"] == 1.0
            assert set(row["verification"]["max_rel_error"]) >= set(t)


@pytest.mark.slow  # a benchmark script's smoke run, in a process of its own
def test_adbench_quick_writes_json(tmp_path):
    """revbench and the @njit references only (the peers are optional extras)."""
    proc, data = _run_adbench(tmp_path, "--peers", "none")
    assert "GMM" in proc.stdout and "BA" in proc.stdout and "goals" in proc.stdout
    for key in ("benchmark", "timestamp", "quick", "machine", "settings", "goals", "peers", "gmm",
                "ba", "goals_met", "load_average"):
        assert key in data, key
    assert data["quick"] is True and data["peers"]["available"] == {}
    assert [(r["d"], r["k"]) for r in data["gmm"]] == [(2, 5), (10, 5)]
    assert [r["name"] for r in data["ba"]] == ["tiny"]
    _check_adbench_rows(data, "revbench_gradient", "revbench_jacobian")
    assert set(data["goals_met"]) == {"gmm_gradient_ratio_le_3", "gmm_gradient_faster_than_jax",
                                      "ba_jacobian_ratio_le_4", "ba_jacobian_5x_faster_than_jax"}
    assert data["goals_met"]["gmm_gradient_faster_than_jax"] is None      # no JAX: not measured


def test_adbench_reports_a_peer_that_disagrees():
    """A variant that fails validation is named, with its error, and not timed."""
    code = f"""
import sys
sys.path.insert(0, {str(BENCHMARKS)!r})
import adbench
fns = {{"njit_objective": lambda: sum(range(100)), "bad_gradient": lambda: None}}
row = adbench.run_size("GMM D=1 K=1", fns, {{}}, {{"njit_objective": 0.0, "bad_gradient": 0.5}},
                       0.001, print)
assert row["verification"]["failed"] == ["bad_gradient"], row
assert "bad_gradient" not in row["timings"]
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "VALIDATION FAILED: GMM D=1 K=1: bad_gradient disagrees" in proc.stdout
    assert "relative error 5.00e-01" in proc.stdout


def _importable(name: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(name) is not None


@pytest.mark.slow
@pytest.mark.skipif(not (_importable("jax") or _importable("torch")),
                    reason="neither JAX nor PyTorch is installed (optional peers)")
def test_adbench_quick_with_peers(tmp_path):
    """The JAX and PyTorch columns, for whichever of them is installed."""
    _, data = _run_adbench(tmp_path, "--gmm", "2x5", "--ba", "tiny")
    peers = set(data["peers"]["available"])
    assert peers and peers | set(data["peers"]["missing"]) == {"jax", "torch"}
    _check_adbench_rows(data, "revbench_gradient", "revbench_jacobian")
    for name in peers:
        assert f"{name}_gradient" in data["gmm"][0]["timings"]
        assert {f"{name}_jacfwd", f"{name}_jacrev"} <= set(data["ba"][0]["timings"])
    if "jax" in peers:
        assert data["goals_met"]["gmm_gradient_faster_than_jax"] in (True, False)


@pytest.mark.slow
def test_bench_checkpoint_quick_writes_json(tmp_path):
    """The checkpointing benchmark runs end to end, verifies its reference, writes its JSON."""
    script = SCRIPT.parent / "bench_checkpoint.py"
    out = tmp_path / "bench_checkpoint.json"
    proc = subprocess.run([sys.executable, str(script), "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    data = json.loads(out.read_text())
    assert data["quick"] is True and "machine" in data
    rows = data["overhead"]["rows"]
    assert rows and all(r["verified"] for r in rows)
    assert {r["strategy"] for r in rows} == {"StoreAll()", "Reverse()"}
    assert all(r["measured_peak_bytes"] >= 0 for r in data["memory"]["rows"])
    heat = data["heat"]["rows"]
    assert {r["strategy"] for r in heat if r["framework"] == "revbench"} == {"StoreAll", "Revolve",
                                                                            "Bennett"}
    assert all(r["grad_error"] < 1e-10 for r in heat if r["framework"] == "revbench")
    if "at_jax_memory" in data["heat"]:  # JAX installed: Revolve in JAX's memory, no more
        at = data["heat"]["at_jax_memory"]
        assert "skipped" in at or (at["snapshots"] >= 3 and at["seconds"] > 0
                                   and at["forward_steps"] >= 1000)
    wave = data["wave"]
    assert {r["strategy"] for r in wave["rows"] if r["framework"] == "revbench"} == {"Reverse"}
    assert all(r["grad_error"] < 1e-10 for r in wave["rows"] if r["framework"] == "revbench")


@pytest.mark.slow
def test_bench_disk_quick_writes_json(tmp_path):
    """The RAM-disk benchmark runs, its gradients agree with the reference, and every
    TwoLevel and Multistage row reports its disk bytes."""
    out = tmp_path / "bench_disk.json"
    proc = subprocess.run([sys.executable, str(SCRIPT.parent / "bench_disk.py"), "--quick",
                           "--out", str(out)], capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    rows = json.loads(out.read_text())["rows"]
    assert [r["strategy"] for r in rows] == ["Revolve"] + ["TwoLevel"] * 3 + ["Multistage"] * 3
    assert all(r["grad_error"] < 1e-10 for r in rows)
    assert rows[0]["disk_bytes"] == 0 and all(r["disk_bytes"] > 0 for r in rows[1:])


@pytest.mark.slow
def test_session_memory_runs_and_writes_json(tmp_path):
    script = SCRIPT.parent / "session_memory.py"
    out = tmp_path / "session.json"
    proc = subprocess.run([sys.executable, str(script), "--runs", "8", "--out", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    data = json.loads(out.read_text())
    assert [s["mode"] for s in data["sessions"]] == ["same", "edited", "plain"]
    assert all(s["rss_after_5_mb"] > 0 for s in data["sessions"])
    assert data["interrupt"]["median_s"] > 0 and "Ctrl-C" in proc.stdout


@pytest.mark.slow
def test_bench_nested_quick_writes_json(tmp_path):
    """The derivative-inside benchmark runs, agrees with JAX, and writes its rows."""
    out = tmp_path / "nested.json"
    proc = subprocess.run([sys.executable, str(SCRIPT.parent / "bench_nested.py"), "--quick",
                           "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    data = json.loads(out.read_text())
    assert data["quick"] is True and [r["n"] for r in data["rows"]] == [100, 10_000]
    for r in data["rows"]:
        assert r["value_s"] > 0 and r["grad_s"] > 0
        if "max_rel_diff_vs_jax" in r:
            assert r["max_rel_diff_vs_jax"] < 1e-10


@pytest.mark.slow  # compiles every eval and its JAX and PyTorch peers
def test_gradbench_quick_checks_revbench_and_its_peers(tmp_path):
    """Every eval at its smallest size through the tool's handler, beside JAX and PyTorch:
    revbench's answers and PyTorch's (where checked) agree with the references."""
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    out = tmp_path / "gradbench.json"
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gradbench.py"
    proc = subprocess.run([sys.executable, str(script), "--quick", "--seconds", "0",
                           "--out", str(out)], capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "MISMATCH" not in proc.stdout, proc.stdout
    rows = json.loads(out.read_text())["rows"]
    assert {r["eval"] for r in rows} == {"ba", "det", "gmm", "ht", "kmeans", "llsq", "lse",
                                         "lstm", "ode", "particle", "saddle"}
    for r in rows:
        assert r["primal_mismatches"] == [] and r["derivative_mismatches"] == [], r
        assert r["rb_derivative_s"] > 0
        if r["eval"] not in ("particle", "saddle"):
            assert r["torch_derivative_s"] > 0 and r["jax_derivative_s"] > 0
        for k in ("torch_primal_mismatches", "torch_derivative_mismatches"):
            assert r.get(k, []) == [], (r["eval"], r[k])
