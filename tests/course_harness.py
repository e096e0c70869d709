"""What the tests of the course's exercise checks share (``tests/test_course_lesson0*.py``).

Each lesson's test loads the reference solutions from ``notebooks/solutions/`` as a
teacher would (by file path: the folder is no package), defines typical wrong answers on
the Python backend (nothing to compile), reads the notebook's own cells (so the skeleton a
student starts from is the one tested) and asserts a hint's wording.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import revbench
from revbench.course.feedback import Feedback

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"


def load_solutions(lesson: str) -> ModuleType:
    """``notebooks/solutions/lesson<lesson>.py``, imported from its file."""
    path = NOTEBOOKS / "solutions" / f"lesson{lesson}.py"
    spec = importlib.util.spec_from_file_location(f"lesson{lesson}_solutions", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wrong(source: str) -> revbench.ReversibleFunction:
    """The one function ``source`` defines: a student's (wrong) answer."""
    (f,) = revbench.define(source, {"np": np, "math": math}, backend="python").values()
    return f


def code_cells(notebook: Path) -> list[str]:
    """The sources of ``notebook``'s code cells, in order."""
    nbformat = pytest.importorskip("nbformat")
    return [c.source for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code"]


def cell_with(notebook: Path, needle: str) -> str:
    """The one code cell holding ``needle``, without its ``%%`` magic line if it has one."""
    found = [s for s in code_cells(notebook) if needle in s]
    assert len(found) == 1, f"{len(found)} cells of {notebook.name} hold {needle!r}"
    return found[0].split("\n", 1)[1] if found[0].startswith("%%") else found[0]


def reversible_cell(notebook: Path, name: str) -> str:
    """The ``%%reversible`` cell that defines ``name``, without the magic line."""
    return cell_with(notebook, f"def {name}(")


def assert_hint(feedback: Feedback, *phrases: str) -> None:
    """A wrong answer's feedback: not ok, and its text says each of ``phrases``."""
    assert not feedback.ok, feedback.text
    for p in phrases:
        assert p in feedback.text, f"{p!r} not in:\n{feedback.text}"
