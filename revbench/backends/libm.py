"""Real scalar functions for the Python backend, bit for bit those of compiled code.

Numba compiles ``np.exp(x)`` of a float to the C library's ``exp`` (through LLVM's
intrinsic), as CPython's :mod:`math` does; NumPy's own scalar loops are other
implementations that differ in the last bit for some arguments (``np.exp`` of a float64
disagrees with the C library on about 4% of arguments).  The Python backend runs the
first call of a compiled function while it compiles (:mod:`revbench.tiering`), so the two
must agree exactly: generated Python code calls these for real arguments.

:mod:`math` raises where NumPy (and compiled code) returns ``inf`` or ``nan``; each
function here returns what compiled code returns instead, so a non-finite result reaches
revbench's own checks (which name the variable) rather than surfacing as a bare
``ValueError`` from the interpreter.
"""

from __future__ import annotations

import math

_INF = math.inf
_NAN = math.nan


def _instead(fn, error: type[Exception], value: float):
    """``fn``, returning ``value`` where :mod:`math` raises ``error``."""
    def f(x: float) -> float:
        try:
            return fn(x)
        except error:
            return value

    f.__name__ = fn.__name__
    return f


exp = _instead(math.exp, OverflowError, _INF)
expm1 = _instead(math.expm1, OverflowError, _INF)
cosh = _instead(math.cosh, OverflowError, _INF)


def _logarithm(fn):
    def log(x: float) -> float:
        if x > 0.0:
            return fn(x)
        if x == 0.0:
            return -_INF
        return _NAN  # negative, or nan

    log.__name__ = fn.__name__
    return log


log = _logarithm(math.log)
log2 = _logarithm(math.log2)
log10 = _logarithm(math.log10)


def log1p(x: float) -> float:
    if x > -1.0:
        return math.log1p(x)
    if x == -1.0:
        return -_INF
    return _NAN


def sqrt(x: float) -> float:
    return math.sqrt(x) if x >= 0.0 else _NAN


sin = _instead(math.sin, ValueError, _NAN)  # of +-inf
cos = _instead(math.cos, ValueError, _NAN)
tan = _instead(math.tan, ValueError, _NAN)
atan = math.atan
asinh = math.asinh


def sinh(x: float) -> float:
    try:
        return math.sinh(x)
    except OverflowError:
        return math.copysign(_INF, x)


def asin(x: float) -> float:
    return math.asin(x) if -1.0 <= x <= 1.0 else _NAN


def acos(x: float) -> float:
    return math.acos(x) if -1.0 <= x <= 1.0 else _NAN


def acosh(x: float) -> float:
    return math.acosh(x) if x >= 1.0 else _NAN


def atanh(x: float) -> float:
    if -1.0 < x < 1.0:
        return math.atanh(x)
    if x == 1.0 or x == -1.0:
        return math.copysign(_INF, x)
    return _NAN


def _c_function(symbol: str, nargs: int = 1):
    """The C library's function ``symbol`` (of ``nargs`` doubles), which compiled code
    calls; None where no C library can be loaded."""
    import ctypes
    import ctypes.util

    for name in (ctypes.util.find_library("m"), None):
        try:
            fn = getattr(ctypes.CDLL(name), symbol)
        except (OSError, AttributeError):
            continue
        fn.restype, fn.argtypes = ctypes.c_double, [ctypes.c_double] * nargs
        return fn
    return None


#: CPython's :func:`math.lgamma` and :func:`math.hypot` are algorithms of its own: they
#: differ from the C library's, which Numba compiles them to, in the last bit (lgamma for
#: about half of all arguments, hypot for one in two hundred)
_C_LGAMMA = _c_function("lgamma")
_C_HYPOT = _c_function("hypot", 2)


def hypot(x: float, y: float) -> float:
    """sqrt(x*x + y*y) without overflow, as compiled code computes it (the C library's)."""
    if _C_HYPOT is not None:
        return _C_HYPOT(x, y)
    return math.hypot(x, y)


def lgamma(x: float) -> float:
    """log|Gamma(x)|, as compiled code computes it: inf at the poles (0, -1, ...) and
    beyond 2.5e305, where :mod:`math` raises."""
    if _C_LGAMMA is not None:
        return _C_LGAMMA(x)
    try:
        return math.lgamma(x)
    except (ValueError, OverflowError):
        return _INF


#: the revbench function names (:mod:`revbench.rules.functions`) computed here for real
#: arguments under the Python backend (``tanh`` is revbench's own, ``rules.special.tanh``,
#: on every path)
FUNCTIONS = frozenset({
    "exp", "expm1", "log", "log2", "log10", "log1p", "sqrt", "sin", "cos", "tan",
    "atan", "asinh", "sinh", "cosh", "asin", "acos", "acosh", "atanh", "lgamma", "hypot"})
