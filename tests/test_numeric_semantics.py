"""Numeric semantics with checks on: nothing silently wrong (issue 9, items 1, 2, 4 and 5).

* integers are int64 on both backends and never wrap around: an update or an expression
  whose exact result does not fit raises ``ReversibilityError``; integer constants (constant
  arithmetic included) outside int64 are static errors; arguments beyond int64 are refused;
* a float or complex ``*=`` / ``/=`` that cannot be undone (an infinite or nan operand, a
  finite non-zero target made 0, subnormal, inf or nan) raises; so does a ``+=`` / ``-=``
  by an infinite or nan operand, or one that overflows a finite target;
* an ancilla that is back at inf or nan can be freed (inf == inf, nan "equals" nan there);
* ``**`` of a negative base with a non-integer exponent is nan (a float) on both backends;
* bools in arithmetic and in math functions compute as 0/1 in float64 (NumPy would use
  float16, or a logical or for ``+``).

Every test runs on both backends (the ``make`` fixture); the hypothesis tests run the two
backends side by side and require the same answer, or the same error.
"""

from __future__ import annotations

import ast
import math
import re
import textwrap
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import revbench
from revbench import ReversibilityError, ReversibilitySyntaxError, ReversibilityTypeError
from revbench.lang.check import check_function
from revbench.lang.parse import SourceInfo, parse_definition
from revbench.lang.types import VarType, infer

MIN, MAX = -(2**63), 2**63 - 1
BACKENDS = ("numba", "python")
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def fails(f, *args, error=ReversibilityError) -> ReversibilityError:
    with pytest.raises(error) as info:
        f(*args)
    return info.value


def refused(make, source: str) -> ReversibilitySyntaxError:
    with pytest.raises(ReversibilitySyntaxError) as info:
        make(source)
    return info.value


_COMPILED: dict[tuple[str, str, bool], revbench.ReversibleFunction] = {}


def compiled(source: str, backend: str, check: bool = True):
    """One function per (source, backend): hypothesis examples reuse the compiled code."""
    key = (source, backend, check)
    if key not in _COMPILED:
        fns = revbench.define(textwrap.dedent(source), {"np": np, "math": math}, backend=backend,
                              check=check)
        _COMPILED[key] = list(fns.values())[-1]
    return _COMPILED[key]


def outcome(f, *args):
    """What a call gives: ``("ok", outputs)`` or ``("error", message)``; arrays are copied
    first, and the caller's copies must be unchanged after a failed call."""
    copies = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            out = f(*copies)
    except ReversibilityError as err:
        for a, c in zip(args, copies):
            if isinstance(a, np.ndarray):
                np.testing.assert_array_equal(c, a)  # restored
        return ("error", str(err).splitlines()[0])
    return ("ok", tuple(o.tolist() if isinstance(o, np.ndarray) else o for o in out))


def same(a, b) -> bool:
    """Equal, with nan equal to nan."""
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    return a == b and type(a) is type(b)


def on_both(source: str, *args, check: bool = True):
    """The outcome on both backends, which must agree."""
    got = [outcome(compiled(source, b, check), *args) for b in BACKENDS]
    assert got[0][0] == got[1][0] and (
        same(got[0][1], got[1][1]) if got[0][0] == "ok" else got[0][1] == got[1][1]), got
    return got[0]


# =========================================================================== #
# 1. int64: no wrap-around
# =========================================================================== #
def test_issue_element_mul_overflow_raises_and_restores(make):
    f = make("""
        def f(v, b):
            v[0] *= b
    """)
    v = np.array([2**61, 3])
    err = fails(f, v, 4)
    assert "integer overflow in `v[0] *= b`" in str(err) and "int64" in str(err)
    assert "2305843009213693952 * 4" in str(err)
    assert err.lineno == 3 and err.variable == "v[0]" and err.function == "f"
    np.testing.assert_array_equal(v, [2**61, 3])  # the caller's data is unchanged
    assert f(np.array([2**60, 3]), 4)[0].tolist() == [2**62, 3]


def test_issue_scalar_mul_overflow(make):
    f = make("""
        def f(a, b):
            a *= b
    """)
    err = fails(f, 2**62, 4)
    assert "`a *= b`" in str(err) and err.lineno == 3
    err = fails(f, 2**61, 4)  # exactly 2**63: one too many
    assert f(2**60, 4) == (2**62, 4)
    assert f(-(2**61), 4) == (MIN, 4)  # exactly -2**63 fits
    assert (~f)(MIN, 4) == (-(2**61), 4)


def test_issue_div_of_min_by_minus_one(make):
    f = make("""
        def f(a):
            a /= -1
    """)
    err = fails(f, MIN)
    assert "integer overflow in `a /= -1`" in str(err) and "-9223372036854775808 // -1" in str(err)
    assert f(MAX) == (-MAX,)
    g = make("""
        def g(a, b):
            a /= b
    """)
    err = fails(g, MIN, -1)
    assert "`a /= b`" in str(err) and err.variable == "a"
    assert g(MIN, 1) == (MIN, 1)
    assert g(MIN, 2) == (MIN // 2, 2)


@pytest.mark.parametrize("op, a, b", [("+=", MAX, 1), ("+=", MIN, -1), ("-=", MIN, 1),
                                      ("-=", MAX, -1), ("-=", 0, MIN), ("+=", -1, MIN),
                                      ("-=", -1, MIN)])
def test_add_sub_overflow(make, op, a, b):
    f = make(f"""
        def f(a, b):
            a {op} b
    """)
    exact = a + b if op == "+=" else a - b
    if MIN <= exact <= MAX:
        assert f(a, b) == (exact, b)
        assert (~f)(exact, b) == (a, b)
    else:
        err = fails(f, a, b)
        assert f"`a {op} b`" in str(err) and "does not fit in int64" in str(err)


def test_int_limits_reachable_exactly(make):
    f = make("""
        def f(a, b):
            a += b
            a -= b
            a += b
    """)
    assert f(MAX - 5, 5) == (MAX, 5)
    assert f(MIN + 5, -5) == (MIN, -5)


@pytest.mark.parametrize("body, args, text", [
    ("a += b * c", (0, 2**62, 4), "b * c"),          # Numba used to wrap to 0 silently
    ("a += b + c", (0, MAX, 1), "b + c"),
    ("a += b - c", (0, MIN, 1), "b - c"),
    ("a += -b", (0, MIN, 0), "-b"),
    ("a += abs(b)", (0, MIN, 0), "abs(b)"),
    ("a += b ** 3", (0, 2**21, 0), "b ** 3"),
    ("a += b // c", (0, MIN, -1), "b // c"),
    ("t = b * c\n    a += t\n    del t", (0, 2**40, 2**30), "b * c"),
])
def test_integer_expression_overflow(make, body, args, text):
    f = make(f"def f(a, b, c):\n    {body}\n")
    err = fails(f, *args)
    assert f"integer overflow in `{text}`" in str(err), str(err)
    assert err.lineno == 2


def test_index_expression_overflow(make):
    f = make("""
        def f(y, x, i):
            y += x[i * 4]
    """)
    x = np.arange(4.0)
    assert f(0.0, x, 0) == (0.0, x, 0)
    err = fails(f, 0.0, x, 2**62)  # i * 4 wraps to 0 under Numba: x[0] was read
    assert "`i * 4`" in str(err)


def test_whole_array_int_overflow_restores(make):
    f = make("""
        def f(y, k):
            y *= k
    """)
    y = np.array([1, 2**61, 3])
    err = fails(f, y, 8)
    assert "`y *= k`" in str(err)
    np.testing.assert_array_equal(y, [1, 2**61, 3])


def test_overflow_in_inverse_is_told_as_inverse(make):
    f = make("""
        def f(a, b):
            a -= b
    """)
    err = fails(~f, MAX, 1)  # the inverse adds
    assert "running its inverse" in str(err)


def test_int_arithmetic_results_stay_python_ints(make):
    f = make("""
        def f(a, b, v):
            a += b * 3 - (-b) + abs(b) // 2
            v[0] += a
    """)
    a, b, v = f(1, 4, np.zeros(1, dtype=np.int64))
    assert (a, b) == (1 + 12 + 4 + 2, 4) and type(a) is int
    assert v.tolist() == [19]


def test_unchecked_code_has_no_overflow_checks(make):
    f = make("""
        def f(a, b):
            a *= b
            a += b * b
    """, check=False)
    assert f(3, 4) == (28, 4)
    assert "_rb_imul" not in f.source("forward") and "_rb_iadd" not in f.source("forward")


def test_unchecked_int64_min_divided_by_minus_one_wraps_on_both_backends(make):
    """Unchecked integers wrap around in int64 (docs/language.md): INT64_MIN // -1 is
    INT64_MIN on both backends (compiled division gave 0), in an expression and in `/=`."""
    f = make("""
        def f(y, n, a, b):
            y += a // b
            n /= b
    """, check=False)
    low = -2**63
    assert f(0, low, low, -1)[:2] == (low, low)
    assert f(0, 12, -7, -1)[:2] == (7, -12)
    assert f(0, 12, 7, -2)[:2] == (-4, -6)


# -- integer constants: static ----------------------------------------------------
@pytest.mark.parametrize("body, text", [
    ("a += 2**70", "1180591620717411303424"),
    ("y += x[2**70]", "1180591620717411303424"),
    ("a += 2**63", "9223372036854775808"),
    ("a += -2**63 - 1", "-9223372036854775809"),
    ("a += 2**62 * 2", "9223372036854775808"),
    ("a += 9223372036854775808", "9223372036854775808"),
    ("a += 4 + 10**19", "10000000000000000004"),
    ("a += 10**10**10", "bits"),                       # refused quickly, never computed
    ("for i in range(2**64):\n        a += i", "18446744073709551616"),
    ("t = np.zeros(2**64)\n    del t", "18446744073709551616"),
    ("if a > 2**64:\n        a += 1", "18446744073709551616"),
    ("y += 2.0 * (x[0] + 3**50)", "717897987691852588770249"),
])
def test_integer_constants_outside_int64_are_static_errors(make, body, text):
    err = refused(make, f"def f(a, y, x):\n    {body}\n")
    assert "does not fit in int64" in err.msg and text in err.msg, err.msg
    assert err.lineno == 2 and err.offset is not None
    assert isinstance(err, SyntaxError)


def test_integer_constant_from_module_refused_at_its_use(backend):
    with pytest.raises(ReversibilitySyntaxError) as info:
        revbench.define("def f(a):\n    a += 1\n    a += BIG\n", {"BIG": 2**64}, backend=backend)
    assert info.value.lineno == 3 and "18446744073709551616" in info.value.msg


@pytest.mark.parametrize("body, expect", [
    ("a += -2**63", MIN), ("a += 2**63 - 1", MAX), ("a += -9223372036854775808", MIN),
    ("a += 2**64 // 2**2 - 2**62", 0), ("a += (2**40) * 2**20", 2**60),
    ("a += 7 // 2 + 7 % 2", 4), ("a += -(2**62) * 2", MIN),
])
def test_integer_constant_arithmetic_is_exact(make, body, expect):
    f = make(f"""
        def f(a):
            {body}
    """)
    assert f(0) == (expect,)
    assert (~f)(expect) == (0,)


def test_float_and_division_constants_are_not_folded(make):
    f = make("""
        def f(y):
            y += 2**-1 + 3 / 2 + 2.0**70
    """)
    assert f(0.0) == (0.5 + 1.5 + 2.0**70,)


# -- arguments beyond int64 ---------------------------------------------------------
@pytest.mark.parametrize("big", [2**70, 2**63, MIN - 1, np.uint64(2**64 - 1), 10**400])
def test_argument_beyond_int64_names_the_argument(make, big):
    f = make("""
        def f(a, b):
            a += b
    """)
    assert f(1, 2) == (3, 2)  # the fast signature path must still see the value
    err = fails(f, 1, big, error=ReversibilityTypeError)
    assert "argument `b` of f" in str(err) and "does not fit in int64" in str(err)
    assert err.variable == "b"
    assert f(1, np.uint64(5)) == (6, 5)


# -- adversarial: hypothesis over values near the limits --------------------------------
near_limits = st.one_of(
    st.integers(MIN, MAX),
    st.integers(MIN, MIN + 2**33), st.integers(MAX - 2**33, MAX),
    st.integers(-(2**33), 2**33), st.sampled_from([0, 1, -1, 2, -2, MIN, MAX, 3037000499,
                                                   3037000500, -3037000500, 2**31, 2**32]))
UPDATE_SRC = {op: f"def f(a, b):\n    a {op} b\n" for op in ("+=", "-=", "*=", "/=")}
EXPR_SRC = {op: f"def f(t, a, b):\n    t += a {op} b\n" for op in ("+", "-", "*", "//")}


def _exact(op: str, a: int, b: int):
    return {"+": a + b, "-": a - b, "*": a * b, "/": None, "//": None}[op[0]]


@SETTINGS
@given(op=st.sampled_from(sorted(UPDATE_SRC)), a=near_limits, b=near_limits)
def test_int_updates_exact_or_refused(op, a, b):
    kind, got = on_both(UPDATE_SRC[op], a, b)
    if op == "/=":
        exact = a // b if b != 0 and a % b == 0 else None
    else:
        exact = _exact(op, a, b)
    if exact is not None and MIN <= exact <= MAX and not (op == "*=" and b == 0):
        assert kind == "ok" and got == (exact, b)
        back = on_both(UPDATE_SRC[op], *got)  # the forward again: just agreement
        assert back[0] in ("ok", "error")
        inv = [outcome(~compiled(UPDATE_SRC[op], be), exact, b) for be in BACKENDS]
        assert inv[0] == inv[1] == ("ok", (a, b))
    else:
        assert kind == "error"
        assert ("does not fit in int64" in got and f"a {op} b" in got) or "operand is zero" in got \
            or "must divide" in got, got


@SETTINGS
@given(op=st.sampled_from(sorted(EXPR_SRC)), a=near_limits, b=near_limits)
def test_int_expressions_exact_or_refused(op, a, b):
    if op == "//" and b == 0:
        return  # ZeroDivisionError on both backends (not a reversibility check)
    kind, got = on_both(EXPR_SRC[op], 0, a, b)
    if op == "//":
        exact = a // b
    else:
        exact = _exact(op, a, b)
    if MIN <= exact <= MAX:
        assert kind == "ok" and got == (exact, a, b)
    else:
        assert kind == "error" and f"integer overflow in `a {op} b`" in got, got


@SETTINGS
@given(c=st.one_of(near_limits, st.integers(MIN - 2**70, MAX + 2**70),
                   st.sampled_from([MAX + 1, MIN - 1, 2**64, -(2**64)])))
def test_int_constants_static_or_exact(c):
    src = f"def f(a):\n    a += {c}\n    a -= {c}\n    a += {c}\n"
    for be in BACKENDS:
        if not MIN <= c <= MAX:
            with pytest.raises(ReversibilitySyntaxError) as info:
                revbench.define(src, backend=be)
            assert info.value.lineno == 2
            continue
        f = compiled(src, be)
        kind, got = outcome(f, 0)
        assert (kind, got) == ("ok", (c,))


@SETTINGS
@given(a=near_limits, n=st.integers(0, 70))
def test_int_power_exact_or_refused(a, n):
    src = f"def f(t, a):\n    t += a ** {n}\n"
    kind, got = on_both(src, 0, a)
    exact = a**n
    if MIN <= exact <= MAX:
        assert (kind, got) == ("ok", (exact, a))
    else:
        assert kind == "error" and "integer overflow" in got


# =========================================================================== #
# 2. float / complex *= and /= that cannot be undone
# =========================================================================== #
def test_issue_divide_by_inf(make):
    f = make("""
        def f(y):
            y /= math.inf
    """)
    err = fails(f, 1.5)
    assert "`/=` by `inf`" in str(err) and "infinite or nan" in str(err)
    assert err.lineno == 3


def test_issue_multiply_underflows_to_zero(make):
    f = make("""
        def f(y, d):
            y *= d
    """)
    err = fails(f, 1e-200, 1e-200)
    assert "`y *= d` cannot be undone" in str(err) and "underflows to zero" in str(err)
    assert err.variable == "y" and err.expected == 1e-200 and err.actual == 0.0
    assert err.lineno == 3


@pytest.mark.parametrize("y, d, op, why", [
    (1e10, 1e300, "*=", "overflows to infinity"),
    (1e-300, 1e300, "/=", "underflows to zero"),
    (1e-300, 1e-10, "*=", "subnormal"),
    (1.0, 1e-310, "/=", "overflows to infinity"),
    (2.0, math.nan, "*=", "infinite or nan"),
    (0.0, math.inf, "*=", "infinite or nan"),       # 0 * inf is nan
    (math.inf, math.inf, "/=", "infinite or nan"),  # inf / inf is nan
])
def test_scale_that_cannot_be_undone(make, y, d, op, why):
    f = make(f"""
        def f(y, d):
            y {op} d
    """)
    err = fails(f, y, d)
    assert why in str(err) and err.lineno == 3
    assert "d" in str(err).splitlines()[0]


@pytest.mark.parametrize("y, d, op", [
    (0.0, 1e-300, "*="),        # zero stays zero, and comes back
    (math.inf, 2.0, "*="),      # already infinite: inf / 2 is inf again
    (math.nan, 2.0, "/="),
    (1e-300, 1e7, "/="),        # still a normal number (1e-307)
    (5e-324, 2.0, "*="),        # subnormal, but exact both ways
    (2.0**-1070, 0.5, "*="),    # a subnormal halved exactly (checked to be)
    (-1e300, 1.7, "*="),
])
def test_scale_that_can_be_undone_is_accepted(make, y, d, op):
    f = make(f"""
        def f(y, d):
            y {op} d
    """)
    out = f(y, d)
    back = (~f)(*out)
    assert same(back, (y, d)) or back == pytest.approx((y, d), rel=1e-15)


def test_complex_scale_underflow(make):
    f = make("""
        def f(z, w):
            z *= w
    """)
    err = fails(f, 1e-200 + 1e-200j, 1e-200 + 0j)
    assert "`z *= w` cannot be undone" in str(err)
    assert f(1 + 1j, 2j) == (-2 + 2j, 2j)


def test_whole_array_scale_underflow_restores(make):
    f = make("""
        def f(x, d):
            x *= d
    """)
    x = np.array([1.0, 1e-300, 3.0])
    err = fails(f, x, 1e-100)
    assert "`x *= d`" in str(err)
    np.testing.assert_array_equal(x, [1.0, 1e-300, 3.0])


def test_scale_check_in_inverse(make):
    f = make("""
        def f(y, d):
            y *= d
    """)
    err = fails(~f, 1e-300, 1e100)  # the inverse divides
    assert "running its inverse" in str(err) and "`y /= d`" in str(err)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradients_of_scaling_still_work(backend):
    f = revbench.define("def f(y, d):\n    y *= d\n    y *= d\n", backend=backend)["f"]
    # the adjoint of y underflows (d * d = 1e-340): adjoints are never undone, so no check
    g = revbench.grad(f, loss="y")(1e200, 1e-170)
    assert g[0] == pytest.approx(0.0, abs=1e-300) and g[1] == pytest.approx(2e30, rel=1e-12)


finite_or_not = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.builds(lambda m, e: m * 10.0**e, st.floats(-10, 10), st.integers(-320, 308)),
    st.sampled_from([0.0, -0.0, 1e-308, 2.2250738585072014e-308, 5e-324, 1.7976931348623157e308,
                     math.inf, -math.inf, math.nan, 1e-160, 1e160]))


def undone_or_refused(src: str, y, operand):
    """Run ``f(y, operand)`` on both backends: ``None`` if it was refused (naming the
    operand), else what the inverse gives back for ``y`` -- which must run: a forward
    update that passed its checks is undone (a result the inverse could not undo, such as
    one near the largest float, is refused by the forward itself)."""
    kind, got = on_both(src, y, operand)
    if kind == "error":
        name = src.split("(")[1].split(")")[0].split(", ")[1]
        assert name in got, got
        return None
    inv = [outcome(~compiled(src, be), *got) for be in BACKENDS]
    assert inv[0][0] == inv[1][0] == "ok", inv
    return inv[0][1][0]


@SETTINGS
@given(op=st.sampled_from(["*=", "/="]), y=finite_or_not, d=finite_or_not)
def test_float_scale_undone_or_refused(op, y, d):
    src = f"def f(y, d):\n    y {op} d\n"
    y0 = undone_or_refused(src, y, d)
    if y0 is None:
        return
    back = on_both(src.replace("def f", "def g"), y0, d)  # agreement only
    assert back[0] in ("ok", "error")
    assert same(y0, y) or y0 == pytest.approx(y, rel=1e-15, abs=0.0), (y, d, y0)


# =========================================================================== #
# 4. ** with a negative base and a non-integer exponent
# =========================================================================== #
@pytest.mark.parametrize("base", [-4.0, -4, -0.5])
def test_issue_negative_base_fractional_exponent_is_nan(make, base):
    """The power is nan (a float, never complex) on both backends; with checks on, adding
    that nan to ``y`` is refused (``y`` could not be recovered), naming the operand."""
    src = """
        def f(y, x):
            y += x ** 0.5
    """
    f, unchecked = make(src), make(src, check=False)
    y, _ = unchecked(0.0, base)
    assert isinstance(y, float) and math.isnan(y)
    assert "`x ** 0.5`: the operand is infinite or nan" in str(fails(f, 0.0, base))
    assert f(0.0, 4.0 if isinstance(base, float) else 4) == (2.0, 4.0 if isinstance(base, float) else 4)


def test_negative_base_into_float_array_and_ancilla(make):
    f = make("""
        def f(y, x, p):
            y[0] += x[0] ** p
    """, check=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ComplexWarning: nothing complex is computed
        y, _, _ = f(np.zeros(1), np.array([-8.0]), 1.0 / 3.0)
    assert math.isnan(y[0])


@pytest.mark.parametrize("expr", ["x ** 0.5", "k ** 0.5", "k ** -1", "x ** k", "k ** k",
                                  "p ** 0.5", "x ** 0.5 + k ** 0.5"])
def test_power_types_say_float(expr):
    src = f"def f(y, x, k, p):\n    y += {expr}\n"
    node = ast.parse(src).body[0]
    func = check_function(parse_definition(node, SourceInfo("<t>", src.splitlines(True), 0, 0), {}))
    typed = infer(func, (VarType("float"), VarType("float"), VarType("int"), VarType("bool")))
    assert typed.expr_type(func.body[0].value) == VarType("float")


def test_integer_exponents_of_negative_bases_stay_exact(make):
    f = make("""
        def f(y, x, k):
            y += x ** 3 + x ** k + x ** 2.0
    """)
    assert f(0.0, -2.0, 3) == (-8.0 - 8.0 + 4.0, -2.0, 3)


@SETTINGS
@given(x=st.one_of(st.floats(-1e6, 1e6), st.integers(-1000, 1000)),
       p=st.one_of(st.floats(-4, 4), st.sampled_from([0.5, 1.5, -0.5, 2.0, 1 / 3])))
def test_power_backends_agree(x, p):
    src = "def f(y, x, p):\n    y += x ** p\n"
    for check in (True, False):
        kind, got = on_both(src, 0.0, x, p, check=check)
        if kind == "ok":
            assert isinstance(got[0], float)
            if x < 0 and p != int(p):
                assert not check and math.isnan(got[0])
        else:
            assert check and "x ** p" in got, got


# =========================================================================== #
# 5. bools in math functions and in arithmetic
# =========================================================================== #
def test_issue_sqrt_of_bool_is_float64(make):
    f = make("""
        def f(r, p):
            r += math.sqrt(p)
    """)
    assert f(0.6, True) == (0.6 + 1.0, True)
    assert f(0.6, False) == (0.6, False)


FLOAT_FUNCS = ["sin", "cos", "tan", "exp", "log1p", "expm1", "sqrt", "tanh", "sinh", "cosh",
               "atan", "asinh", "asin", "acos"]


@pytest.mark.parametrize("fn", FLOAT_FUNCS)
@pytest.mark.parametrize("p", [True, False])
def test_math_functions_of_bools_compute_in_float64(make, fn, p):
    f = make(f"""
        def f(r, p, b):
            r += np.{fn}(p) + math.{fn}(b[0])
    """)
    want = 2 * getattr(math, fn)(float(p))
    r, _, _ = f(0.0, p, np.array([p]))
    assert r == pytest.approx(want, rel=1e-15, abs=1e-300)


def test_two_argument_functions_of_bools(make):
    f = make("""
        def f(r, p, q):
            r += math.atan2(p, q) + math.hypot(p, q) + min(p, 0.5) + max(q, 2)
    """)
    r = f(0.0, True, True)[0]
    assert r == pytest.approx(math.atan2(1.0, 1.0) + math.hypot(1.0, 1.0) + 0.5 + 2, rel=1e-15)


def test_bool_array_elements_add_as_integers(make):
    f = make("""
        def f(n, b, y):
            n += b[0] + b[1]
            n -= b[0] - b[1]
            n += -b[0] + abs(b[1]) + b[0] * b[1] + max(b[0], b[1])
            y += b[0] + b[1] + 0.5
    """)
    n, b, y = f(0, np.array([True, True]), 0.0)
    assert n == 2 - 0 + (-1 + 1 + 1 + 1) and y == 2.5
    assert (~f)(n, b, y) == (0, b, 0.0)


@pytest.mark.parametrize("fn", ["min", "max"])
def test_min_max_of_bools_are_ints(make, fn):
    f = make(f"""
        def f(n, p, q, x):
            t = {fn}(p, q)
            n += t
            x[t] += 1.0
            del t
    """)
    n, _, _, x = f(0, True, False, np.zeros(2))
    assert type(n) is int and n == (0 if fn == "min" else 1)
    assert x.tolist() == ([1.0, 0.0] if fn == "min" else [0.0, 1.0])


@SETTINGS
@given(fn=st.sampled_from(FLOAT_FUNCS + ["log", "log2", "log10"]), p=st.booleans())
def test_bool_function_backends_agree(fn, p):
    src = f"def f(r, p):\n    r += np.{fn}(p)\n"
    got = [outcome(compiled(src, be, check=False), 0.0, p) for be in BACKENDS]
    assert got[0][0] == got[1][0] == "ok"
    a, b = got[0][1][0], got[1][1][0]
    if not math.isfinite(a):  # log(False): with checks on, -inf cannot be added and undone
        checked = on_both(src, 0.0, p)
        assert checked[0] == "error" and "infinite or nan" in checked[1], checked
    assert type(a) is type(b) is float
    assert same(a, b) or a == pytest.approx(b, rel=1e-15)


# =========================================================================== #
# 2b. float += / -= that cannot be undone: overflow, infinite or nan operands
# =========================================================================== #
@pytest.mark.parametrize("op", ["+=", "-="])
@pytest.mark.parametrize("y, x, why", [
    (1e308, 1e308, "overflows to infinity"),
    (-1e308, -1e308, "overflows to infinity"),
    (1.0, math.inf, "infinite or nan"),
    (1.0, math.nan, "infinite or nan"),
    (math.inf, math.inf, "infinite or nan"),
])
def test_shift_that_cannot_be_undone_raises(make, op, y, x, why):
    f = make(f"""
        def f(y, x):
            y {op} x
    """)
    if op == "-=" and why.startswith("overflows"):
        x = -x
    msg = str(fails(f, y, x))
    assert why in msg and f"y {op} x" in msg, msg


def test_shift_of_an_infinite_or_nan_target_by_a_finite_operand_is_undone(make):
    f = make("""
        def f(y, x):
            y += x
    """)
    for y in (math.inf, -math.inf):
        assert f(y, 1.0) == (y, 1.0) and (~f)(y, 1.0) == (y, 1.0)
    y, _ = f(math.nan, 1.0)
    assert math.isnan(y)


def test_shift_overflow_of_an_array_element_restores_the_array(make):
    f = make("""
        def f(y, x):
            y += x * 2.0
    """)
    y = np.array([1.0, 1e308, 3.0])
    msg = str(fails(f, y, 5e307))
    assert "overflows to infinity" in msg and "`y` was 1e+308" in msg
    np.testing.assert_array_equal(y, [1.0, 1e308, 3.0])


def test_shift_by_an_overflowing_function_names_the_operand(make):
    f = make("""
        def f(y, x):
            y -= math.exp(x)
    """)
    msg = str(fails(f, 0.0, 1000.0))
    assert "`exp(x)`" in msg and "infinite or nan" in msg
    assert f(0.0, 0.0) == (-1.0, 0.0)


def test_complex_shift_by_an_infinite_part_raises(make):
    f = make("""
        def f(y, x):
            y += x
    """)
    assert "infinite or nan" in str(fails(f, 1j, complex(math.inf, 1.0)))
    assert "overflows" in str(fails(f, complex(0.0, 1e308), complex(0.0, 1e308)))


def test_adjoint_accumulation_is_not_checked_like_an_undone_update():
    """Adjoints only accumulate (they are never undone): large gradients are not refused."""
    f = revbench.define("def f(y, x):\n    y += x * x\n", {})["f"]
    g = revbench.grad(f, loss="y", wrt="x")
    assert g(0.0, 1e154)[1] == pytest.approx(2e154)


@SETTINGS
@given(op=st.sampled_from(["+=", "-="]), y=finite_or_not, x=finite_or_not)
def test_float_shift_undone_or_refused(op, y, x):
    src = f"def f(y, x):\n    y {op} x\n"
    y0 = undone_or_refused(src, y, x)
    if y0 is None:
        return
    # a shift is undone up to the rounding of the result (1 ulp of the larger operand)
    assert same(y0, y) or abs(y0 - y) <= 2.0**-52 * max(abs(y), abs(x)), (y, x, y0)


# =========================================================================== #
# ancillas back at inf or nan can be freed
# =========================================================================== #
@pytest.mark.parametrize("x", [math.nan, math.inf, -math.inf])
def test_an_ancilla_back_at_inf_or_nan_is_freed(make, x):
    f = make("""
        def f(y, x):
            a = x * 2.0
            y += 1.0
            del a
    """)
    assert f(1.0, x)[0] == 2.0
    assert (~f)(2.0, x)[0] == 1.0


def test_an_array_ancilla_copied_from_inf_and_nan_is_freed(make):
    f = make("""
        def f(y, x):
            a = x.copy()
            y += 1.0
            del a
    """)
    assert f(1.0, np.array([math.nan, math.inf, 1.0]))[0] == 2.0


def test_a_dirty_ancilla_is_still_refused_next_to_nan(make):
    f = make("""
        def f(y, x):
            a = x * 2.0
            a += 1.0
            del a
    """)
    assert "ancilla `a`" in str(fails(f, 1.0, 3.0))
    y = np.zeros(1)
    g = make("""
        def g(y, x):
            a = 0.0
            a += x
            del a
    """)
    assert "infinite or nan" in str(fails(g, y[0], math.nan))  # refused before the `del`


# =========================================================================== #
# the Python backend is as quiet as compiled code (no NumPy warnings from generated files)
# =========================================================================== #
def test_python_backend_does_not_warn_from_generated_code():
    f = revbench.define("def f(y, x):\n    y += math.exp(x) * 0.0 + x * x\n", {"math": math},
                        backend="python", check=False)["f"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y, _ = f(0.0, 1e200)
    assert math.isnan(y)  # inf * 0.0


# =========================================================================== #
# the debugger's tracer makes the same checks as generated code
# =========================================================================== #
@pytest.mark.parametrize("args, error", [
    ((1e308, 1e308), "overflows to infinity"),
    ((1.0, math.inf), "infinite or nan"),
    ((1.0, math.nan), "infinite or nan"),
    ((1.0, 2.0), None),
])
def test_the_tracer_checks_shifts_like_generated_code(args, error):
    f = revbench.define("def f(y, x):\n    y += x\n", {})["f"]
    recording = revbench.trace(f, *args)
    if error is None:
        assert recording.error is None
    else:
        assert error in str(recording.error)
        assert str(recording.error).splitlines()[0] == str(fails(f, *args)).splitlines()[0]


@pytest.mark.parametrize("x", [math.nan, math.inf])
def test_the_tracer_frees_an_ancilla_back_at_inf_or_nan(x):
    f = revbench.define("def f(y, x):\n    a = x * 2.0\n    y += 1.0\n    del a\n", {})["f"]
    assert revbench.trace(f, 1.0, x).error is None
    g = revbench.define("def g(y, x):\n    a = x.copy()\n    y += 1.0\n    del a\n", {})["g"]
    assert revbench.trace(g, 1.0, np.array([x, 1.0])).error is None



def test_compiled_checked_updates_are_inlined(fresh_cache):
    """Checked ``+=`` / ``-=`` are calls of runtime helpers in generated code (less code
    for Numba to type); compiled, LLVM must inline them all.  With the failure's raise
    inside the helper, LLVM kept each float update a call: checked loops ran 2-3x slower.
    Only the failures stay out of line."""
    src = """
    def f(y, x, n):
        for i in range(len(x)):
            y += x[i] * x[i]
            y -= 2.0 * x[i]
            x[i] += y
            x[i] -= 0.5 * y
            n += 3
            n -= 1
            n += i
    """
    f = revbench.define(textwrap.dedent(src), backend="numba")["f"]
    x = np.array([0.5, 1.5, -2.0])
    kernel = f.kernel("forward", 0.0, x, 1)
    assert kernel(0.0, x.copy(), 1, 0.0, 0.0)[0] == f(0.0, x.copy(), 1)[0]
    llvm = "\n".join(kernel.inspect_llvm(sig) for sig in kernel.signatures)
    called = set(re.findall(r"\bcall [^@]*@(\S+?)\(", llvm))
    helpers = [c for c in called if re.search(r"float_shift|rb_i(add|sub|mul)|rb_checked", c)]
    assert not helpers, helpers
    assert "rb_shift_failed" in llvm and "rb_int_overflowed" in llvm  # out of line


def test_a_check_names_the_element_not_the_local_it_was_loaded_into(make):
    """An element read twice in a loop body is loaded once into a local (the ``hoist``
    transform); a failed check still names it as written: ``x[i]``, not ``_rb_h1``."""
    f = make("""
    def f(y, x):
        for i in range(len(x)):
            y[i] -= x[i]
            y[i] += 2.0 * x[i]
    """)
    y = np.array([1.7e308, 1.0])
    err = fails(f, y, np.array([-1.7e308, 0.0]))
    assert "`y[i] -= x[i]`" in str(err) and "_rb_" not in str(err), str(err)
    np.testing.assert_array_equal(y, [1.7e308, 1.0])  # the caller's array restored


@pytest.mark.parametrize("check", [True, False])
def test_a_float_power_with_an_int_exponent_overflows_alike_on_both_backends(check):
    """Python's float power raises OverflowError (and ZeroDivisionError for 0.0 ** -1)
    where Numba gives inf: the Python backend computes it as NumPy does, so both give inf
    -- stopped by the checks at the update, with checks on."""
    src = "def f(y, x, k):\n    y += x ** k\n"
    for args in [(0.0, 2.0, 2000), (0.0, 0.0, -1), (0.0, -0.0, -3), (0.0, 1.5, -2)]:
        got = []
        for backend in ("numba", "python"):
            f = revbench.define(src, backend=backend, check=check)["f"]
            try:
                got.append(f(*args))
            except revbench.ReversibilityError as err:
                assert check and "infinite or nan" in str(err)
                got.append("refused")
        assert repr(got[0]) == repr(got[1]), (args, got)


EXTREMES = """
def extremes(out, a, b):
    out[0] += max(a, b)
    out[1] += min(a, b)
    out[2] += np.maximum(a, b)
    out[3] += np.minimum(a, b)
    out[4] += np.fmax(a, b)
    out[5] += np.fmin(a, b)
"""


@pytest.mark.parametrize("a, b", [(0.0, math.nan), (math.nan, 0.0), (math.nan, math.nan),
                                  (1.0, 2.0), (-0.5, -3.0), (2.0, 2.0)])
def test_extremes_treat_nan_as_their_spelling_says(make, a, b):
    """``max``/``min`` are Python's (the first argument unless the second is larger), NumPy's
    spellings are NumPy's: ``np.maximum`` gives nan if either number is nan (a nan must not
    vanish because of the order of the arguments), ``np.fmax`` ignores a nan.  (Unchecked:
    with checks on, an update by nan is refused.)"""
    f = make(EXTREMES, check=False)
    want = [max(a, b), min(a, b), np.maximum(a, b), np.minimum(a, b), np.fmax(a, b),
            np.fmin(a, b)]
    got = f(np.zeros(6), a, b)[0]
    np.testing.assert_array_equal(got, want)


def test_extremes_of_ints_stay_ints_and_their_gradients_split_ties(make):
    f = make(EXTREMES)
    out = f(np.zeros(6, dtype=np.int64), 7, -3)[0]
    assert out.dtype == np.int64 and out.tolist() == [7, -3, 7, -3, 7, -3]
    g = make("""
def ext(y, a, b):
    y += np.maximum(a, b) + 2.0 * np.fmin(a, b) + 4.0 * np.minimum(a, b) + 8.0 * np.fmax(a, b)
""")
    assert revbench.grad(g, "y")(0.0, 1.0, 3.0)[1:] == (6.0, 9.0)
    assert revbench.grad(g, "y")(0.0, 3.0, 3.0)[1:] == (7.5, 7.5)


def _bits(z: complex) -> tuple:
    """A complex number's parts as bits (nan is nan, and -0.0 is not 0.0)."""
    return tuple(np.float64(p).view(np.int64) if p == p else "nan" for p in (z.real, z.imag))


COMPLEX_EDGES = [complex(x, y) for x in (0.0, -0.0, 1.0, -2.0, 19.0, -360.0, 709.5, 710.0,
                                          1500.0, 1e-310, 1e308, -1e308, math.inf,
                                          -math.inf, math.nan)
                 for y in (0.0, -0.0, 0.5, -3.0, 1e-310, 1e308, math.inf, math.nan)]


@pytest.mark.parametrize("fn", ["sqrt", "tanh", "exp"])
def test_complex_sqrt_tanh_and_exp_are_numpys_bit_for_bit(fn):
    """Numba's own complex sqrt and tanh lose digits or give nan at the ends of the range
    (sqrt(1e308 + 1e307j) halved the imaginary part; tanh(360 + 1j) was nan, tanh(19 + 0.5j)
    above 1; exp(710+0j) was inf+nanj): compiled code calls the C library's algorithms,
    which NumPy calls, so both
    backends give NumPy's value, bit for bit, over the whole range and the special values."""
    src = f"def f(w, z):\n    w += np.{fn}(z)\n"
    compiled = revbench.define(src, {"np": np}, backend="numba", check=False)["f"]
    rng = np.random.default_rng(7)
    zs = list(COMPLEX_EDGES)
    for e in range(-320, 309, 3):
        for _ in range(4):
            zs.append(complex(rng.uniform(-1, 1) * 10.0 ** e,
                              rng.uniform(-1, 1) * 10.0 ** (e + int(rng.integers(-20, 1)))))
    zs += [complex(x, y) for x in np.linspace(-400, 400, 161) for y in (0.1, -2.0, 3.0)]
    with np.errstate(all="ignore"):
        for z in zs:
            want = complex(getattr(np, fn)(np.complex128(z)))
            # (-0.0 + r is r, bit for bit, zeros' signs included)
            assert _bits(compiled(complex(-0.0, -0.0), z)[0]) == _bits(want), (fn, z)


def test_complex_sqrt_and_tanh_at_the_edges_with_checks_and_gradients(make):
    f = make("""
        def f(w, v, z):
            w += np.sqrt(z)
            v += np.tanh(z)
    """)
    for z in (1e308 + 1e307j, 360 + 1j, 19 + 0.5j, 3e-320 - 2e-321j):
        w, v, _ = f(0j, 0j, z)
        assert w == np.sqrt(np.complex128(z)) and v == np.tanh(np.complex128(z))
    h = make("""
        def h(s, z):
            s += np.real(np.sqrt(z)) + np.imag(np.tanh(z))
    """)
    for z in (0.7 - 1.3j, 30 + 0.2j, -4.0 + 1e-3j):
        revbench.check_grad(h, 0.0, z, loss="s")


@pytest.mark.parametrize("source, args, named", [
    ("y += np.max(x, axis=0)", (np.zeros(2), np.array([[1.0, np.inf], [2.0, 3.0]])),
     "`+=` by `np.max(x, axis=0)`"),
    ("y += np.cumprod(x)", (np.zeros(2), np.array([1e300, 1e300])), "`+=` by `np.cumprod(x)`"),
    ("y += np.cumprod(x)", (np.zeros(2, np.int64), np.array([2**40, 2**40])),
     "integer overflow in `np.cumprod(x)`"),
])
def test_a_check_in_a_lowered_statement_names_the_users_expression(make, source, args, named):
    """Reductions along an axis and scans become loops over revbench's own variables: a
    failed check names the operand as the user wrote it, never those."""
    f = make(f"def f(y, x):\n    {source}\n")
    with pytest.raises(revbench.ReversibilityError) as info:
        f(*args)
    assert named in str(info.value) and "_rb_" not in str(info.value), str(info.value)


@pytest.mark.parametrize("source, args", [
    ("w += z ** 2", (0j, 1e300j)),
    ("w += z ** -1", (0j, 0j)),
    ("w += abs(z)", (0.0, 1.5e308 + 1.5e308j)),
    ("w *= z", (1 + 0.5j, 1.7976931348623157e308j)),
])
def test_complex_overflow_is_the_same_on_both_backends(source, args):
    """Python's complex numbers raise OverflowError (or ZeroDivisionError) where compiled
    code and NumPy give inf or nan: the Python backend gives what Numba gives, unchecked,
    and the same checked error."""
    src = f"def f(w, z):\n    {source}\n"
    for check in (False, True):
        outcomes = []
        for backend in BACKENDS:
            f = revbench.define(src, {"np": np}, backend=backend, check=check)["f"]
            try:
                outcomes.append(("ok", repr(f(*args))))
            except revbench.ReversibilityError as exc:
                outcomes.append(("error", str(exc).splitlines()[0]))
        assert outcomes[0] == outcomes[1], (check, outcomes)
