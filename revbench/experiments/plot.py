"""Plots of an experiment: the space-time trade-off, how time and memory grow with T, the
pebbles of a schedule, and timings side by side.

Only this module and :mod:`~revbench.experiments.plot_style` (of the package) import
matplotlib, and only when a plot is asked for.  Every figure follows plot_style's rules:
constrained layout, log axes labelled on their powers of ten, legends of at least 9 points,
point labels clear of the markers.
"""

from __future__ import annotations

import math
from typing import Any

from revbench.checkpoint.strategies import STRATEGIES
from revbench.experiments.plot_style import LEGEND_FONTSIZE, decade_limits, figure, log_axis, place_labels

#: the marker of the peers' rows (JAX, PyTorch); revbench's strategies carry their own
PEER_MARKER = "x"


def marker_of(strategy: str) -> str:
    """The marker of a row whose ``strategy`` column is ``strategy``: the registered
    strategy's (by class name), or :data:`PEER_MARKER`."""
    cls = STRATEGIES.get(strategy)
    return PEER_MARKER if cls is None else cls.marker


def _label(row: Any) -> str:
    knob = row["knob"] if isinstance(row["knob"], str) and row["knob"] else ""
    prefix = "" if row["framework"] == "revbench" else f"{row['framework']} "
    return f"{prefix}{row['strategy']}({knob})" if prefix == "" else f"{prefix}{row['strategy']}"


#: below one page the resident-size measurement cannot resolve anything: shown at this floor
FLOOR_BYTES = 4096


def _mb(value: Any) -> float:
    """Bytes as MB, NaN when unknown (a peer has no exact count), at least one page so that
    a zero stays visible on log axes."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return math.nan
    return max(float(value), FLOOR_BYTES) / 2**20


def plot_result(result: Any):
    """Four panels: memory against time at the largest T (each point labelled with its
    knob), time and memory against T on log axes, and each measured time against its cost
    model (exact counts x the step times measured in the same run); one legend of the rows,
    under the panels."""
    import matplotlib.pyplot as plt

    df = result.table
    df = df[df["seconds"].notna()].copy()
    fig, axes = figure(2, 2, figsize=(12.5, 9.5))
    axes = list(axes.flat)
    fig.suptitle(f"revbench experiments: {result.workload} -- gradient of a loop of T steps")
    if df.empty:
        for ax in axes:
            ax.text(0.5, 0.5, "no successful runs", ha="center", va="center")
        return fig
    df["label"] = [_label(r) for _, r in df.iterrows()]
    df["exact_mb"] = [_mb(r["peak_bytes"]) for _, r in df.iterrows()]
    df["measured_mb"] = [_mb(r["measured_peak_bytes"]) for _, r in df.iterrows()]
    # where there is no exact count (peers), the measured memory stands in for it
    df["memory_mb"] = df["exact_mb"].fillna(df["measured_mb"])
    labels = list(dict.fromkeys(df["label"]))
    colors = {lab: plt.cm.tab20(i % 20) for i, lab in enumerate(labels)}

    ax = axes[0]
    T = df["n_steps"].max()
    last = df[df["n_steps"] == T]
    points = []  # labelled once the figure is laid out
    for _, r in last.iterrows():
        marker = marker_of(r["strategy"])
        y = r["measured_mb"] if r["measured_mb"] == r["measured_mb"] else r["exact_mb"]
        ax.scatter(r["seconds"], y, marker=marker, s=60, color=colors[r["label"]])
        if r["exact_mb"] == r["exact_mb"]:  # the states held, exactly: a hollow twin
            ax.scatter(r["seconds"], r["exact_mb"], marker=marker, s=40, facecolors="none",
                       edgecolors=colors[r["label"]])
            ax.plot([r["seconds"]] * 2, [y, r["exact_mb"]], color=colors[r["label"]], lw=0.6)
        if y == y:
            dark = tuple(0.7 * c for c in colors[r["label"]][:3])  # pale colours, legible
            points.append((r["seconds"], y, r["knob"] or r["label"], dark))
    log_axis(ax)
    ax.margins(0.08)  # room for the labels of the points at the edges
    ax.set_xlabel("time of one gradient (s)")
    ax.set_ylabel("peak memory measured (MB); hollow: states held")
    ax.set_title(f"the space-time knob at T = {T:,}")
    ax.grid(True, which="both", alpha=0.3)

    for ax, column, ylabel in ((axes[1], "seconds", "time of one gradient (s)"),
                               (axes[2], "measured_mb", "peak memory measured (MB)")):
        for lab in labels:
            sub = df[df["label"] == lab].sort_values("n_steps")
            strategy = sub["strategy"].iloc[0]
            ax.plot(sub["n_steps"], sub[column], marker=marker_of(strategy),
                    color=colors[lab], label=lab, linestyle="-" if strategy in STRATEGIES else "--")
            if column == "measured_mb" and strategy in STRATEGIES:
                ax.plot(sub["n_steps"], sub["exact_mb"], color=colors[lab], linestyle=":",
                        linewidth=1)
        log_axis(ax)
        ax.set_xlabel("T (steps)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    ax = axes[3]
    model = df[df["model_seconds"].notna() & (df["model_seconds"] > 0)] \
        if "model_seconds" in df else df.iloc[:0]
    for _, r in model.iterrows():
        ax.scatter(r["model_seconds"], r["seconds"], marker=marker_of(r["strategy"]), s=40,
                   color=colors[r["label"]])
    if not model.empty:
        lo = min(model["model_seconds"].min(), model["seconds"].min()) / 1.5
        hi = max(model["model_seconds"].max(), model["seconds"].max()) * 1.5
        ax.plot([lo, hi], [lo, hi], color="black", lw=0.8, label="measured = model")
        ax.plot([lo, hi], [1.15 * lo, 1.15 * hi], color="gray", lw=0.8, linestyle="--",
                label="1.15 x model")
        ax.legend(fontsize=LEGEND_FONTSIZE, loc="upper left")
        log_axis(ax)
    ax.set_xlabel("cost model: counts x step times (s)")
    ax.set_ylabel("measured time of one gradient (s)")
    ax.set_title("the method against its implementation")
    ax.grid(True, which="both", alpha=0.3)
    axes[1].set_title("time against T")
    axes[2].set_title("memory against T (dotted: states held x their size)")
    handles, names = axes[1].get_legend_handles_labels()
    fig.legend(handles, names, loc="outside lower center", ncols=min(4, len(names)),
               fontsize=LEGEND_FONTSIZE, title="solid: revbench's strategies; dashed: peers",
               title_fontsize=LEGEND_FONTSIZE)
    for ax in axes:
        if ax.get_xscale() == "log":
            decade_limits(ax)
    place_labels(axes[0], points)
    return fig


def pebble_history(strategy: Any, n_steps: int, inplace: bool) -> list[tuple[int, int, tuple[int, ...]]]:
    """``(op, t, states held)`` for every action of ``strategy``'s schedule on ``n_steps``
    steps: the real schedule, replayed without running any step."""
    from revbench.checkpoint.plan import PlanBuilder

    history: list[tuple[int, int, tuple[int, ...]]] = []

    class Recorder(PlanBuilder):
        def _row(self, op: int, t: int, a: int, b: int) -> None:
            history.append((op, t, tuple(self.held)))

    b = Recorder(inplace, strategy.slots(n_steps, inplace), lambda rows: None)
    b.start()
    strategy.schedule(b, n_steps)
    return history


def plot_pebbles(strategies: list[Any], n_steps: int = 16, inplace: bool = False):
    """The pebble picture: for each strategy, which states are held (dots) at each action
    (downwards), and which step each action runs (forward, inverse, reverse)."""
    from matplotlib.lines import Line2D

    from revbench.checkpoint.plan import FWD, INV, REV

    fig, axes = figure(1, len(strategies), figsize=(3.2 * len(strategies), 6.5), squeeze=False)
    colors = {FWD: "tab:blue", INV: "tab:orange", REV: "tab:red"}
    for ax, s in zip(axes[0], strategies):
        hist = [h for h in pebble_history(s, n_steps, inplace) if h[0] in colors]
        # one collection for the held states and one for each kind of step (an artist per
        # action took seconds to make and lay out)
        ax.scatter([t for _, _, held in hist for t in held],
                   [y for y, (_, _, held) in enumerate(hist) for _ in held], s=6, color="0.6")
        for op, color in colors.items():
            rows = [(y, t) for y, (o, t, _) in enumerate(hist) if o == op]
            if rows:
                ax.scatter([t + 0.5 for _, t in rows], [y for y, _ in rows], s=14,
                           marker=">" if op == FWD else "<", color=color)
        ax.invert_yaxis()
        ax.set_xlabel("state index t")
        fwd = sum(op == FWD for op, _, _ in hist)
        inv = sum(op == INV for op, _, _ in hist)
        peak = max(len(h) for _, _, h in hist) if hist else 0
        ax.set_title(f"{s.label}\n{fwd} fwd, {inv} inv, <= {peak} held", fontsize=10)
        ax.set_xlim(-1, n_steps + 1)
    axes[0][0].set_ylabel("action (time runs downwards)")
    fig.suptitle(f"Pebbles: states held (grey) while {n_steps} steps are run forward (blue), "
                 "uncomputed (orange) and reversed (red)", fontsize=11)
    keys = [Line2D([], [], ls="", marker="o", ms=4, color="0.6", label="state held")] + \
        [Line2D([], [], ls="", marker=">" if op == FWD else "<", ms=6, color=c, label=name)
         for op, c, name in ((FWD, colors[FWD], "step forward"), (INV, colors[INV], "step uncomputed"),
                             (REV, colors[REV], "step reversed"))]
    fig.legend(handles=keys, loc="outside lower center", ncols=4, fontsize=LEGEND_FONTSIZE)
    return fig


#: the colours of :func:`plot_timings`' bars: (what the legend calls them, colour)
TOOL_COLORS = {"revbench": ("revbench", "tab:blue"), "hand": ("by hand, SciPy", "tab:gray"),
               "peer": ("JAX, PyTorch", "tab:orange")}


def _tool_kind(tool: str) -> str:
    if "revbench" in tool:
        return "revbench"
    return "hand" if "hand" in tool or tool == "SciPy" else "peer"


def plot_timings(timings: dict[str, dict[str, float]], unit: str = "ms"):
    """One panel per workload of ``timings`` (``{workload: {tool: seconds}}``): each tool's
    time as a horizontal bar on a log axis, its value written at the bar's end; shorter is
    faster.  revbench's bars are blue, hand-written code's and SciPy's grey, the other
    frameworks' orange.  ``unit``: ``"s"``, ``"ms"`` or ``"us"``."""
    import textwrap

    from matplotlib.patches import Patch

    scale = {"s": 1.0, "ms": 1e3, "us": 1e6}[unit]
    n = max(len(timings), 1)
    rows = max((len(t) for t in timings.values()), default=1)
    fig, axes = figure(1, n, figsize=(4.4 * n, 1.6 + 0.5 * rows), squeeze=False)
    for ax, (workload, t) in zip(axes[0], timings.items()):
        tools = list(t)
        values = [t[k] * scale for k in tools]
        ax.barh(range(len(tools)), values,
                color=[TOOL_COLORS[_tool_kind(k)][1] for k in tools])
        ax.set_yticks(range(len(tools)), [textwrap.fill(k, 20) for k in tools])
        ax.invert_yaxis()
        log_axis(ax, "x")
        shown = [v for v in values if v > 0 and math.isfinite(v)]
        if shown:  # from the power of ten below the shortest bar, with room for the values
            ax.set_xlim(10.0 ** math.floor(math.log10(min(shown)) - 1e-9),
                        10.0 ** math.ceil(math.log10(3 * max(shown))))
        for i, v in enumerate(values):
            if v > 0 and math.isfinite(v):
                ax.annotate(f"{v:.3g}", (v, i), xytext=(3, 0), textcoords="offset points",
                            va="center", fontsize=LEGEND_FONTSIZE)
        ax.set_xlabel(f"{'µs' if unit == 'us' else unit}, log scale (shorter is faster)")
        ax.set_title(workload)
        ax.grid(True, axis="x", which="major", alpha=0.3)
    if not timings:
        axes[0][0].text(0.5, 0.5, "no timings", ha="center", va="center")
    kinds = [k for k in TOOL_COLORS if any(_tool_kind(tool) == k for t in timings.values()
                                           for tool in t)]
    if kinds:
        fig.legend(handles=[Patch(color=TOOL_COLORS[k][1], label=TOOL_COLORS[k][0]) for k in kinds],
                   loc="outside lower center", ncols=len(kinds), fontsize=LEGEND_FONTSIZE)
    return fig
