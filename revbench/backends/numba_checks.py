"""The checked arithmetic of generated code, as Numba compiles it: written into the caller.

With checks on, every ``+=`` / ``-=`` of a float and every ``+ - *`` of integers calls a
helper of :mod:`revbench.backends.runtime` (``_rb_float_shift``, ``_rb_iadd``, ...): one
call is far less code for Numba to type than the update, its test and a failure branch
written out.  Under Numba those calls are *intrinsics*: typing one costs what typing a call
costs, and its code goes straight into the caller -- the operation, one test and a branch
to a failure function compiled out of line (raising with run-time values is a lot of code).

Compiled as functions of their own, the helpers were small, but LLVM inlines a call only
where its cost model says so: in a large kernel, some checked updates stayed calls, and a
raise inside a helper kept all of them calls (2-3x slower checked loops).

The failures are the runtime's own functions (:func:`runtime.shift_failed`,
:func:`runtime.int_overflowed`), compiled once per process and linked into each caller:
the Python backend calls the very same code, so both backends raise the same check.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable

import numpy as np

from revbench.backends import runtime
from revbench.rules import special

#: (where it is written: the Python backend's copies need it too)
copy_function = runtime.copy_function


def inline_helper(fn: Callable) -> Callable | None:
    """The intrinsic generated code calls under Numba for the runtime helper ``fn``, or
    ``None`` where ``fn`` has none (it is then compiled as a function).

    The matrix-product update (:func:`revbench.backends.blas.matmul_update`, and its
    ``matmul_failed``) is :mod:`~revbench.backends.blas`'s own Numba code, which calls
    the routine ``rb_matmul`` by name: asking for it registers that symbol in this
    process -- which a caller loaded from Numba's cache needs as much as one compiled
    now (its lazy dispatcher asks here before Numba loads it)."""
    found = _intrinsics().get(fn)
    if found is None and getattr(fn, "__module__", None) == "revbench.backends.blas":
        from revbench.backends import blas

        found = blas.numba_helper(fn)
    return found


def _call_out_of_line(context, builder, dispatcher, argtypes: tuple, args: tuple) -> None:
    """A call of the jitted ``dispatcher`` (compiled for ``argtypes`` on first use) from
    generated LLVM code; an exception it raises propagates to the caller's caller."""
    cres = dispatcher.overloads.get(argtypes)
    if cres is None:
        dispatcher.compile(argtypes)
        cres = dispatcher.overloads[argtypes]
    context.active_code_library.add_linking_library(cres.library)
    context.call_internal(builder, cres.fndesc, cres.signature, args)


def _add(a, b):
    return a + b


def _sub(a, b):
    return a - b


def _finite(v):
    return abs(v.real) < math.inf and abs(v.imag) < math.inf


def _range_len_unsigned(a, b, s):
    """``runtime.range_len`` in machine integers: the span in unsigned arithmetic, which
    holds every distance between two int64 (compiled by Numba)."""
    if s == 0:
        raise ValueError("range() arg 3 must not be zero")
    if (s > 0 and b <= a) or (s < 0 and b >= a):
        return 0
    if s > 0:
        span, step = np.uint64(b) - np.uint64(a), np.uint64(s)
    else:
        span, step = np.uint64(a) - np.uint64(b), np.uint64(0) - np.uint64(s)
    n = (span - np.uint64(1)) // step + np.uint64(1)
    if n > np.uint64(runtime.INT64_MAX):
        raise ValueError(runtime.RANGE_TOO_LONG)
    return np.int64(n)


def float_int_power() -> Callable:
    """``runtime.float_int_power`` as Numba compiles it: the same function, reading
    ``math.pow`` (which gives IEEE results in compiled code) for ``ieee_pow`` (Numba's own
    ``a ** n`` raises for a zero to a negative power and for ``n = -2**63``); the GPU
    compiles it too (``cuda_helpers``)."""
    return copy_function(runtime.float_int_power, "rb_float_int_power", ieee_pow=math.pow)


@functools.cache
def _intrinsics() -> dict[Callable, Callable]:
    import numba
    from numba.core import types as nb
    from numba.core.typing import signature
    from numba.extending import intrinsic

    shift_failed = numba.njit(copy_function(runtime.shift_failed, "rb_shift_failed"))
    overflowed = numba.njit(copy_function(runtime.int_overflowed, "rb_int_overflowed"))

    @intrinsic(prefer_literal=True)
    def rb_float_shift(typingctx, old, value, subtract, module, k):
        """``old - value`` if ``subtract`` (a constant) else ``old + value``, tested."""
        if not isinstance(subtract, nb.BooleanLiteral):
            return None
        python_op = _sub if subtract.literal_value else _add
        typed = typingctx.resolve_function_type(
            operator.sub if subtract.literal_value else operator.add, (old, value), {})
        if typed is None:
            return None
        out = typed.return_type
        fail_types = (old, out, value, nb.int64, nb.int64)

        def codegen(context, builder, sig, args):
            a, v, _, m, kk = args
            new = context.compile_internal(builder, python_op, signature(out, old, value), (a, v))
            ok = context.compile_internal(builder, _finite, signature(nb.boolean, out), (new,))
            with builder.if_then(builder.not_(ok), likely=False):
                _call_out_of_line(context, builder, shift_failed, fail_types, (a, new, v, m, kk))
            return new

        return signature(out, old, value, subtract, nb.int64, nb.int64), codegen

    def checked_int(method: str, name: str):
        """int64 ``a op b`` with LLVM's overflow intrinsic: the operation and one branch
        on its overflow flag."""
        def typer(typingctx, a, b, module, k):
            if not all(isinstance(t, (nb.Integer, nb.Boolean)) for t in (a, b)):
                return None

            def codegen(context, builder, sig, args):
                x, y = (context.cast(builder, v, t, nb.int64) for v, t in zip(args[:2], (a, b)))
                m, kk = (context.cast(builder, v, t, nb.int64)
                         for v, t in zip(args[2:], sig.args[2:]))
                r = getattr(builder, method)(x, y)
                with builder.if_then(builder.extract_value(r, 1), likely=False):
                    _call_out_of_line(context, builder, overflowed, (nb.int64,) * 4, (x, y, m, kk))
                return builder.extract_value(r, 0)

            return signature(nb.int64, a, b, nb.int64, nb.int64), codegen

        typer.__name__ = typer.__qualname__ = name
        return intrinsic(prefer_literal=False)(typer)

    def as_int64(context, builder, args, types):
        return [context.cast(builder, v, t, nb.int64) for v, t in zip(args, types)]

    def wrapping(name: str, lower: Callable, arity: int):
        """An unchecked int64 operation (``runtime.int_wadd`` ...) as a machine integer
        instruction *without* ``nsw``: Numba's own carries it, so LLVM may assume that the
        result did not wrap (and fold a test of it away)."""
        def typed(operands):
            if not all(isinstance(t, (nb.Integer, nb.Boolean)) for t in operands):
                return None

            def codegen(context, builder, sig, args):
                return lower(builder, *as_int64(context, builder, args, sig.args))

            return signature(nb.int64, *operands), codegen

        # (an intrinsic's typer has a fixed arity: Numba takes a *args one for a star call)
        if arity == 1:
            def typer(typingctx, a):
                return typed((a,))
        else:
            def typer(typingctx, a, b):
                return typed((a, b))
        typer.__name__ = typer.__qualname__ = name
        return intrinsic(prefer_literal=False)(typer)

    def negate(builder, a):
        return builder.sub(a.type(0), a)

    def absolute(builder, a):
        return builder.select(builder.icmp_signed("<", a, a.type(0)), negate(builder, a), a)

    @intrinsic(prefer_literal=True)
    def rb_wpow(typingctx, a, n):
        """``a ** n`` for a literal ``n >= 0``: square-and-multiply, each product wrapping."""
        if not (isinstance(a, (nb.Integer, nb.Boolean)) and isinstance(n, nb.IntegerLiteral)
                and n.literal_value >= 0):
            return None
        power = n.literal_value

        def codegen(context, builder, sig, args):
            base = context.cast(builder, args[0], a, nb.int64)
            result, k = base.type(1), power
            while k:
                if k & 1:
                    result = builder.mul(result, base)
                k >>= 1
                if k:
                    base = builder.mul(base, base)
            return result

        return signature(nb.int64, a, n), codegen

    def c_complex(c_name: str, scale: float | None):
        """A complex function as the C library computes it: ``c_name`` called with the
        parts of a ``double complex`` (two doubles in, ``{ double, double }`` out: the
        x86-64 convention, which LLVM's C callers follow too), its parts then scaled."""
        from llvmlite import ir as llir
        from numba.core import cgutils

        @intrinsic
        def call(typingctx, z):
            if not isinstance(z, nb.Complex):
                return None

            def codegen(context, builder, sig, args):
                d = llir.DoubleType()
                fn = cgutils.get_or_insert_function(
                    builder.module, llir.FunctionType(llir.LiteralStructType([d, d]), [d, d]),
                    c_name)
                c = context.make_complex(builder, nb.complex128,
                                         value=context.cast(builder, args[0], z, nb.complex128))
                r = builder.call(fn, [c.real, c.imag])
                out = context.make_complex(builder, nb.complex128)
                out.real, out.imag = builder.extract_value(r, 0), builder.extract_value(r, 1)
                if scale is not None:
                    out.real = builder.fmul(out.real, d(scale))
                    out.imag = builder.fmul(out.imag, d(scale))
                return out._getvalue()

            return signature(nb.complex128, z), codegen

        return call

    return {**{fn: c_complex(*fn.c_function) for fn in special.COMPLEX_FUNCTIONS.values()},
            runtime.range_len: numba.njit(_range_len_unsigned),
            runtime.float_int_power: numba.njit(float_int_power()),
            runtime.float_shift: rb_float_shift,
            runtime.int_add: checked_int("sadd_with_overflow", "rb_iadd"),
            runtime.int_sub: checked_int("ssub_with_overflow", "rb_isub"),
            runtime.int_mul: checked_int("smul_with_overflow", "rb_imul"),
            runtime.int_wadd: wrapping("rb_wadd", lambda b, x, y: b.add(x, y), 2),
            runtime.int_wsub: wrapping("rb_wsub", lambda b, x, y: b.sub(x, y), 2),
            runtime.int_wmul: wrapping("rb_wmul", lambda b, x, y: b.mul(x, y), 2),
            runtime.int_wneg: wrapping("rb_wneg", negate, 1),
            runtime.int_wabs: wrapping("rb_wabs", absolute, 1),
            runtime.int_wpow: rb_wpow}
