"""What the error says when Numba cannot compile an external function or a custom adjoint.

A function compiled by Numba compiles every function it calls with Numba, whatever their own
``backend=``: the Python backend of the function called decides for all it calls.  So the fix
the message names depends on who is compiled: the function itself (give *it*
``backend='python'``) or a caller (give the *caller* ``backend='python'``; the callee's own
``backend='python'`` does not help -- a user who had given it was told to give it).
"""

from __future__ import annotations

import numpy as np
import pytest

import revbench
from revbench import ReversibilityTypeError, reversible

#: the message's first part, the same in every case
NOT_NUMBA = "cannot be compiled by Numba"


def _twice(x):
    """Plain Python, which code compiled by Numba cannot call."""
    return 2.0 * x


def _py_adjoint(out, x, out_bar, x_bar):
    return out_bar, x_bar + _twice(out_bar)


@revbench.external(adjoint=_py_adjoint, backend="python")
def mvp_py(x):
    return _twice(x)


@revbench.external(adjoint=_py_adjoint)
def mvp_nb(x):
    return _twice(x)


@reversible
def caller_nb(L, y, x):
    mvp_py(y, x)
    L += y * y


@reversible(backend="python")
def caller_py(L, y, x):
    mvp_py(y, x)
    L += y * y


@reversible(backend="python")
def middle_py(y, x):
    mvp_py(y, x)


@reversible
def outer_nb(L, y, x):
    middle_py(y, x)
    L += y * y


@reversible(backend="python")
def outer_py_of_numba_external(L, y, x):
    mvp_nb(y, x)
    L += y * y


@reversible(backend="python")
def step_py(y, x):
    y += 2.0 * x


@reversible
def step_nb(y, x):
    y += 2.0 * x


@reversible
def calls_step_py(L, y, x):
    step_py(y, x)
    L += y * y


@pytest.fixture
def adjoints():
    """``step_py`` and ``step_nb`` with a custom adjoint that calls plain Python."""
    def step_adjoint(y, x, y_bar, x_bar):
        return y_bar, x_bar + _twice(y_bar)

    for f in (step_py, step_nb):
        revbench.custom_adjoint(f, step_adjoint)
    yield
    for f in (step_py, step_nb):
        revbench.remove_adjoint(f)


def _message(thunk) -> str:
    with pytest.raises(ReversibilityTypeError, match=NOT_NUMBA) as info:
        thunk()
    return str(info.value)


def _says_the_caller(msg: str, callee: str, caller: str, code: str) -> None:
    assert (f"{callee} runs here as part of {caller}, which has backend='numba': a function "
            "compiled by Numba compiles every function it calls with Numba, whatever their "
            f"own backend= says. To call other Python, give {caller} backend='python' (it "
            f"then runs {callee} as Python, whatever {callee}'s own backend), or write {code} "
            "in the Python that Numba compiles") in msg
    assert f"give {callee} backend" not in msg and f"define {callee} with" not in msg


def test_a_python_external_called_from_compiled_code_names_the_caller():
    msg = _message(lambda: caller_nb(0.0, 0.0, 3.0))
    assert "the external function mvp_py cannot be compiled by Numba" in msg
    _says_the_caller(msg, "mvp_py", "caller_nb", "mvp_py")
    assert "in reversible function caller_nb" in msg
    # ... and the fix it names is what works
    assert caller_py(0.0, 0.0, 3.0) == (36.0, 6.0, 3.0)
    assert revbench.grad(caller_py, loss="L")(0.0, 0.0, 3.0) == (1.0, 12.0, 24.0)


def test_gradients_name_the_caller_too():
    msg = _message(lambda: revbench.grad(caller_nb, loss="L")(0.0, 0.0, 3.0))
    _says_the_caller(msg, "mvp_py", "caller_nb", "mvp_py")


def test_through_a_python_function_the_outermost_compiled_one_is_named():
    """``outer_nb`` (Numba) calls ``middle_py`` (Python) calls ``mvp_py``: ``outer_nb``'s
    backend decides for both."""
    msg = _message(lambda: outer_nb(0.0, 0.0, 3.0))
    _says_the_caller(msg, "mvp_py", "outer_nb", "mvp_py")
    assert "give middle_py backend" not in msg


def test_a_python_caller_runs_a_numba_backend_external_as_python():
    assert outer_py_of_numba_external(0.0, 0.0, 3.0) == (36.0, 6.0, 3.0)


def test_a_numba_external_called_itself_is_told_to_take_the_python_backend():
    msg = _message(lambda: mvp_nb(0.0, 3.0))
    assert msg.startswith("Numba could not compile this statement: the external function "
                          "mvp_nb cannot be compiled by Numba")
    assert msg.split("\n")[0].endswith(
        "Under backend='numba' it must compile with Numba (numpy, np.linalg, math); to call "
        "other Python, define mvp_nb with revbench.external(mvp_nb, ..., backend='python')")
    assert mvp_py(0.0, 3.0) == (6.0, 3.0)  # what that gives


def test_an_inverse_is_told_about_its_function():
    msg = _message(lambda: (~mvp_nb)(6.0, 3.0))
    assert msg.split("\n")[0].endswith(
        "define mvp_nb with revbench.external(mvp_nb, ..., backend='python')")
    msg = _message(lambda: (~caller_nb)(36.0, 6.0, 3.0))
    _says_the_caller(msg, "mvp_py", "caller_nb", "mvp_py")


def test_a_custom_adjoint_of_a_python_function_called_from_compiled_code(adjoints):
    assert revbench.grad(step_py, loss="y")(0.0, 3.0) == (1.0, 2.0)  # on its own: Python
    msg = _message(lambda: revbench.grad(calls_step_py, loss="L")(0.0, 0.0, 3.0))
    assert "the custom adjoint step_adjoint of step_py cannot be compiled by Numba" in msg
    _says_the_caller(msg, "step_py", "calls_step_py", "step_adjoint")


def test_a_custom_adjoint_of_a_numba_function_called_itself(adjoints):
    msg = _message(lambda: revbench.grad(step_nb, loss="y")(0.0, 3.0))
    assert "the custom adjoint step_adjoint of step_nb cannot be compiled by Numba" in msg
    assert msg.split("\n")[0].endswith("; to call other Python, give step_nb backend='python'")


def test_uncompiled_paths_keep_the_whole_advice():
    """Where the error is not told against a function called (here: read as Numba raised
    it), the fix covers both: the function's own backend and its callers'."""
    from revbench.backends.numba_backend import _fix_for_the_caller

    text = ("the external function mvp_nb cannot be compiled by Numba: x. Under "
            "backend='numba' it must compile with Numba (numpy, np.linalg, math); to call "
            "other Python, define mvp_nb with revbench.external(mvp_nb, ..., "
            "backend='python'), and give backend='python' to the reversible functions that "
            "call it, if any: a function compiled by Numba compiles every function it calls "
            "with Numba, whatever their own backend= says")
    with pytest.raises(ReversibilityTypeError):  # (its stand-in is registered when compiled)
        mvp_nb(0.0, 3.0)
    assert _fix_for_the_caller(text, "mvp_nb").endswith(
        "define mvp_nb with revbench.external(mvp_nb, ..., backend='python')")
    _says_the_caller(_fix_for_the_caller(text, "some_caller"), "mvp_nb", "some_caller", "mvp_nb")
    assert _fix_for_the_caller("something else", "f") == "something else"


def test_numba_compiles_what_the_advice_says_it_compiles():
    """The advice's other way: the same external written in what Numba compiles."""
    def adjoint(out, x, out_bar, x_bar):
        return out_bar, x_bar + 2.0 * out_bar

    @revbench.external(adjoint=adjoint)
    def mvp_ok(x):
        return 2.0 * x

    ns = {"mvp_ok": mvp_ok}
    f = revbench.define("def g(L, y, x):\n    mvp_ok(y, x)\n    L += y * y\n", ns)["g"]
    assert revbench.grad(f, loss="L")(0.0, 0.0, np.float64(3.0)) == (1.0, 12.0, 24.0)
