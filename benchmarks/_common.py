"""What every benchmark records about the machine and the code it measured."""

from __future__ import annotations

import importlib
import json
import os
import platform
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: the variables that set how many threads BLAS, OpenMP and Numba start
THREAD_VARIABLES = ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                    "MKL_NUM_THREADS")


def prepare(one_thread: bool = False) -> None:
    """What a benchmark does before NumPy, Numba or revbench load: the repository
    importable, and with ``one_thread`` every thread variable set to 1."""
    import sys

    if one_thread:
        for var in THREAD_VARIABLES:
            os.environ[var] = "1"
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))


def machine_info(*modules: str) -> dict:
    """Python, CPU, thread settings, git commit, and the versions of ``modules``."""
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    import numba

    info = {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable,
        "numba_num_threads": numba.config.NUMBA_NUM_THREADS,
    }
    for name in ("revbench", "numba", "numpy", *modules):
        info[name] = getattr(importlib.import_module(name), "__version__", "?")
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                              text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "revbench"], cwd=REPO,
                               capture_output=True, text=True, timeout=10)
        if head.returncode == 0:
            info["git_commit"] = head.stdout.strip()
            info["git_revbench_dirty"] = bool(dirty.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def child_env(changes: dict) -> dict:
    """This process's environment with ``changes`` (a value of ``None`` unsets the
    variable): what a benchmark's subprocess runs with."""
    env = dict(os.environ)
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def loadavg() -> list[float] | None:
    """The load average (the machine is shared and noisy: keep it with the figures)."""
    try:
        return list(os.getloadavg())
    except (AttributeError, OSError):
        return None


def write_results(results: dict, out: Path) -> None:
    """Write the results as JSON, atomically (a crash never leaves half a file)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(results, indent=2) + "\n")
    os.replace(tmp, out)
    print(f"\nresults written to {out}")
