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
from revbench.experiments import memory  # noqa: E402
from revbench.experiments.__main__ import format_table, legend, main, parse_strategy  # noqa: E402
from revbench.experiments.memory import measure_call, measurement_floor, peak_during  # noqa: E402

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


# (the heat equation in the quick suite; the others, ten seconds each, in the slow suite)
@pytest.mark.parametrize("name", ["heat"] + [
    pytest.param(n, marks=pytest.mark.slow) for n in ("wave", "rnn", "revnet")])
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
    assert (rb["timed_runs"] >= 1).all() and (rb["timed_runs"] % 1 == 0).all()
    floor = r.info["memory_floor_bytes"]
    if floor is not None:
        assert (t["memory_floor_bytes"] == floor).all()
        assert (t["measured_below_floor"] == (t["measured_peak_bytes"] < floor)).all()
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
    with pytest.raises(ValueError, match="strategies names no strategy"):
        experiments.compare("heat", n_steps=[3], strategies=[], progress=False)


def test_the_cli_refuses_what_it_could_not_finish_before_measuring(tmp_path, capsys):
    """An --out that is a file was found after the whole measurement (a FileExistsError);
    an empty --strategies measured nothing and wrote empty files; a negative knob was an
    'unknown strategy'."""
    a_file = tmp_path / "results"
    a_file.write_text("")
    for argv, says in ((["heat", "--out", str(a_file)], "is a file, not a folder"),
                       (["heat", "--strategies", ""], "--strategies names no strategy"),
                       (["heat", "--strategies", "revolve:-3"], "must be an int >= 1, got -3")):
        with pytest.raises(SystemExit) as info:
            main([*argv, "--steps", "3", "--repeats", "1", "--no-peers", "--no-progress"])
        assert info.value.code == 2
        assert says in capsys.readouterr().err


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


def _fake_clock(monkeypatch, per_read: float) -> None:
    """measure_call's clock advances ``per_read`` seconds each time it is read."""
    now = [0.0]

    def clock():
        now[0] += per_read
        return now[0]

    monkeypatch.setattr(memory, "_clock", clock)


def test_measure_call_repeats_a_short_call_until_a_sample_is_long_enough(monkeypatch):
    calls = []
    _fake_clock(monkeypatch, 0.001)  # every sample reads 1 ms, however many calls it holds
    result, seconds, _, runs = measure_call(lambda: calls.append(1) or len(calls), repeats=3,
                                            min_seconds=0.02)
    per_sample = math.ceil(1.2 * 0.02 / 0.001)
    assert runs == 3 * per_sample > 3
    assert len(calls) == 1 + runs  # one untimed call that chose the number, then the samples
    assert result == len(calls)
    assert seconds == pytest.approx(0.001 / per_sample)


def test_measure_call_times_a_long_call_once_per_sample(monkeypatch):
    calls = []
    _fake_clock(monkeypatch, 0.05)
    _, seconds, _, runs = measure_call(lambda: calls.append(1), repeats=3, min_seconds=0.02)
    assert runs == 3 and len(calls) == 3  # the first call is the first sample
    assert seconds == pytest.approx(0.05)
    with pytest.raises(ValueError, match="repeats"):
        measure_call(lambda: None, repeats=0)


def test_a_short_row_is_repeated(monkeypatch):
    _fake_clock(monkeypatch, 0.001)
    r = experiments.compare("heat", n_steps=[4], strategies=[StoreAll()], repeats=2,
                            progress=False, peers=False)
    row = r.table.iloc[0]
    assert row["timed_runs"] == 2 * math.ceil(1.2 * 0.02 / 0.001)
    assert r.info["min_sample_seconds"] == 0.02
    with pytest.raises(ValueError, match="min_seconds"):
        experiments.compare("heat", n_steps=[4], min_seconds=-1)


def test_the_memory_floor_is_calibrated(monkeypatch):
    floor = measurement_floor()
    if floor is None:
        pytest.skip("peak memory cannot be measured here")
    assert floor >= memory.MIN_FLOOR_BYTES and floor % (128 * 1024) == 0
    assert measurement_floor() == floor  # measured once per process
    try:
        # every figure 300 KiB off: the floor is twice that, rounded up to 128 KiB
        monkeypatch.setattr(memory, "peak_during",
                            lambda fn: (fn(), 8 * fn.__defaults__[0] + 300 * 1024))
        assert measurement_floor(refresh=True) == 640 * 1024
        monkeypatch.setattr(memory, "peak_during", lambda fn: (fn(), None))
        assert measurement_floor(refresh=True) is None
    finally:
        monkeypatch.undo()
        measurement_floor(refresh=True)


def _rows(**changes):
    row = {"workload": "heat", "framework": "revbench", "strategy": "Bennett", "knob": "k=2",
           "n_steps": 10, "seconds": 1e-3, "timed_runs": 40, "model_seconds": 5e-4,
           "time_overhead": 2.0, "forward_steps": 10, "inverse_steps": 0, "reverse_steps": 10,
           "peak_states": 11, "peak_bytes": 8800, "measured_peak_bytes": 4096,
           "memory_floor_bytes": 256 * 1024, "measured_below_floor": True,
           "memory_overhead_bytes": 4096 - 8800, "grad_error": 0.0, "roundtrip_error": 0.0,
           "error": ""}
    big = dict(row, n_steps=1000, peak_states=1001, peak_bytes=880_000,
               measured_peak_bytes=3 * 2**20, measured_below_floor=False,
               memory_overhead_bytes=3 * 2**20 - 880_000)
    failed = dict(row, n_steps=10**9, seconds=math.nan, timed_runs=math.nan,
                  measured_peak_bytes=math.nan, measured_below_floor=False,
                  memory_overhead_bytes=math.nan,
                  error="InsufficientMemoryError: Bennett(k=2) needs 8.8 TB")
    return pd.DataFrame([dict(r, **changes) for r in (row, big, failed)])


def test_the_table_shows_a_figure_below_the_floor_as_such():
    lines = format_table(_rows()).splitlines()
    header = lines[0].split()
    small, big, failed = ([dict(zip(header, line.split())) for line in lines[1:]])
    assert small["measured_MB"] == "<0.25" and small["extra_MB"] == "-"
    assert big["measured_MB"] == "3.000" and big["extra_MB"] == f"{(3 * 2**20 - 880_000) / 2**20:.3f}"
    assert small["runs"] == "40" and failed["runs"] == "-" and failed["measured_MB"] == "-"
    assert "error" not in header


def test_the_legend_lists_the_rows_that_failed():
    text = legend(_rows())
    assert "(here 0.25 MB)" in text and "20 ms" in text
    assert "rows without figures:" in text
    assert "revbench Bennett k=2 n_steps=1000000000: InsufficientMemoryError" in text
    assert "rows without figures" not in legend(_rows().iloc[:2])


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
    lines = out.splitlines()
    header = lines[1].split()
    assert header[:4] == ["framework", "strategy", "knob", "n_steps"]
    assert "error" not in header and "runs" in header  # failures are listed, not a column
    # the legend under the table explains every column it printed
    legend_at = lines.index("columns:")
    explained = {line.split()[0] for line in lines[legend_at + 1:] if line.startswith("  ")
                 and not line.startswith("   ")}
    assert set(header) - {"framework", "strategy", "knob", "n_steps"} <= explained
    floor = measurement_floor()
    if floor is not None:
        assert f"(here {floor / 2**20:.3g} MB)" in " ".join(lines[legend_at:])
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
