"""``%%reversible --expect-error``: a lesson shows a mistake's error as plain output.

The teaching notebooks show the errors a beginner meets; run top to bottom they must
have no error output, so such a cell prints the error (the same located message a failing
cell shows) to standard output.  A cell that unexpectedly runs is an error itself, so a
lesson cannot silently stop showing what it explains.
"""

# ruff: noqa: F811  (the shell and ip fixtures come from ipython_harness)
from __future__ import annotations

from ipython_harness import ip, run, shell  # noqa: F401


def test_a_static_error_is_printed_not_raised(ip):
    ran = run(ip, "%%reversible --expect-error\ndef bad(y, x):\n    y = x * x")
    assert ran.success, ran.out
    assert ran.lines[0] == "This cell fails, as it should:"
    assert "ReversibilitySyntaxError" in ran.out and "line 3" in ran.out, ran.out
    assert "bad" not in ip.user_ns, "a failing cell defines nothing"


def test_a_runtime_error_is_printed_at_its_line_and_variables_are_kept(ip):
    run(ip, "x = 2.0")
    ran = run(ip, "%%reversible --expect-error\nt = 0.0\nt += x\ndel t")
    assert ran.success, ran.out
    assert "ReversibilityError" in ran.out and "ancilla `t`" in ran.out, ran.out
    assert "line 4" in ran.out, ran.out
    assert ip.user_ns["x"] == 2.0 and "t" not in ip.user_ns


def test_a_cell_that_runs_is_an_error(ip):
    run(ip, "y = 0.0")
    ran = run(ip, "%%reversible --expect-error\ny += 1.0")
    assert not ran.success
    assert "expected to fail" in ran.out, ran.out
    assert ip.user_ns["y"] == 0.0, "its change is undone, as a failing cell's would be"


def test_a_cell_that_runs_changes_nothing_arrays_and_definitions_included(ip):
    """(Its changes used to stay: re-running the "failed" cell moved the variables again.)"""
    run(ip, "import numpy as np\na = np.array([1.0, 2.0, 3.0])\nkeep = a")
    for _ in range(2):
        ran = run(ip, "%%reversible --expect-error\na[0] *= 2.0\n")
        assert not ran.success and "what it changed is undone" in ran.out, ran.out
        assert ip.user_ns["a"].tolist() == [1.0, 2.0, 3.0] and ip.user_ns["a"] is ip.user_ns["keep"]
    ran = run(ip, "%%reversible --expect-error\ndef ok(y, x):\n    y += x\n")
    assert not ran.success and "ok" not in ip.user_ns
