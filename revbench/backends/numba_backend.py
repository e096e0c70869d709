"""The Numba backend: the generated source, compiled by ``numba.njit``.

Numba is imported only here, the first time a function is compiled, so
``import revbench`` stays light.  Compiled code is cached on disk
(``cache=True``) next to the generated source, keyed by its content hash.
Typing failures are translated back to the user's line.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from revbench.backends.codegen import FASTMATH_FLAGS, Generated
from revbench.backends.loader import load_module
from revbench.backends.runtime import TABLES
from revbench.lang.errors import ReversibilityTypeError

_user_cache: dict[tuple[str, str], Callable] = {}


def _njit(**kw):
    import numba

    return numba.njit(cache=True, **kw)


def compile_numba(gen: Generated, injected: dict[str, object], check: bool,
                  fastmath: bool = False) -> Callable:
    mod = load_module(gen.key, gen.source, "nb", injected)
    fn = getattr(mod, gen.function_name)
    dispatcher = getattr(mod, "_rb_dispatcher", None)
    if dispatcher is None:
        flags = {"fastmath": set(FASTMATH_FLAGS)} if fastmath else {}
        dispatcher = _njit(boundscheck=check, **flags)(fn)
        mod._rb_dispatcher = dispatcher
    return dispatcher


def user_function(rule) -> Callable:
    """What generated code calls for a registered user function (one per fingerprint),
    or for a helper of :mod:`revbench.backends.runtime` (checked integers, float shifts)."""
    key = (rule.name, rule.fingerprint)
    if key not in _user_cache:
        impl = _checked_int_impls().get(rule.user_function, rule.user_function)
        _user_cache[key] = typed_once(impl, rule.name)
    return _user_cache[key]


def external_callable(fn: Callable, name: str, fingerprint: str) -> Callable:
    """What generated code calls for an external function (:mod:`revbench.external`):
    ``fn`` compiled once per argument types; a function Numba cannot compile is reported
    as such, by name, when the caller is typed."""
    def result(disp, args):
        return lambda *args: disp(*args)

    return _opaque_stand_in(fn, (f"external:{name}", fingerprint), f"rb_external_{name}",
                            f"the external function {name}",
                            f"to call other Python, define {name} with backend='python'", result)


def adjoint_callable(fn: Callable, label: str, function: str, fingerprint: str,
                     n_adjoints: int) -> Callable:
    """What generated code calls for a custom adjoint (:mod:`revbench.rules.adjoints`):
    ``fn`` compiled once per argument types, always returning a tuple -- of
    ``n_adjoints`` adjoints, or the caller's typing fails with a message that says so."""
    from numba.core import types
    from numba.core.errors import TypingError

    def result(disp, args):
        ret = disp.overloads[tuple(args)].signature.return_type
        n = len(ret) if isinstance(ret, types.BaseTuple) else 1
        if n != n_adjoints:
            raise TypingError(
                f"the custom adjoint {label} of {function} returns {n} value(s), but {function} "
                f"has {n_adjoints} float or complex argument(s): return their adjoints at entry, "
                "in order (a tuple)")
        if isinstance(ret, types.BaseTuple):
            return lambda *args: disp(*args)
        return lambda *args: (disp(*args),)

    return _opaque_stand_in(fn, (f"adjoint:{function}:{n_adjoints}", fingerprint),
                            f"rb_adjoint_{function}", f"the custom adjoint {label} of {function}",
                            f"to call other Python, give {function} backend='python'", result)


def _opaque_stand_in(fn: Callable, key: tuple, symbol: str, what: str, fix: str,
                     result: Callable) -> Callable:
    """A stand-in for a user's function that is not an expression rule, compiled while
    the caller is typed: a function Numba cannot compile is reported as the user's
    mistake -- naming it (``what``) and how to fix it -- rather than as Numba's typing
    trace of generated code.  ``result(dispatcher, arg_types)`` checks what it returns
    and gives the implementation.  One stand-in per fingerprint: edited code is new code.
    """
    if key in _user_cache:
        return _user_cache[key]
    import numba
    from numba.core.errors import TypingError
    from numba.extending import overload

    disp = numba.njit(fn)

    def stand_in(*args):  # only jitted code calls it
        return fn(*args)

    def typing(*args):
        try:
            disp.compile(tuple(args))
        except Exception as exc:
            text = str(exc).strip()
            first = text.splitlines()[0] if text else type(exc).__name__
            raise TypingError(f"{what} cannot be compiled by Numba: {first}. Under "
                              f"backend='numba' it must compile with Numba (numpy, np.linalg, "
                              f"math); {fix}") from None
        return result(disp, args)

    stand_in.__name__ = stand_in.__qualname__ = symbol
    overload(stand_in, prefer_literal=False, strict=False, inline="never")(typing)
    _user_cache[key] = stand_in
    return stand_in


def typed_once(impl: Callable, name: str) -> Callable:
    """A stand-in for ``impl`` in jitted code that Numba compiles once per argument
    *types*.

    Every call site passes constants (the module key, the check's number): a plain
    ``njit`` dispatcher is typed with each constant as a literal and compiles one
    specialisation per value -- 66 compilations of the float-shift helper for the GMM
    gradient, a third of its cold compile.  An overload typed with
    ``prefer_literal=False`` sees int64 instead.  It stays a call (LLVM inlines it
    where that pays) rather than Numba-level inlining, which would type its body again
    at every call site.
    """
    from numba.extending import overload

    def stand_in(*args):  # only jitted code calls it: the Python backend calls impl
        return impl(*args)

    stand_in.__name__ = stand_in.__qualname__ = f"rb_{name}"
    # no cache of its own: the callers' cached machine code holds it (and a user's function
    # defined in a notebook cell has no file Numba could cache it beside)
    overload(stand_in, prefer_literal=False, strict=False, inline="never")(lambda *args: impl)
    return stand_in


_int_impls: dict[Callable, Callable] = {}


def _checked_int_impls() -> dict[Callable, Callable]:
    """runtime's checked int64 helpers as Numba compiles them; ``+ - *`` use LLVM's
    overflow intrinsics (an add or multiply and one branch on the overflow flag)."""
    if _int_impls:
        return _int_impls
    from numba.core import types
    from numba.extending import intrinsic

    from revbench.backends import runtime
    from revbench.backends.runtime import CheckFailed

    def with_overflow(method: str):
        @intrinsic
        def op(typingctx, a, b):
            sig = types.Tuple((types.int64, types.boolean))(types.int64, types.int64)

            def codegen(context, builder, signature, args):
                r = getattr(builder, method)(*args)
                return context.make_tuple(builder, signature.return_type,
                                          [builder.extract_value(r, 0), builder.extract_value(r, 1)])

            return sig, codegen

        return op

    add, sub, mul = (with_overflow(m) for m in ("sadd_with_overflow", "ssub_with_overflow",
                                                  "smul_with_overflow"))

    def checked(op):
        def impl(a, b, module, k):
            r, overflow = op(int(a), int(b))
            if overflow:
                raise CheckFailed(module, k, int(a), int(b))
            return r

        return impl

    _int_impls.update({runtime.int_add: checked(add), runtime.int_sub: checked(sub),
                       runtime.int_mul: checked(mul)})
    return _int_impls


def is_numba_error(exc: BaseException) -> bool:
    mod = type(exc).__module__ or ""
    return mod.startswith("numba")


_LOC = re.compile(r'File "([^"]*rbgen_([0-9a-f]{32})\.py)", line (\d+)')


def translate_numba_error(exc: BaseException, function: str) -> ReversibilityTypeError:
    """A Numba compile error, told against the user's line rather than generated code."""
    msg = str(exc)
    where = None
    for m in _LOC.finditer(msg):
        key = int(m.group(2)[:15], 16)
        table = TABLES.get(key)
        if table and int(m.group(3)) in table.linemap:
            where = (table, table.linemap[int(m.group(3))])
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", ln).strip() for ln in msg.splitlines()]
    step = next((ln for ln in lines if ln.startswith("Failed in")), "")
    detail = [ln for ln in lines if ln and not ln.startswith(("Failed in", "During:", "File ", "^"))
              and not ln.startswith("- ") and "rbgen_" not in ln]
    first = detail[0] if detail else (step or type(exc).__name__)
    if step and detail:
        first += f" [{step}]"
    # a user's custom adjoint that failed (``adjoint_callable``) says so itself, deeper in
    for marker in ("the custom adjoint ", "the external function "):
        own = next((ln for ln in lines if marker in ln), None)
        if own is not None:
            first = own[own.index(marker):]
            break
    if where:
        table, line = where
        text = table.source_lines.get(line, "").strip()
        return ReversibilityTypeError(
            f"Numba could not compile this statement: {first}\n  in reversible function "
            f"{table.function}, {table.filename}, line {line}: {text}",
            function=table.function, filename=table.filename, lineno=line, stage="numba")
    return ReversibilityTypeError(f"Numba could not compile {function}: {first}",
                                  function=function, stage="numba")
