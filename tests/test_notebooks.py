"""The teaching notebooks in ``notebooks/`` run top to bottom, and are committed clean.

Every notebook is executed with nbclient on the venv's ``python3`` kernel, from its own
folder (as JupyterLab and Binder run it); any cell error fails the test with the cell and
its traceback.  A cell that opens the debugger must display a widget.  The quick checks
make sure the notebooks are stored without outputs, ask for the ``python3`` kernel, and
that Binder's requirements keep up with ``pyproject.toml``.
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


def test_binder_installs_what_pyproject_declares() -> None:
    """binder/requirements.txt (an image layer repo2docker can reuse) lists exactly the
    dependencies and the `notebook` extra of pyproject.toml: no hand copy drifting away."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = set(project["dependencies"]) | set(project["optional-dependencies"]["notebook"])
    listed = {ln.strip() for ln in (ROOT / "binder" / "requirements.txt").read_text().splitlines()
              if ln.strip() and not ln.lstrip().startswith("#")}
    assert listed == declared, (f"missing from binder: {sorted(declared - listed)}; "
                                f"not in pyproject: {sorted(listed - declared)}")


def test_gitignore_keeps_notebook_checkpoints_out() -> None:
    assert ".ipynb_checkpoints/" in (ROOT / ".gitignore").read_text().splitlines()


def test_make_demo_shows_a_gradient() -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "revbench.demo"], capture_output=True, text=True,
                         timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "grad(poly, loss='y')(0.0, 2.0) -> (1.0, 13.0)" in out.stdout


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_is_committed_clean(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
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


def test_binder_installs_what_the_notebooks_need() -> None:
    tomllib = pytest.importorskip("tomllib", reason="tomllib needs Python 3.11")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    needed = _requirement_names(project["dependencies"] + project["optional-dependencies"]["notebook"])
    binder = _requirement_names((ROOT / "binder" / "requirements.txt").read_text().splitlines())
    assert needed <= binder, f"binder/requirements.txt lacks {sorted(needed - binder)}"
    assert ".[notebook]" in (ROOT / "binder" / "postBuild").read_text(), "postBuild installs revbench"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_runs(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed: pip install -e '.[test]'")
    # The venv's python3 kernel, even where the user's own Jupyter folders define another.
    monkeypatch.setenv("JUPYTER_PREFER_ENV_PATH", "1")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=CELL_TIMEOUT_S,
                                     resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as e:
        plain = re.sub(r"\x1b\[[0-9;]*m", "", str(e))  # IPython colours its tracebacks
        pytest.fail(f"{path.name}: a cell failed:\n{plain}", pytrace=False)
    for i, cell in enumerate(nb.cells, 1):
        if cell.cell_type == "code" and _opens_debugger(cell.source):
            shown = [o for o in cell.outputs if WIDGET_VIEW in o.get("data", {})]
            assert shown, f"{path.name}, cell {i} opens the debugger but displays no widget: {cell.outputs}"
