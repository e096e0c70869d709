"""Every runtime check of the contract (§5) raises a ReversibilityError that says what failed.

The message names the variable, the expected and actual values, the function and the
source line; the attributes ``variable``, ``expected``, ``actual``, ``function`` and
``lineno`` are set.  A failed call leaves the caller's arrays exactly as they were.
"""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pytest

import revbench
from revbench import ReversibilityError, ReversibilitySyntaxError, ReversibilityTypeError

MARK = "# <-"


@revbench.reversible
def mod_dirty(y, x):
    t = 0.0
    t += x
    y += t
    del t


@revbench.reversible(backend="python")
def mod_dirty_py(y, x):
    t = 0.0
    t += x
    y += t
    del t


def marked_line(source: str) -> tuple[int, str]:
    """The 1-based number and stripped text (without the marker) of the marked line."""
    lines = textwrap.dedent(source).splitlines()
    hits = [(k, line) for k, line in enumerate(lines, 1) if line.rstrip().endswith(MARK)]
    assert len(hits) == 1
    k, line = hits[0]
    return k, line.split(MARK)[0].strip()


def fails(f, *args) -> ReversibilityError:
    with pytest.raises(ReversibilityError) as info:
        f(*args)
    return info.value


def assert_error(err: ReversibilityError, source: str, *, variable=None, function="f",
                 expected=None, actual=None, values_in_message=True) -> None:
    """The error names the variable, expected/actual values, the function and the line."""
    line_no, text = marked_line(source)
    msg = str(err)
    assert isinstance(err, ReversibilityError)
    assert not isinstance(err, ReversibilitySyntaxError)
    assert err.lineno == line_no, f"lineno {err.lineno}, expected {line_no}: {msg}"
    assert err.function == function, (err.function, msg)
    assert function in msg
    assert text in msg, f"message should show the source line {text!r}: {msg}"
    if variable is not None:
        assert err.variable == variable, (err.variable, msg)
        assert variable in msg
    else:
        assert err.variable
    if expected is not None:
        assert _same(err.expected, expected), (err.expected, expected)
        if values_in_message:
            assert _text(expected) in msg, f"message should show expected {expected!r}: {msg}"
    if actual is not None:
        assert _same(err.actual, actual), (err.actual, actual)
        if values_in_message:
            assert _text(actual) in msg, f"message should show actual {actual!r}: {msg}"


def _same(a, b) -> bool:
    if hasattr(a, "item"):
        a = a.item()
    if isinstance(b, float):
        return abs(a - b) <= 1e-12
    return a == b


def _text(v) -> str:
    return str(v)


@pytest.fixture
def default_tolerance():
    yield
    revbench.set_tolerance(atol=1e-8, rtol=1e-8)


# --------------------------------------------------------------------------- #
# ancillas
# --------------------------------------------------------------------------- #
DIRTY = """
    def f(y, x):
        t = 0.0
        t += x
        y += t
        del t  # <-
"""


def test_dirty_scalar_ancilla(make):
    f = make(DIRTY)
    err = fails(f, 0.0, 2.5)
    assert_error(err, DIRTY, variable="t", expected=0.0, actual=2.5)
    assert "del t" in str(err)
    # a clean ancilla passes
    assert f(1.0, 0.0) == (1.0, 0.0)


@pytest.mark.parametrize("fn", [mod_dirty, mod_dirty_py], ids=["numba", "python"])
def test_decorated_function_error_points_at_file_line(fn):
    err = fails(fn, 0.0, 1.0)
    assert err.filename == __file__
    assert err.lineno == fn.__wrapped__.__code__.co_firstlineno + 5  # decorator line + 5
    assert err.variable == "t" and err.function == fn.__name__
    assert "del t" in str(err) and fn.__name__ in str(err)


def test_dirty_ancilla_in_inverse(make):
    src = """
        def f(y, x):
            t = 0.0  # <-
            y += x
            t += y
            del t
    """
    f = make(src)
    assert f(0.0, 0.0) == (0.0, 0.0)
    # the inverse allocates t at `del t`, runs t -= y (t = -3), and deallocates it where
    # the forward allocated it
    err = fails(~f, 3.0, 1.0)
    assert_error(err, src, variable="t", expected=0.0, actual=-3.0)
    assert err.function == "f"
    assert "inverse" in str(err)


def test_dirty_ancilla_allocated_from_expression(make):
    src = """
        def f(y, x):
            t = x * 2.0
            t += 1.0
            y += t
            del t  # <-
    """
    f = make(src)
    err = fails(f, 0.0, 1.5)
    assert_error(err, src, variable="t", expected=3.0, actual=4.0)


def test_dirty_int_ancilla(make):
    src = """
        def f(y, n):
            k = 0
            k += n
            y += k
            del k  # <-
    """
    f = make(src)
    err = fails(f, 0, 7)
    assert_error(err, src, variable="k", expected=0, actual=7)


def test_dirty_bool_ancilla(make):
    src = """
        def f(y, x):
            b = x > 0.0
            b ^= True
            del b  # <-
    """
    f = make(src)
    err = fails(f, 0.0, 1.0)
    assert_error(err, src, variable="b", expected=True, actual=False)


def test_dirty_array_ancilla_names_element(make):
    src = """
        def f(y, x):
            t = np.zeros(3)
            t[1] += x
            y += t[1]
            del t  # <-
    """
    f = make(src)
    err = fails(f, 0.0, 4.0)
    assert_error(err, src, variable="t[1]", expected=0.0, actual=4.0)


def test_dirty_2d_array_ancilla_names_element(make):
    src = """
        def f(y, x):
            T = np.zeros((2, 3))
            T[1, 2] += x
            del T  # <-
    """
    f = make(src)
    err = fails(f, 0.0, 4.0)
    assert_error(err, src, variable="T[1, 2]", expected=0.0, actual=4.0)


def test_dirty_copy_ancilla(make):
    src = """
        def f(y, x):
            t = x.copy()
            t[0] += y
            del t  # <-
    """
    f = make(src)
    err = fails(f, 2.0, np.array([1.0, 5.0]))
    assert_error(err, src, variable="t[0]", expected=1.0, actual=3.0)


def test_dirty_ancilla_in_callee_names_callee(make):
    src = """
        def g(y, x):
            t = 0.0
            t += x
            del t  # <-

        def f(y, x):
            g(y, x)
    """
    f = make(src)
    err = fails(f, 0.0, 1.0)
    assert_error(err, src, variable="t", function="g", expected=0.0, actual=1.0)


def test_dirty_ancilla_in_inverse_call_names_callee(make):
    src = """
        def g(y, x):
            t = 0.0  # <-
            t += x
            y += t
            del t

        def f(y, x):
            ~g(y, x)
    """
    f = make(src)
    err = fails(f, 0.0, 1.0)
    assert_error(err, src, variable="t", function="g", expected=0.0, actual=-1.0)
    assert "inverse" in str(err)


# --------------------------------------------------------------------------- #
# if / while / for
# --------------------------------------------------------------------------- #
def test_if_postcondition_mismatch(make):
    src = """
        def f(y, x):
            if (x > 0.0, y > 10.0):  # <-
                y += x
    """
    f = make(src)
    assert f(20.0, 1.0) == (21.0, 1.0)
    err = fails(f, 0.0, 1.0)
    assert_error(err, src, variable="y > 10.0", expected=True, actual=False)


def test_if_default_postcondition_mismatch(make):
    src = """
        def f(y, x):
            if x > 0.0:  # <-
                x -= 5.0
    """
    f = make(src)
    err = fails(f, 0.0, 1.0)
    assert_error(err, src, variable="x > 0.0", expected=True, actual=False)


def test_if_postcondition_true_without_branch(make):
    src = """
        def f(y, x):
            if (x > 0.0, y > 0.0):  # <-
                y += 1.0
            else:
                y += 5.0
    """
    f = make(src)
    err = fails(f, 0.0, -1.0)
    assert_error(err, src, variable="y > 0.0", expected=False, actual=True)


def test_while_postcondition_true_on_entry(make):
    src = """
        def f(k, n):
            while (k < n, k > 0):  # <-
                k += 1
    """
    f = make(src)
    assert f(0, 3) == (3, 3)
    err = fails(f, 1, 3)
    assert_error(err, src, variable="k > 0", expected=False, actual=True)


def test_while_postcondition_false_after_iteration(make):
    src = """
        def f(k, n):
            while (k < n, k > 5):  # <-
                k += 1
    """
    f = make(src)
    err = fails(f, 0, 3)
    assert_error(err, src, variable="k > 5", expected=True, actual=False)


@pytest.mark.parametrize("update, bound, start, actual", [("n += 1", "n", 4, 8), ("a -= 1", "a", 0, -4),
                                                          ("s += 1", "s", 1, 5)])
def test_for_bound_changed(make, update, bound, start, actual):
    src = f"""
        def f(y, a, n, s):
            for i in range(a, n, s):  # <-
                y += 1.0
                {update}
    """
    f = make(src)
    err = fails(f, 0.0, 0, 4, 1)
    assert_error(err, src, variable=bound, expected=start, actual=actual)


def test_for_bound_expression_changed(make):
    src = """
        def f(x, n):
            for i in range(len(x) - n):  # <-
                n += 1
    """
    f = make(src)
    err = fails(f, np.zeros(5), 0)
    assert_error(err, src, variable="len(x) - n", expected=5, actual=0)


# --------------------------------------------------------------------------- #
# aliasing
# --------------------------------------------------------------------------- #
ALIAS = """
    def f(x, i, j):
        x[i] += 2.0 * x[j]  # <-
"""


def test_runtime_alias(make):
    f = make(ALIAS)
    x = np.array([1.0, 2.0, 3.0])
    f(x, 0, 1)
    np.testing.assert_array_equal(x, [5.0, 2.0, 3.0])
    err = fails(f, x, 2, 2)
    assert_error(err, ALIAS, values_in_message=False)
    msg = str(err)
    assert "x[i]" in msg and "x[j]" in msg
    assert "x" in err.variable
    assert "2" in msg
    np.testing.assert_array_equal(x, [5.0, 2.0, 3.0])


@pytest.mark.parametrize("i, j", [(-1, 2), (2, -1), (-3, 0), (0, -3)])
def test_runtime_alias_negative_index(make, i, j):
    f = make(ALIAS)
    err = fails(f, np.array([1.0, 2.0, 3.0]), i, j)
    assert_error(err, ALIAS, values_in_message=False)


def test_runtime_alias_2d(make):
    src = """
        def f(A, i, j):
            A[i, j] += A[j, i]  # <-
    """
    f = make(src)
    A = np.arange(9.0).reshape(3, 3)
    f(A, 0, 1)
    err = fails(f, A, 1, 1)
    assert_error(err, src, values_in_message=False)


def test_runtime_alias_in_swap(make):
    src = """
        def f(x, i, j):
            x[i] *= 2.0
            x[i], x[j] = x[j], x[i]  # <-
    """
    f = make(src)
    x = np.array([1.0, 2.0])
    f(x, 0, 1)
    np.testing.assert_array_equal(x, [2.0, 2.0])
    x = np.array([1.0, 2.0])
    # swapping an element with itself is harmless or refused; it must not corrupt x
    try:
        f(x, 0, 0)
    except ReversibilityError as err:
        assert err.lineno == marked_line(src)[0]
        np.testing.assert_array_equal(x, [1.0, 2.0])
    else:
        np.testing.assert_array_equal(x, [2.0, 2.0])


CALL_ALIAS = """
    def g(a, b):
        a += b

    def f(x, i, j):
        g(x[i], x[j])  # <-
"""


def test_call_argument_alias(make):
    f = make(CALL_ALIAS)
    x = np.array([1.0, 2.0, 3.0])
    f(x, 0, 2)
    np.testing.assert_array_equal(x, [4.0, 2.0, 3.0])
    err = fails(f, x, 1, 1)
    assert_error(err, CALL_ALIAS, values_in_message=False)
    assert "x[i]" in str(err) and "x[j]" in str(err)
    np.testing.assert_array_equal(x, [4.0, 2.0, 3.0])


def test_call_argument_alias_negative_index(make):
    f = make(CALL_ALIAS)
    err = fails(f, np.array([1.0, 2.0, 3.0]), -1, 2)
    assert_error(err, CALL_ALIAS, values_in_message=False)


def test_call_argument_alias_in_inverse_call(make):
    src = """
        def g(a, b):
            a += b

        def f(x, i, j):
            ~g(x[i], x[j])  # <-
    """
    f = make(src)
    err = fails(f, np.array([1.0, 2.0]), 0, 0)
    assert_error(err, src, values_in_message=False)


# --------------------------------------------------------------------------- #
# *= and /= by zero, inexact integer division
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("op", ["*=", "/="])
def test_update_by_zero_names_operand(make, op):
    src = f"""
        def f(y, x):
            y {op} x - 1.0  # <-
    """
    f = make(src)
    err = fails(f, 3.0, 1.0)
    assert_error(err, src, variable="x - 1.0", values_in_message=False)
    assert op in str(err)
    assert "0" in str(err)


@pytest.mark.parametrize("op", ["*=", "/="])
def test_update_by_zero_int_and_complex(make, op):
    src = f"""
        def f(k, n, z, w):
            k {op} n
            z {op} w  # <-
    """
    f = make(src)
    err = fails(f, 4, 2, 1j, 0j)
    assert_error(err, src, variable="w", values_in_message=False)
    err = fails(f, 4, 0, 1j, 1j)
    assert err.variable == "n" and err.lineno == marked_line(src)[0] - 1


def test_update_by_zero_in_inverse(make):
    src = """
        def f(y, x):
            y += 1.0
            y /= x  # <-
    """
    f = make(src)
    err = fails(~f, 3.0, 0.0)
    assert_error(err, src, variable="x", values_in_message=False)


def test_whole_array_update_by_zero_element(make):
    src = """
        def f(y, x):
            y *= x  # <-
    """
    f = make(src)
    y = np.array([1.0, 2.0, 3.0])
    err = fails(f, y, np.array([1.0, 0.0, 2.0]))
    assert err.lineno == marked_line(src)[0]
    np.testing.assert_array_equal(y, [1.0, 2.0, 3.0])


def test_inexact_integer_division(make):
    src = """
        def f(k, n):
            k /= n  # <-
    """
    f = make(src)
    assert f(12, 4) == (3, 4)
    err = fails(f, 7, 2)
    assert_error(err, src, variable="n", values_in_message=False)
    msg = str(err)
    assert "7" in msg and "2" in msg


def test_inexact_integer_division_array_element(make):
    src = """
        def f(x, n):
            for i in range(len(x)):
                x[i] /= n  # <-
    """
    f = make(src)
    x = np.array([4, 6, 7])
    err = fails(f, x, 2)
    assert_error(err, src, variable="n", values_in_message=False)
    np.testing.assert_array_equal(x, [4, 6, 7])


# --------------------------------------------------------------------------- #
# whole-array shape mismatch
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("shape_y, shape_x", [((3,), (4,)), ((2, 3), (3, 2)), ((2, 3), (2, 4))])
def test_whole_array_shape_mismatch(make, shape_y, shape_x):
    src = """
        def f(y, x):
            y += 2.0 * x  # <-
    """
    f = make(src)
    y = np.ones(shape_y)
    err = fails(f, y, np.ones(shape_x))
    assert err.lineno == marked_line(src)[0], str(err)
    assert err.function == "f"
    assert "y" in str(err) and "x" in str(err)
    assert err.variable in ("y", "x")
    np.testing.assert_array_equal(y, np.ones(shape_y))


SWAP = """
    def f(a, b):
        a, b = b, a  # <-
"""


def test_whole_array_swap_shape_mismatch(make):
    f = make(SWAP)
    a, b = np.ones(3), np.zeros(4)
    err = fails(f, a, b)
    assert err.lineno == marked_line(SWAP)[0] and err.function == "f"
    assert "a" in str(err) and "b" in str(err)
    np.testing.assert_array_equal(a, np.ones(3))
    np.testing.assert_array_equal(b, np.zeros(4))


@pytest.mark.parametrize("a, b", [(1.0, 2), (np.ones(3), np.zeros(3, dtype=np.int64)), (np.ones(3), 1.0)],
                         ids=["float-int", "float-int-arrays", "array-scalar"])
def test_swap_of_different_types_is_type_error(make, a, b):
    f = make(SWAP)
    with pytest.raises(ReversibilityTypeError) as info:
        f(a, b)
    assert isinstance(info.value, TypeError)
    assert "a" in str(info.value) and "b" in str(info.value)


@pytest.mark.parametrize("shape_y, shape_x", [((3,), (3, 1)), ((3, 1), (3,))])
def test_whole_array_ndim_mismatch(make, shape_y, shape_x):
    f = make("""
        def f(y, x):
            y += x
    """)
    with pytest.raises(ReversibilityError) as info:
        f(np.ones(shape_y), np.ones(shape_x))
    msg = str(info.value)
    assert "dimension" in msg or "shape" in msg or "ndim" in msg, msg


# --------------------------------------------------------------------------- #
# tolerances
# --------------------------------------------------------------------------- #
TOL_SRC = """
    def f(y, x, d):
        t = x * 1.0
        t += d
        y += t
        del t  # <-
"""


def test_default_tolerance(make, default_tolerance):
    f = make(TOL_SRC)
    f(0.0, 0.0, 5e-9)  # |d| <= atol
    f(0.0, 1e6, 5e-3)  # |d| <= atol + rtol * 1e6
    fails(f, 0.0, 0.0, 1e-6)
    fails(f, 0.0, 1e6, 1.0)


def test_per_function_atol(make, default_tolerance):
    f = make(TOL_SRC, atol=1e-5)
    f(0.0, 0.0, 1e-6)
    err = fails(f, 0.0, 0.0, 1e-4)
    assert_error(err, TOL_SRC, variable="t", expected=0.0, actual=1e-4)


def test_per_function_atol_in_inverse_view(make, default_tolerance):
    f = make(TOL_SRC, atol=1e-5)
    (~f)(0.0, 0.0, 1e-6)
    fails(~f, 0.0, 0.0, 1e-4)


def test_per_function_rtol(make, default_tolerance):
    f = make(TOL_SRC, rtol=1e-5)
    f(0.0, 1e6, 1.0)
    fails(f, 0.0, 1e6, 100.0)


def test_per_function_tolerance_in_decorator_of_source(backend, default_tolerance):
    f = revbench.define(textwrap.dedent("""
        @reversible(atol=1e-3)
        def f(y, x, d):
            t = x * 1.0
            t += d
            del t
    """), {}, backend=backend)["f"]
    f(0.0, 0.0, 1e-4)
    fails(f, 0.0, 0.0, 1e-2)


def test_global_tolerance(make, default_tolerance):
    f = make(TOL_SRC)
    fails(f, 0.0, 0.0, 1e-6)
    revbench.set_tolerance(atol=1e-5)
    f(0.0, 0.0, 1e-6)
    fails(f, 0.0, 0.0, 1e-4)
    revbench.set_tolerance(atol=1e-8, rtol=1e-3)
    f(0.0, 10.0, 1e-3)
    fails(f, 0.0, 10.0, 1.0)
    revbench.set_tolerance(atol=1e-8, rtol=1e-8)
    fails(f, 0.0, 0.0, 1e-6)


def test_per_function_tolerance_wins_over_global(make, default_tolerance):
    f = make(TOL_SRC, atol=1e-10, rtol=0.0)
    revbench.set_tolerance(atol=1.0)
    fails(f, 0.0, 0.0, 1e-6)


def test_tolerance_in_inverse(make, default_tolerance):
    f = make(TOL_SRC)
    (~f)(0.0, 0.0, 5e-9)
    fails(~f, 0.0, 0.0, 1e-6)
    revbench.set_tolerance(atol=1e-4)
    (~f)(0.0, 0.0, 1e-6)


def test_tolerance_applies_to_postconditions(make, default_tolerance):
    f = make("""
        def f(y, x):
            if (x > 0.0, y > 1.0):
                y += x
    """)
    f(1.0, 0.5)
    fails(f, 0.5, 0.25)


def test_integer_checks_are_exact(make, default_tolerance):
    src = """
        def f(y, n):
            k = 0
            k += n
            del k  # <-
    """
    f = make(src, atol=10.0, rtol=1.0)
    revbench.set_tolerance(atol=10.0, rtol=1.0)
    err = fails(f, 0.0, 1)
    assert_error(err, src, variable="k", expected=0, actual=1)


def test_integer_array_checks_are_exact(make, default_tolerance):
    f = make("""
        def f(y, n):
            t = np.zeros(2, dtype=np.int64)
            t[0] += n
            del t
    """)
    revbench.set_tolerance(atol=10.0, rtol=1.0)
    err = fails(f, 0.0, 1)
    assert err.variable == "t[0]"


def test_bad_tolerance_values(default_tolerance):
    with pytest.raises(ValueError):
        revbench.set_tolerance(atol=-1.0)
    with pytest.raises(ValueError):
        revbench.define("def f(y):\n    y += 1.0\n", atol=-1.0)


# --------------------------------------------------------------------------- #
# a failed call loses no data
# --------------------------------------------------------------------------- #
LOSSY = """
    def f(y, A, x):
        for i in range(len(x)):
            y[i] += x[i]
            A[i, i] *= 2.0
        t = 0.0
        t += x[0]
        del t  # <-
"""


def test_failed_call_restores_arrays(make):
    f = make(LOSSY)
    y, A, x = np.arange(3.0), np.arange(9.0).reshape(3, 3), np.array([1.0, 2.0, 3.0])
    y0, A0, x0 = y.copy(), A.copy(), x.copy()
    err = fails(f, y, A, x)
    assert_error(err, LOSSY, variable="t")
    np.testing.assert_array_equal(y, y0)
    np.testing.assert_array_equal(A, A0)
    np.testing.assert_array_equal(x, x0)


def test_failed_inverse_call_restores_arrays(make):
    f = make(LOSSY)
    y, A, x = np.arange(3.0), np.arange(9.0).reshape(3, 3) + 1.0, np.array([1.0, 2.0, 3.0])
    y0, A0 = y.copy(), A.copy()
    fails(~f, y, A, x)
    np.testing.assert_array_equal(y, y0)
    np.testing.assert_array_equal(A, A0)


def test_failed_nested_call_restores_arrays(make):
    f = make("""
        def g(y, x):
            y[0] += x
            t = 0.0
            t += x
            del t

        def f(y, x):
            y[1] += 5.0
            g(y, x)
    """)
    y = np.array([1.0, 2.0])
    fails(f, y, 1.0)
    np.testing.assert_array_equal(y, [1.0, 2.0])


def test_failed_assert_restores_arrays(make):
    f = make("""
        def f(y, x):
            y[0] += x
            assert y[0] < 0.0
    """)
    y = np.array([1.0, 2.0])
    with pytest.raises(AssertionError):
        f(y, 1.0)
    np.testing.assert_array_equal(y, [1.0, 2.0])


def test_failed_check_then_success(make):
    f = make(DIRTY)
    fails(f, 0.0, 1.0)
    assert f(1.0, 0.0) == (1.0, 0.0)


# --------------------------------------------------------------------------- #
# check=False
# --------------------------------------------------------------------------- #
def test_check_false_does_not_raise_for_dirty_ancilla(make):
    f = make(DIRTY, check=False)
    assert f(0.0, 2.5) == (2.5, 2.5)


def test_check_false_does_not_check_postconditions(make):
    f = make("""
        def f(y, x):
            if (x > 0.0, y > 10.0):
                y += x
    """, check=False)
    assert f(0.0, 1.0) == (1.0, 1.0)


def test_check_false_does_not_check_alias(make):
    f = make(ALIAS, check=False)
    x = np.array([1.0, 2.0])
    f(x, 1, 1)
    np.testing.assert_array_equal(x, [1.0, 6.0])


def test_check_false_still_refuses_static_errors(backend):
    with pytest.raises(ReversibilitySyntaxError):
        revbench.define("def f(y):\n    y += y\n", {}, backend=backend, check=False)


# --------------------------------------------------------------------------- #
# arguments
# --------------------------------------------------------------------------- #
ARGS_SRC = """
    def f(y, x):
        for i in range(len(x)):
            y[i] += x[i]
"""


def test_list_argument(make):
    f = make(ARGS_SRC)
    with pytest.raises((TypeError, ReversibilityError)) as info:
        f([0.0, 0.0], np.ones(2))
    msg = str(info.value)
    assert "y" in msg and "list" in msg


def test_float32_array_argument(make):
    f = make(ARGS_SRC)
    with pytest.raises((TypeError, ReversibilityError)) as info:
        f(np.zeros(2, dtype=np.float32), np.ones(2))
    msg = str(info.value)
    assert "float32" in msg and "y" in msg


@pytest.mark.parametrize("args", [(np.zeros(2),), (np.zeros(2), np.ones(2), 1.0), ()])
def test_wrong_number_of_arguments(make, args):
    f = make(ARGS_SRC)
    with pytest.raises(TypeError) as info:
        f(*args)
    assert "2" in str(info.value)


@pytest.mark.parametrize("bad", ["text", None, {"a": 1}, (1.0, 2.0)],
                         ids=["str", "none", "dict", "tuple"])
def test_non_numeric_scalar_argument(make, bad):
    f = make("""
        def f(y, x):
            y += x
    """)
    with pytest.raises((TypeError, ReversibilityError)) as info:
        f(0.0, bad)
    assert "x" in str(info.value)


def test_same_array_twice(make):
    f = make(ARGS_SRC)
    a = np.ones(2)
    err = fails(f, a, a)
    assert "y" in str(err) and "x" in str(err)
    np.testing.assert_array_equal(a, np.ones(2))


def test_overlapping_views(make):
    f = make(ARGS_SRC)
    a = np.ones(4)
    fails(f, a[:2], a[1:3])
    np.testing.assert_array_equal(a, np.ones(4))


def test_read_only_array(make):
    f = make(ARGS_SRC)
    y = np.zeros(2)
    y.setflags(write=False)
    with pytest.raises((TypeError, ReversibilityError)):
        f(y, np.ones(2))


def test_changing_argument_types_between_calls(make):
    f = make("""
        def f(y, x):
            y += x * 2
    """)
    assert f(1, 2) == (5, 2)
    assert f(1.0, 2.0) == (5.0, 2.0)
    assert f(1j, 1.0) == (1j + 2.0, 1.0)


def test_int_target_with_float_value_is_type_error(make):
    f = make("""
        def f(k, x):
            k += x
    """)
    with pytest.raises((ReversibilityTypeError, TypeError, ReversibilityError)):
        f(1, 0.5)


def test_numpy_scalar_arguments(make):
    f = make("""
        def f(y, x):
            y += x
    """)
    out = f(np.float64(1.0), np.int64(2))
    assert out == (3.0, 2)
    assert isinstance(out[0], float)


def test_error_is_not_masked_by_math_domain(make):
    f = make("""
        def f(y, x):
            y += math.sqrt(x) if x >= 0.0 else 0.0
    """)
    assert f(0.0, 4.0) == (2.0, 4.0)
    assert f(0.0, -4.0) == (0.0, -4.0)


def test_log_of_negative_gives_nan_or_error(make):
    f = make("""
        def f(y, x):
            y += np.log(x)
    """)
    try:
        with np.errstate(invalid="ignore"):
            out = f(0.0, -1.0)
    except (ValueError, ReversibilityError, ArithmeticError):
        return
    assert math.isnan(out[0])


LOOP_VAR_REUSED = """  # the inverse meets the loop (marked) first
def f(n, k):
    for q in range(n):                # <-
        n += q
    q = np.zeros(k)
    del q
    n *= k
"""


def test_name_reused_with_another_type_is_refused_in_both_directions(make):
    """A name bound as a loop variable (int) and as an array ancilla is refused by the
    program and by its inverse, which meets the two bindings in the opposite order: a
    type error naming the variable, never an internal error from the code generator
    (found by the mutation fuzzer)."""
    f = make(LOOP_VAR_REUSED)
    for g, words in ((f, ("ancilla", "float64[:]", "int64")), (~f, ("loop variable", "int64"))):
        with pytest.raises(ReversibilityTypeError) as info:
            g(6, 4)
        msg = str(info.value)
        assert "`q`" in msg and "use another name" in msg, msg
        for w in words:
            assert w in msg, msg
    line, text = marked_line(LOOP_VAR_REUSED)
    with pytest.raises(ReversibilityTypeError) as info:
        (~f)(6, 4)
    assert info.value.lineno == line and text in str(info.value)


NEGATIVE_SIZE = """
def f(y, x, n):
    t = np.zeros((2, n))              # <-
    y += np.sum(x)
    del t
"""


def test_a_negative_allocation_size_names_the_variable_and_line(make):
    """(NumPy's and Numba's np.zeros raise a bare ValueError, with no line in compiled code.)"""
    f = make(NEGATIVE_SIZE)
    err = fails(f, 0.0, np.ones(3), -2)
    line, text = marked_line(NEGATIVE_SIZE)
    assert err.lineno == line and text in str(err)
    assert "`t` cannot be allocated with a negative size: `n` (axis 1)" in str(err)
    assert "-2" in str(err)
    assert f(0.0, np.ones(3), 0)[0] == 3.0
