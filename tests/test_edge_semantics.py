"""The edges of the arithmetic, the same on every execution (docs/language.md section 9).

Each program runs on the three paths a user can get -- the Python backend, the default
compiled path (revbench's own code generator) and Numba alone (``REVBENCH_NATIVE=0``,
what the default path runs for any kernel the generator leaves to Numba) -- and all three
must give the same result or the same error, bit for bit, and the one the documentation
states.  The cases are the disagreements a differential campaign found: a process killed
by SIGFPE, unchecked integers that did not wrap, a pole that was finite, loops that ran 0
times or never ended, a check that sent a kernel to Numba.
"""

from __future__ import annotations

import itertools
import math
import textwrap

import numpy as np
import pytest
from test_native import same  # (bit for bit: nan equal to nan, signed zeros apart)

import revbench
from revbench.backends import runtime
from revbench.backends.native import engine

PATHS = ("python", "native", "numba")
I64_MIN, I64_MAX = -(2**63), 2**63 - 1


def run_on(path: str, monkeypatch, source: str, args: tuple, check: bool, op=None):
    """``op(f)(*args)`` (default: a forward call) on one path: ``("returned", value)`` or
    ``("raised", type name, message)``."""
    monkeypatch.setenv("REVBENCH_NATIVE", "0" if path == "numba" else "1")
    f = revbench.define(textwrap.dedent(source), {"np": np, "math": math}, check=check,
                        backend="python" if path == "python" else "numba",
                        filename="edges.py")["f"]
    call = f if op is None else op(f)
    args = tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)  # (each its own)
    try:
        return ("returned", call(*args))
    except Exception as exc:
        return ("raised", type(exc).__name__, str(exc))


def on_every_path(monkeypatch, source: str, args: tuple, check: bool = True, op=None,
                  equal=None):
    """The outcome all three paths agree on (the test fails where they do not); ``equal``
    compares results (default: bit for bit, nans too)."""
    outcomes = {p: run_on(p, monkeypatch, source, args, check, op) for p in PATHS}
    first = outcomes["python"]
    for o in outcomes.values():
        assert o[0] == first[0], outcomes
        if o[0] == "returned":
            assert (equal or same)(o[1], first[1]), outcomes
        else:
            assert o[1:] == first[1:], outcomes
    return first


def wrapped(v: int) -> int:
    return ((v - I64_MIN) % 2**64) + I64_MIN


# -- unchecked integers wrap around in int64, on every path ------------------------------
EDGES = (I64_MIN, I64_MIN + 1, -(2**32), -3037000500, -7, -1, 0, 1, 3, 3037000500, 2**32,
         I64_MAX - 1, I64_MAX)


@pytest.mark.parametrize("expr, exact", [
    ("a + b", lambda a, b: a + b), ("a - b", lambda a, b: a - b),
    ("a * b", lambda a, b: a * b), ("-a + b", lambda a, b: -a + b),
    ("abs(a) - b", lambda a, b: abs(a) - b), ("a ** 3 + b", lambda a, b: a ** 3 + b),
])
def test_unchecked_integer_arithmetic_wraps_the_same_on_every_path(monkeypatch, expr, exact):
    source = f"def f(n, a, b):\n    n += {expr}\n"
    pairs = list(itertools.product(EDGES[::3], EDGES[1::3]))
    for a, b in pairs:
        out = on_every_path(monkeypatch, source, (0, a, b), check=False)
        assert out == ("returned", (wrapped(exact(a, b)), a, b)), (a, b, out)


def test_the_helpers_are_the_rule_of_section_9():
    for a, b in itertools.product(EDGES, EDGES):
        assert runtime.int_wadd(a, b) == wrapped(a + b)
        assert runtime.int_wsub(a, b) == wrapped(a - b)
        assert runtime.int_wmul(a, b) == wrapped(a * b)
    for a in EDGES:
        assert runtime.int_wneg(a) == wrapped(-a) and runtime.int_wabs(a) == wrapped(abs(a))
        for n in (0, 1, 2, 5, 63, 64, 1000):
            assert runtime.int_wpow(a, n) == wrapped(a ** n if n < 70 else pow(a, n, 2**64))


def test_a_divisor_that_wraps_to_zero_raises_instead_of_killing_the_process(monkeypatch):
    """d * d wraps to 0 for d = 2**32: a ZeroDivisionError everywhere (Numba's product
    carried nsw, LLVM assumed it nonzero, and the division trapped: SIGFPE)."""
    for source, args in (("def f(m, n, d):\n    m += n % (d * d)\n", (0, 7, 2**32)),
                         ("def f(m, n, d):\n    m += n // (d * d)\n", (0, 7, 2**32)),
                         ("def f(n, c):\n    n /= c ** 64\n", (7, -4))):
        out = on_every_path(monkeypatch, source, args, check=False)
        assert out[:2] == ("raised", "ZeroDivisionError"), out


def test_a_product_that_wraps_negative_is_floored_as_it_wrapped(monkeypatch):
    a, b = 3037000500, -19129707703304192  # a * a wraps to a negative number
    q = (-b) // wrapped(a * a)
    assert q == -1
    for source, n in (("def f(n, a, b):\n    n -= (-b) // (a * a)\n", -8 - q),
                      ("def f(n, a, b):\n    n -= ((-b) // (a * a)) ** 5\n", -8 - q ** 5)):
        assert on_every_path(monkeypatch, source, (-8, a, b), check=False) == \
            ("returned", (n, a, b))


def test_the_smallest_int64_literal_is_an_int64(monkeypatch):
    source = "def f(n):\n    n += -2**63\n"
    assert on_every_path(monkeypatch, source, (-8,), check=False) == \
        ("returned", (wrapped(-8 - 2**63),))
    assert on_every_path(monkeypatch, source, (5,), check=False) == ("returned", (5 - 2**63,))
    assert on_every_path(monkeypatch, source, (5,), check=True) == ("returned", (5 - 2**63,))
    out = on_every_path(monkeypatch, source, (-8,), check=True)
    assert out[:2] == ("raised", "ReversibilityError") and "integer overflow" in out[2]
    inverse = on_every_path(monkeypatch, source, (wrapped(-8 - 2**63),), check=False,
                            op=lambda f: ~f)
    assert inverse == ("returned", (-8,))


# -- ranges near the ends of int64 ----------------------------------------------------------
LOOP = "def f(n, a, b, st):\n    for i in range(a, b, st):\n        n += 1\n"


@pytest.mark.parametrize("a, b, st", [
    (I64_MIN, I64_MAX, 2**62),            # spans more than int64: stop - start overflows
    (I64_MAX - 1, I64_MAX, 2),             # the counter would step past int64 (a hang)
    (I64_MIN + 1, I64_MIN, -2),
    (-5, I64_MAX, 2**61), (I64_MAX, I64_MIN, -(2**62)), (1, I64_MIN, 1), (-3, 4, 1),
    (4, -3, -1), (I64_MIN, -(2**62), 2**60),
])
def test_a_range_near_the_ends_of_int64_runs_its_python_length(monkeypatch, a, b, st):
    n = len(range(a, b, st))
    for check in (True, False):
        assert on_every_path(monkeypatch, LOOP, (0, a, b, st), check) == \
            ("returned", (n, a, b, st))
        assert on_every_path(monkeypatch, LOOP, (n, a, b, st), check, op=lambda f: ~f) == \
            ("returned", (0, a, b, st))


def test_constant_ranges_near_the_end_of_int64_end(monkeypatch):
    for st in (2, 3):
        source = f"def f(n):\n    for i in range({I64_MAX - 2}, {I64_MAX}, {st}):\n        n += 1\n"
        for check in (True, False):
            assert on_every_path(monkeypatch, source, (0,), check) == ("returned", (1,))


def test_a_range_too_long_to_count_is_refused_alike(monkeypatch):
    out = on_every_path(monkeypatch, LOOP, (0, I64_MIN, I64_MAX, 1), check=False)
    assert out == ("raised", "ValueError", runtime.RANGE_TOO_LONG)


# -- special functions at their poles -------------------------------------------------------
def test_digamma_at_a_huge_negative_pole_is_nan_on_every_path(monkeypatch):
    """``math.floor`` of -1e20 is undefined in machine integers (fptosi): the pole test
    must not rely on it (native code found -1e20 no pole once a kernel held digamma twice)."""
    twice = "def f(y, x, t):\n    y += digamma(x)\n    t += digamma(x)\n"
    for x in (-1e20, -2.0**60, -2.0**52, -3.0, -0.0):
        out = on_every_path(monkeypatch, twice, (0.0, x, 0.0), check=False)
        assert out[0] == "returned" and math.isnan(out[1][0]) and math.isnan(out[1][2])
    jvp = on_every_path(monkeypatch, "def f(y, x):\n    y += digamma(x)\n", (0.0, -1e20),
                        check=False, op=lambda f: lambda *a: revbench.jvp(
                            f, *a, tangents={"x": 0.75}, outputs="y"))
    assert jvp[0] == "returned" and all(math.isnan(v[0]) for v in jvp[1])


# -- what sends a kernel to Numba ---------------------------------------------------------------
def test_an_alias_check_over_a_3d_array_compiles_natively(monkeypatch):
    source = """
    def f(A, p, R):
        for b in range(1, A.shape[0]):
            for i in range(A.shape[1]):
                for j in range(A.shape[2]):
                    for k in range(A.shape[2]):
                        A[b, i, j] += A[p[b], i, k] * R[b, k, j]
    """
    before = dict(engine.refused)
    ok = on_every_path(monkeypatch, source, (np.ones((3, 4, 4)), np.array([0, 0, 1]),
                                             np.ones((3, 4, 4))))
    assert ok[0] == "returned"
    assert engine.refused == before, engine.refused
    bad = on_every_path(monkeypatch, source, (np.ones((3, 4, 4)), np.array([0, 1, 1]),
                                              np.ones((3, 4, 4))))
    assert bad[:2] == ("raised", "ReversibilityError")
    assert "both are index (1, 0, 0)" in bad[2] and "line 7" in bad[2]


# -- a float to an int power, np.sign, the C library's functions --------------------------------
def test_a_float_to_an_int_power_is_the_same_products_everywhere(monkeypatch):
    """|k| products from 1.0 (Numba's algorithm), IEEE results at the ends: ``0.0 ** -3`` is
    inf (Numba raised), ``2.0 ** -2**63`` is 0.0 (Numba raised OverflowError); the Python
    backend had NumPy's pow, another last bit for about two powers in three."""
    xs = [float(x) for x in np.random.default_rng(3).uniform(0.5, 2.0, 20)]
    for k in (3, 7, -5, 0, 70000, -(2**63)):
        for source in ("def f(y, x, k):\n    y += x ** k\n",
                       f"def f(y, x, k):\n    y += x ** {k}\n"):
            for x in xs[:4] + [0.0, -0.0, math.inf, -2.5]:
                on_every_path(monkeypatch, source, (0.0, x, k), check=False)
    assert on_every_path(monkeypatch, "def f(y, x, k):\n    y += x ** k\n", (0.0, 0.0, -1),
                         check=False) == ("returned", (math.inf, 0.0, -1))
    assert on_every_path(monkeypatch, "def f(y, x, k):\n    y += x ** k\n", (0.0, 2.0, -2**63),
                         check=True) == ("returned", (0.0, 2.0, -2**63))
    grad = on_every_path(monkeypatch, "def f(y, x):\n    y += (-x) ** -1\n", (0.0, 1e-300),
                         check=False, op=lambda f: revbench.grad(f, loss="y"))
    assert grad == ("returned", (1.0, math.inf))


def test_np_sign_of_a_zero_is_plus_zero_everywhere(monkeypatch):
    out = on_every_path(monkeypatch, "def f(y, x):\n    y += math.atan2(np.sign(x), -1.0)\n",
                        (0.0, -0.0), check=False)
    assert out == ("returned", (math.pi, -0.0))  # NumPy's sign(-0.0) is +0.0
    for x in (-2.5, 0.0, 3.0, math.nan, -math.inf):
        on_every_path(monkeypatch, "def f(y, x):\n    y += np.sign(x)\n", (0.0, x))
    for n in (-7, 0, 9):
        assert on_every_path(monkeypatch, "def f(m, n):\n    m += np.sign(n)\n", (0, n)) == \
            ("returned", (int(np.sign(n)), n))


def test_a_zero_divisor_behind_a_power_or_a_sign_raises_everywhere(monkeypatch):
    """(The Python backend followed NumPy's scalar rules there: a value instead of the error.)"""
    for source, args, check in (("def f(n, a, b):\n    n += a % np.sign(b)\n", (0, 7, 0), True),
                                ("def f(y, x, z):\n    y += (x ** 2) / z\n", (0.0, 3.0, 0.0), False),
                                ("def f(y, x, z):\n    y += (x ** 2) // z\n", (0.0, 3.0, 0.0), False)):
        out = on_every_path(monkeypatch, source, args, check)
        assert out[:2] == ("raised", "ZeroDivisionError"), out


def test_hypot_is_the_c_librarys_on_the_python_backend_too(monkeypatch):
    src = ("def f(y, x, z, k, flag):\n    t = math.hypot(np.minimum(np.arcsinh(z), x), "
           "(max(z, z) ** -0.5))\n    y += t\n    del t\n")
    on_every_path(monkeypatch, src, (1e308, -0.377, 1.0, 0, False), check=False,
                  op=lambda f: revbench.grad(f, loss="y"))
    rng = np.random.default_rng(4)
    for x, y in rng.normal(size=(30, 2)) * 10.0 ** rng.integers(-300, 300, size=(30, 2)):
        on_every_path(monkeypatch, "def f(r, x, y):\n    r += math.hypot(x, y)\n",
                      (0.0, float(x), float(y)), check=False)


def test_errors_of_a_compiled_jvp_name_their_line_as_a_call_does(monkeypatch):
    swap = "def f(x, k, j):\n    x[k], x[j] = x[j], x[k]\n"
    out = on_every_path(monkeypatch, swap, (np.array([-0.08, 0.9]), 2, -3), op=lambda f: (
        lambda *a: revbench.jvp(f, *a, tangents={"x": np.ones(2)}, outputs="x")))
    assert out[:2] == ("raised", "IndexError") and "index -3 is out of bounds" in out[2]
    out = on_every_path(monkeypatch, "def f(y, x, z):\n    y += x / z\n", (0.0, 1.0, 0.0),
                        check=False, op=lambda f: (
                            lambda *a: revbench.jvp(f, *a, tangents={"x": 1.0}, outputs="y")))
    assert out == ("raised", "ZeroDivisionError", "float division by zero")


@pytest.mark.parametrize("bad", [True, False, math.nan, math.inf, -1e-9, "1e-8", 1j])
def test_a_tolerance_is_a_finite_real_number_at_least_zero(bad):
    """``atol=True`` was taken as 1.0: an ancilla left at 0.87 was freed without a word."""
    with pytest.raises(ValueError, match="must be a finite number >= 0"):
        revbench.reversible(atol=bad)
    with pytest.raises(ValueError, match="must be a finite number >= 0"):
        revbench.set_tolerance(rtol=bad)
    ok = revbench.define("def f(y, x):\n    t = 0.0\n    t += x\n    y += t\n    del t\n",
                         atol=np.float64(0.5))["f"]
    with pytest.raises(revbench.ReversibilityError, match="ancilla `t`"):
        ok(0.0, 0.87)


# -- floats: a zero divisor raises, signed zeros as IEEE leaves them (section 9) ------------
DIVISION_SOURCE = "def f(y, x, a, u, N, W):\n    {target} += {expr}\n"


@pytest.mark.parametrize("expr, target, python", [
    ("u / W[0]", "x", lambda: 1.0 / 0.0),              # an array's element (np.float64)
    ("W[1] / W[0]", "x", lambda: 1.0 / 0.0),
    ("u // W[0]", "x", lambda: 1.0 // 0.0),
    ("u % W[0]", "x", lambda: 1.0 % 0.0),
    ("np.sum(W) / 0.0", "x", lambda: 0.0 / 0.0),       # a sum
    ("a // N[0]", "y", lambda: 1 // 0),
    ("N[1] // N[0]", "y", lambda: 1 // 0),
    ("a % N[0]", "y", lambda: 1 % 0),
    ("N[1] / N[0]", "x", lambda: 1 / 0),                # int / int: a float
    ("np.abs((u + 1j) / W[0])", "x", lambda: (1.0 + 1j) / 0.0),
])
@pytest.mark.parametrize("check", [True, False])
def test_a_zero_divisor_raises_on_every_path_whatever_the_operands(monkeypatch, expr, target,
                                                                   python, check):
    """The Python backend computed an array element's division with NumPy's scalar rules
    (inf, nan, 0 and a warning) where compiled code raised: a program gave a number on one
    path and an error on the others, unchecked -- and, checked, the error that the Python
    replay of a compiled failure reports was the finiteness check's, not the division's.
    Every path raises Python's own error for the same operation on Python numbers."""
    source = DIVISION_SOURCE.format(target=target, expr=expr)
    args = (0, 0.0, 1, 1.0, np.zeros(3, dtype=np.int64), np.zeros(3))
    out = on_every_path(monkeypatch, source, args, check)
    with pytest.raises(ZeroDivisionError) as exc:
        python()
    assert out[:2] == ("raised", "ZeroDivisionError"), out
    assert out[2].startswith(str(exc.value)), (out, exc.value)


@pytest.mark.parametrize("expr, u, v, result", [
    ("u * v", -0.0, 1.0, -0.0), ("u + v", -0.0, 0.0, 0.0), ("np.sqrt(u)", -0.0, 0.0, -0.0),
    ("np.sin(u)", -0.0, 0.0, -0.0), ("abs(u)", -0.0, 0.0, 0.0), ("np.sign(u)", -0.0, 0.0, 0.0),
    ("np.arctan2(u, v)", 0.0, -0.0, math.pi), ("np.arctan2(u, v)", -0.0, -0.0, -math.pi),
    ("max(u, v)", -0.0, 0.0, -0.0), ("max(v, u)", -0.0, 0.0, 0.0),
    ("min(u, v)", 0.0, -0.0, 0.0), ("max(u, v)", math.nan, 1.0, math.nan),
    ("max(v, u)", math.nan, 1.0, 1.0), ("u ** -1", -0.0, 0.0, -math.inf),
    ("u ** -3", 0.0, 0.0, math.inf),
])
def test_signed_zeros_and_nans_are_the_same_on_every_path(monkeypatch, expr, u, v, result):
    source = f"def f(x, u, v):\n    x += {expr}\n"
    out = on_every_path(monkeypatch, source, (-0.0, u, v), check=False)
    assert out[0] == "returned", out
    got = out[1][0]  # (-0.0 + r is r for every r, -0.0 included)
    assert same(float(got), float(result)), (expr, got, result)


@pytest.mark.parametrize("flag", [True, False, np.True_, np.False_])
@pytest.mark.parametrize("check", [True, False])
def test_a_bool_array_size_counts_as_0_or_1_on_every_path(monkeypatch, flag, check):
    """``np.zeros(a)`` with a bool ``a`` (a fuzzer's mutation): the Python backend raised
    NumPy's TypeError, Numba refused to compile it, native code made 1 element.  A bool
    counts as 0 or 1 there, as in an index -- in a loop's reused buffer too."""
    source = ("def f(y, a, x):\n    q = np.zeros(a)\n    y += len(q)\n    del q\n"
              "    for i in range(2):\n        r = np.zeros((a, 2))\n        y += len(r)\n"
              "        del r\n")
    out = on_every_path(monkeypatch, source, (0, flag, 1.0), check)
    assert out[0] == "returned" and out[1][0] == 3 * int(flag), out


# -- complex numbers: CPython's arithmetic and power, the C library's functions -------------
_PARTS = (0.0, -0.0, 1.0, -2.5, 0.5, 1e-300, 5e-324, 1e308, 710.0, -745.0, 30.0,
          math.pi, math.inf, -math.inf, math.nan)
#: every pair of special parts: the values the C library treats one by one
COMPLEX_GRID = np.array([complex(a, b) for a in _PARTS for b in _PARTS])


def same_values(a, b) -> bool:
    """Equal numbers, bit for bit, nan equal to any nan (its sign and payload are part of
    no rule), element by element, real and imaginary parts apart."""
    a, b = np.asarray(a, dtype=complex).ravel(), np.asarray(b, dtype=complex).ravel()
    if a.shape != b.shape:
        return False
    pa = np.concatenate([a.real, a.imag])
    pb = np.concatenate([b.real, b.imag])
    nan = np.isnan(pa)
    return bool(np.array_equal(nan, np.isnan(pb))
                and pa[~nan].tobytes() == pb[~nan].tobytes())


@pytest.mark.parametrize("fn", ["exp", "log", "log2", "log10", "sqrt", "sin", "cos", "tan",
                                "sinh", "cosh", "tanh", "conj", "abs"])
def test_complex_functions_are_the_c_librarys_on_every_path(monkeypatch, fn):
    """Native code and Numba call the C library's ``cexp``, ``clog``, ... (the table
    ``rules.special.COMPLEX_C``), the Python backend NumPy, which calls the same functions:
    the same bits over every pair of special parts (infinities, nans, signed zeros, the
    ends of the range)."""
    source = f"""
        def f(y, z):
            for i in range(z.shape[0]):
                y[i] += {'abs' if fn == 'abs' else 'np.' + fn}(z[i])
    """
    # (starting at -0.0: ``-0.0 + v`` is ``v``, its signed zeros too)
    y = np.full(len(COMPLEX_GRID), -0.0 if fn == "abs" else complex(-0.0, -0.0))
    first = on_every_path(monkeypatch, source, (y, COMPLEX_GRID), check=False,
                          equal=lambda a, b: same_values(a[0], b[0]))
    if fn == "abs":  # (the C library's hypot: NumPy's array loop has its own, last bits apart)
        from revbench.backends import libm

        expected = [libm.hypot(z.real, z.imag) for z in COMPLEX_GRID.tolist()]
    else:
        with np.errstate(all="ignore"):
            expected = [complex(getattr(np, fn)(z)) for z in COMPLEX_GRID]  # (NumPy's scalars)
    assert same_values(first[1][0], expected)


@pytest.mark.parametrize("expr", ["a * b", "a / b", "a ** b", "a ** 2", "a ** 3", "a ** -1",
                                  "a ** 0.5", "a + b", "a - b", "a ** 100"])
def test_complex_arithmetic_is_pythons_on_every_path(monkeypatch, expr):
    """``* / **`` of complex numbers as Python computes them (an array's complex128 element
    included: NumPy's own division and power are other algorithms); where Python raises for
    a power, the rule's value (section 9)."""
    a = COMPLEX_GRID[::4].copy()
    b = np.roll(COMPLEX_GRID, 7)[::4].copy()
    source = f"""
        def f(y, a, b):
            for i in range(a.shape[0]):
                y[i] += {expr.replace('a', 'a[i]').replace('b', 'b[i]')}
    """
    y = np.full(len(a), complex(-0.0, -0.0))
    outcome = on_every_path(monkeypatch, source, (y, a, b), check=False,
                            equal=lambda u, v: same_values(u[0], v[0]))
    if "/" in expr and outcome[0] == "raised":
        assert outcome[1:] == ("ZeroDivisionError", "complex division by zero")
        return
    for k, (x, w) in enumerate(zip(a.tolist(), b.tolist())):
        try:
            want = eval(expr, {"a": x, "b": w})
        except (ZeroDivisionError, OverflowError):
            continue  # (the rule's own value: tested below)
        assert same_values(outcome[1][0][k], want), (expr, x, w)


def test_a_complex_power_where_python_raises_has_the_rules_value(monkeypatch):
    source = """
        def f(y, a, b):
            for i in range(a.shape[0]):
                y[i] += a[i] ** b[i]
    """
    a = np.array([0j, 0j, 0j, 1e300 + 0j])
    b = np.array([-1 + 0j, 1j, -2.5 + 0j, 3 + 0j])
    out = on_every_path(monkeypatch, source, (np.zeros(4, dtype=complex), a, b), check=False,
                        equal=lambda u, v: same_values(u[0], v[0]))
    y = out[1][0]
    assert all(math.isnan(v.real) and math.isnan(v.imag) for v in y[:3]), y  # (0 ** negative)
    assert math.isinf(y[3].real), y                                          # (an overflow)
    with pytest.raises(ZeroDivisionError):
        0j ** -1  # (what Python does instead)
