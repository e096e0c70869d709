"""revbench's own functions written as plain Python, which both backends compile from this
one source: the derivatives of ``lgamma`` (digamma, trigamma), NumPy's extremes of two
numbers as NumPy treats nan; and the table of complex functions, which every path takes
from the C library (below).

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

import numpy as np

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


# -- tanh: revbench's own, so that a loop of it vectorises ---------------------------------
# The C library's ``tanh`` (glibc's) is a call with branches, about 15 ns an element, and
# a neural network's hidden layer is little else.  This one is straight-line arithmetic
# that LLVM's loop vectoriser takes (the native code generator inlines it; Numba and the
# GPU compile it; the Python backend runs it): the same operations in the same order on
# every path, so the same bits (no fused multiply-adds: neither LLVM nor NumPy contracts
# without being told).  Accuracy: within 1.5 ulp of the true tanh (1.42 the worst found),
# where glibc's is within 1 (tests/test_own_functions.py measures both against mpmath).
#
# Method: for |x| < 0.55, x + x t P(t) with t = x^2 and P of degree 10 fitted to
# (tanh(x)/x - 1)/t on [0, 0.3025] (mpmath's Chebyshev fit, 60 digits: 2.3e-18 relative);
# beyond, 1 - 2 / (e^2|x| + 1), whose result is >= 1/2, so the subtraction loses nothing,
# with e^y = 2^k e^s, k = round(y / ln 2), s = y - k ln 2 in two parts (Cody and Waite:
# k * _LN2_HI is exact) and e^s = 1 + s + s^2 Q(s), Q of degree 10 fitted on
# [-ln2/2, ln2/2] (1.7e-19).  |x| is capped at 20, where tanh rounds to 1, so 2^k needs no
# more than 58 bits; the divisor is at least 2, never zero.  tanh(-0.0) is -0.0.
_LN2_HI = 0.6931471526622772  # ln 2 rounded to 24 bits
_LN2_LO = 2.7897668087737545e-08  # ln 2 - _LN2_HI


def tanh(x: float) -> float:
    """The hyperbolic tangent of a real number (see the comment above)."""
    a = abs(x)
    if a < 0.55:
        t = a * a
        p = -0.3333333333333333 + t * (0.13333333333332714 + t * (-0.053968253967434016 + t * (
            0.021869488493666944 + t * (-0.008863234397814355 + t * (0.003592110378689024 + t * (
                -0.001455661830100716 + t * (0.0005889360520074057 + t * (
                    -0.0002346347410887237 + t * (8.511313685577672e-05 + t * (
                        -2.060276537636634e-05))))))))))
        r = a + a * (t * p)
    else:
        y = 2.0 * (a if a < 20.0 else 20.0)  # (a nan takes 20 too: the nan returns below)
        k = math.floor(y * LOG2E + 0.5)
        s = (y - k * _LN2_HI) - k * _LN2_LO
        q = 0.5 + s * (0.1666666666666667 + s * (0.04166666666666667 + s * (
            0.008333333333326141 + s * (0.0013888888888883752 + s * (0.00019841269874800493 + s * (
                2.4801587325533363e-05 + s * (2.7557255425746435e-06 + s * (
                    2.7557273661348637e-07 + s * (2.510520637395701e-08 + s * (
                        2.0914679376583935e-09))))))))))
        e = (1.0 + (s + s * (s * q))) * float(1 << k)
        r = 1.0 - 2.0 / (e + 1.0)
    return math.copysign(r, x) if x == x else x


#: (the code of) revbench's functions none of whose divisors can be zero -- each says why:
#: ``tanh``'s is at least 3.8 -- so that compiled code needs no zero test in them (a
#: backend compiles a renamed copy of the function: the code is the same)
NONZERO_DIVISORS = frozenset({tanh.__code__})


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


# -- complex functions: the C library's -------------------------------------------------
# A complex ``exp``, ``log``, ``sqrt``, ... is the C library's function (glibc's ``cexp``,
# ``clog``, ...), which NumPy calls for ``np.exp`` of a complex128: the one rule of
# docs/language.md section 9, kept by every path -- the Python backend calls NumPy (these
# functions), Numba code calls the C function itself (``numba_checks``), native code too
# (``native/lower.py``).  NumPy's ``log2`` and ``log10`` are ``clog`` with both parts
# scaled.  (Numba's own complex functions are other algorithms: its ``tan`` differed in
# the last bits on a third of the arguments tried, its ``sqrt`` lost digits at the ends of
# the range; the GPU refuses complex numbers.)

#: NumPy's ``NPY_LOG2E`` and ``NPY_LOG10E``: what ``log2`` and ``log10`` scale ``clog`` by
LOG2E = 1.4426950408889634
LOG10E = 0.4342944819032518
#: revbench's name of a complex function -> (the C library's function, the factor its
#: result's parts are scaled by, or None)
COMPLEX_C: dict[str, tuple[str, float | None]] = {
    "exp": ("cexp", None), "log": ("clog", None), "log2": ("clog", LOG2E),
    "log10": ("clog", LOG10E), "sqrt": ("csqrt", None),
    "sin": ("csin", None), "cos": ("ccos", None), "tan": ("ctan", None),
    "sinh": ("csinh", None), "cosh": ("ccosh", None), "tanh": ("ctanh", None)}


def _complex_function(name: str):
    """The Python backend's complex ``name``: NumPy's, which is the C library's."""
    numpy_fn = getattr(np, name)

    def fn(z):
        with np.errstate(all="ignore"):
            return complex(numpy_fn(np.complex128(z)))

    fn.__name__ = fn.__qualname__ = f"c{name}"
    fn.c_function = COMPLEX_C[name]
    return fn


#: revbench's name -> the complex function as Python calls it (compiled code calls the C
#: function each names in ``c_function`` instead)
COMPLEX_FUNCTIONS = {name: _complex_function(name) for name in COMPLEX_C}


def complex_pow(a, b):
    """``a ** b`` with a complex result: CPython's algorithm, operation for operation -- an
    integral real exponent up to 100 in magnitude by repeated squaring (``c_powi``), any
    other through the polar form (``_Py_c_pow``) -- on every path (Numba's own squares for
    ``** 2`` and has no ``c_powi``; NumPy's is another algorithm).  Where Python raises
    ``ZeroDivisionError`` (zero to a negative or complex power) the result is ``nan+nanj``,
    as NumPy's; where it raises ``OverflowError``, the infinities the computation reaches
    (docs/language.md section 9).  Compiled code reads :mod:`math` here, whose functions
    are the C library's there; the Python backend runs a copy reading IEEE versions
    (``runtime.complex_pow``), as C computes them where :mod:`math` would raise."""
    ar = a.real
    ai = a.imag
    br = b.real
    bi = b.imag
    if bi == 0.0 and abs(br) <= 100.0 and br == math.floor(br):
        n = int(br)
        k = -n if n < 0 else n
        rr = 1.0
        ri = 0.0
        pr = ar
        pi = ai
        mask = 1
        while k >= mask:
            if k & mask:
                t = rr * pr - ri * pi
                ri = rr * pi + ri * pr
                rr = t
            mask *= 2
            t = pr * pr - pi * pi
            pi = pr * pi + pi * pr
            pr = t
        if n >= 0:
            return complex(rr, ri)
        if rr == 0.0 and ri == 0.0:
            return complex(math.nan, math.nan)
        # 1 / r, as CPython divides (_Py_c_quot)
        if abs(rr) >= abs(ri):
            q = ri / rr
            d = rr + ri * q
            return complex((1.0 + 0.0 * q) / d, (0.0 - 1.0 * q) / d)
        if abs(ri) >= abs(rr):
            q = rr / ri
            d = rr * q + ri
            return complex((1.0 * q + 0.0) / d, (0.0 * q - 1.0) / d)
        return complex(math.nan, math.nan)
    if br == 0.0 and bi == 0.0:
        return complex(1.0, 0.0)
    if ar == 0.0 and ai == 0.0:
        if bi != 0.0 or br < 0.0:
            return complex(math.nan, math.nan)
        return complex(0.0, 0.0)
    vabs = math.hypot(ar, ai)
    length = math.pow(vabs, br)
    at = math.atan2(ai, ar)
    phase = at * br
    if bi != 0.0:
        e = math.exp(at * bi)
        if e != 0.0:  # (C divides by an exp that underflowed to 0 too: inf, or nan for 0)
            length = length / e
        elif length > 0.0:
            length = math.inf
        else:
            length = math.nan
        phase += bi * math.log(vabs)
    return complex(length * math.cos(phase), length * math.sin(phase))
