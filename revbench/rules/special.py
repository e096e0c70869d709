"""revbench's own functions written as plain Python, which both backends compile from this
one source: the derivatives of ``lgamma`` (digamma, trigamma), NumPy's extremes of two
numbers as NumPy treats nan, and the complex square root and hyperbolic tangent that
compiled code calls instead of Numba's (below).

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
#: every float at or beyond 2**52 in magnitude is an integer: the poles are tested there
#: without ``math.floor``, whose int result compiled code makes with ``fptosi`` -- undefined
#: beyond 2**63, so the native code generator found -1e20 no pole (digamma finite there)
_ALL_INTEGERS = 4503599627370496.0  # (a plain global: every backend compiles these functions)



def digamma(x: float) -> float:
    """psi(x) = d/dx log|Gamma(x)|."""
    if x != x or x == -math.inf:
        return math.nan
    if x == math.inf:
        return math.inf
    if x <= 0.0 and (x <= -_ALL_INTEGERS or x == math.floor(x)):
        return math.nan  # a pole (0, -1, -2, ...)
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
    if x <= 0.0 and (x <= -_ALL_INTEGERS or x == math.floor(x)):
        return math.nan  # a pole (0, -1, -2, ...)
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


def sign(x):
    """``np.sign(x)``: 1, -1 or 0 of ``x``'s own type (``x ** 0`` is 1 or 1.0), nan for nan,
    and +0.0 for either zero, as NumPy gives (the C-style ``x`` for a zero kept -0.0)."""
    if x > 0:
        return x ** 0
    if x < 0:
        return -(x ** 0)
    if x == 0:
        return x - x  # (-0.0 - -0.0 is +0.0)
    return x


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


# (Each function is self-contained -- the sine and cosine of the imaginary part, taken as
# the C library takes them, a tiny one being its own sine, are written in each -- because
# compiled code calls it as a registered function, which cannot call another Python
# function of this module.)
#
# Numba's complex ``sqrt`` loses digits at the ends of the range (``sqrt(1e308 + 1e307j)``
# halves the imaginary part, subnormal arguments lose half their digits) and its complex
# ``tanh`` gives nan once the real part passes about 355 and more than 1 near 19.  Compiled
# code calls these instead (the Python backend calls NumPy's): the C library's algorithms,
# which NumPy calls, written out operation for operation -- so the two backends agree bit
# for bit (the tests compare them with NumPy over the whole range and the special values).

_DBL_MAX = 1.7976931348623157e308
_DBL_MIN = 2.2250738585072014e-308
_DBL_EPSILON = 2.220446049250313e-16
_TANH_T = 354.0  # int((DBL_MAX_EXP - 1) * ln 2 / 2): beyond it exp(2x) overflows


def csqrt(z):
    """``np.sqrt(z)`` of a complex ``z``: the C library's algorithm (glibc's ``csqrt``),
    which NumPy calls, operation for operation (scaling by powers of two is exact)."""
    x = z.real
    y = z.imag
    if not (math.isfinite(x) and math.isfinite(y)):
        if math.isinf(y):
            return complex(math.inf, y)
        if math.isinf(x):
            if x < 0.0:
                return complex(math.nan if y != y else 0.0, math.copysign(math.inf, y))
            return complex(x, math.nan if y != y else math.copysign(0.0, y))
        return complex(math.nan, math.nan)
    if y == 0.0:
        if x < 0.0:
            return complex(0.0, math.copysign(math.sqrt(-x), y))
        return complex(abs(math.sqrt(x)), math.copysign(0.0, y))
    if x == 0.0:
        if abs(y) >= 2.0 * _DBL_MIN:
            r = math.sqrt(0.5 * abs(y))
        else:
            r = 0.5 * math.sqrt(2.0 * abs(y))
        return complex(r, math.copysign(r, y))
    scale = 0
    if abs(x) > _DBL_MAX / 4.0:
        scale = 1
        x *= 0.25
        y *= 0.25
    elif abs(y) > _DBL_MAX / 4.0:
        scale = 1
        x = x * 0.25 if abs(x) >= 4.0 * _DBL_MIN else 0.0
        y *= 0.25
    elif abs(x) < 2.0 * _DBL_MIN and abs(y) < 2.0 * _DBL_MIN:
        scale = -27  # -(53 + 1) // 2
        x *= 2.0 ** 54
        y *= 2.0 ** 54
    d = math.hypot(x, y)
    if x > 0.0:
        r = math.sqrt(0.5 * (d + x))
        if scale == 1 and abs(y) < 1.0:
            s = y / r
            r *= 2.0
            scale = 0
        else:
            s = 0.5 * (y / r)
    else:
        s = math.sqrt(0.5 * (d - x))
        if scale == 1 and abs(y) < 1.0:
            r = abs(y / s)
            s *= 2.0
            scale = 0
        else:
            r = abs(0.5 * (y / s))
    if scale == 1:
        r *= 2.0
        s *= 2.0
    elif scale == -27:
        r *= 2.0 ** -27
        s *= 2.0 ** -27
    return complex(r, math.copysign(s, y))


def ctanh(z):
    """``np.tanh(z)`` of a complex ``z``: the C library's algorithm (glibc's ``ctanh``),
    which NumPy calls, operation for operation."""
    x = z.real
    y = z.imag
    if math.isinf(x):
        if math.isfinite(y) and abs(y) > 1.0:
            return complex(math.copysign(1.0, x), math.copysign(0.0, math.sin(y) * math.cos(y)))
        return complex(math.copysign(1.0, x), math.copysign(0.0, y))
    if not (math.isfinite(x) and math.isfinite(y)):
        if y == 0.0:
            return z
        return complex(x if x == 0.0 else math.nan, math.nan)
    sin_y, cos_y = (math.sin(y), math.cos(y)) if abs(y) > _DBL_MIN else (y, 1.0)
    if abs(x) > _TANH_T:  # exp(2x) would overflow: the imaginary part in two divisions
        e = math.exp(2.0 * _TANH_T)
        im = 4.0 * sin_y * cos_y / e
        rest = abs(x) - _TANH_T
        im = im / e if rest > _TANH_T else im / math.exp(2.0 * rest)
        return complex(math.copysign(1.0, x), im)
    if abs(x) > _DBL_MIN:
        sinh_x = math.sinh(x)
        cosh_x = math.cosh(x)
    else:
        sinh_x = x
        cosh_x = 1.0
    if abs(sinh_x) > abs(cos_y) * _DBL_EPSILON:
        den = sinh_x * sinh_x + cos_y * cos_y
    else:
        den = cos_y * cos_y
    return complex(sinh_x * cosh_x / den, sin_y * cos_y / den)


_EXP_T = 709.0  # int((DBL_MAX_EXP - 1) * ln 2): beyond it exp(x) overflows


def cexp(z):
    """``np.exp(z)`` of a complex ``z``: the C library's algorithm (glibc's ``cexp``),
    which NumPy calls (Numba's loses the last digit near overflow, and gives ``inf+nanj``
    for ``exp(710+0j)``)."""
    x = z.real
    y = z.imag
    if math.isfinite(x):
        if not math.isfinite(y):
            return complex(math.nan, math.nan)
        sin_y, cos_y = (math.sin(y), math.cos(y)) if abs(y) > _DBL_MIN else (y, 1.0)
        if x > _EXP_T:  # scaled in steps of exp(709), as the C library does
            e = math.exp(_EXP_T)
            x -= _EXP_T
            sin_y *= e
            cos_y *= e
            if x > _EXP_T:
                x -= _EXP_T
                sin_y *= e
                cos_y *= e
        if x > _EXP_T:
            return complex(_DBL_MAX * cos_y, _DBL_MAX * sin_y)
        v = math.exp(x)
        return complex(v * cos_y, v * sin_y)
    if math.isinf(x):
        if math.isfinite(y):
            v = math.inf if x > 0.0 else 0.0
            if y == 0.0:
                return complex(v, y)
            sin_y, cos_y = (math.sin(y), math.cos(y)) if abs(y) > _DBL_MIN else (y, 1.0)
            return complex(math.copysign(v, cos_y), math.copysign(v, sin_y))
        if x > 0.0:
            return complex(math.inf, y - y)
        return complex(0.0, math.copysign(0.0, y))
    if y == 0.0:
        return complex(math.nan, y)
    return complex(math.nan, math.nan)
