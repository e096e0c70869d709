"""A compiled call that fails without a line (issue 27, item 1): Numba's ``IndexError`` says
only "index is out of bounds". revbench runs the call again on the Python backend, on
copies of the arguments, and raises its error instead: NumPy's message with the index and
the size, and the user's line.
"""

from __future__ import annotations

import numpy as np
import pytest

import revbench
import revbench.function as function_module


def test_an_index_error_names_the_line_the_index_and_the_size():
    f = revbench.define("def total(s, x):\n    for i in range(len(x) + 1):\n        s += x[i]\n",
                        {})["total"]
    with pytest.raises(IndexError) as info:
        f(0.0, np.arange(3.0))
    text = str(info.value) + "".join(getattr(info.value, "__notes__", []))
    assert "index 3 is out of bounds for axis 0 with size 3" in text
    assert "in reversible function total, <revbench-define-" in text and "line 3: s += x[i]" in text
    assert "does not know its lines" not in text


def test_the_replay_runs_on_copies_and_the_callers_data_is_restored():
    f = revbench.define("def bump(x, k):\n    for i in range(k):\n        x[i] += 1.0\n", {})["bump"]
    x = np.zeros(3)
    with pytest.raises(IndexError) as info:
        f(x, 5)
    assert "line 3: x[i] += 1.0" in "".join(info.value.__notes__)
    np.testing.assert_array_equal(x, [0.0, 0.0, 0.0])


def test_an_error_inside_a_callee_names_the_callees_line():
    fns = revbench.define("def pick(s, x, i):\n    s += x[i]\n\n"
                          "def outer(s, x):\n    for i in range(4):\n        pick(s, x, i)\n", {})
    with pytest.raises(IndexError) as info:
        fns["outer"](0.0, np.arange(3.0))
    notes = "".join(info.value.__notes__)
    assert "in reversible function pick" in notes and "line 2: s += x[i]" in notes


def test_a_replay_that_would_take_too_long_keeps_the_compiled_error(monkeypatch):
    monkeypatch.setattr(function_module, "REPLAY_SECONDS", 0.0)
    f = revbench.define("def late(s, x):\n    for i in range(200000):\n        s += 1.0\n"
                        "    s += x[7]\n", {})["late"]
    with pytest.raises(IndexError) as info:
        f(0.0, np.zeros(3))
    assert "run it with backend='python' to see the line" in "".join(info.value.__notes__)


def test_the_python_backend_is_not_replayed():
    f = revbench.define("def total(s, x):\n    s += x[5]\n", {}, backend="python")["total"]
    with pytest.raises(IndexError) as info:
        f(0.0, np.arange(3.0))
    assert "line 2: s += x[5]" in "".join(info.value.__notes__)


def test_the_replay_prints_nothing_again(capsys):
    f = revbench.define("def loud(s, x):\n    print('once', s)\n    s += x[9]\n", {})["loud"]
    with pytest.raises(IndexError):
        f(0.0, np.zeros(2))
    assert capsys.readouterr().out.count("once") == 1


def test_a_division_by_zero_is_located_too():
    f = revbench.define("def ratio(s, k, m):\n    s += k // m\n", {})["ratio"]
    with pytest.raises(ZeroDivisionError) as info:
        f(0, 3, 0)
    assert "line 2: s += k // m" in "".join(info.value.__notes__)


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_a_float_divided_by_zero_is_the_same_error_with_its_line_on_both_backends(backend):
    """A zero divisor raises Python's ZeroDivisionError on every path (docs/language.md
    section 9), an array's element too (NumPy's float64 would give inf): compiled code
    raises it and is replayed on the Python backend for the same message, with the line as
    a note.  The caller's arrays are unchanged."""
    f = revbench.define("def g(s, y, x):\n    y[0] += x[0] * 2.0\n    s += x[0] / x[1]\n",
                        {}, backend=backend)["g"]
    y, x = np.array([1.0]), np.array([1.0, 0.0])
    with pytest.raises(ZeroDivisionError, match=r"^float division by zero") as info:
        f(0.0, y, x)
    assert any("line 3: s += x[0] / x[1]" in note for note in info.value.__notes__)
    np.testing.assert_array_equal(y, [1.0])
