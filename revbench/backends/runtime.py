"""What generated code needs at run time, and how its failures are reported.

Generated code raises :class:`CheckFailed` with small integers and the values
involved (Numba can raise exceptions with runtime arguments, not format
strings).  Each generated module registers a :class:`CheckTable` under its
key, and :func:`to_user_error` turns the raw exception into a
:class:`~revbench.lang.errors.ReversibilityError` whose message names the
variable, the expected and actual values, the function and the source line.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from revbench.backends import libm
from revbench.lang.errors import ReversibilityError
from revbench.lang.ir import shown_file, shown_name
from revbench.rules import checks, special
from revbench.rules.checks import CHECKS


class CheckFailed(Exception):
    """Raised by generated code: ``(module_key, check_index, expected, actual, *index)``."""


class Interrupted(KeyboardInterrupt, Exception):
    """Raised by compiled code that noticed Ctrl-C (:func:`interrupted`).

    A ``KeyboardInterrupt`` -- what the user pressed -- that Numba can raise (it raises
    ``Exception`` subclasses only); the function's caller restores its arguments and
    raises a plain ``KeyboardInterrupt``."""


#: how often a long-running loop asks whether Ctrl-C was pressed (a power of two, minus one)
POLL_MASK = 65535

#: compiled code asks CPython for Ctrl-C at every ``POLL_EVERY``-th poll (the others only
#: count down, ``numba_backend``): a poll sits in a loop around loops or calls, so even an
#: iteration of a millisecond answers Ctrl-C within a tenth of a second
POLL_EVERY = 128


def interrupted() -> bool:
    """Whether an interrupt is pending.  Compiled code polls this in long-running loops,
    where the interpreter cannot deliver Ctrl-C (Numba's version runs Python's signal
    handlers: ``numba_backend``); plain Python receives it by itself.

    Under the Python backend it also runs the polls registered with
    :func:`register_poll` (tiered execution stops an interpreted run there once the
    compiled code is ready: :mod:`revbench.tiering`)."""
    for poll in _POLLS:
        poll()
    return False


_POLLS: list = []


def register_poll(poll) -> None:
    """Have interpreted code's loop polls call ``poll()`` (which may raise to stop the run)."""
    if poll not in _POLLS:
        _POLLS.append(poll)


@dataclass(frozen=True)
class CheckInfo:
    kind: str  # see MESSAGES
    variable: str  # the user's text of the variable / condition / operand
    line: int
    detail: str = ""  # extra text (the other operand, the statement, ...)


@dataclass
class CheckTable:
    function: str
    filename: str
    direction: str
    checks: list[CheckInfo] = field(default_factory=list)
    linemap: dict[int, int] = field(default_factory=dict)  # generated line -> user line
    source_lines: dict[int, str] = field(default_factory=dict)  # user line -> text
    path: str = ""
    #: (check kind, variable, line) -> a sentence on the cause, or "" (the compiler's, from
    #: the function's IR: :func:`revbench.lang.hints.ancilla_culprit`)
    hint: Callable[[str, str, int], str] | None = field(default=None, repr=False, compare=False)


#: module key -> its table (filled when a generated module is loaded)
TABLES: dict[int, CheckTable] = {}

#: check kind -> the headline of its message (:data:`revbench.rules.checks.CHECKS`, where
#: each kind also says what must hold and how its values are worded)
MESSAGES = {kind: c.message for kind, c in CHECKS.items()}

#: the range of revbench integers (int64): exact results outside it are refused
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
#: the smallest positive normal float64: a product or quotient below it may have lost
#: digits, so ``*=`` / ``/=`` then checks that its inverse gives the target back, to
#: within SCALE_RTOL (two roundings)
FLOAT_TINY = checks.FLOAT_TINY
SCALE_RTOL = 2.0**-51
#: a product or quotient above this (half the largest float) is checked the same way:
#: its inverse may round up to inf
FLOAT_HUGE = 2.0**1023
#: |a|, |b| <= this: a * b fits in int64 (3037000499 ** 2 < 2 ** 63)
_MUL_SAFE = 3037000499


#: the updates, longest first: what separates a statement's target from its operand
_UPDATE_OPS = ("//=", "**=", "+=", "-=", "*=", "/=", "^=", "%=")


def users_words(text: str, line: str) -> str:
    """``text`` (an expression a check names) as the user wrote it: a lowered statement's
    expression names revbench's own variables (``np.cumprod(x)`` became a loop over
    ``_rb_scan0``), so the message names the operand of the user's line instead."""
    if "_rb_" not in text or not line:
        return text
    for op in _UPDATE_OPS:
        if op in line:
            return line.split(op, 1)[1].strip()
    return line


def to_user_error(exc: CheckFailed, tables: Mapping[int, CheckTable] | None = None
                  ) -> ReversibilityError:
    """Turn a raw :class:`CheckFailed` into the user's :class:`ReversibilityError`.

    ``tables`` are those of the code that was called (it and its callees): one compiled
    module can serve several functions of the same code (a cell run again, a function
    copied into two files), and only the caller knows which one failed."""
    key, k, expected, actual, *index = exc.args
    table = (tables or {}).get(key) or TABLES.get(key)
    if table is None:  # pragma: no cover - a module loaded without its table
        return ReversibilityError(f"a reversibility check failed: {exc.args}")
    info = table.checks[k]
    text = table.source_lines.get(info.line, "").strip()
    var = users_words(info.variable, text)
    if index and info.kind == "ancilla":
        var = f"{var}[{', '.join(str(int(i)) for i in index)}]"
    op, tab, detail = info.detail.rpartition("\t")
    failure = checks.Failure(var, f"{op}{tab}{users_words(detail, text)}", expected, actual,
                             tuple(index))
    what = checks.headline(info.kind, failure)
    values = CHECKS[info.kind].values(failure)
    op = info.detail if info.kind in ("zero", "nonfinite") else \
        (info.detail.split(" ")[1:2] or [""])[0] if info.kind == "result" else ""
    if op and text and op not in text:  # an update run backwards (or inside `with inverted:`)
        what = f"{what} (undoing `{text}`)"
    # (the lean run before a sweep is the forward run, as the user sees it: one message
    # whichever of the two this process happened to compile)
    run = table.direction.removesuffix("-before-sweep")
    direction = "" if run == "forward" else f" (running its {run})"
    msg = (f"{what}: {values}\n  in reversible function {shown_name(table.function)}{direction}, "
           f"{shown_file(table.filename)}, line {info.line}: {text}")
    cause = table.hint(info.kind, info.variable, info.line) if table.hint is not None else ""
    if cause:
        msg += f"\n  {cause}"
    return ReversibilityError(msg, variable=var, expected=expected, actual=actual,
                              function=table.function, filename=table.filename, lineno=info.line)


# --------------------------------------------------------------------------- #
# Sums in expressions, for the debugger's tracer (generated code loops instead)
# --------------------------------------------------------------------------- #
def as_tuple(r):
    """A custom adjoint's result as a tuple (it may return one adjoint bare)."""
    return r if isinstance(r, tuple) else (r,)


def loop_sum(item, shape, start):
    """``start + item(i0) + item(i1) + ...`` over the indices of ``shape`` in order: the
    order of generated code's loops (Python's ``sum`` of floats compensates rounding
    from 3.12 on, which would differ in the last bits)."""
    import numpy as np

    for ix in np.ndindex(shape):
        start += item(ix)
    return start


def loop_extreme(item, shape, start, largest):
    """The largest (or smallest) of ``item(i)`` over the indices of ``shape``, as generated
    code finds it: a nan wins (as in NumPy), else the first extreme in index order."""
    import numpy as np

    for ix in np.ndindex(shape):
        v = item(ix)
        if (v > start if largest else v < start) or v != v:
            start = v
            if v != v:
                break
    return start


# --------------------------------------------------------------------------- #
# A checked float shift (generated code with checks on calls this)
# --------------------------------------------------------------------------- #
def shift_failed(old, new, value, module, k):
    """``y += value`` (or ``-=``) made ``y`` infinite or nan: raise check ``k`` (an
    infinite or nan operand) or ``k + 1`` (a finite ``old`` overflowed); return when
    ``old`` was already infinite or nan (shifted by a finite amount, it stays so)."""
    if not (abs(value.real) < math.inf and abs(value.imag) < math.inf):
        raise CheckFailed(module, k, 0, value)
    if abs(old.real) < math.inf and abs(old.imag) < math.inf:
        raise CheckFailed(module, k + 1, old, new)


def float_shift(old, value, subtract, module, k):
    """``old + value`` (``old - value`` where ``subtract``) for a checked float or complex
    ``y += value`` (``-=``): one call in generated code instead of a copy of ``y``, the
    update, a test and a failure branch -- less code for Numba to type and LLVM to
    optimize, which inlines it back (``subtract`` is a constant at every call site; Numba
    compiles :func:`shift_failed` out of line, see ``numba_backend``)."""
    new = old - value if subtract else old + value
    if not (abs(new.real) < math.inf and abs(new.imag) < math.inf):
        shift_failed(old, new, value, module, k)
    return new


# --------------------------------------------------------------------------- #
# Checked int64 arithmetic (generated code with checks on calls these)
# --------------------------------------------------------------------------- #
# Each takes the operands, then the module key and the check index to report
# with, and returns the exact result or raises CheckFailed(module, k, a, b) when
# that result does not fit in int64.  These are the Python backend's versions
# (unbounded ints; NumPy int64 and bool scalars are converted by int() first);
# numba_backend compiles them too (and has its own + - * with LLVM's overflow
# intrinsics), so every test is made *before* the operation: Numba's signed
# overflow is not even guaranteed to wrap (LLVM may assume it never happens).
def safe_abs(x):
    """``abs(x)``, where a complex number whose modulus exceeds the float range is inf (as
    in compiled code and NumPy) rather than Python's ``OverflowError``: the Python
    backend's ``abs``."""
    try:
        return abs(x)
    except OverflowError:
        return math.inf


def _ieee_pow(x: float, y: float) -> float:
    try:
        return math.pow(x, y)
    except OverflowError:  # (of a positive x: complex_pow takes the power of a modulus)
        return math.inf


#: :mod:`math`'s functions as the C library computes them -- inf or nan where :mod:`math`
#: raises: what the Python backend's :func:`complex_pow` reads for ``math``
_IEEE_MATH = types.SimpleNamespace(
    floor=math.floor, atan2=math.atan2, inf=math.inf, nan=math.nan, pow=_ieee_pow,
    cos=libm.cos, exp=libm.exp, hypot=libm.hypot, log=libm.log, sin=libm.sin)


def copy_function(fn: Callable, qualname: str | None = None, **names: object) -> Callable:
    """A copy of the Python function ``fn`` that reads ``names`` instead of the globals of
    those names (its module keeps its own); ``qualname`` renames it (each function
    compiled into cached code needs a name of its own: issue 21)."""
    copy = types.FunctionType(fn.__code__, {**fn.__globals__, **names}, fn.__name__,
                              fn.__defaults__, fn.__closure__)
    copy.__qualname__, copy.__module__ = fn.__qualname__, fn.__module__
    if qualname is not None:
        copy.__name__ = copy.__qualname__ = qualname
    return copy


#: ``a ** b`` with a complex result on the Python backend: the rule
#: (:func:`revbench.rules.special.complex_pow`, which compiled code runs), reading C's
#: functions, as compiled code does
complex_pow = copy_function(special.complex_pow, "complex_pow", math=_IEEE_MATH)


def int_wrap(v):
    """``v`` wrapped around into int64, as Numba's unchecked integers do: the Python
    backend's integers (unbounded) call this with checks off, so both backends give
    the same int64 results (two's complement) where overflow is not checked."""
    v = int(v)
    if INT64_MIN <= v <= INT64_MAX:
        return v
    return ((v - INT64_MIN) & 0xFFFFFFFFFFFFFFFF) + INT64_MIN


# -- unchecked int64 arithmetic: two's complement, wrapping around -------------------
# What ``check=False`` code calls for an integer ``+ - *``, unary ``-``, ``abs`` and ``**``
# that may overflow (docs/language.md section 9).  These are the rule, in exact Python
# arithmetic; the compiled versions do the same with machine integers *without* LLVM's
# ``nsw`` flag (Numba's own ``a * b`` carries it: LLVM then assumes no overflow, so a
# product that wraps to 0 passed a zero-divisor test, and the division trapped).  The
# Numba versions are intrinsics (:mod:`numba_checks`), the native code generator lowers
# the names itself, the GPU's are in :mod:`cuda_helpers`; tests compare all of them
# with these over the int64 edges.
def int_wadd(a, b):
    return int_wrap(int(a) + int(b))


def int_wsub(a, b):
    return int_wrap(int(a) - int(b))


def int_wmul(a, b):
    return int_wrap(int(a) * int(b))


def int_wneg(a):
    return int_wrap(-int(a))


def int_wabs(a):
    """``abs(a)`` wrapped: ``abs(-2**63)`` is ``-2**63``."""
    return int_wrap(abs(int(a)))


def int_wpow(a, n):
    """``a ** n`` for a constant ``n >= 0``, wrapped: the same as multiplying ``n`` times,
    each product wrapped (wrapping is arithmetic modulo 2**64)."""
    return int_wrap(pow(int(a), int(n), 1 << 64))


#: beyond this many products a float to an int power is the C library's ``pow``
POWER_PRODUCTS = 0x10000


def ieee_pow(a, b):
    """The C library's ``pow``, with IEEE results where :func:`math.pow` raises (``0.0 **
    -1.0`` is inf): compiled code's ``math.pow`` (Numba compiles :func:`float_int_power` with
    ``math.pow`` in its place, :mod:`numba_checks`)."""
    import numpy as np  # (only here: the runtime is imported by every kernel)

    with np.errstate(all="ignore"):
        return float(np.float64(a) ** b)


def float_int_power(a, n):
    """``a ** n`` of a float ``a`` and an int ``n`` (docs/language.md section 9): ``|n|``
    square-and-multiply products from 1.0, the reciprocal for a negative ``n`` -- the
    algorithm compiled code runs (Numba's ``int_power``) -- and IEEE results where it ends
    in a zero or an infinity (``0.0 ** -3`` is inf, not an error); beyond
    :data:`POWER_PRODUCTS` products, the C library's ``pow``.  (NumPy's scalar power is
    ``pow`` throughout, which differs from the products in the last bit.)"""
    a, n = float(a), int(n)
    if n > POWER_PRODUCTS or n < -POWER_PRODUCTS:
        return ieee_pow(a, float(n))
    r, e = 1.0, abs(n)
    while e:
        if e & 1:
            r *= a
        e >>= 1
        a *= a
    if n >= 0:
        return r
    if r == 0.0:
        return math.copysign(math.inf, r)
    return 1.0 / r


#: what a loop over a range too long to count says (it could never run to its end)
RANGE_TOO_LONG = "a range() with more than 2**63 - 1 elements cannot be looped over"


def range_len(a, b, s):
    """The number of elements of ``range(a, b, s)``, as Python counts them: what a loop
    whose bounds may be negative counts with (``stop - start`` overflows int64 where the
    range spans more than it).  Compiled code computes it in unsigned arithmetic
    (:mod:`numba_checks`, the native generator's ``rb_range_len``)."""
    a, b, s = int(a), int(b), int(s)
    if s == 0:
        raise ValueError("range() arg 3 must not be zero")
    n = max(0, (b - a + s - (1 if s > 0 else -1)) // s)
    if n > INT64_MAX:
        raise ValueError(RANGE_TOO_LONG)
    return n


def _python_number(v):
    item = getattr(v, "item", None)  # (a NumPy scalar: the Python number it holds)
    return item() if item is not None else v


def py_truediv(a, b):
    """The Python backend's ``a / b``: a zero divisor raises ``ZeroDivisionError``, with
    Python's own message, whatever the operands' types -- NumPy's scalars (an array's
    elements, a sum) give inf or nan there, compiled code raises (docs/language.md,
    section 9); complex numbers divide as Python divides them."""
    if b == 0:
        return _python_number(a) / _python_number(b)  # (raises Python's error)
    if isinstance(a, complex) or isinstance(b, complex):
        # Python's complex division (CPython's algorithm, as compiled code divides), not
        # NumPy's, which an array's complex128 element would take (another last bit)
        return complex(a) / complex(b)
    return a / b


def py_floordiv(a, b):
    """The Python backend's ``a // b`` (see :func:`py_truediv`)."""
    if b == 0:
        return _python_number(a) // _python_number(b)
    return a // b


def py_mod(a, b):
    """The Python backend's ``a % b`` (see :func:`py_truediv`)."""
    if b == 0:
        return _python_number(a) % _python_number(b)
    return a % b


def int_overflowed(a, b, module, k):
    """Raise check ``k``: ``a op b`` does not fit in int64 (what compiled code calls, out
    of line, when LLVM's overflow flag is set: :mod:`revbench.backends.numba_checks`)."""
    raise CheckFailed(module, k, a, b)


def int_add(a, b, module, k):
    a = int(a)
    b = int(b)
    if (b > 0 and a > INT64_MAX - b) or (b < 0 and a < INT64_MIN - b):
        raise CheckFailed(module, k, a, b)
    return a + b


def int_sub(a, b, module, k):
    a = int(a)
    b = int(b)
    if (b < 0 and a > INT64_MAX + b) or (b > 0 and a < INT64_MIN + b):
        raise CheckFailed(module, k, a, b)
    return a - b


def mul_overflows(a, b):
    """Whether the int64 product ``a * b`` is out of range, told without computing it:
    Numba's integer product has no defined overflow (LLVM may assume there is none), so
    nothing may rely on wrapping.  Plain arithmetic on int64 operands: the GPU's checked
    helpers compile this very function (:mod:`revbench.backends.cuda_helpers`)."""
    if -_MUL_SAFE <= a <= _MUL_SAFE and -_MUL_SAFE <= b <= _MUL_SAFE:
        return False  # the common case: no overflow possible
    if a > 0:
        return (b > 0 and a > INT64_MAX // b) or (b < -1 and a > INT64_MIN // b)
    if a < 0:
        return (b > 0 and a < -1 and b > INT64_MIN // a) or (
            b < 0 and (a == INT64_MIN or b == INT64_MIN or -a > INT64_MAX // -b))
    return False


def int_mul(a, b, module, k):
    a = int(a)
    b = int(b)
    if mul_overflows(a, b):
        raise CheckFailed(module, k, a, b)
    return a * b


def int_floordiv(a, b, module, k):
    a = int(a)
    b = int(b)
    if b == -1 and a == INT64_MIN:
        raise CheckFailed(module, k, a, b)
    return a // b


def int_pow(a, n, module, k):
    """``a ** n`` for a constant ``n >= 0``: ``n`` products, each checked as in :func:`int_mul`."""
    a = int(a)
    n = int(n)
    if n == 0 or a == 1:
        return 1
    if a == 0:
        return 0
    if a == -1:
        return 1 if n % 2 == 0 else -1
    if n >= 64:  # |a| >= 2
        raise CheckFailed(module, k, a, n)
    r = 1
    for _ in range(n):  # (mul_overflows(r, a), written out: Numba compiles this one)
        if r > 0:
            bad = (a > 0 and r > INT64_MAX // a) or (a < -1 and r > INT64_MIN // a)
        else:
            bad = (a > 0 and r < -1 and a > INT64_MIN // r) or (
                a < 0 and (r == INT64_MIN or a == INT64_MIN or -r > INT64_MAX // -a))
        if bad:
            raise CheckFailed(module, k, a, n)
        r = r * a
    return r


def int_neg(a, module, k):
    a = int(a)
    if a == INT64_MIN:
        raise CheckFailed(module, k, a, a)
    return -a


def int_abs(a, module, k):
    a = int(a)
    if a == INT64_MIN:
        raise CheckFailed(module, k, a, a)
    return abs(a)
