"""The eval's side of GradBench's protocol, for tests and benchmarks: it starts the tool
(``python -m revbench.gradbench``) as GradBench does, sends each eval's messages with
inputs generated as GradBench's evals generate them (the same generators, seeds and
sizes), and checks every answer: the protocol (ids, ``success``, ``output``, one
``evaluate`` timing per run) and the values, against the references of
:mod:`revbench.gradbench.reference` with GradBench's comparison (``|x - y| / max(1, |x| +
|y|) <= 1e-4``, the structures equal).

``python -m revbench.gradbench.driver [EVAL ...] [--size smallest|all] [--check]`` runs
it from a shell and prints one line per evaluation.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from revbench.gradbench.reference import reference

SEED = 31337

#: GradBench's workloads of each eval, smallest first (its defaults)
SIZES: dict[str, list[dict]] = {
    "hello": [{}],
    "lse": [{"n": n} for n in (2500, 5000, 10000, 20000, 40000, 80000, 160000, 320000,
                               640000, 1280000)],
    "llsq": [{"n": n, "m": 128} for n in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8196,
                                          16392)],
    "det": [{"ell": ell} for ell in range(5, 12)],
    "kmeans": sorted(({"k": k, "n": n, "d": d} for k, n, d in itertools.product(
        (10, 100, 1000), (1000, 10000), (8, 16))), key=lambda s: s["k"] * s["n"] * s["d"]),
    "ode": sorted(({"n": n, "s": s} for n, s in itertools.product((1000, 10000, 100000),
                                                                  (1, 10, 100))),
                  key=lambda z: z["n"] * z["s"]),
    "gmm": sorted(({"d": d, "k": k, "n": 1000} for d, k in itertools.product(
        (2, 10, 20, 32, 64), (5, 10, 25, 50, 100))), key=lambda s: s["d"] * s["k"]),
    "ba": [dict(zip(("n", "m", "p"), size)) for size in (
        (49, 7776, 31843), (21, 11315, 36455), (161, 48126, 182072), (372, 47423, 204472),
        (257, 65132, 225911), (539, 65220, 277273), (93, 61203, 287451), (88, 64298, 383937),
        (810, 88814, 393775), (1197, 126327, 563734), (1723, 156502, 678718),
        (253, 163691, 899155), (245, 198739, 1091386), (356, 226730, 1255268))],
    "lstm": sorted(({"l": layers, "c": c} for layers, c in itertools.product(
        (2, 4, 6), (1024, 4096, 8192))), key=lambda s: s["l"] * s["c"]),
    "ht": [{"model": model, "n": n, "complicated": complicated}
           for complicated in (False, True) for model in ("small", "big") for n in (100, 192)],
    "particle": [{"w": 0.0}],
    "saddle": [{"start": [1.0, 1.0]}],
}

#: each eval's functions, in the order its eval asks for them
FUNCTIONS = {"hello": ("square", "double"), "lse": ("primal", "gradient"),
             "llsq": ("primal", "gradient"), "det": ("primal", "gradient"),
             "kmeans": ("cost", "dir"), "ode": ("primal", "gradient"),
             "gmm": ("objective", "jacobian"), "lstm": ("objective", "jacobian"),
             "ba": ("objective", "jacobian"), "ht": ("objective", "jacobian"),
             "particle": ("rr", "ff", "fr", "rf"), "saddle": ("rr", "ff", "fr", "rf")}


def inputs(module: str, sizes: list[dict], min_runs: int = 1, min_seconds: float = 0.0
           ) -> Iterator[tuple[str, Any]]:
    """``(description, input)`` of each workload, generated as GradBench's eval does."""
    runs = {"min_runs": min_runs, "min_seconds": min_seconds}
    if module in ("lse", "llsq", "det", "kmeans", "ode"):
        np.random.seed(SEED)  # (once, then every workload in order)
    for size in sizes:
        if module == "lse":
            yield f"n={size['n']}", {"x": np.random.rand(size["n"]).tolist(), **runs}
        elif module == "llsq":
            yield (f"n={size['n']},m={size['m']}",
                   {"x": np.random.rand(size["m"]).tolist(), "n": size["n"], **runs})
        elif module == "det":
            ell = size["ell"]
            yield f"{ell}", {"A": np.random.rand(ell * ell).tolist(), "ell": ell, **runs}
        elif module == "kmeans":
            points = np.random.rand(size["n"], size["d"])
            yield (f"k={size['k']},n={size['n']},d={size['d']}",
                   {"points": points.tolist(), "centroids": points[-size["k"]:].tolist(),
                    **runs})
        elif module == "ode":
            yield (f"n={size['n']},s={size['s']}",
                   {"x": np.random.rand(size["n"]).tolist(), "s": size["s"], **runs})
        elif module == "gmm":
            d, k, n = size["d"], size["k"], size["n"]
            rng = np.random.default_rng(seed=SEED)  # (again for every workload)
            x = rng.normal(size=(n, d))
            mu = rng.uniform(size=(k, d))
            q = rng.normal(size=(k, d))
            l = rng.normal(size=(k, d * (d - 1) // 2))  # noqa: E741
            alpha = rng.normal(size=k)
            yield f"{d}_{k}_{n}", {"d": d, "k": k, "n": n, "x": x.tolist(), "m": 0,
                                   "gamma": 1.0, "mu": mu.tolist(), "q": q.tolist(),
                                   "l": l.tolist(), "alpha": alpha.tolist(), **runs}
        elif module == "ba":
            yield (f"ba_n{size['n']}_m{size['m']}_p{size['p']}",
                   {**size, **ba_input(), **runs})
        elif module == "lstm":
            yield f"l={size['l']},c={size['c']}", {**lstm_input(size["l"], size["c"]), **runs}
        elif module == "ht":
            kind = "complicated" if size["complicated"] else "simple"
            yield (f"{kind}_{size['model']}/hand{1 + (size['n'] > 100)}_t26_c{size['n']}",
                   {**ht_input(size["n"], HAND_VERTICES[size["model"]], size["complicated"]),
                    **runs})
        elif module == "particle":
            yield "w=0", {**size, **runs}
        elif module == "saddle":
            yield "w=0", {**size, **runs}
        else:
            raise KeyError(f"no workloads for {module!r}")


def ba_input(seed: int = SEED) -> dict:
    """One camera, point, weight and feature for GradBench's ba (which reads them from
    ADBench's files ``ba{i}_n..._m..._p....txt``, not here: drawn at random, seeded, with
    the camera in front of the point and a small distortion)."""
    rng = np.random.default_rng(seed)
    cam = np.concatenate([0.1 * rng.normal(size=3), [0.0, 0.0, -5.0], [1.0 + rng.random()],
                          0.01 * rng.normal(size=2), 0.001 * rng.normal(size=2)])
    return {"cam": cam.tolist(), "x": rng.normal(size=3).tolist(), "w": float(rng.random()),
            "feat": rng.normal(size=2).tolist()}


def lstm_input(layers: int, c: int, seed: int = SEED) -> dict:
    """GradBench's lstm input for ``layers`` layers and ``c`` characters: each character
    one row of its code's bits (``b`` of them, enough for the largest code), the states and
    parameters uniform in [0, 1).  GradBench reads the characters from a text it ships
    (``evals/lstm/data/lstm_full.txt``), which is not here: these are printable ASCII
    characters drawn at random, seeded."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(32, 127, size=c)
    b = int(np.ceil(np.log2(codes.max())))
    sequence = [[float(bit) for bit in format(int(code), f"0{b}b")] for code in codes]
    return {"main_params": rng.random((2 * layers, 4 * b)).tolist(),
            "extra_params": rng.random((3, b)).tolist(),
            "state": rng.random((2 * layers, b)).tolist(), "sequence": sequence}


#: the vertices of the hand models (ADBench's small model has 544; the big one, drawn
#: here, ten times as many)
HAND_VERTICES = {"small": 544, "big": 5440}


def ht_input(n_points: int, n_vertices: int, complicated: bool, seed: int = SEED) -> dict:
    """GradBench's ht input: a hand of 22 bones (a root, a wrist, five fingers of four
    bones in a chain), ``n_vertices`` vertices each bound to a bone and its parent, two
    triangles per vertex, ``n_points`` points matched to vertices (simple) or to points
    ``us`` of triangles (complicated), and a pose ``theta``.  GradBench reads the model and
    the points from ADBench's files (``evals/ht/data``), which are not here: these are
    drawn at random, seeded, with the same layout and a plausible geometry."""
    rng = np.random.default_rng(seed + n_points + n_vertices + complicated)
    parents = np.array([-1, 0] + [p for f in range(5)
                                  for p in (1, 2 + 4 * f, 3 + 4 * f, 4 + 4 * f)])
    nb = parents.size

    def rotation(angles):
        cx, cy, cz = np.cos(angles)
        sx, sy, sz = np.sin(angles)
        rx = np.array([[1, 0, 0], [0, cx, -sx], [0, sx, cx]])
        ry = np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
        rz = np.array([[cz, -sz, 0], [sz, cz, 0], [0, 0, 1]])
        return rz @ ry @ rx

    relatives = np.zeros((nb, 4, 4))
    for b in range(nb):
        relatives[b, :3, :3] = rotation(0.3 * rng.normal(size=3))
        relatives[b, :3, 3] = [0.0, 0.0, 0.0] if b == 0 else rng.normal([0.0, 1.0, 0.0], 0.3)
        relatives[b, 3, 3] = 1.0
    absolutes = np.zeros_like(relatives)
    for b in range(nb):
        absolutes[b] = relatives[b] if parents[b] < 0 else absolutes[parents[b]] @ relatives[b]
    bone = rng.integers(1, nb, size=n_vertices)
    positions = np.ones((n_vertices, 4))
    positions[:, :3] = absolutes[bone, :3, 3] + 0.2 * rng.normal(size=(n_vertices, 3))
    weights = np.zeros((n_vertices, nb))
    share = rng.uniform(0.5, 1.0, size=n_vertices)
    weights[np.arange(n_vertices), bone] = share
    weights[np.arange(n_vertices), parents[bone]] += 1.0 - share
    triangles = rng.integers(0, n_vertices, size=(2 * n_vertices, 3))
    theta = 0.2 * rng.normal(size=26)
    correspondences = rng.integers(0, triangles.shape[0] if complicated else n_vertices,
                                   size=n_points)
    points = positions[rng.integers(0, n_vertices, size=n_points), :3] + 0.1 * rng.normal(
        size=(n_points, 3))
    us = rng.uniform(0.0, 0.5, size=(n_points, 2)) if complicated else np.zeros((0, 2))
    model = {"bone_count": nb, "bone_names": [f"bone{b}" for b in range(nb)],
             "parents": parents.tolist(), "base_relatives": relatives.tolist(),
             "inverse_base_absolutes": np.linalg.inv(absolutes).tolist(),
             "base_positions": positions.tolist(), "weights": weights.tolist(),
             "triangles": triangles.tolist(), "is_mirrored": False}
    return {"theta": theta.tolist(), "us": us.tolist() if complicated else [],
            "data": {"model": model, "correspondences": correspondences.tolist(),
                     "points": points.tolist()}}


def mismatches(expected: Any, actual: Any, tolerance: float = 1e-4, where: str = "") -> list[str]:
    """GradBench's comparison: the same structure, numbers within ``tolerance`` of
    ``|x - y| / max(1, |x| + |y|)``, everything else equal."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict) or set(actual) != set(expected):
            got = sorted(actual) if isinstance(actual, dict) else repr(actual)[:80]
            return [f"{where or 'output'}: {got}, expected the keys {sorted(expected)}"]
        return [m for key in expected for m in mismatches(expected[key], actual[key], tolerance,
                                                          f"{where}.{key}")]
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [f"{where or 'output'}: {type(actual).__name__} of length "
                    f"{len(actual) if isinstance(actual, list) else '-'}, expected a list of "
                    f"{len(expected)}"]
        out: list[str] = []
        for i, (e, a) in enumerate(zip(expected, actual)):
            out += mismatches(e, a, tolerance, f"{where}[{i}]")
            if len(out) > 10:
                break
        return out
    if isinstance(expected, float) or isinstance(actual, float):
        if isinstance(actual, bool) or not isinstance(actual, (int, float)):
            return [f"{where or 'output'}: {actual!r}, expected a number"]
        if not abs(expected - actual) / max(1.0, abs(expected) + abs(actual)) <= tolerance:
            return [f"{where or 'output'}: {actual!r}, expected {expected!r}"]
        return []
    return [] if expected == actual else [f"{where or 'output'}: {actual!r}, expected {expected!r}"]


class ProtocolError(AssertionError):
    """The tool broke the protocol (or the session could not go on)."""


@dataclass
class Result:
    module: str
    function: str
    description: str
    success: bool
    seconds: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    output: Any = None

    @property
    def mean_seconds(self) -> float:
        return sum(self.seconds) / len(self.seconds) if self.seconds else float("nan")


class Tool:
    """The tool's process, spoken to line by line."""

    def __init__(self, command: list[str] | None = None, check: bool = False,
                 env: dict | None = None) -> None:
        command = command or [sys.executable, "-m", "revbench.gradbench",
                              *(["--check"] if check else [])]
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1, env={**os.environ, **(env or {})})
        self.next_id = 0

    def send(self, message: dict | str) -> dict:
        """Send one message (a dict gets the next id; a str is sent as it is) and read
        the answer, which must be one JSON object with the same id."""
        if isinstance(message, dict):
            message = {"id": self.next_id, **message}
            self.next_id += 1
            line = json.dumps(message)
        else:
            line = message
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer:
            raise ProtocolError(f"the tool closed its output after {line[:200]!r} "
                                f"(exit code {self.proc.poll()})")
        try:
            reply = json.loads(answer)
        except json.JSONDecodeError as exc:
            raise ProtocolError(f"the tool answered with something that is not JSON: "
                                f"{answer[:200]!r} ({exc})") from None
        if isinstance(message, dict) and reply.get("id") != message["id"]:
            raise ProtocolError(f"answer {reply!r} to message {message['id']}")
        return reply

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout=60)

    def __enter__(self) -> Tool:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.close()


def run_eval(tool: Tool, module: str, sizes: list[dict] | None = None, min_runs: int = 1,
             min_seconds: float = 0.0, validate: bool = True) -> list[Result]:
    """One eval's session on ``tool``: start, define, then each workload's functions,
    each followed by an analysis message with the driver's verdict."""
    reply = tool.send({"kind": "start", "eval": module})
    if set(reply) - {"id", "tool", "config"}:
        raise ProtocolError(f"start answered {reply!r}")
    reply = tool.send({"kind": "define", "module": module})
    if reply.get("success") is not True:
        raise ProtocolError(f"define {module} failed: {reply.get('error')}")
    results = []
    if module == "hello":
        return _hello(tool, validate)
    for description, raw in inputs(module, sizes or SIZES[module][:1], min_runs, min_seconds):
        for function in FUNCTIONS[module]:
            results.append(_evaluate(tool, module, function, description, raw, min_runs,
                                     validate))
    return results


def _hello(tool: Tool, validate: bool) -> list[Result]:
    """GradBench's hello: four rounds of square then double, each input the previous
    output."""
    results, x = [], 1.0
    for _ in range(4):
        for function in ("square", "double"):
            r = _evaluate(tool, "hello", function, f"x={x}", x, 1, validate)
            results.append(r)
            x = r.output
    return results


def _evaluate(tool: Tool, module: str, function: str, description: str, raw: Any,
              min_runs: int, validate: bool) -> Result:
    reply = tool.send({"kind": "evaluate", "module": module, "function": function,
                       "input": raw, "description": description})
    result = Result(module, function, description, reply.get("success") is True)
    if not result.success:
        result.problems.append(f"failed: {reply.get('error')}")
        return result
    if "error" in reply or "output" not in reply:
        raise ProtocolError(f"a success must have an output and no error: {reply!r}")
    timings = reply.get("timings")
    if not isinstance(timings, list) or not timings or any(
            not isinstance(t, dict) or t.get("name") != "evaluate"
            or isinstance(t.get("nanoseconds"), bool) or not isinstance(t.get("nanoseconds"), int)
            or t["nanoseconds"] < 0 for t in timings):
        raise ProtocolError(f"timings must be evaluate timings in whole nanoseconds: {timings!r}")
    if len(timings) < min_runs:
        raise ProtocolError(f"{len(timings)} runs, fewer than min_runs = {min_runs}")
    result.seconds = [t["nanoseconds"] / 1e9 for t in timings]
    result.output = reply["output"]
    expected = reference(module, function, raw) if validate else None
    if expected is not None:
        result.problems += mismatches(expected, reply["output"])
    tool.send({"kind": "analysis", "of": tool.next_id - 1, "valid": not result.problems,
               **({"error": "; ".join(result.problems[:10])} if result.problems else {})})
    return result


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m revbench.gradbench.driver",
                                 description="GradBench's evals against revbench's tool")
    ap.add_argument("evals", nargs="*", default=sorted(FUNCTIONS))
    ap.add_argument("--size", choices=("smallest", "all"), default="smallest")
    ap.add_argument("--check", action="store_true", help="the tool with checks on")
    ap.add_argument("--min-runs", type=int, default=1)
    ap.add_argument("--min-seconds", type=float, default=0.0)
    ap.add_argument("--no-validate", action="store_true",
                    help="check the protocol only, not the values (no JAX)")
    args = ap.parse_args(argv)
    bad = 0
    for module in args.evals:
        with Tool(check=args.check) as tool:
            sizes = SIZES[module] if args.size == "all" else SIZES[module][:1]
            for r in run_eval(tool, module, sizes, args.min_runs, args.min_seconds,
                              validate=not args.no_validate):
                status = "ok" if r.success and not r.problems else "INVALID"
                bad += status != "ok"
                print(f"{module:8s} {r.function:10s} {r.description:16s} {status:8s} "
                      f"{r.mean_seconds * 1e3:10.3f} ms  {'; '.join(r.problems[:3])}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
