"""revbench.experiments (experiments.md §8): compare, its table, plots, files and command line."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

pd = pytest.importorskip("pandas")

from revbench import experiments, reversible  # noqa: E402
from revbench.checkpoint import Bennett, Periodic, Reverse, Revolve, StoreAll, TimeLoop  # noqa: E402
from revbench.experiments.__main__ import main, parse_strategy  # noqa: E402
from revbench.experiments.memory import peak_during  # noqa: E402

COLUMNS = ["workload", "strategy", "knob", "n_steps", "seconds", "forward_steps", "inverse_steps",
           "reverse_steps", "peak_states", "peak_bytes", "measured_peak_bytes", "grad_error",
           "roundtrip_error"]


def test_workloads_are_described():
    assert {"heat", "wave", "rnn", "revnet"} <= set(experiments.WORKLOADS)
    for name, w in experiments.WORKLOADS.items():
        assert w.name == name and w.description and "\n" not in w.description
        assert w.kind in ("sparse", "ML")
    assert not experiments.WORKLOADS["heat"].inplace and experiments.WORKLOADS["wave"].inplace
    assert not experiments.WORKLOADS["rnn"].inplace and experiments.WORKLOADS["revnet"].inplace


@pytest.mark.parametrize("name", ["heat", "wave", "rnn", "revnet"])
def test_compare_every_fitting_strategy(name):
    r = experiments.compare(name, n_steps=[4, 12], repeats=1, progress=False, peers=False)
    t = r.table
    for c in COLUMNS:
        assert c in t.columns, c
    rb = t[t["framework"] == "revbench"]
    assert set(rb["n_steps"]) == {4, 12}
    strategies = set(rb["strategy"])
    inplace = experiments.WORKLOADS[name].inplace
    assert {"StoreAll", "Periodic", "Revolve"} <= strategies
    assert ("Reverse" in strategies) == inplace and ("Bennett" in strategies) == (not inplace)
    assert (rb["reverse_steps"] == rb["n_steps"]).all()
    assert (rb["grad_error"] < 1e-10).all()
    assert (rb["seconds"] > 0).all() and (rb["measured_peak_bytes"] >= 0).all()
    store = rb[rb["strategy"] == "StoreAll"]
    assert (store["peak_states"] == store["n_steps"] + 1).all()
    assert (store["forward_steps"] == store["n_steps"]).all()
    state_bytes = store["peak_bytes"].iloc[0] / store["peak_states"].iloc[0]
    assert (rb["peak_bytes"] == rb["peak_states"] * state_bytes).all()
    if inplace:
        assert (rb[rb["strategy"] == "Reverse"]["peak_states"] == 2).all()
    else:
        bennett2 = rb[(rb["strategy"] == "Bennett") & (rb["knob"] == "k=2")]
        assert len(bennett2) == 2 and (bennett2["inverse_steps"] > 0).all()
    # the cost model: exact counts x the step times measured in the same run
    steps = r.info["step_seconds"]
    assert steps["forward"] > 0 and steps["reverse"] >= 0
    assert (steps["inverse"] != steps["inverse"]) == inplace  # NaN for an in-place step
    expect = (rb["forward_steps"] * steps["forward"] + rb["reverse_steps"] * steps["reverse"]
              + (0 if inplace else rb["inverse_steps"] * steps["inverse"]))
    np.testing.assert_allclose(rb["model_seconds"], expect, rtol=1e-12)
    np.testing.assert_allclose(rb["time_overhead"], rb["seconds"] / rb["model_seconds"])
    np.testing.assert_allclose(rb["memory_overhead_bytes"],
                               rb["measured_peak_bytes"] - rb["peak_bytes"])


def test_step_times_validates_and_times_each_kind():
    from revbench.experiments.workloads import WORKLOADS

    w = WORKLOADS["heat"]
    loop, args = w.loop(5), w.args(5)
    times = loop.step_times(*args, steps=50, repeats=2)
    assert set(times) == {"forward", "reverse", "inverse"}
    assert all(v >= 0 for v in times.values()) and times["forward"] > 0
    with pytest.raises(ValueError, match="steps must be an int >= 1"):
        loop.step_times(*args, steps=0)


def test_the_result_matches_the_numpy_reference():
    w = experiments.WORKLOADS["heat"]
    args = w.args(20)
    value, _ = w.reference(20, args)
    r = experiments.compare("heat", n_steps=[20], strategies=[Bennett(k=3)], repeats=2,
                            progress=False, peers=False)
    row = r.table.iloc[0]
    assert row["value"] == pytest.approx(value, rel=1e-12)
    assert row["knob"] == "k=3" and row["strategy"] == "Bennett"


def test_a_users_own_loop():
    @reversible
    def step(u_new, u, t, a):
        for i in range(len(u)):
            u_new[i] += a * u[i] + 0.01 * t

    @reversible
    def loss(out, u, a):
        for i in range(len(u)):
            out += u[i]

    loop = TimeLoop(step, 5, loss=loss)
    u0 = np.ones(3)
    r = experiments.compare(loop, args=(u0, 0.9), n_steps=[3, 7],
                            strategies=[StoreAll(), Revolve(snapshots=2)], repeats=1,
                            progress=False)
    assert len(r.table) == 4 and r.workload == "custom"
    assert np.array_equal(u0, np.ones(3))
    # value of u_T summed: u_{t+1} = a u_t + 0.01 t
    u = np.ones(3)
    for t in range(7):
        u = 0.9 * u + 0.01 * t
    last = r.table[(r.table["n_steps"] == 7) & (r.table["strategy"] == "Revolve")].iloc[0]
    assert last["value"] == pytest.approx(u.sum())


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"unknown workload .nope.*heat"):
        experiments.compare("nope")
    with pytest.raises(ValueError, match="n_steps"):
        experiments.compare("heat", n_steps=[0])
    with pytest.raises(ValueError, match="repeats"):
        experiments.compare("heat", n_steps=[3], repeats=0)
    with pytest.raises(ValueError, match="fit"):
        experiments.compare("heat", n_steps=[3], strategies=[Reverse()], progress=False)
    with pytest.raises(TypeError, match="args"):
        experiments.compare(experiments.WORKLOADS["heat"].loop(3), n_steps=[3])


def test_default_strategies_scale_with_the_loop():
    short = experiments.default_strategies(False, 10)
    long = experiments.default_strategies(False, 100_000)
    assert any(isinstance(s, Bennett) and s.k == 2 for s in short)
    assert not any(isinstance(s, Bennett) and s.k == 2 for s in long)  # too slow there
    assert any(isinstance(s, Reverse) for s in experiments.default_strategies(True, 10))


def test_plot_and_save(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    r = experiments.compare("wave", n_steps=[3, 9], strategies=[StoreAll(), Periodic(every=2),
                            Reverse()], repeats=1, progress=False, peers=False)
    fig = r.plot()
    assert len(fig.axes) == 4
    assert "T = 9" in fig.axes[0].get_title()
    # the last panel: each revbench row's time against its cost model
    model = fig.axes[3]
    assert "model" in model.get_xlabel()
    assert len(model.collections) == len(r.table[r.table["framework"] == "revbench"])
    labels = {t.get_text() for t in fig.axes[0].texts}
    assert "every=2" in labels
    paths = r.save(tmp_path / "out" / "wave")
    data = json.loads(paths["json"].read_text())
    assert data["workload"] == "wave" and len(data["rows"]) == 6
    assert pd.read_csv(paths["csv"]).shape[0] == 6
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    paths = r.save(tmp_path)  # a directory: files named after the workload
    assert paths["csv"].name == "wave.csv"


def test_memory_measurement_sees_numba_allocations():
    """tracemalloc cannot see Numba's allocations; the resident-size peak can."""
    numba = pytest.importorskip("numba")

    @numba.njit
    def allocate(n):
        a = np.ones(n)
        return a.sum()

    allocate(10)
    _, small = peak_during(lambda: allocate(10))
    _, big = peak_during(lambda: allocate(20_000_000))  # 160 MB inside compiled code
    if small is None:
        pytest.skip("peak memory cannot be measured here")
    assert big > 100 * 2**20 and small < 10 * 2**20


def test_parse_strategy():
    assert parse_strategy("revolve:10") == Revolve(snapshots=10)
    assert parse_strategy("Revolve(snapshots=4)") == Revolve(snapshots=4)
    assert parse_strategy("bennett(3)") == Bennett(k=3)
    assert parse_strategy("StoreAll") == StoreAll()
    assert parse_strategy("periodic=5") == Periodic(every=5)
    with pytest.raises(ValueError, match="unknown strategy"):
        parse_strategy("tape")
    with pytest.raises(ValueError, match="takes no knob"):
        parse_strategy("reverse:3")


def test_cli_list(capsys):
    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    for name in ("heat", "wave", "rnn", "revnet"):
        assert name in out


def test_cli_runs_and_writes(tmp_path, capsys):
    assert main(["heat", "--steps", "3,6", "--strategies", "storeall,bennett:2", "--out",
                 str(tmp_path), "--no-progress", "--no-peers", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "Bennett" in out and "k=2" in out
    for ext in ("json", "csv", "png"):
        assert (tmp_path / f"heat.{ext}").exists()


@pytest.mark.parametrize("argv, words", [
    (["heat", "--steps", "10,x"], "--steps"),
    (["heat", "--strategies", "tape"], "unknown strategy"),
    (["heat", "--strategies", "reverse"], "fit"),
    (["nosuch"], "invalid choice"),
    (["heat", "--step", "10"], "unrecognized"),   # no abbreviations
    (["heat", "--repeats", "0"], "positive"),
    ([], "WORKLOAD"),
])
def test_cli_bad_arguments_are_one_line_usage_errors(argv, words, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv + ["--no-progress", "--no-peers"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("python -m revbench.experiments: error:") and words in err[-1]
    assert not any("Traceback" in line for line in err)


@pytest.mark.slow
def test_cli_quick_in_a_fresh_process(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "revbench.experiments", "heat", "--quick",
                           "--out", str(tmp_path), "--no-progress"], capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads((tmp_path / "heat.json").read_text())["rows"]
    ours = [r for r in rows if r["framework"] == "revbench"]
    assert {r["n_steps"] for r in ours} == {10, 100}
    assert all(r["grad_error"] < 1e-10 for r in ours)
    assert all(math.isfinite(r["seconds"]) for r in ours)
