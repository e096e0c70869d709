"""Plots of an experiment: the space-time trade-off, and how time and memory grow with T.

Only this module (of the package) imports matplotlib, and only when a plot is asked for.
"""

from __future__ import annotations

import math
from typing import Any

from revbench.checkpoint.strategies import STRATEGIES

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
    strategy and knob), time and memory against T on log axes, and each measured time
    against its cost model (exact counts x the step times measured in the same run)."""
    import matplotlib.pyplot as plt

    df = result.table
    df = df[df["seconds"].notna()].copy()
    fig, axes = plt.subplots(1, 4, figsize=(21, 4.8))
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
    for _, r in last.iterrows():
        marker = marker_of(r["strategy"])
        y = r["measured_mb"] if r["measured_mb"] == r["measured_mb"] else r["exact_mb"]
        ax.scatter(r["seconds"], y, marker=marker, s=60, color=colors[r["label"]])
        if r["exact_mb"] == r["exact_mb"]:  # the states held, exactly: a hollow twin
            ax.scatter(r["seconds"], r["exact_mb"], marker=marker, s=40, facecolors="none",
                       edgecolors=colors[r["label"]])
            ax.plot([r["seconds"]] * 2, [y, r["exact_mb"]], color=colors[r["label"]], lw=0.6)
        ax.annotate(r["knob"] or r["label"], (r["seconds"], y), fontsize=7,
                    xytext=(4, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
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
        ax.set_xscale("log")
        ax.set_yscale("log")
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
        ax.legend(fontsize=7)
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("cost model: counts x step times (s)")
    ax.set_ylabel("measured time of one gradient (s)")
    ax.set_title("the method against its implementation")
    ax.grid(True, which="both", alpha=0.3)
    axes[1].set_title("time against T")
    axes[2].set_title("memory against T (dotted: states held x their size)")
    axes[2].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
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
    import matplotlib.pyplot as plt

    from revbench.checkpoint.plan import FWD, INV, REV

    fig, axes = plt.subplots(1, len(strategies), figsize=(3.2 * len(strategies), 6.5),
                             squeeze=False)
    colors = {FWD: "tab:blue", INV: "tab:orange", REV: "tab:red"}
    for ax, s in zip(axes[0], strategies):
        hist = [h for h in pebble_history(s, n_steps, inplace) if h[0] in colors]
        for y, (op, t, held) in enumerate(hist):
            ax.scatter(held, [y] * len(held), s=6, color="0.6")
            ax.scatter([t + 0.5], [y], s=14, marker=">" if op == FWD else "<", color=colors[op])
        ax.invert_yaxis()
        ax.set_xlabel("state index t")
        fwd = sum(op == FWD for op, _, _ in hist)
        inv = sum(op == INV for op, _, _ in hist)
        peak = max(len(h) for _, _, h in hist) if hist else 0
        ax.set_title(f"{s.label}\n{fwd} fwd, {inv} inv, <= {peak} held", fontsize=9)
        ax.set_xlim(-1, n_steps + 1)
    axes[0][0].set_ylabel("action (time runs downwards)")
    fig.suptitle(f"Pebbles: states held (grey) while {n_steps} steps are run forward (blue), "
                 "uncomputed (orange) and reversed (red)", fontsize=10)
    fig.tight_layout()
    return fig
