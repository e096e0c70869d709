"""What every exercise's check cell shows (``revbench.course.feedback``): a value, never an
exception; the student's own errors become hints; the HTML escapes what it quotes and takes
its text colour from JupyterLab's theme."""

from __future__ import annotations

import numpy as np

import revbench
from revbench.course.feedback import attempt, call, close, expect_outputs, fail, hint, show, success


def test_attempt_turns_fail_and_student_errors_into_hints():
    assert attempt("Ex", lambda: success("Ex")).ok

    def wrong():
        fail("Ex", "y is 3.0, expected 4.0", "the product rule")

    fb = attempt("Ex", wrong)
    assert not fb.ok and fb.title == "y is 3.0, expected 4.0" and fb.details == ("the product rule",)

    def raises():
        raise revbench.ReversibilityError("ancilla `t` is not back at 0.0\nmore lines")

    fb = attempt("Ex", raises)
    assert not fb.ok
    assert fb.title == "your code raised ReversibilityError: ancilla `t` is not back at 0.0"
    assert "read the whole message" in fb.text


def test_text_and_html():
    fb = hint("Exercise 9.9", "x is <0>", "use `y += x`")
    assert fb.text == "✘ Exercise 9.9: x is <0>\n  use `y += x`" and not fb
    page = fb._repr_html_()
    assert "x is &lt;0&gt;" in page and "<0>" not in page
    assert "var(--jp-content-font-color1" in page and "rb-feedback-hint" in page
    assert success("Ex", "Right!")._repr_html_().count("rb-feedback-ok") == 1


def test_show_and_close():
    assert show(2.0) == "2.0" and show(np.float64(0.1)) == "0.1" and show((1.0,)) == "(1.0,)"
    assert show(float("inf")) == "inf" and show(1e-20) == "1e-20"
    assert close((1.0, np.array([1, 2])), (1.0 + 1e-12, np.array([1, 2])))
    assert not close(np.array([1, 2]), np.array([1, 3])) and not close(np.ones(2), np.ones(3))
    assert not close(1, 1.0 + 1e-3)


def test_checks_run_on_copies():
    f = revbench.define("def f(x):\n    x += 1.0\n", backend="python")["f"]
    x = np.zeros(2)
    call(f, x)
    assert x.tolist() == [0.0, 0.0]
    fb = attempt("Ex", lambda: (expect_outputs("Ex", f, (x,), (np.full(2, 2.0),)), success("Ex"))[1])
    assert not fb.ok and "`x` ends as [1. 1.], expected [2. 2.]" in fb.title
    assert x.tolist() == [0.0, 0.0]
