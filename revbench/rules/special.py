"""revbench's own functions written as plain Python, which both backends compile from this
one source: the derivatives of ``lgamma`` (digamma, trigamma), and NumPy's extremes of two
numbers as NumPy treats nan (below).

``math.lgamma`` (SciPy's ``gammaln``) is built into Numba and CPython alike, but its
derivative ``digamma`` and second derivative ``trigamma`` are not: SciPy's
``scipy.special.digamma`` cannot be called from Numba's compiled code (numba-scipy, which
would bridge it, supports only old SciPy releases).  So they are written here once, in the
subset of Python that Numba compiles: the same code runs in both backends, bit for bit
(``math.log``, ``math.tan`` and ``math.sin`` are the C library's in both).

Method (Abramowitz & Stegun 6.3.6, 6.3.18, 6.4.6, 6.4.12): reflect negative arguments,
step up with the recurrence until ``x >= 10``, then the asymptotic series, whose first
omitted term is below 1e-17 there.  The poles (0, -1, -2, ...) give nan, as SciPy does for
negative integers; the tests compare with SciPy to 1e-13.
"""

from __future__ import annotations

import math

_SHIFT = 10.0  # the series is used from here on


def digamma(x: float) -> float:
    """psi(x) = d/dx log|Gamma(x)|."""
    if x != x or x == -math.inf:
        return math.nan
    if x == math.inf:
        return math.inf
    if x <= 0.0 and x == math.floor(x):
        return math.nan  # a pole
    result = 0.0
    if x < 0.0:  # psi(x) = psi(1 - x) - pi / tan(pi x)
        result = -math.pi / math.tan(math.pi * x)
        x = 1.0 - x
    while x < _SHIFT:  # psi(x) = psi(x + 1) - 1 / x
        result -= 1.0 / x
        x += 1.0
    f = 1.0 / (x * x)
    series = f * (-1.0 / 12 + f * (1.0 / 120 + f * (-1.0 / 252 + f * (
        1.0 / 240 + f * (-1.0 / 132 + f * (691.0 / 32760 + f * (-1.0 / 12)))))))
    return result + math.log(x) - 0.5 / x + series


def trigamma(x: float) -> float:
    """psi'(x) = d^2/dx^2 log|Gamma(x)|."""
    if x != x or x == -math.inf:
        return math.nan
    if x == math.inf:
        return 0.0
    if x <= 0.0 and x == math.floor(x):
        return math.nan  # a pole
    result = 0.0
    if x < 0.0:  # psi'(x) = pi^2 / sin^2(pi x) - psi'(1 - x)
        s = math.sin(math.pi * x)
        result = math.pi * math.pi / (s * s)
        sign = -1.0
        x = 1.0 - x
    else:
        sign = 1.0
    tail = 0.0
    while x < _SHIFT:  # psi'(x) = psi'(x + 1) + 1 / x^2
        sq = x * x
        tail += 1.0 / sq if sq > 0.0 else math.inf  # (x^2 underflows below 1e-162)
        x += 1.0
    f = 1.0 / (x * x)
    series = (1.0 / x) * (1.0 + f * (1.0 / 6 + f * (-1.0 / 30 + f * (1.0 / 42 + f * (
        -1.0 / 30 + f * (5.0 / 66 + f * (-691.0 / 2730 + f * (7.0 / 6))))))))
    return result + sign * (tail + series + 0.5 * f)


# -- NumPy's extremes of two numbers ----------------------------------------------------
# Python's ``max(a, b)`` returns ``a`` unless ``b > a``, so ``max(0.0, nan)`` is 0.0 and
# ``max(nan, 0.0)`` nan; revbench's ``max``/``min`` keep that.  NumPy's spellings differ,
# and a program written with them must get NumPy's answer: ``np.maximum`` / ``np.minimum``
# give nan when either number is nan, ``np.fmax`` / ``np.fmin`` the other number.  Written
# for ints too (``a != a`` is never true), so one function serves every type.


def maximum(a, b):
    """``np.maximum(a, b)``: the larger; nan if either is nan."""
    if a != a:
        return a
    if b != b:
        return b
    return a if a >= b else b


def minimum(a, b):
    """``np.minimum(a, b)``: the smaller; nan if either is nan."""
    if a != a:
        return a
    if b != b:
        return b
    return a if a <= b else b


def fmax(a, b):
    """``np.fmax(a, b)``: the larger; a nan is ignored (nan only if both are)."""
    if a != a:
        return b
    if b != b:
        return a
    return a if a >= b else b


def fmin(a, b):
    """``np.fmin(a, b)``: the smaller; a nan is ignored (nan only if both are)."""
    if a != a:
        return b
    if b != b:
        return a
    return a if a <= b else b
