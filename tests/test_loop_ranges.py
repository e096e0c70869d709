"""What a loop's range proves (revbench.lang.ranges): the alias and overflow checks it lets
checked code leave out, and every case where it must not.

A stencil such as ``u[t + 1, i] += c * (u[t, i - 1] - 2 u[t, i] + u[t, i + 1])`` used to
compare its indices at every element (and check ``t + 1``, ``i - 1`` for overflow, three
times over). Its loops prove the elements distinct and the sums in range, so the checks go;
a loop that proves nothing (a variable start, a negative index, ``i + 2``) keeps them, and
they still fire where the program is wrong.
"""

from __future__ import annotations

import numpy as np
import pytest

from revbench import ReversibilityError
from revbench.lang import ir, ranges

MAX = 2**63 - 1


def loop(var="i", start=0, stop=10, step=1):
    as_expr = (lambda v: v if not isinstance(v, int) else
               (ir.Const(v) if v >= 0 else ir.UnaryOp("-", ir.Const(-v))))
    return ir.For(var, as_expr(start), as_expr(stop), as_expr(step), ())


def elem(*indices):
    return ir.Elem("u", tuple(indices))


def plus(e, c):
    return ir.BinOp("+", e, ir.Const(c))


def minus(e, c):
    return ir.BinOp("-", e, ir.Const(c))


IV, TV = ir.Var("i"), ir.Var("t")


# --------------------------------------------------------------------------- #
# the analysis itself
# --------------------------------------------------------------------------- #
def test_loop_range_of_each_kind_of_range():
    assert ranges.loop_range(loop(start=0)) == ranges.LoopRange(0, True)
    assert ranges.loop_range(loop(start=3, step=2)) == ranges.LoopRange(3, True)
    assert ranges.loop_range(loop(start=ir.Var("a"))) == ranges.LoopRange(None, True)
    # a negative step: every value is above the stop, none is below a known bound
    assert ranges.loop_range(loop(start=9, stop=-1, step=-1)) == ranges.LoopRange(0, False)
    assert ranges.loop_range(loop(start=9, stop=ir.Var("a"), step=-1)) == ranges.UNKNOWN
    assert ranges.loop_range(loop(step=ir.Var("s"))) == ranges.UNKNOWN


@pytest.mark.parametrize("a, b, distinct", [
    ((plus(TV, 1), IV), (TV, IV), True),                  # rows t + 1 and t
    ((IV,), (minus(IV, 1),), False),                     # i = 0: u[-1] wraps (start 0)
    ((plus(TV, 1), IV), (plus(TV, 1), minus(IV, 1)), False),  # same row, i - 1 may be -1
    ((TV,), (TV,), False),                               # the same element
    ((ir.Const(0),), (ir.Const(1),), True),
    ((ir.Const(0),), (ir.UnaryOp("-", ir.Const(1)),), False),  # u[-1] may be u[0]
    ((ir.Var("k"),), (plus(ir.Var("k"), 1),), False),  # not a loop variable
    ((plus(IV, 1),), (plus(IV, 2),), True),              # i from 1: both indices >= 2
])
def test_provably_distinct(a, b, distinct):
    known = {"t": ranges.LoopRange(0, True), "i": ranges.LoopRange(0, True)}
    if (plus(IV, 1),) == a:
        known["i"] = ranges.LoopRange(1, True)
    assert ranges.provably_distinct(elem(*a), elem(*b), known) is distinct
    assert ranges.provably_distinct(elem(*b), elem(*a), known) is distinct


@pytest.mark.parametrize("expr, known, safe", [
    (plus(IV, 1), ranges.LoopRange(0, True), True),       # i < stop <= INT64_MAX
    (plus(IV, 2), ranges.LoopRange(0, True), False),      # stop may be INT64_MAX
    (plus(IV, 1), ranges.LoopRange(0, False), False),     # a negative step: no upper bound
    (minus(IV, 1), ranges.LoopRange(0, False), True),
    (minus(IV, 1), ranges.LoopRange(None, True), False),  # no lower bound
    (ir.BinOp("+", ir.Const(1), IV), ranges.LoopRange(0, True), True),
    (ir.BinOp("-", ir.Const(1), IV), ranges.LoopRange(0, True), False),
    (ir.BinOp("*", IV, ir.Const(2)), ranges.LoopRange(0, True), False),
    (ir.BinOp("+", plus(IV, 1), ir.Const(-1)), ranges.LoopRange(None, True), True),  # = i
])
def test_cannot_overflow(expr, known, safe):
    assert ranges.cannot_overflow(expr, {"i": known}) is safe


# --------------------------------------------------------------------------- #
# what checked code keeps and leaves out
# --------------------------------------------------------------------------- #
STENCIL = """
def stencil(u, c):
    rows, n = u.shape
    for t in range(rows - 1):
        u[t + 1, 0] += u[t, 0]
        for i in range(1, n - 1):
            u[t + 1, i] += u[t, i] + c * (u[t, i - 1] - 2.0 * u[t, i] + u[t, i + 1])
        u[t + 1, n - 1] += u[t, n - 1]
"""


def test_a_stencil_needs_no_alias_or_index_overflow_checks(make):
    f = make(STENCIL)
    u = np.zeros((4, 6))
    u[0] = np.arange(6.0)
    src = f.source("forward", u, 0.1)
    inner = src[src.index("for i in range"):]
    assert "_rb_iadd" not in inner and "_rb_isub(i" not in inner, src
    assert "_RbCheckFailed" not in inner.split("_rb_float_shift")[0], src
    out, _ = f(u.copy(), 0.1)
    want = u.copy()
    for t in range(3):
        want[t + 1, 0] += want[t, 0]
        for i in range(1, 5):
            want[t + 1, i] += want[t, i] + 0.1 * (want[t, i - 1] - 2 * want[t, i] + want[t, i + 1])
        want[t + 1, 5] += want[t, 5]
    np.testing.assert_allclose(out, want, rtol=1e-15)
    back, _ = (~f)(out, 0.1)
    np.testing.assert_allclose(back, u, atol=1e-12)


def test_a_wrapping_index_is_still_checked_for_aliasing(make):
    # i = 0 reads x[-1]: the last element, which is x[0] itself when len(x) == 1
    f = make("""
        def f(x):
            for i in range(len(x)):
                x[i] += x[i - 1]
    """)
    out = f(np.array([1.0, 2.0, 3.0]))[0]
    np.testing.assert_array_equal(out, [4.0, 6.0, 9.0])
    x = np.array([5.0])
    with pytest.raises(ReversibilityError, match="are the same element at run time"):
        f(x)
    np.testing.assert_array_equal(x, [5.0])


def test_a_loop_with_a_variable_start_keeps_its_checks(make):
    f = make("""
        def f(x, a):
            for i in range(a, len(x)):
                x[i] += x[i - 1]
    """)
    np.testing.assert_array_equal(f(np.array([1.0, 2.0, 3.0]), 1)[0], [1.0, 3.0, 6.0])
    x = np.array([7.0])
    with pytest.raises(ReversibilityError):
        f(x, 0)  # x[0] += x[-1]: the same element
    np.testing.assert_array_equal(x, [7.0])


def test_i_plus_one_at_the_top_of_int64_does_not_overflow(make):
    f = make("""
        def f(v, a, b):
            for i in range(a, b):
                v[0] += i + 1
    """)
    src = f.source("forward", np.zeros(1, dtype=np.int64), 0, 1)
    assert "_rb_iadd(i, 1" not in src and "(i + 1)" in src, src  # v[0] += stays checked
    out = f(np.zeros(1, dtype=np.int64), MAX - 1, MAX)[0]
    assert out.tolist() == [MAX]  # i = MAX - 1, i + 1 = MAX fits exactly


def test_i_plus_two_and_a_descending_i_plus_one_are_still_checked(make):
    up = make("""
        def f(v, a, b):
            for i in range(a, b):
                v[0] += i + 2
    """)
    with pytest.raises(ReversibilityError, match="integer overflow in `i \\+ 2`"):
        up(np.zeros(1, dtype=np.int64), MAX - 1, MAX)
    down = make("""
        def f(v, a, b):
            for i in range(a, b, -1):
                v[0] += i + 1
    """)
    v = np.zeros(1, dtype=np.int64)
    with pytest.raises(ReversibilityError, match="integer overflow in `i \\+ 1`"):
        down(v, MAX, MAX - 1)
    assert v.tolist() == [0]


def test_i_minus_one_below_a_known_start_is_unchecked_and_right(make):
    f = make("""
        def f(v, x):
            for i in range(1, len(x)):
                v[i - 1] += x[i]
    """)
    v, x = np.zeros(3), np.array([1.0, 2.0, 3.0, 4.0])
    src = f.source("forward", v, x)
    assert "_rb_isub(i" not in src, src
    np.testing.assert_array_equal(f(v, x)[0], [2.0, 3.0, 4.0])


def test_unchecked_and_checked_stencils_agree_on_both_backends(make):
    import revbench

    u = np.random.default_rng(0).standard_normal((6, 9))
    results = []
    for backend in ("numba", "python"):
        for check in (True, False):
            f = revbench.define(STENCIL, {"np": np}, backend=backend, check=check)["stencil"]
            results.append(f(u.copy(), 0.2)[0])
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])
