"""Binder's build warms the Numba cache for the lessons, and its start finds that cache again.

repo2docker runs ``binder/postBuild`` once, when it builds the image, and ``binder/start``
at every launch, before the Jupyter server.  Both call this script:

``python binder/warm_cache.py env``
    prints the ``export`` lines for the shell: ``REVBENCH_CACHE_DIR`` (one place for build
    and run), and ``NUMBA_CPU_NAME=generic`` when this machine's CPU is not the one the
    build compiled for (see below).
``python binder/warm_cache.py warm``
    executes every lesson notebook (``notebooks/NN_*.ipynb``) once, headless, with nbclient,
    so that each function a lesson defines is compiled and its machine code lands in the
    cache; a student's first cells then load it instead of waiting for Numba.  The files a
    notebook writes are removed afterwards (the image keeps a clean checkout).

**Where the cache lives.**  revbench keeps generated code and Numba's cache under
``REVBENCH_CACHE_DIR`` (else ``~/.cache/revbench``).  The cache is put in the Python
environment (``sys.prefix/var/cache/revbench``), which is part of the image, rather than in
the home folder, which a JupyterHub may mount over with a user's own volume; and the same
variable is exported at build and at run time, so both agree.

**Which CPU.**  Numba's cache is keyed by the CPU it compiled for (name and features): code
built on the build machine is reused only on a machine with the same CPU.  Binder builds
and runs on machines of one cluster, usually alike, but not always.  So the build warms the
cache twice: for its own CPU, and for ``NUMBA_CPU_NAME=generic`` (portable x86-64 code, a
little slower where loops vectorise), and records its CPU; ``start`` keeps native code when
the CPU matches and switches to generic code when it does not, and either way the first
cells find compiled code.  A ``NUMBA_CPU_NAME`` already set is left alone.

Only the standard library, Numba and nbclient (a dependency of JupyterLab's server) are
used, from the environment being built.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"
LESSON = re.compile(r"^\d\d_[\w-]+\.ipynb$")
#: the build's CPU, as Numba keys its cache (written by ``warm``, read by ``env``)
CPU_FILE = "binder-build-cpu.json"
#: seconds one cell may run during the build (cold compilations on a busy builder)
CELL_TIMEOUT_S = 900
#: not walked when looking for the files a notebook wrote (nor is any hidden folder: on
#: Binder the repository is the home folder, whose ~/.cache, ~/.ipython ... are kept)
SKIP_DIRS = {"__pycache__"}


def cache_dir() -> Path:
    """The revbench cache of this environment: ``REVBENCH_CACHE_DIR`` if set, else inside
    the environment (``sys.prefix/var/cache/revbench``)."""
    given = os.environ.get("REVBENCH_CACHE_DIR")
    return Path(given) if given else Path(sys.prefix) / "var" / "cache" / "revbench"


def numba_cpu() -> list[str]:
    """This machine's code-generation key as Numba's cache sees it: (triple, CPU, features)."""
    from numba.core.registry import cpu_target

    return [str(x) for x in cpu_target.target_context.codegen().magic_tuple()]


def env_lines() -> list[str]:
    """The ``export`` lines that make a run use the build's cache (see the module docstring)."""
    cache = cache_dir()
    lines = [f"export REVBENCH_CACHE_DIR={shlex.quote(str(cache))}"]
    if "NUMBA_CPU_NAME" not in os.environ:
        try:
            built_for = json.loads((cache / CPU_FILE).read_text())
        except (OSError, ValueError):
            built_for = None  # no warmed cache (a build without postBuild): nothing to match
        if built_for is not None and built_for != numba_cpu():
            lines.append("export NUMBA_CPU_NAME=generic")
    return lines


def lessons() -> list[Path]:
    return sorted(p for p in NOTEBOOKS.glob("*.ipynb") if LESSON.match(p.name))


def _files() -> set[Path]:
    found = set()
    for folder, dirs, names in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")
                   and Path(folder, d) != cache_dir()]
        found.update(Path(folder) / n for n in names)
    return found


def run_lesson(path: Path, env: dict[str, str]) -> str | None:
    """Execute ``path`` on a fresh python3 kernel in its folder; None, or what went wrong."""
    import nbclient
    import nbformat

    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=CELL_TIMEOUT_S,
                                     resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute(env=env)
    except Exception as e:  # a lesson that fails must not cost the students their Binder
        return re.sub(r"\x1b\[[0-9;]*m", "", str(e))[-3000:]
    return None


def warm(cpus: list[str], strict: bool) -> int:
    """Run every lesson once per CPU target; record the build's CPU; remove written files."""
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    os.environ["REVBENCH_CACHE_DIR"] = str(cache)
    os.environ.setdefault("JUPYTER_PREFER_ENV_PATH", "1")  # this environment's kernel
    os.environ.setdefault("MPLBACKEND", "Agg")
    # compile every call before it runs: a tiered kernel (a notebook's default) would run
    # it interpreted and could end before the background compilation is saved
    os.environ["REVBENCH_TIERED"] = "0"
    (cache / CPU_FILE).write_text(json.dumps(numba_cpu()))
    failures = 0
    before = _files()
    for cpu in cpus:
        env = dict(os.environ)
        env.pop("NUMBA_CPU_NAME", None)
        env.pop("NUMBA_CPU_FEATURES", None)
        if cpu != "native":
            env["NUMBA_CPU_NAME"] = cpu
        for path in lessons():
            t0 = time.perf_counter()
            error = run_lesson(path, env)
            took = time.perf_counter() - t0
            print(f"warm_cache: {path.name} ({cpu} CPU) {'ran' if error is None else 'FAILED'} "
                  f"in {took:.1f} s", flush=True)
            if error is not None:
                failures += 1
                print(error, file=sys.stderr, flush=True)
    for new in sorted(_files() - before):
        new.unlink()
        print(f"warm_cache: removed {new.relative_to(REPO)} (written by a lesson)", flush=True)
    print(f"warm_cache: the cache in {cache} holds {sum(1 for _ in cache.rglob('*'))} files",
          flush=True)
    return 1 if failures and strict else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("env", help="print the export lines for binder/start and binder/postBuild")
    w = sub.add_parser("warm", help="run every lesson once to fill the cache")
    w.add_argument("--cpu", action="append", default=None,
                   help="CPU targets to warm ('native', 'generic'; default both)")
    w.add_argument("--strict", action="store_true", help="exit 1 when a lesson fails")
    args = parser.parse_args(argv)
    if args.command == "env":
        print("\n".join(env_lines()))
        return 0
    return warm(args.cpu or ["native", "generic"], args.strict)


if __name__ == "__main__":
    sys.exit(main())
