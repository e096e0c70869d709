"""The teaching notebooks in ``notebooks/`` run top to bottom, and are committed clean.

Every notebook is executed with nbclient on the venv's ``python3`` kernel, from its own
folder (as JupyterLab and Binder run it); any error output or anything written to stderr
fails the test with the cells and their tracebacks (lessons show a beginner's errors as
text: ``%%reversible --expect-error``, ``print(e)``).  A cell that opens the debugger must
display a widget, and an exercise's check cell (``check.exercise_k(...)``) a Feedback.  The
quick checks make sure every lesson exists, the notebooks are stored without outputs and ask
for the ``python3`` kernel, and that Binder (``binder/``) installs revbench from
``pyproject.toml`` and warms the cache its start uses.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
TOUR = ROOT / "notebooks" / "01_tour.ipynb"
CELL_TIMEOUT_S = 600  # the first cells pay for kernel start and cold Numba compilations
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
#: the course's lessons, in order (issue 11)
LESSONS = ["01_tour", "02_reversible_programming", "03_ad_by_uncomputation", "04_debugger",
           "05_space_time", "06_workloads"]

nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed: pip install -e '.[test]'")


def _ids(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


def _opens_debugger(source: str) -> bool:
    first = source.lstrip().splitlines()[0] if source.strip() else ""
    return (first.startswith("%%reversible") and "--debug" in first.split()) or "revbench.debug(" in source


def test_the_tour_is_there() -> None:
    assert TOUR in NOTEBOOKS
    makefile = (ROOT / "Makefile").read_text()
    assert "notebooks/01_tour.ipynb" in makefile, "`make lab` opens the tour"
    # the server's root is the repository, so the notebooks' links to docs/ resolve
    assert "--ServerApp.root_dir=$(CURDIR)" in makefile


def _is_local_requirement(line: str) -> bool:
    """repo2docker's test (``repo2docker.utils.is_local_pip_requirement``): a line that
    refers to a local path makes it copy the whole repository before ``pip install``."""
    line = line.split("#", 1)[0].strip()
    if line.startswith("--") and "=" in line:
        line = line.split("=", 1)[1]
    elif line.startswith("-"):
        line = line.split(None, 1)[1] if len(line.split(None, 1)) > 1 else ""
    return line.startswith(".") or "file://" in line


def test_binder_derives_its_requirements_from_pyproject() -> None:
    """binder/requirements.txt holds no hand copy of the dependencies: it installs revbench
    from the repository with its `notebook` extra, so pyproject.toml alone lists them."""
    tomllib = pytest.importorskip("tomllib", reason="tomllib needs Python 3.11")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "notebook" in project["optional-dependencies"]
    text = (ROOT / "binder" / "requirements.txt").read_text()
    lines = [ln for ln in (raw.split("#", 1)[0].strip() for raw in text.splitlines()) if ln]
    assert lines == ["-e .[notebook]"], (
        f"binder/requirements.txt must be the one line `-e .[notebook]` (revbench from this "
        f"repository with the extra pyproject.toml declares), not {lines}")
    # a local reference: repo2docker copies the repository first, and runs pip from its root
    assert all(_is_local_requirement(ln) for ln in lines)
    assert not _requirement_names(lines), "no package is named by hand"


def test_binder_runtime_satisfies_requires_python() -> None:
    tomllib = pytest.importorskip("tomllib", reason="tomllib needs Python 3.11")
    runtime = (ROOT / "binder" / "runtime.txt").read_text().strip()
    m = re.fullmatch(r"python-(\d+)\.(\d+)", runtime)
    assert m, f"binder/runtime.txt: `python-X.Y`, as repo2docker reads it, not {runtime!r}"
    floor = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    low = re.fullmatch(r">=\s*(\d+)\.(\d+)", floor)
    assert low and tuple(map(int, m.groups())) >= tuple(map(int, low.groups())), (runtime, floor)


def test_binder_build_warms_the_cache_that_start_uses() -> None:
    """postBuild runs every lesson (warm_cache.py warm) after exporting the cache's place,
    and start exports the same place at every launch, then hands over to the server."""
    import os

    post = (ROOT / "binder" / "postBuild").read_text()
    start = (ROOT / "binder" / "start").read_text()
    for name, text in (("postBuild", post), ("start", start)):
        assert os.access(ROOT / "binder" / name, os.X_OK), f"binder/{name} must be executable"
        assert text.startswith("#!/usr/bin/env bash")
        assert 'warm_cache.py" env)"' in text, f"binder/{name} exports warm_cache.py's environment"
    assert post.index('warm_cache.py" env') < post.index('warm_cache.py" warm')
    assert start.rstrip().endswith('exec "$@"'), "binder/start must end by running the server"
    assert "01_tour.ipynb" in post, "Binder opens on the tour"


def _warm_cache_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("binder_warm_cache", ROOT / "binder" / "warm_cache.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_binder_start_picks_the_cache_and_the_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`warm_cache.py env`: the cache's place, and generic-CPU code only when this CPU is not
    the one the build compiled for (Numba's cache is keyed by it)."""
    import json
    import shlex

    wc = _warm_cache_module()
    monkeypatch.setenv("REVBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("NUMBA_CPU_NAME", raising=False)
    export = f"export REVBENCH_CACHE_DIR={shlex.quote(str(tmp_path))}"
    assert wc.env_lines() == [export], "no warmed cache: nothing to match"
    (tmp_path / wc.CPU_FILE).write_text(json.dumps(wc.numba_cpu()))
    assert wc.env_lines() == [export], "the builder's CPU: its native code"
    (tmp_path / wc.CPU_FILE).write_text(json.dumps(["x86_64-unknown-linux-gnu", "other-cpu", "+sse2"]))
    assert wc.env_lines() == [export, "export NUMBA_CPU_NAME=generic"]
    monkeypatch.setenv("NUMBA_CPU_NAME", "host")
    assert wc.env_lines() == [export], "a NUMBA_CPU_NAME already set is left alone"
    monkeypatch.delenv("REVBENCH_CACHE_DIR")
    import sys

    assert wc.cache_dir() == Path(sys.prefix) / "var" / "cache" / "revbench", "in the environment"


def test_binder_warming_runs_the_lessons_and_leaves_the_tree_clean(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`warm_cache.py warm` on a stand-in repository: each lesson runs on a kernel (here one
    that writes a file, which is removed afterwards), the build's CPU is recorded, and with
    --strict a failing lesson fails the build."""
    pytest.importorskip("nbclient", reason="nbclient is not installed: pip install -e '.[test]'")
    import json

    wc = _warm_cache_module()
    repo = tmp_path / "repo"
    (repo / "notebooks").mkdir(parents=True)
    (repo / "notebooks" / "kept.txt").write_text("already there")
    monkeypatch.setattr(wc, "REPO", repo)
    monkeypatch.setattr(wc, "NOTEBOOKS", repo / "notebooks")
    for name, value in (("REVBENCH_CACHE_DIR", str(tmp_path / "cache")), ("JUPYTER_PREFER_ENV_PATH", "1"),
                        ("MPLBACKEND", "Agg")):
        monkeypatch.setenv(name, value)  # warm() sets them: restored after the test

    def lesson(name: str, source: str) -> None:
        nb = nbformat.v4.new_notebook()
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nb.cells = [nbformat.v4.new_code_cell(source)]
        nbformat.write(nb, repo / "notebooks" / name)

    lesson("01_writes.ipynb", "import os\nassert os.environ['REVBENCH_CACHE_DIR']\n"
                              "open('made.txt', 'w').write('x')")
    assert wc.warm(["native"], strict=True) == 0
    assert not (repo / "notebooks" / "made.txt").exists(), "a file a lesson wrote stays in the image"
    assert (repo / "notebooks" / "kept.txt").exists() and (repo / "notebooks" / "01_writes.ipynb").exists()
    assert json.loads((tmp_path / "cache" / wc.CPU_FILE).read_text()) == wc.numba_cpu()
    (repo / "notebooks" / "01_writes.ipynb").unlink()
    lesson("01_fails.ipynb", "1 / 0")
    assert wc.warm(["native"], strict=True) == 1
    assert wc.warm(["native"], strict=False) == 0, "on Binder a failing lesson must not stop the build"


def test_gitignore_keeps_notebook_checkpoints_out() -> None:
    assert ".ipynb_checkpoints/" in (ROOT / ".gitignore").read_text().splitlines()


def test_make_demo_shows_a_gradient() -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "revbench.demo"], capture_output=True, text=True,
                         timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "grad(poly, loss='y')(0.0, 2.0) -> (1.0, 13.0)" in out.stdout


def _committed_text(path: Path) -> str | None:
    """The text of ``path`` as the last commit holds it (None outside a git checkout, or
    for a file not committed yet): what a learner's session in JupyterLab autosaves into
    the working copy -- outputs -- is theirs, not the repository's (issue 27, item 10)."""
    import subprocess

    try:
        out = subprocess.run(["git", "show", f"HEAD:{path.relative_to(ROOT).as_posix()}"],
                             cwd=ROOT, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def test_gitignore_keeps_debugger_exports_out() -> None:
    """"⤓ export page" writes ``<name>-debugger.html`` into the working folder (the lessons'
    folder): ignored, so a session in the lab leaves ``git status`` clean."""
    assert "*-debugger.html" in (ROOT / ".gitignore").read_text().splitlines()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_is_committed_clean(path: Path) -> None:
    text = _committed_text(path)
    nb = nbformat.reads(text, as_version=4) if text is not None else nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3", (
        f"{path.name}: the kernelspec must be python3 (the venv's kernel, also on Binder)")
    for i, cell in enumerate(nb.cells, 1):
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, (
                f"{path.name}, cell {i}: commit notebooks without outputs "
                f"(JupyterLab: Edit > Clear Outputs of All Cells, then save)")


def _requirement_names(lines: list[str]) -> set[str]:
    names = set()
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            names.add(re.split(r"[\s<>=!~;\[]", line, maxsplit=1)[0].lower())
    return names


def test_every_lesson_of_the_course_is_there() -> None:
    """The course of issue 11: six lessons, in this order, as notebooks/NN_name.ipynb."""
    missing = [name for name in LESSONS if not (ROOT / "notebooks" / f"{name}.ipynb").is_file()]
    assert not missing, f"lessons missing from notebooks/: {missing}"


def _is_check_cell(source: str) -> bool:
    """A cell that shows an exercise's check: a statement ``check.exercise_k(...)`` on its own
    (not a cell that only uses the check's result, as in ``if check.exercise_2(f).ok:``)."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:  # a magic cell
        return False
    return any(isinstance(st, ast.Expr) and isinstance(st.value, ast.Call)
               and isinstance(st.value.func, ast.Attribute) and st.value.func.attr.startswith("exercise_")
               and isinstance(st.value.func.value, ast.Name) and st.value.func.value.id == "check"
               for st in tree.body)


def _problems(cell) -> list[str]:
    """What a student must never see: an error, or anything written to stderr."""
    found = []
    for out in cell.outputs:
        if out.output_type == "error":
            tb = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(out.get("traceback", [])))
            found.append(f"error {out.ename}: {out.evalue}\n{tb[-2000:]}")
        elif out.output_type == "stream" and out.name == "stderr":
            found.append(f"stderr: {out.text[-2000:]}")
    return found


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_runs(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Top to bottom on a fresh kernel: no error output, nothing on stderr, every debugger
    cell shows a widget, and every exercise's check cell shows its Feedback."""
    nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed: pip install -e '.[test]'")
    # The venv's python3 kernel, even where the user's own Jupyter folders define another.
    monkeypatch.setenv("JUPYTER_PREFER_ENV_PATH", "1")
    nb = nbformat.read(path, as_version=4)
    # allow_errors: every cell runs, so one failure report lists all the cells that misbehave
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=CELL_TIMEOUT_S, allow_errors=True,
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    code = [(i, c) for i, c in enumerate(nb.cells, 1) if c.cell_type == "code"]
    problems = {i: p for i, c in code if (p := _problems(c))}
    assert not problems, f"{path.name}: cells with error or stderr output (1-based cell numbers):\n" + \
        "\n".join(f"--- cell {i}:\n" + "\n".join(p) for i, p in problems.items())
    for i, cell in code:
        if _opens_debugger(cell.source):
            shown = [o for o in cell.outputs if WIDGET_VIEW in o.get("data", {})]
            assert shown, f"{path.name}, cell {i} opens the debugger but displays no widget: {cell.outputs}"
        if _is_check_cell(cell.source):
            html = [o["data"]["text/html"] for o in cell.outputs if "text/html" in o.get("data", {})]
            assert any("rb-feedback" in h for h in html), (
                f"{path.name}, cell {i} checks an exercise but shows no Feedback: {cell.outputs}")


def test_the_build_requirement_reads_the_license_field() -> None:
    """``license = "MIT"`` (an SPDX string) is read by setuptools 77 and later only: the
    build requirement must say so, or an older setuptools fails the install (issue 27)."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    if isinstance(project["project"].get("license"), str):
        req = [r for r in project["build-system"]["requires"] if r.startswith("setuptools")]
        assert req and re.fullmatch(r"setuptools>=(\d+)(\.\d+)*", req[0].replace(" ", "")), req
        assert int(re.search(r">=(\d+)", req[0]).group(1)) >= 77, req
