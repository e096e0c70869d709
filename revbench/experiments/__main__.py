"""``python -m revbench.experiments``: list the workloads, or run one and write its results.

    python -m revbench.experiments --list
    python -m revbench.experiments heat --steps 100,1000 --strategies storeall,revolve:10 --out results
    python -m revbench.experiments wave --quick

A bad argument is a one-line usage error (exit status 2).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

from revbench.checkpoint import STRATEGIES, Strategy
from revbench.experiments.memory import MIN_SAMPLE_SECONDS

QUICK_STEPS = [10, 100]


def strategy_usage() -> str:
    """The registered strategies as the command line spells them: ``storeall, revolve:C, ...``"""
    return ", ".join(cls.cli_name + (f":{cls.knob_letter}" if cls.knob_name else "")
                     for cls in STRATEGIES.values())


def parse_strategy(text: str) -> Strategy:
    """``revolve:10``, ``Revolve(snapshots=10)``, ``Revolve(10)``, ``storeall``,
    ``TwoLevel(period=10, snapshots=4)`` ...: the registered strategies by their
    ``cli_name`` (any case), with their knob (and other int settings by name)."""
    by_name = {cls.cli_name: cls for cls in STRATEGIES.values()}
    m = re.fullmatch(r"\s*([A-Za-z]+)\s*(?:[:=]\s*(-?\d+)|\(\s*(?:[a-z]+\s*=\s*)?(-?\d*)\s*"
                     r"((?:,\s*[a-z]+\s*=\s*-?\d+\s*)*)\))?\s*", text)
    if not m or m.group(1).lower() not in by_name:
        raise ValueError(f"unknown strategy {text!r}; use one of {strategy_usage()}")
    cls = by_name[m.group(1).lower()]
    value = m.group(2) or m.group(3)
    if cls.knob_name is None:
        if value:
            raise ValueError(f"{cls.__name__} takes no knob, got {text!r}")
        return cls()
    # (negative numbers are read too: the strategy's own check says what it needs)
    settings = {k: int(v) for k, v in re.findall(r"([a-z]+)\s*=\s*(-?\d+)", m.group(4) or "")}
    if value:
        settings[cls.knob_name] = int(value)
    try:
        return cls(**settings)
    except TypeError:
        raise ValueError(f"{cls.__name__} has no setting among {sorted(settings)}: {text!r}") \
            from None


def _steps(text: str) -> list[int]:
    try:
        steps = [int(s.replace("_", "")) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--steps takes comma-separated integers, got {text!r}") from None
    if not steps or min(steps) < 1:
        raise argparse.ArgumentTypeError(f"--steps must be positive integers, got {text!r}")
    return steps


def _strategies(text: str) -> list[Strategy]:
    try:
        out = [parse_strategy(s) for s in re.split(r",(?![^()]*\))", text) if s.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not out:
        raise argparse.ArgumentTypeError(f"--strategies names no strategy: {text!r}")
    return out


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def build_parser() -> argparse.ArgumentParser:
    from revbench.experiments.workloads import WORKLOADS

    p = argparse.ArgumentParser(
        prog="python -m revbench.experiments", allow_abbrev=False,
        description="Measure reverse computing against checkpointing: the time and memory of "
                    "the gradient of a loop of T steps, for each strategy of revbench.checkpoint.")
    p.add_argument("workload", nargs="?", choices=list(WORKLOADS), metavar="WORKLOAD",
                   help=f"one of: {', '.join(WORKLOADS)}")
    p.add_argument("--list", action="store_true", help="list the workloads and exit")
    p.add_argument("--steps", type=_steps, help="loop lengths T, comma-separated (default 100,1000)")
    p.add_argument("--strategies", type=_strategies,
                   help=f"comma-separated: {strategy_usage()} "
                        "(default: each fitting strategy over a range of its knob)")
    p.add_argument("--repeats", type=_positive,
                   help="timed samples per row, their median reported (default 3); a sample "
                        f"repeats a call shorter than {MIN_SAMPLE_SECONDS * 1e3:g} ms until it "
                        "lasts that long")
    p.add_argument("--quick", action="store_true",
                   help=f"small and fast: steps {','.join(map(str, QUICK_STEPS))}, one sample")
    p.add_argument("--out", default="results", metavar="DIR",
                   help="where to write WORKLOAD.json, .csv and .png (default: results)")
    p.add_argument("--no-peers", action="store_true", help="leave out JAX / PyTorch rows")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="run each measured configuration as a task of the Dask scheduler at "
                        "ADDRESS (tcp://host:8786; docs/scale.md); needs revbench[dask]")
    return p


def _mb(v: float) -> str:
    return "-" if v != v else f"{v / 2**20:.3f}"


def _count(v: float) -> str:
    return "-" if v != v else f"{int(v)}"


def format_table(df) -> str:
    """The rows of a :func:`~revbench.experiments.compare` table as the command line prints
    them: MB (2**20 bytes), step counts, ``-`` where a figure does not apply, and a measured
    memory figure below the measurement's floor as ``<FLOOR`` (its ``extra_MB`` as ``-``)."""
    show = df.copy()
    below = show["measured_below_floor"].fillna(False).astype(bool) \
        if "measured_below_floor" in show else [False] * len(show)
    floor = show["memory_floor_bytes"] if "memory_floor_bytes" in show else [math.nan] * len(show)
    show["measured_MB"] = [f"<{f / 2**20:.3g}" if b else _mb(v)
                           for v, b, f in zip(show["measured_peak_bytes"], below, floor)]
    show["extra_MB"] = ["-" if b else _mb(v) for v, b in zip(show["memory_overhead_bytes"], below)]
    show["peak_MB"] = show["peak_bytes"].map(_mb)
    show["overhead"] = show["time_overhead"].map(lambda v: f"{v:.2f}x" if v == v else "-")
    counts = {"timed_runs": "runs", "forward_steps": "fwd", "inverse_steps": "inv",
              "reverse_steps": "rev", "peak_states": "states"}
    for col, short in counts.items():
        show[short] = show[col].map(_count) if col in show else "-"
    show = show.rename(columns={"model_seconds": "model_s"})
    cols = ["framework", "strategy", "knob", "n_steps", "seconds", "runs", "model_s", "overhead",
            "fwd", "inv", "rev", "states", "peak_MB", "measured_MB", "extra_MB", "grad_error",
            "roundtrip_error"]
    return show[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}", na_rep="-")


def legend(df, min_seconds: float = MIN_SAMPLE_SECONDS) -> str:
    """What the columns of :func:`format_table` mean, and why a row has no figures."""
    floors = df["memory_floor_bytes"].dropna() if "memory_floor_bytes" in df else []
    floor = f"{floors.iloc[0] / 2**20:.3g} MB" if len(floors) else "unknown"
    ms = f"{min_seconds * 1e3:.3g} ms"
    items = [
        ("seconds", "wall time of one gradient call (the loss and its gradient), the median of "
                    "the samples"),
        ("runs", f"gradient calls timed: a call shorter than {ms} runs back to back until one "
                 f"sample lasts {ms}, and seconds = the sample's time / its calls (JAX and "
                 "PyTorch rows too, after a warm-up call)"),
        ("model_s", "the cost model: fwd x the time of one forward step + inv x one inverse step "
                    "+ rev x one reverse step, each step timed in this run"),
        ("overhead", "seconds / model_s: what the implementation adds to the method"),
        ("fwd", "runs of the step forward, the first sweep included"),
        ("inv", "runs of the step's inverse without adjoints (Bennett's uncomputation)"),
        ("rev", "runs of the step's reverse sweep (its adjoint, which also uncomputes): "
                "n_steps for every strategy"),
        ("states", "the most states held at once, the working state included"),
        ("peak_MB", "states x the bytes of one state, counted exactly (MB = 2**20 bytes)"),
        ("measured_MB", "the most memory the operating system saw one gradient call add (its "
                        "resident size: Numba's arrays included); '<F': below F, the floor "
                        f"under which the measurement cannot tell a figure from noise (here "
                        f"{floor})"),
        ("extra_MB", "measured_MB - peak_MB: what the implementation holds beyond the states "
                     "('-' when measured_MB is below the floor)"),
        ("grad_error", "relative difference (2-norm) of the gradient from StoreAll()'s in the "
                       "same run (Revolve's where StoreAll() does not fit)"),
        ("roundtrip_error", "Reverse(): the largest difference between the initial state "
                            "recovered by running the steps backwards and the true one; 0 for "
                            "the others"),
        ("-", "does not apply (JAX and PyTorch rows have no step counts or cost model)"),
    ]
    width = max(len(k) for k, _ in items) + 2
    lines = ["columns:"]
    for key, text in items:
        lines += textwrap.wrap(text, 100, initial_indent="  " + key.ljust(width),
                               subsequent_indent=" " * (width + 2))
    failed = df[df["error"].fillna("").astype(str) != ""] if "error" in df else df.iloc[:0]
    if len(failed):
        lines.append("rows without figures:")
        for _, r in failed.iterrows():
            what = [str(r[c]) for c in ("framework", "strategy", "knob") if r[c] == r[c] and r[c]]
            lines.append(f"  {' '.join(what)} n_steps={r['n_steps']}: {r['error']}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    from revbench.experiments import compare
    from revbench.experiments.workloads import WORKLOADS

    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.list:
        for w in WORKLOADS.values():
            kind = "in-place" if w.inplace else "out-of-place"
            print(f"{w.name:8s} {w.kind:6s} {kind:12s} {w.description}")
        return 0
    if ns.workload is None:
        parser.error("name a WORKLOAD (or --list)")
    if Path(ns.out).exists() and not Path(ns.out).is_dir():  # (before measuring, not after)
        parser.error(f"--out {ns.out!r} is a file, not a folder")
    steps = ns.steps or (QUICK_STEPS if ns.quick else [100, 1000])
    repeats = ns.repeats or (1 if ns.quick else 3)
    client = None
    if ns.scheduler:
        try:
            from distributed import Client
        except ImportError:
            parser.error("--scheduler needs Dask: pip install 'revbench[dask]'")
        try:
            client = Client(ns.scheduler)
        except OSError as exc:
            parser.error(f"--scheduler {ns.scheduler}: no Dask scheduler answers there ({exc})")
    try:
        result = compare(ns.workload, n_steps=steps, strategies=ns.strategies, repeats=repeats,
                         progress=not ns.no_progress, peers=not ns.no_peers, client=client)
    except (ValueError, TypeError) as exc:
        parser.error(str(exc).splitlines()[0])
    finally:
        if client is not None:
            client.close()
    print(f"{ns.workload}: {WORKLOADS[ns.workload].description}")
    print(format_table(result.table))
    print(legend(result.table))
    paths = result.save(f"{ns.out}/{ns.workload}")
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
