"""``python -m revbench.experiments``: list the workloads, or run one and write its results.

    python -m revbench.experiments --list
    python -m revbench.experiments heat --steps 100,1000 --strategies storeall,revolve:10 --out results
    python -m revbench.experiments wave --quick

A bad argument is a one-line usage error (exit status 2).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence

from revbench.checkpoint import STRATEGIES, Strategy

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
    m = re.fullmatch(r"\s*([A-Za-z]+)\s*(?:[:=]\s*(\d+)|\(\s*(?:[a-z]+\s*=\s*)?(\d*)\s*"
                     r"((?:,\s*[a-z]+\s*=\s*\d+\s*)*)\))?\s*", text)
    if not m or m.group(1).lower() not in by_name:
        raise ValueError(f"unknown strategy {text!r}; use one of {strategy_usage()}")
    cls = by_name[m.group(1).lower()]
    value = m.group(2) or m.group(3)
    if cls.knob_name is None:
        if value:
            raise ValueError(f"{cls.__name__} takes no knob, got {text!r}")
        return cls()
    settings = {k: int(v) for k, v in re.findall(r"([a-z]+)\s*=\s*(\d+)", m.group(4) or "")}
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
        return [parse_strategy(s) for s in re.split(r",(?![^()]*\))", text) if s.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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
    p.add_argument("--repeats", type=_positive, help="timed runs per row (default 3)")
    p.add_argument("--quick", action="store_true",
                   help=f"small and fast: steps {','.join(map(str, QUICK_STEPS))}, one repeat")
    p.add_argument("--out", default="results", metavar="DIR",
                   help="where to write WORKLOAD.json, .csv and .png (default: results)")
    p.add_argument("--no-peers", action="store_true", help="leave out JAX / PyTorch rows")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def format_table(df) -> str:
    show = df.copy()
    for col in ("peak_bytes", "measured_peak_bytes", "memory_overhead_bytes"):
        show[col] = (show[col] / 2**20).map(lambda v: f"{v:.3f}" if v == v else "-")
    show["time_overhead"] = show["time_overhead"].map(lambda v: f"{v:.2f}x" if v == v else "-")
    show = show.rename(columns={"peak_bytes": "peak_MB", "measured_peak_bytes": "measured_MB",
                                "forward_steps": "fwd", "inverse_steps": "inv",
                                "reverse_steps": "rev", "peak_states": "states",
                                "model_seconds": "model_s", "time_overhead": "overhead",
                                "memory_overhead_bytes": "extra_MB"})
    cols = ["framework", "strategy", "knob", "n_steps", "seconds", "model_s", "overhead", "fwd",
            "inv", "rev", "states", "peak_MB", "measured_MB", "extra_MB", "grad_error",
            "roundtrip_error", "error"]
    return show[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}")


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
    steps = ns.steps or (QUICK_STEPS if ns.quick else [100, 1000])
    repeats = ns.repeats or (1 if ns.quick else 3)
    try:
        result = compare(ns.workload, n_steps=steps, strategies=ns.strategies, repeats=repeats,
                         progress=not ns.no_progress, peers=not ns.no_peers)
    except (ValueError, TypeError) as exc:
        parser.error(str(exc).splitlines()[0])
    print(f"{ns.workload}: {WORKLOADS[ns.workload].description}")
    print(format_table(result.table))
    paths = result.save(f"{ns.out}/{ns.workload}")
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
