"""Smoke test of the core benchmark: it runs, verifies itself and writes its JSON.

Timings are never asserted on (they depend on the machine); only that the script
works end to end (``--quick``) and that its results file has the documented shape.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_core.py"


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
