"""The device functions checked GPU code calls (:mod:`revbench.backends.cuda_codegen`).

The CPU's checked helpers (:mod:`revbench.backends.runtime`) raise; a GPU thread cannot.
These do the same tests and, where one fails, record it in the item's status
``st = [module, check + 1]`` (the first failure wins) and return a harmless value: the
generated code returns at its next status test, and the host raises the CPU's error.

Imported only by generated CUDA modules (it imports ``numba.cuda``).
"""

from __future__ import annotations

import math

from numba import config as numba_config
from numba import cuda, int64, uint64

from revbench.backends import numba_checks, runtime
from revbench.backends.runtime import INT64_MAX, INT64_MIN
from revbench.rules import special


def device(signature: str):
    """A helper compiled once, for ``signature``: called with constants (the module key,
    the check's number), Numba would otherwise compile it again for every literal value
    (hundreds of times per kernel).  NVVM inlines the calls."""
    return cuda.jit(signature, device=True)


ST = "int64[::1]"  # an item's status: [module, check + 1]
I = f"int64(int64, int64, int64, int64, {ST})"  # noqa: E741 - (a, b, module, k, status)
F = f"float64(float64, float64, int64, int64, {ST})"


@device(f"void({ST}, int64, int64)")
def _rb_fail(st, module, k):
    if st[1] == 0:
        st[0] = module
        st[1] = k + 1


@device(I)
def _rb_ix(i, n, module, k, st):
    """Index ``i`` of an axis of length ``n`` (negative counts from the end), or 0 after
    reporting check ``k`` when it is out of range."""
    j = i + n if i < 0 else i
    if j < 0 or j >= n:
        _rb_fail(st, module, k)
        return 0
    return j


@device(F)
def _rb_fdiv(a, b, module, k, st):
    if b == 0:
        _rb_fail(st, module, k)
        return 0.0
    return a / b


@device(F)
def _rb_ffloordiv0(a, b, module, k, st):
    if b == 0:
        _rb_fail(st, module, k)
        return 0.0
    return a // b


@device(F)
def _rb_fmod0(a, b, module, k, st):
    if b == 0:
        _rb_fail(st, module, k)
        return 0.0
    return a % b


@device(I)
def _rb_ifloordiv0(a, b, module, k, st):
    if b == 0 or (b == -1 and a == INT64_MIN):
        _rb_fail(st, module, k)
        return 0
    return a // b


@device(I)
def _rb_imod0(a, b, module, k, st):
    if b == 0:
        _rb_fail(st, module, k)
        return 0
    return a % b


# -- functions CUDA's math library lacks ---------------------------------------------
#: revbench's own functions written in Python (:mod:`revbench.rules.special`: ``lgamma``'s
#: derivatives, digamma and trigamma; NumPy's extremes of two numbers and ``np.sign``, for
#: ints and floats alike, so compiled for the types they meet), compiled for the device
#: from the same code
SPECIAL = {**{name: device("float64(float64)")(getattr(special, name))
              for name in ("digamma", "trigamma")},
           **{name: cuda.jit(device=True)(getattr(special, name))
              for name in ("minimum", "maximum", "fmin", "fmax", "sign")}}


# -- checked int64 arithmetic and float shifts (runtime.py's, reporting) -------------
@device(I)
def iadd(a, b, module, k, st):
    if (b > 0 and a > INT64_MAX - b) or (b < 0 and a < INT64_MIN - b):
        _rb_fail(st, module, k)
        return 0
    return a + b


@device(I)
def isub(a, b, module, k, st):
    if (b < 0 and a > INT64_MAX + b) or (b > 0 and a < INT64_MIN + b):
        _rb_fail(st, module, k)
        return 0
    return a - b


#: the CPU's rule, compiled for the device (one rule for both)
_mul_overflows = device("boolean(int64, int64)")(runtime.mul_overflows)


@device(I)
def imul(a, b, module, k, st):
    if _mul_overflows(a, b):
        _rb_fail(st, module, k)
        return 0
    return a * b


@device(I)
def ifloordiv(a, b, module, k, st):
    if b == -1 and a == INT64_MIN:
        _rb_fail(st, module, k)
        return 0
    return a // b


@device(I)
def ipow(a, n, module, k, st):
    if n == 0 or a == 1:
        return 1
    if a == 0:
        return 0
    if a == -1:
        return 1 if n % 2 == 0 else -1
    if n >= 64:
        _rb_fail(st, module, k)
        return 0
    r = 1
    for _ in range(n):
        if _mul_overflows(r, a):
            _rb_fail(st, module, k)
            return 0
        r = r * a
    return r


@device(f"int64(int64, int64, int64, {ST})")
def ineg(a, module, k, st):
    if a == INT64_MIN:
        _rb_fail(st, module, k)
        return 0
    return -a


@device(f"int64(int64, int64, int64, {ST})")
def iabs(a, module, k, st):
    if a == INT64_MIN:
        _rb_fail(st, module, k)
        return 0
    return abs(a)


@device(f"float64(float64, float64, boolean, int64, int64, {ST})")
def float_shift(old, value, subtract, module, k, st):
    new = old - value if subtract else old + value
    if not abs(new) < math.inf:
        if not abs(value) < math.inf:
            _rb_fail(st, module, k)
        elif abs(old) < math.inf:
            _rb_fail(st, module, k + 1)
    return new


# -- unchecked int64 arithmetic, wrapping around (runtime.int_wadd's rule) -------------
# A device's int64 ``+ - *`` carry LLVM's ``nsw`` flag (no overflow assumed), as the CPU's
# do under Numba; unsigned arithmetic carries none, and int64 <-> uint64 keeps the bits.
# The simulator runs the helpers as Python, where the runtime's exact versions are the rule.
if numba_config.ENABLE_CUDASIM:
    wadd, wsub, wmul, wneg, wabs, wpow, range_len, fpowi = (
        cuda.jit(device=True)(f) for f in (runtime.int_wadd, runtime.int_wsub, runtime.int_wmul,
                                           runtime.int_wneg, runtime.int_wabs, runtime.int_wpow,
                                           runtime.range_len, runtime.float_int_power))
else:  # pragma: no cover - compiled for a GPU (tests/test_gpu.py lowers them with NVVM)
    @device("int64(int64, int64)")
    def wadd(a, b):
        return int64(uint64(a) + uint64(b))

    @device("int64(int64, int64)")
    def wsub(a, b):
        return int64(uint64(a) - uint64(b))

    @device("int64(int64, int64)")
    def wmul(a, b):
        return int64(uint64(a) * uint64(b))

    @device("int64(int64)")
    def wneg(a):
        return int64(uint64(0) - uint64(a))

    @device("int64(int64)")
    def wabs(a):
        return wneg(a) if a < 0 else a

    @device("int64(int64, int64)")
    def wpow(a, n):
        r, b = uint64(1), uint64(a)
        while n > 0:
            if n & 1:
                r = r * b
            n >>= 1
            b = b * b
        return int64(r)

    #: a float to an int power: the CPU's compiled rule (numba_checks), for the device
    fpowi = device("float64(float64, int64)")(numba_checks.float_int_power())

    @device("int64(int64, int64, int64)")
    def range_len(a, b, s):
        """``runtime.range_len`` (a zero step is a check of its own before the loop; a
        thread cannot raise, and a range too long to count could never end anyway)."""
        if s == 0 or (s > 0 and b <= a) or (s < 0 and b >= a):
            return 0
        if s > 0:
            span, step = uint64(b) - uint64(a), uint64(s)
        else:
            span, step = uint64(a) - uint64(b), uint64(0) - uint64(s)
        return int64((span - uint64(1)) // step + uint64(1))


#: the CPU helper's name (:data:`revbench.backends.codegen.INT_HELPERS` and
#: ``WRAP_HELPERS``) -> its device twin
CHECKED = {"iadd": iadd, "isub": isub, "imul": imul, "ifloordiv": ifloordiv, "ipow": ipow,
           "ineg": ineg, "iabs": iabs, "float_shift": float_shift, "wadd": wadd, "wsub": wsub,
           "wmul": wmul, "wneg": wneg, "wabs": wabs, "wpow": wpow, "range_len": range_len,
           "fpowi": fpowi}


@cuda.jit
def column_sums(part, out):
    """``out[0, 0, q] = sum over t of part[t, q]`` in the order of t (a summed gradient's
    partial sums, one row per thread, added in a fixed order): one thread per column,
    neighbouring threads reading neighbouring addresses."""
    q = cuda.grid(1)
    if q < part.shape[1]:
        s = 0.0
        for t in range(part.shape[0]):
            s += part[t, q]
        out[0, 0, q] = s


@cuda.jit
def column_sums_by_warps(part, out):
    """``out[0, 0, q] = sum over t of part[t, q]``, one warp per column ``q``: lane ``l``
    adds rows ``l, l + 32, ...`` in order, then the lanes' sums are added by shuffles in a
    fixed pattern -- the same bits every run, however the GPU schedules the warps."""
    q = cuda.grid(1) // 32
    lane = cuda.threadIdx.x % 32
    if q >= part.shape[1]:
        return  # (a whole warp: the shuffles below see all or none of its lanes)
    s = 0.0
    for t in range(lane, part.shape[0], 32):
        s += part[t, q]
    for delta in (16, 8, 4, 2, 1):
        s += cuda.shfl_down_sync(0xFFFFFFFF, s, delta)
    if lane == 0:
        out[0, 0, q] = s
