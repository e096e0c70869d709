"""NiLang examples, ported in our own words: the defects its test suite found.

NiLang.jl's own tests and examples, translated into revbench's language, found
four kinds of failure; each has a regression test here, on the three variants
the port runs (Numba, the Python backend, Numba with ``check=False``), and the
debugger's tracer where it computes values itself:

1. complex expressions with float arguments: the gradient of the float is the
   real part of what flows back (no internal names, no advice to make an adjoint
   complex);
2. the gradient of ``sqrt`` and ``x ** 0.5`` at 0: one documented answer, 0;
3. routines nested in routines, differentiated with ``check=False``;
4. unchecked int64 arithmetic: it wraps around the same way on both backends.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import revbench
from revbench.debugging.tracing import trace

VARIANTS = [("numba", True), ("python", True), ("numba", False)]
VARIANT_IDS = ["numba", "python", "numba-unchecked"]


def define(src: str, backend: str, check: bool) -> dict:
    return revbench.define(src, backend=backend, check=check)


# --------------------------------------------------------------------------- #
# 1. The complex battery: float and complex arguments in one expression
# --------------------------------------------------------------------------- #
# loss += <expr> with y, z complex and r, s float
BATTERY = [
    "abs(y + r)",
    "abs(y - r * s)",
    "abs(y ** r)",
    "abs(r ** y)",
    "abs(y / r)",
    "abs(r / y)",
    "abs(y / z) * r",
    "abs(np.exp(y * r))",
    "abs(np.log(y * r + z))",
    "abs(1.0 / (y + r))",
    "abs(y) ** 2 * r",
    "(y * r).real + (z * s).imag",
    "np.real(y * z * r) - np.imag(y + s)",
    "abs(np.sin(y) * r + np.cosh(z * s))",
    "abs(np.sqrt(y * r + 1.0))",
    "abs(conj(y) * r + z)",
    "r * abs(y) + s * abs(z * r)",
    "abs(y * abs(z) * r)",  # a real quantity with a complex seed inside a complex product
]


def _loss(f, y, z, r, s):
    return f(0.0, y, z, r, s)[0]


def _central(f, args, k, h):
    lo, hi = list(args), list(args)
    lo[k] -= h
    hi[k] += h
    return (_loss(f, *hi) - _loss(f, *lo)) / (2 * h)


@pytest.mark.parametrize("backend,check", VARIANTS, ids=VARIANT_IDS)
@pytest.mark.parametrize("expr", BATTERY)
def test_complex_battery_gradients_match_central_differences(expr, backend, check):
    f = define(f"def f(loss, y, z, r, s):\n    loss += {expr}\n", backend, check)["f"]
    args = (0.8 + 1.3j, -0.6 + 0.9j, 0.7, 1.9)
    g = revbench.grad(f, loss="loss")(0.0, *args)[1:]
    h = 1e-6
    for k, (a, gk) in enumerate(zip(args, g)):
        if isinstance(a, float):
            assert isinstance(gk, float), f"the gradient of a float argument is {type(gk)}"
            assert gk == pytest.approx(_central(f, args, k, h), rel=1e-6, abs=1e-7)
        else:
            assert isinstance(gk, complex)
            # dL/dRe + i dL/dIm
            re = _central(f, args, k, h)
            im = (_loss(f, *args[:k], a + 1j * h, *args[k + 1:])
                  - _loss(f, *args[:k], a - 1j * h, *args[k + 1:])) / (2 * h)
            assert gk.real == pytest.approx(re, rel=1e-6, abs=1e-7)
            assert gk.imag == pytest.approx(im, rel=1e-6, abs=1e-7)


@pytest.mark.slow  # (every program of the battery compiled by Numba: the gradients above stay quick)
def test_complex_battery_backends_agree_and_check_grad_passes():
    src = "def f(loss, y, z, r, s):\n    loss += " + " + ".join(f"({e})" for e in BATTERY) + "\n"
    args = (0.8 + 1.3j, -0.6 + 0.9j, 0.7, 1.9)
    results = [revbench.grad(define(src, b, c)["f"], loss="loss")(0.0, *args)
               for b, c in VARIANTS]
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert a == pytest.approx(b, rel=1e-12, abs=1e-12)
    revbench.check_grad(define(src, "numba", True)["f"], 0.0, *args, loss="loss")


def test_real_and_imag_of_real_numbers_and_ints():
    f = define("def f(y, x, n):\n    y += x.real + 2.0 * x.imag + np.real(n) + np.imag(n)\n",
               "numba", True)["f"]
    assert f(0.0, 1.5, 3) == (4.5, 1.5, 3)
    assert revbench.grad(f, loss="y")(0.0, 1.5, 3)[1] == 1.0


def test_tracer_agrees_on_a_mixed_gradient():
    f = define("def f(loss, y, r):\n    loss += abs(y + r)\n", "numba", True)["f"]
    t = trace(f, 0.0, 1.0 + 2.0j, 0.7, loss="loss")
    expected = revbench.grad(f, loss="loss")(0.0, 1.0 + 2.0j, 0.7)
    assert t.gradients[2] == pytest.approx(expected[2], rel=1e-14)
    assert isinstance(t.gradients[2], float)


def test_complex_target_times_float_operand_gives_a_float_gradient():
    # y *= r with y complex: r's adjoint is the real part of conj(y) * y_bar
    f = define("def f(loss, y, r):\n    y *= r\n    loss += abs(y)\n", "numba", True)["f"]
    g = revbench.grad(f, loss="loss")(0.0, 3.0 + 4.0j, 2.0)
    assert isinstance(g[2], float) and g[2] == pytest.approx(5.0)


# --------------------------------------------------------------------------- #
# 2. sqrt at zero: 0, on every variant and spelling, never a raw error
# --------------------------------------------------------------------------- #
ROOTS = ["sqrt(x)", "math.sqrt(x)", "np.sqrt(x) * 2.0", "x ** 0.5", "x ** 0.25",
         "sqrt(x * x + w * w)", "hypot(x, w)", "(x * x + w * w) ** 0.5"]


@pytest.mark.parametrize("backend,check", VARIANTS, ids=VARIANT_IDS)
@pytest.mark.parametrize("expr", ROOTS)
def test_root_gradient_at_zero_is_zero(expr, backend, check):
    f = define(f"def f(y, x, w):\n    y += {expr}\n", backend, check)["f"]
    assert revbench.grad(f, loss="y")(0.0, 0.0, 0.0) == (1.0, 0.0, 0.0)
    t = trace(f, 0.0, 0.0, 0.0, loss="y")
    assert t.gradients == (1.0, 0.0, 0.0)


@pytest.mark.parametrize("backend,check", VARIANTS, ids=VARIANT_IDS)
def test_root_gradients_away_from_zero_are_unchanged(backend, check):
    f = define("def f(y, x, p):\n    y += sqrt(x) + x ** 0.5 + x ** p + p ** x\n",
               backend, check)["f"]
    g = revbench.grad(f, loss="y")(0.0, 2.0, 1.5)
    assert g[1] == pytest.approx(2 * 0.5 / math.sqrt(2.0) + 1.5 * 2.0 ** 0.5
                                 + math.log(1.5) * 1.5 ** 2.0)
    assert g[2] == pytest.approx(math.log(2.0) * 2.0 ** 1.5 + 2.0 * 1.5)


@pytest.mark.parametrize("backend,check", VARIANTS, ids=VARIANT_IDS)
def test_power_partials_at_a_zero_base(backend, check):
    f = define("def f(y, x, p):\n    y += x ** p + x ** 2 + x ** 1 + x ** 3.0\n",
               backend, check)["f"]
    # d/dx at 0: p = 1 gives 1 (x ** p is x), 2x gives 0, 1, 3x**2 gives 0
    assert revbench.grad(f, loss="y")(0.0, 0.0, 1.0)[1:] == (2.0, 0.0)
    # p = 0.5: no derivative at 0, 0 by convention; d/dp of 0 ** p is 0
    assert revbench.grad(f, loss="y")(0.0, 0.0, 0.5)[1:] == (1.0, 0.0)
    assert revbench.grad(f, loss="y")(0.0, 0.0, 2.0)[1:] == (1.0, 0.0)


def test_complex_sqrt_at_zero():
    f = define("def f(loss, z):\n    loss += abs(np.sqrt(z) + 1.0)\n", "numba", True)["f"]
    assert revbench.grad(f, loss="loss")(0.0, 0j)[1] == 0j


# --------------------------------------------------------------------------- #
# 3. Routines nested in routines, through calls: a correlation coefficient
# --------------------------------------------------------------------------- #
STATISTICS = '''
def mean_into(m, x):
    n = len(x)
    with routine:
        s = 0.0
        for i in range(n):
            s += x[i]
    m += s / n
    ~routine


def covariance(c, x, y):
    n = len(x)
    with routine as means:
        mx = 0.0
        my = 0.0
        mean_into(mx, x)
        mean_into(my, y)
    for i in range(n):
        with routine:
            dx = x[i] - mx
            dy = y[i] - my
        c += dx * dy / (n - 1)
        ~routine
    ~means


def correlation(r, x, y):
    with routine:
        cxy = 0.0
        cxx = 0.0
        cyy = 0.0
        xc = np.copy(x)
        yc = np.copy(y)
        covariance(cxy, x, y)
        covariance(cxx, x, xc)
        covariance(cyy, y, yc)
        with routine as product:
            p = 0.0
            p += cxx * cyy
        e = 0.0
        e += sqrt(p)
        ~product
    r += cxy / e
    ~routine
'''


@pytest.mark.parametrize("backend,check", VARIANTS, ids=VARIANT_IDS)
def test_nested_routines_statistic(backend, check):
    ns = define(STATISTICS, backend, check)
    x = np.array([1.0, 2.0, 4.0, 7.0, 3.0])
    y = np.array([2.0, 1.0, 5.0, 3.0, 4.5])
    r = ns["correlation"](0.0, x, y)[0]
    assert r == pytest.approx(np.corrcoef(x, y)[0, 1], rel=1e-13)
    assert (~ns["correlation"])(r, x, y)[0] == pytest.approx(0.0, abs=1e-15)
    gx, gy = revbench.grad(ns["correlation"], loss="r")(0.0, x, y)[1:]
    for k in range(len(x)):
        for arr, g in ((x, gx), (y, gy)):
            lo, hi = arr.copy(), arr.copy()
            lo[k] -= 1e-6
            hi[k] += 1e-6
            a = (hi, y) if arr is x else (x, hi)
            b = (lo, y) if arr is x else (x, lo)
            fd = (np.corrcoef(*a)[0, 1] - np.corrcoef(*b)[0, 1]) / 2e-6
            assert g[k] == pytest.approx(fd, rel=1e-6, abs=1e-9)
    gc = revbench.grad(ns["covariance"], loss="c")(0.0, x, y)[1]
    np.testing.assert_allclose(gc, (y - y.mean()) / (len(x) - 1), rtol=1e-12, atol=1e-15)


# --------------------------------------------------------------------------- #
# 4. int64 arithmetic: checked, it raises; unchecked, it wraps alike everywhere
# --------------------------------------------------------------------------- #
FACTORIAL = '''
def i_factorial(out, n):
    with routine:
        anc = 1
        for i in range(1, n + 1):
            anc *= i
    out += anc
    ~routine


def square_into(y, x):
    y += x * x
'''


@pytest.mark.parametrize("backend", ["numba", "python"])
def test_factorial_overflow_raises_with_checks(backend):
    ns = define(FACTORIAL, backend, True)
    assert ns["i_factorial"](0, 20) == (2432902008176640000, 20)
    with pytest.raises(revbench.ReversibilityError, match="integer overflow in `anc \\*= i`"):
        ns["i_factorial"](0, 21)
    with pytest.raises(revbench.ReversibilityError, match="integer overflow in `x \\* x`"):
        ns["square_into"](0, 2**32)


@pytest.mark.parametrize("backend", ["numba", "python"])
def test_unchecked_int_overflow_wraps_on_both_backends(backend):
    ns = define(FACTORIAL, backend, False)
    assert ns["i_factorial"](0, 21) == (-4249290049419214848, 21)  # 21! mod 2**64, signed
    assert ns["square_into"](0, 2**32) == (0, 2**32)
    assert ns["square_into"](5, 2**32 + 1) == (5 + 2**33 + 1, 2**32 + 1)


def _wrap(v: int) -> int:
    return (v + 2**63) % 2**64 - 2**63


INT64 = st.integers(-2**63, 2**63 - 1)


@settings(max_examples=60, deadline=None)
@given(a=INT64, b=INT64, c=st.integers(-2**40, 2**40))
def test_unchecked_int_arithmetic_agrees_between_backends(a, b, c):
    src = ("def f(y, a, b, c, v, w):\n"
           "    y += a * b - c * c + (a + b) // 3 - abs(-a)\n"
           "    y *= 3\n"
           "    y -= -b\n"
           "    v[0] += a * c\n"
           "    v[1] -= np.sum(w) * b\n")
    expected_y = _wrap(a * b - c * c + _wrap(a + b) // 3 - _wrap(abs(_wrap(-a))))
    expected_y = _wrap(_wrap(expected_y * 3) + b)
    out = []
    for backend in ("numba", "python"):
        v = np.array([1, 2], dtype=np.int64)
        w = np.array([2**62, a, b], dtype=np.int64)
        out.append((define(src, backend, False)["f"](0, a, b, c, v, w)[0], v.tolist()))
    assert out[0] == out[1]
    assert out[0][0] == expected_y
    assert out[0][1] == [_wrap(1 + a * c), _wrap(2 - _wrap(_wrap(2**62 + a + b) * b))]


def test_tracer_wraps_unchecked_ints_as_the_backends_do():
    f = define(FACTORIAL, "numba", False)["i_factorial"]
    assert trace(f, 0, 21).outputs == (-4249290049419214848, 21)
