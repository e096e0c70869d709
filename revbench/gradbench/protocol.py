"""GradBench's protocol, the tool's side: JSON lines in, one JSON line out for each.

GradBench (github.com/gradbench/gradbench) runs an *eval* and a *tool* as two processes
and relays the eval's messages to the tool's standard input, one JSON object a line, and
the tool's answers back.  The eval sends, in order:

* ``{"id": 0, "kind": "start", "eval": ..., "config": ...}`` -- answered ``{"id": 0,
  "tool": "revbench", "config": {...}}``;
* ``{"id": 1, "kind": "define", "module": "gmm"}`` -- whether the tool has that eval:
  ``{"id": 1, "success": true, "timings": [{"name": "compile", "nanoseconds": ...}]}``,
  or ``"success": false`` with an ``error``.  revbench compiles the eval's programs here
  (on small inputs of the right types: the machine code does not depend on sizes), so no
  compile time falls inside a scored run;
* ``{"id": 2, "kind": "evaluate", "module": ..., "function": ..., "input": ...}`` -- the
  function's value at the input: ``{"id": 2, "success": true, "output": ..., "timings":
  [{"name": "evaluate", "nanoseconds": ...}, ...]}``, one ``evaluate`` timing per run.  An
  input that carries ``min_runs`` and ``min_seconds`` is evaluated again and again until
  both are reached; only the computation is timed (not turning JSON into arrays and back);
* ``{"id": 3, "kind": "analysis", "of": 2, "valid": ...}`` and any other kind -- answered
  ``{"id": 3}``.

A message the tool cannot serve -- not JSON, no ``id``, an unknown module or function, an
input of the wrong shape, an error while computing -- is answered ``success: false`` with a
message saying what was wrong, and the tool keeps serving.  Nothing but answers is written
to standard output.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from collections.abc import Iterable
from typing import Any, TextIO

from revbench.gradbench import evals

TOOL = "revbench"


class Server:
    """One session: the evals defined so far and their programs."""

    def __init__(self, check: bool = False) -> None:
        #: runtime checks in the programs (``--check``): slower, every inverse verified
        self.check = check
        self.defined: dict[str, evals.Eval] = {}

    # -- one message -----------------------------------------------------------------
    def answer(self, line: str) -> dict | None:
        """The answer to one line (None for a blank line)."""
        if not line.strip():
            return None
        try:
            message = json.loads(line)
        except json.JSONDecodeError as exc:
            return {"id": None, "success": False, "error": f"not JSON: {exc}"}
        if not isinstance(message, dict) or "id" not in message:
            return {"id": None, "success": False,
                    "error": "a message must be a JSON object with an `id`"}
        mid, kind = message["id"], message.get("kind")
        try:
            if kind == "start":
                return {"id": mid, "tool": TOOL, "config": {"check": self.check}}
            if kind == "define":
                return {"id": mid, **self.define(message.get("module"))}
            if kind == "evaluate":
                return {"id": mid, **self.evaluate(message)}
            return {"id": mid}  # (analysis, and kinds this tool does not know)
        except Exception as exc:  # the tool keeps serving, and says what went wrong
            return {"id": mid, "success": False,
                    "error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}"}

    def define(self, module: Any) -> dict:
        if not isinstance(module, str) or module not in evals.EVALS:
            return {"success": False,
                    "error": f"revbench has no eval {module!r}; it has {sorted(evals.EVALS)}"}
        t = time.perf_counter_ns()
        self.defined[module] = evals.EVALS[module](check=self.check)
        return {"success": True,
                "timings": [{"name": "compile", "nanoseconds": time.perf_counter_ns() - t}]}

    def evaluate(self, message: dict) -> dict:
        module, function = message.get("module"), message.get("function")
        ev = self.defined.get(module)
        if ev is None:
            known = "" if module in evals.EVALS else " (revbench has no such eval)"
            return {"success": False, "error": f"module {module!r} was not defined{known}"}
        if function not in ev.functions:
            return {"success": False, "error": f"{module} has no function {function!r}; it "
                                               f"has {sorted(ev.functions)}"}
        if "input" not in message:
            return {"success": False, "error": "an evaluate message needs an `input`"}
        raw = message["input"]
        runs, seconds = _runs(raw)
        prepare, compute, output = ev.functions[function]
        data = prepare(raw)
        timings, spent, n, result = [], 0, 0, None
        while n < runs or spent < seconds * 1e9:
            t = time.perf_counter_ns()
            result = compute(data)
            dt = time.perf_counter_ns() - t
            timings.append({"name": "evaluate", "nanoseconds": dt})
            spent += dt
            n += 1
        return {"success": True, "output": output(result), "timings": timings}

    # -- a session -------------------------------------------------------------------
    def serve(self, lines: Iterable[str], out: TextIO) -> None:
        for line in lines:
            reply = self.answer(line)
            if reply is not None:
                out.write(json.dumps(reply) + "\n")
                out.flush()


def _runs(raw: Any) -> tuple[int, float]:
    """``min_runs`` and ``min_seconds`` of an input (1 and 0 where it has none)."""
    if not isinstance(raw, dict):
        return 1, 0.0
    runs, seconds = raw.get("min_runs", 1), raw.get("min_seconds", 0.0)
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise ValueError(f"min_runs must be an integer >= 1, got {runs!r}")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not (
            0 <= seconds < float("inf")):
        raise ValueError(f"min_seconds must be a number >= 0, got {seconds!r}")
    return runs, float(seconds)


def main(argv: list[str] | None = None, stdin: TextIO | None = None,
         stdout: TextIO | None = None) -> int:
    """``python -m revbench.gradbench [--check]``: serve GradBench's protocol on standard
    input and output until the eval closes its end."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m revbench.gradbench",
                                 description="revbench as a GradBench tool")
    ap.add_argument("--check", action="store_true",
                    help="runtime checks on in every program (slower)")
    args = ap.parse_args(argv)
    Server(check=args.check).serve(stdin or sys.stdin, stdout or sys.stdout)
    return 0

