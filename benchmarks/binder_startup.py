#!/usr/bin/env python
"""How long a student waits on Binder: from the end of the build to the first executed cell
and to the end of each lesson, in a fresh environment built the way Binder builds it.

Run it as::

    python benchmarks/binder_startup.py [--workdir DIR] [--modes warm,cold,generic]
                                        [--only 01_tour ...] [--out PATH] [--keep]

It rebuilds what repo2docker builds, from ``binder/`` alone, in a scratch folder (by default
a new one under /tmp):

1. a copy of the working tree (tracked and untracked, not ignored files: what a clone of
   this tree would hold), which is also the home folder, as on Binder (``REPO_DIR=HOME``);
2. a fresh virtual environment (``python -m venv``) where, from the copy's root,
   ``pip install -r binder/requirements.txt`` installs revbench and its notebook extra;
3. ``binder/postBuild``, which warms the revbench/Numba cache by running every lesson.

Then each lesson is run the way a student opens it: a fresh process started through
``binder/start`` (which exports the cache's place), a fresh ``python3`` kernel, every cell
in order with nbclient.  It records, counting from the moment the process is launched, when
the first code cell finished (the kernel's start included), when the last did, and the
slowest cell.  The modes:

``warm``     as on Binder: the cache the build warmed, the build machine's CPU;
``cold``     the same, but an empty revbench cache (``REVBENCH_CACHE_DIR`` on a new empty
             folder): what the warming saves;
``generic``  a run on a machine whose CPU differs from the builder's (``NUMBA_CPU_NAME=generic``,
             which ``binder/start`` would pick there): the build's generic-CPU cache.

Results (with the build's times and the machine) go to ``benchmarks/results/binder.json``
(or ``--out``); a table goes to stdout.  The pip install needs a package index (a mirror
will do).  Timings are never asserted by the tests; they are recorded here.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MODES = ("warm", "cold", "generic")
#: environment variables of this shell that must not leak into the fresh environment
LEAKY_PREFIXES = ("REVBENCH_", "NUMBA_", "JUPYTER", "XDG_", "IPYTHON", "PYTHON", "VIRTUAL_ENV",
                  "MPLCONFIGDIR", "CONDA_")
RUN_TIMEOUT_S = 1800


# --------------------------------------------------------------- inside the fresh environment


def run_notebook(path: Path) -> dict:
    """Execute ``path`` with nbclient (in the fresh environment's own Python) and report when
    each code cell finished (``time.time()``), and which cells showed errors or stderr."""
    import nbclient
    import nbformat

    nb = nbformat.read(path, as_version=4)
    done: list[tuple[int, float]] = []

    def executed(cell, cell_index: int, execute_reply) -> None:
        done.append((cell_index, time.time()))

    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=RUN_TIMEOUT_S,
                                     allow_errors=True, on_cell_executed=executed,
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    bad = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.output_type == "error" or (out.output_type == "stream" and out.name == "stderr"):
                bad.append({"cell": i, "output": out.output_type if out.output_type == "error"
                            else "stderr", "text": (out.get("evalue") or out.get("text", ""))[:300]})
    return {"cells": [{"index": i, "done": t, "source": nb.cells[i].source.split("\n", 1)[0][:60]}
                      for i, t in done],
            "problems": bad}


# --------------------------------------------------------------- the build


def fresh_env(home: Path, venv: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(LEAKY_PREFIXES)}
    env["HOME"] = str(home)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
    env["VIRTUAL_ENV"] = str(venv)
    return env


def copy_tree(dest: Path) -> int:
    """The working tree as a clone of it would hold it (tracked and untracked, not ignored)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO, capture_output=True, check=True).stdout.decode().split("\0")
    n = 0
    for rel in filter(None, listed):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
            n += 1
    return n


def timed(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> float:
    print(f"$ {' '.join(cmd)}   (log: {log})", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    took = time.perf_counter() - t0
    if proc.returncode:
        sys.exit(f"failed ({proc.returncode}) after {took:.0f} s: {' '.join(cmd)}\n"
                 f"{log.read_text(errors='replace')[-4000:]}")
    return took


def build(work: Path, python: str) -> dict:
    """Copy, venv, ``pip install -r binder/requirements.txt``, ``binder/postBuild``."""
    repo, venv = work / "repo", work / "env"
    repo.mkdir(parents=True)
    files = copy_tree(repo)
    env = fresh_env(repo, venv)
    times = {"files_copied": files}
    times["venv_s"] = timed([python, "-m", "venv", str(venv)], repo, env, work / "venv.log")
    times["pip_install_s"] = timed([str(venv / "bin" / "pip"), "install", "--no-cache-dir", "-r",
                                    "binder/requirements.txt"], repo, env, work / "pip.log")
    times["postbuild_s"] = timed(["bash", "binder/postBuild"], repo, env, work / "postBuild.log")
    times["postbuild_log"] = [ln for ln in (work / "postBuild.log").read_text().splitlines()
                              if ln.startswith("warm_cache:")]
    return times


# --------------------------------------------------------------- the measurements


def measure(work: Path, notebook: str, mode: str) -> dict:
    """One lesson opened by a student: a process launched through binder/start, from launch
    to the first executed cell and to the last."""
    repo, venv = work / "repo", work / "env"
    env = fresh_env(repo, venv)
    if mode == "cold":
        empty = Path(tempfile.mkdtemp(prefix="cold-cache-", dir=work))
        env["REVBENCH_CACHE_DIR"] = str(empty)
    elif mode == "generic":
        env["NUMBA_CPU_NAME"] = "generic"
    path = repo / "notebooks" / notebook
    cmd = ["bash", "binder/start", str(venv / "bin" / "python"), str(Path(__file__).resolve()),
           "_run", str(path)]
    launched = time.time()
    proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    if proc.returncode:
        return {"notebook": notebook, "mode": mode, "failed": proc.stderr[-3000:]}
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    cells = report["cells"]
    ends = [c["done"] - launched for c in cells]
    durations = [ends[0]] + [b - a for a, b in itertools.pairwise(ends)]
    slowest = max(range(len(cells)), key=durations.__getitem__)
    return {"notebook": notebook, "mode": mode, "first_cell_s": round(ends[0], 2),
            "end_s": round(ends[-1], 2), "code_cells": len(cells),
            "slowest_cell": {"index": cells[slowest]["index"], "seconds": round(durations[slowest], 2),
                             "source": cells[slowest]["source"]},
            "problems": report["problems"]}


def table(results: list[dict], build_times: dict) -> str:
    rows = [f"build: pip install {build_times['pip_install_s']:.0f} s, postBuild (cache warming) "
            f"{build_times['postbuild_s']:.0f} s",
            "seconds from launch (fresh process through binder/start, fresh kernel):",
            f"{'notebook':34} {'mode':8} {'first cell':>10} {'end':>7} {'slowest cell':>13}  problems",
            "-" * 92]
    for r in results:
        if "failed" in r:
            rows.append(f"{r['notebook']:34} {r['mode']:8} FAILED: {r['failed'][-200:]}")
            continue
        slow = r["slowest_cell"]
        rows.append(f"{r['notebook']:34} {r['mode']:8} {r['first_cell_s']:10.1f} {r['end_s']:7.1f} "
                    f"{slow['seconds']:7.1f} (#{slow['index']:>2})  {len(r['problems']) or ''}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_run"]:  # inside the fresh environment: one notebook, a JSON line out
        print(json.dumps(run_notebook(Path(argv[1]))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, help="scratch folder (default: a new one in /tmp)")
    parser.add_argument("--reuse", action="store_true",
                        help="measure in --workdir as it was built before (skip the build)")
    parser.add_argument("--python", default=sys.executable, help="the Python that makes the venv")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {MODES}")
    parser.add_argument("--only", nargs="+", default=(), help="these lessons only (e.g. 01_tour)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "binder.json")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if unknown := set(modes) - set(MODES):
        parser.error(f"unknown modes {sorted(unknown)}; choose from {MODES}")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="revbench-binder-"))
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    load_before = os.getloadavg()
    try:
        if args.reuse:
            build_times = json.loads((work / "build.json").read_text())
        else:
            work.mkdir(parents=True, exist_ok=True)
            build_times = build(work, args.python)
            (work / "build.json").write_text(json.dumps(build_times))
        lessons = sorted(p.name for p in (work / "repo" / "notebooks").glob("[0-9][0-9]_*.ipynb"))
        if args.only:
            lessons = [n for n in lessons if n.removesuffix(".ipynb") in args.only or n in args.only]
        results = []
        for mode in modes:
            for name in lessons:
                print(f"[{mode}] {name} ...", file=sys.stderr, flush=True)
                results.append(measure(work, name, mode))
    finally:
        if not args.keep and args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    sys.path.insert(0, str(HERE))
    import _common

    out = {"benchmark": "binder_startup", "date": started, "machine": _common.machine_info(),
           "load_average": {"start": list(load_before), "end": list(os.getloadavg())},
           "build": build_times, "runs": results}
    print(table(results, build_times))
    _common.write_results(out, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
