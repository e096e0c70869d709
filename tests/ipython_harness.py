"""A real IPython shell with revbench's extension loaded, for the notebook tests.

``shell`` (one per test module) and ``ip`` (reset before each test) are pytest
fixtures; ``run`` executes a cell as a notebook does (it gets an ``In[n]`` number)
and returns what the user saw, colours stripped.
"""

from __future__ import annotations

import gc
import re
from dataclasses import dataclass, field

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from traitlets.config import Config

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Ran:
    """One executed cell: IPython's result and what the user saw."""

    result: object
    out: str  # stdout and stderr, colours stripped
    displayed: list = field(default_factory=list)  # rich outputs (display(...))

    @property
    def success(self) -> bool:
        return self.result.success

    @property
    def error(self) -> BaseException | None:
        return self.result.error_in_exec or self.result.error_before_exec

    @property
    def number(self) -> int:
        return self.result.execution_count

    @property
    def lines(self) -> list[str]:
        return self.out.strip().splitlines()


@pytest.fixture(scope="module")
def shell():
    config = Config()
    config.HistoryManager.hist_file = ":memory:"  # the cells are numbered, but not saved anywhere
    ip = InteractiveShell.instance(config=config)
    # the shell is one per process: start each module on an empty namespace, whatever the
    # modules before it left there (a notebook variable `y` turns `y = 0.0` into an error)
    ip.reset(new_session=False)
    if "revbench" not in ip.extension_manager.loaded:
        ip.run_line_magic("load_ext", "revbench")
    # each reset ends in a full gc.collect(): in a worker that ran other test modules first
    # (their compiled code, many objects), that cost 0.4 s a test.  What the earlier
    # modules left is moved out of the collector's sight for this module's tests; what
    # these tests make is still collected as in a notebook.
    gc.collect()
    gc.freeze()
    try:
        yield ip
    finally:
        gc.unfreeze()
        ip.run_line_magic("unload_ext", "revbench")


@pytest.fixture
def ip(shell):
    shell.reset(new_session=False)
    shell.run_cell("import numpy as np")
    return shell


def run(ip, source: str) -> Ran:
    """Run a cell as a notebook does (it gets an ``In[n]`` number)."""
    with capture_output() as cap:
        result = ip.run_cell(source, store_history=True)
    return Ran(result, ANSI.sub("", cap.stdout + cap.stderr), cap.outputs)


def run_ok(ip, source: str) -> Ran:
    ran = run(ip, source)
    assert ran.success, ran.out
    return ran
