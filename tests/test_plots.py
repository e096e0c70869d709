"""Every figure the project draws reads well (issue 27, item 8): drawn with the Agg backend,
measured with :func:`revbench.experiments.plot_style.layout_problems` -- no overprinted tick
labels, log axes labelled on at least two powers of ten, point labels clear of the markers and
of each other, legends of at least 9 points, no text cut off at the figure's edge."""

from __future__ import annotations

import math

import pytest

pd = pytest.importorskip("pandas")
matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from revbench import experiments  # noqa: E402
from revbench.checkpoint import Bennett, Periodic, Reverse, Revolve, StoreAll  # noqa: E402
from revbench.experiments.compare import Result  # noqa: E402
from revbench.experiments.plot import plot_pebbles, plot_result, plot_timings  # noqa: E402
from revbench.experiments.plot_style import (  # noqa: E402
    LEGEND_FONTSIZE,
    _decades,
    decade_limits,
    figure,
    layout_problems,
    log_axis,
    place_labels,
)

#: lesson 05's heat experiment as one run measured it (n_steps=[100, 1000], JAX and PyTorch
#: installed): framework, strategy, knob, T, seconds, peak_bytes, measured_peak_bytes,
#: model_seconds
HEAT = [
    ("revbench", "StoreAll", "", 100, 0.00341, 80800, 0, 0.0028),
    ("revbench", "Periodic", "every=32", 100, 0.00357, 28000, 28672, 0.00343),
    ("revbench", "Revolve", "snapshots=5", 100, 0.00488, 5600, 0, 0.00487),
    ("revbench", "Revolve", "snapshots=10", 100, 0.00428, 9600, 0, 0.00425),
    ("revbench", "Revolve", "snapshots=32", 100, 0.00394, 27200, 28672, 0.00389),
    ("revbench", "Bennett", "k=2", 100, 0.0123, 7200, 0, 0.0142),
    ("revbench", "Bennett", "k=4", 100, 0.00658, 9600, 0, 0.00717),
    ("revbench", "Bennett", "k=16", 100, 0.00413, 18400, 20480, 0.00411),
    ("revbench", "Online", "snapshots=32", 100, 0.00393, 27200, 28672, 0.00394),
    ("revbench", "TwoLevel", "period=32, snapshots=4", 100, 0.00582, 6400, 4096, 0.00488),
    ("jax", "lax.scan", "", 100, 0.00309, None, 299008, None),
    ("jax", "lax.scan+jax.checkpoint", "segments=10", 100, 0.00731, None, 24576, None),
    ("torch", "autograd", "", 100, 0.0147, None, 552960, None),
    ("torch", "autograd+checkpoint", "segments=10", 100, 0.0405, None, 135168, None),
    ("revbench", "StoreAll", "", 1000, 0.0153, 800800, 589824, 0.028),
    ("revbench", "Periodic", "every=32", 1000, 0.0195, 50400, 49152, 0.0343),
    ("revbench", "Revolve", "snapshots=5", 1000, 0.0466, 5600, 4096, 0.0692),
    ("revbench", "Revolve", "snapshots=10", 1000, 0.0333, 9600, 4096, 0.0518),
    ("revbench", "Revolve", "snapshots=32", 1000, 0.0272, 27200, 24576, 0.0437),
    ("revbench", "Bennett", "k=2", 1000, 0.406, 9600, 4096, 0.555),
    ("revbench", "Bennett", "k=4", 1000, 0.185, 13600, 8192, 0.157),
    ("revbench", "Bennett", "k=16", 1000, 0.0483, 28000, 32768, 0.0651),
    ("revbench", "Online", "snapshots=32", 1000, 0.0264, 27200, 24576, 0.0449),
    ("revbench", "TwoLevel", "period=32, snapshots=4", 1000, 0.0337, 6400, 4096, 0.0496),
    ("jax", "lax.scan", "", 1000, 0.0125, None, 5033984, None),
    ("jax", "lax.scan+jax.checkpoint", "segments=32", 1000, 0.0118, None, 28672, None),
    ("torch", "autograd", "", 1000, 0.153, None, 14700544, None),
    ("torch", "autograd+checkpoint", "segments=32", 1000, 0.443, None, 6955008, None),
]

#: lesson 06's closing figure: {workload: {tool: seconds}}, as one run measured them
TIMINGS = {
    "GMM gradient": {"njit objective (by hand)": 3.1e-4, "revbench objective": 3.6e-4,
                     "revbench gradient": 1.1e-3, "JAX gradient": 6e-4, "PyTorch gradient": 2.2e-3},
    "sparse xᵀAy gradient": {"njit (by hand)": 5e-5, "SciPy": 1.1e-4, "revbench": 9e-5,
                             "JAX": 8e-5, "PyTorch": 4.5e-4},
    "BA Jacobian": {"njit residuals (by hand)": 5e-4, "revbench, loop of calls": 3e-2,
                    "JAX vmap(jacrev)": 5e-3, "PyTorch vmap(jacrev)": 5e-2,
                    "revbench, batched (yours)": 1e-3},
}


def heat(rows=HEAT, workload="heat"):
    columns = ["framework", "strategy", "knob", "n_steps", "seconds", "peak_bytes",
               "measured_peak_bytes", "model_seconds"]
    table = pd.DataFrame(rows, columns=columns)
    table["workload"] = workload
    return Result(workload, table)


@pytest.fixture
def check():
    """``check(fig)``: asserts that ``fig`` reads well, and closes it."""
    figs = []

    def check(fig):
        figs.append(fig)
        problems = layout_problems(fig)
        assert not problems, "\n".join(problems)
        return fig

    yield check
    for fig in figs:
        plt.close(fig)


# the figures


def test_lesson_5_experiment_with_peers(check):
    fig = check(plot_result(heat()))
    knob = fig.axes[0]
    assert "T = 1,000" in knob.get_title()
    assert len(knob.texts) == 14  # every row at the largest T labelled
    assert {"every=32", "period=32, snapshots=4", "segments=32"} <= {t.get_text() for t in knob.texts}
    assert fig.legends and all(t.get_fontsize() >= LEGEND_FONTSIZE for t in fig.legends[0].get_texts())


def test_lesson_5_knob_panel_over_less_than_a_decade(check):
    """revbench's rows at T = 100 take 3.4 to 12 ms: one power of ten in the data, which an
    automatic log axis labels on its minor ticks (2x10^-3, 3x10^-3, ... overprinted)."""
    rows = [r for r in HEAT if r[0] == "revbench" and r[3] == 100]
    fig = check(plot_result(heat(rows)))
    lo, hi = fig.axes[0].get_xlim()
    assert lo <= 1e-3 and hi >= 1e-2  # two powers of ten, each labelled


def test_a_measured_experiment(check):
    r = experiments.compare("wave", n_steps=[3, 9], strategies=[StoreAll(), Periodic(every=2),
                            Reverse()], repeats=1, progress=False, peers=False)
    fig = check(r.plot())
    assert {t.get_text() for t in fig.axes[0].texts} >= {"every=2"}


def test_an_experiment_without_results(check):
    rows = [("revbench", "StoreAll", "", 10, math.nan, 800, 4096, math.nan)]
    check(plot_result(heat(rows)))


def test_lesson_5_pebbles(check):
    fig = check(plot_pebbles([StoreAll(), Periodic(every=4), Revolve(snapshots=3), Bennett(k=2),
                              Bennett(k=4)], n_steps=16))
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "state held", "step forward", "step uncomputed", "step reversed"]


def test_lesson_6_timings(check):
    fig = check(plot_timings(TIMINGS))
    assert [ax.get_title() for ax in fig.axes] == list(TIMINGS)
    for ax, t in zip(fig.axes, TIMINGS.values()):
        assert ax.get_xscale() == "log"
        lo, hi = ax.get_xlim()
        assert lo < min(t.values()) * 1e3 and hi > max(t.values()) * 1e3  # every bar whole
        assert len(ax.texts) == len(t)  # each bar's value written
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["revbench", "by hand, SciPy",
                                                                 "JAX, PyTorch"]


def test_timings_of_one_workload_in_microseconds(check):
    fig = check(plot_timings({"sparse": TIMINGS["sparse xᵀAy gradient"]}, unit="us"))
    assert "µs" in fig.axes[0].get_xlabel()


def test_every_figure_is_laid_out_by_constrained_layout():
    figs = [plot_result(heat()), plot_pebbles([StoreAll()], n_steps=4), plot_timings(TIMINGS)]
    try:
        for fig in figs:
            assert fig.get_layout_engine().__class__.__name__ == "ConstrainedLayoutEngine"
    finally:
        for fig in figs:
            plt.close(fig)


# the rules, and the check that finds their breaches


@pytest.mark.parametrize("lo, hi, want", [(0.0034, 0.0123, (0.001, 0.0123)),
                                          (0.02, 0.05, (0.01, 0.1)),
                                          (0.01, 0.05, (0.01, 0.1)),
                                          (1.0, 1.0, (1.0, 10.0)),
                                          (0.003, 0.2, (0.003, 0.2))])
def test_log_limits_hold_two_powers_of_ten(lo, hi, want):
    assert _decades(lo, hi) == pytest.approx(want)


def test_the_check_finds_overprinted_log_tick_labels():
    """Lesson 06's bars as the notebook drew them: an automatic log axis over less than a
    decade labels its minor ticks, and they overprint."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
    try:
        for ax, t in zip(axes, TIMINGS.values()):
            ax.barh(list(t), [v * 1e3 for v in t.values()])
            ax.set_xscale("log")
        fig.tight_layout()
        assert any("tick labels" in p and "overlap" in p for p in layout_problems(fig))
    finally:
        plt.close(fig)


def test_the_check_finds_a_log_axis_with_one_label():
    fig, ax = figure()
    try:
        ax.plot([0.02, 0.05], [1, 2])
        log_axis(ax, "x")
        assert any("fewer than two" in p for p in layout_problems(fig))
        decade_limits(ax, "x")
        assert layout_problems(fig) == []
    finally:
        plt.close(fig)


def test_the_check_finds_labels_on_markers_small_legends_and_cut_text():
    fig, ax = plt.subplots(figsize=(4, 3))
    try:
        ax.scatter([1, 2], [1, 1], s=60)
        ax.annotate("on its marker", (1, 1), ha="center", va="center")
        ax.annotate("on the next", (1, 1), xytext=(4, 3), textcoords="offset points", fontsize=30)
        ax.plot([0, 3], [0, 2], label="a line")
        ax.legend(fontsize=7)
        fig.text(0.9, 0.5, "cut off at the edge")
        problems = "\n".join(layout_problems(fig))
        assert "'on its marker' covers its own point" in problems
        assert "'on the next' covers a marker" in problems
        assert "labels 'on its marker' and 'on the next' overlap" in problems
        assert "legend entry 'a line' is 7.0 pt" in problems
        assert "'cut off at the edge' reaches out of the figure" in problems
    finally:
        plt.close(fig)


def test_labels_are_placed_clear_of_crowded_markers():
    fig, ax = figure(figsize=(4, 3))
    try:
        xs = [1.0, 1.05, 1.1, 1.0, 1.05, 1.1, 2.0]
        ys = [1.0, 1.0, 1.0, 1.05, 1.05, 1.05, 2.0]
        ax.scatter(xs, ys, s=60)
        ax.set_xlim(0.5, 2.5)
        ax.set_ylim(0.5, 2.5)
        place_labels(ax, [(x, y, f"point {i}", "k") for i, (x, y) in enumerate(zip(xs, ys))])
        assert len(ax.texts) == len(xs)
        assert layout_problems(fig) == []
    finally:
        plt.close(fig)
