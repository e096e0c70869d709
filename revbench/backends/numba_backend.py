"""The Numba backend: the generated source, compiled by ``numba.njit``.

Numba is imported only here, the first time a function is compiled, so
``import revbench`` stays light.  Compiled code is cached on disk
(``cache=True``) next to the generated source, keyed by its content hash.
Typing failures are translated back to the user's line.
"""

from __future__ import annotations

import collections
import functools
import re
import types
from collections.abc import Callable
from types import ModuleType
from typing import Any

from revbench.backends import numba_checks, numba_linking
from revbench.backends.codegen import FASTMATH_FLAGS, Generated
from revbench.backends.loader import LOCK, load_module
from revbench.backends.native import engine as native
from revbench.backends.runtime import TABLES
from revbench.lang.errors import ReversibilityTypeError
from revbench.lang.ir import shown_file

_user_cache: dict[tuple[str, str], LazyImpl] = {}


def module_dispatcher(mod: ModuleType, function_name: str, **options) -> LazyDispatcher:
    """The compiled function ``function_name`` of the generated module ``mod``: one
    dispatcher per module, cached on disk (:func:`revbench.backends.kernel_cache.jit`),
    made when Numba is first needed for it (:class:`LazyDispatcher`)."""
    with LOCK:
        dispatcher = _dispatchers.get(mod.__name__)
        if dispatcher is None:
            dispatcher = LazyDispatcher(mod, function_name, options)
            _dispatchers[mod.__name__] = dispatcher
        _recent.append(dispatcher)
        return dispatcher


class LazyDispatcher:
    """A generated kernel's Numba dispatcher, made the first time something needs Numba
    for it: a call the native path does not take, an attribute of Numba's dispatcher
    (``overloads``, ``compile``), a caller that Numba compiles.

    The native path (:mod:`revbench.backends.native`) runs most kernels, and a process
    that loads their machine code from the disk cache need not import Numba's compiler
    at all -- 0.4 s of the first call of a five-line function, where the call itself
    takes microseconds.  Until then the module's globals may hold other kernels'
    ``LazyDispatcher`` and user functions' :class:`LazyImpl`; making the dispatcher puts
    the real objects in their place, which is what Numba types."""

    def __init__(self, mod: ModuleType, function_name: str, options: dict):
        self._rb_mod = mod
        self._rb_function = function_name
        self._rb_options = options
        self._rb_numba = None

    @property
    def py_func(self) -> Callable:
        return getattr(self._rb_mod, self._rb_function)

    @property
    def numba(self) -> Callable:
        """The Numba dispatcher (made now if it was not)."""
        made = self._rb_numba
        if made is None:
            with LOCK:
                if self._rb_numba is None:
                    self._rb_numba = self._make()
                made = self._rb_numba
        return made

    def _make(self) -> Callable:
        from revbench.backends.kernel_cache import jit

        mod = self._rb_mod
        for name, value in list(vars(mod).items()):
            if isinstance(value, (LazyDispatcher, LazyImpl)):
                setattr(mod, name, value.numba)
        _register_interrupt_poll()
        return jit(getattr(mod, self._rb_function), **self._rb_options)

    def __call__(self, *args):
        return self.numba(*args)

    def __getattr__(self, name: str):
        if name.startswith("_rb_") or name == "__wrapped__":
            # (revbench's own marks, the native path's; what inlining asks of any callable)
            raise AttributeError(name)
        return getattr(self.numba, name)

    def __repr__(self) -> str:
        state = "made" if self._rb_numba is not None else "not made yet"
        return f"<revbench kernel {self._rb_mod.__name__}.{self._rb_function}: Numba {state}>"


def has_machine_code(dispatcher: Any) -> bool:
    """Whether a kernel's machine code is in this process, native or Numba's (any types):
    a call runs it rather than compile."""
    if native.has_code(dispatcher):
        return True
    made = dispatcher._rb_numba if isinstance(dispatcher, LazyDispatcher) else dispatcher
    return made is not None and bool(getattr(made, "overloads", None))


def numba_callable(obj: Any) -> Any:
    """``obj`` as Numba code can call it: a lazy dispatcher's Numba dispatcher, else
    ``obj`` (a kernel handed to a user's own ``@njit`` code: ``f.kernel``)."""
    return obj.numba if isinstance(obj, LazyDispatcher) else obj


#: the dispatchers asked for last, kept alive after their functions are gone: a notebook
#: cell run again defines its functions anew (the old ones are dropped before the first
#: call), and its unchanged code is then found compiled, not compiled again.  (Numba never
#: frees the machine code of a dispatcher, so code compiled again is memory lost.)
_recent: collections.deque = collections.deque(maxlen=64)


#: generated module name -> its dispatcher, while something uses it (kept where the kernels
#: that call it find it: :data:`revbench.backends.numba_linking.KERNELS`)
_dispatchers = numba_linking.KERNELS


_poll_registered: list[bool] = []

#: the LLVM global a module's polls count down (internal: one per compiled module)
_POLL_COUNTDOWN = "revbench_poll_countdown"


def _register_interrupt_poll() -> None:
    """Compiled code's :func:`revbench.backends.runtime.interrupted`: a call of CPython's
    ``PyErr_CheckSignals`` (named, not an address, so cached machine code stays valid in
    another process), which runs Python's signal handlers -- Ctrl-C's raises -- in the
    main thread; true when one raised (the kernel then raises ``Interrupted``).

    Only every ``POLL_EVERY``-th poll asks CPython: the others count down a counter in
    the kernel's own module (a relaxed atomic, so threads may share it), a nanosecond.
    Asking costs about ten (two calls into CPython), which a loop around a short loop --
    a sparse product's rows -- paid at every row: it doubled the heat equation's step.
    Only a thread that holds the GIL asks (``PyGILState_Check``): a batched driver's
    workers run without it (``nogil``), and the thread waiting for them takes Ctrl-C."""
    if _poll_registered:
        return
    import llvmlite.ir as lir
    from numba.core import cgutils
    from numba.core import types as ntypes
    from numba.extending import intrinsic, overload

    from revbench.backends import runtime

    @intrinsic
    def check_signals(typingctx):
        def codegen(context, builder, signature, args):
            i32 = lir.IntType(32)
            fnty = lir.FunctionType(i32, [])
            zero = lir.Constant(i32, 0)
            countdown = builder.module.globals.get(_POLL_COUNTDOWN)
            if countdown is None:
                countdown = lir.GlobalVariable(builder.module, i32, _POLL_COUNTDOWN)
                countdown.linkage = "internal"
                countdown.initializer = zero
            left = builder.load_atomic(countdown, "monotonic", 4)
            due = builder.icmp_signed("<=", left, zero)
            result = cgutils.alloca_once_value(builder, lir.Constant(lir.IntType(1), 0))
            with builder.if_else(due, likely=False) as (then, otherwise):
                with then:
                    builder.store_atomic(lir.Constant(i32, runtime.POLL_EVERY - 1), countdown,
                                         "monotonic", 4)
                    held = cgutils.get_or_insert_function(builder.module, fnty, "PyGILState_Check")
                    fn = cgutils.get_or_insert_function(builder.module, fnty, "PyErr_CheckSignals")
                    with builder.if_then(builder.icmp_signed("!=", builder.call(held, []), zero),
                                         likely=True):
                        builder.store(builder.icmp_signed("!=", builder.call(fn, []), zero),
                                      result)
                with otherwise:
                    builder.store_atomic(builder.sub(left, lir.Constant(i32, 1)), countdown,
                                         "monotonic", 4)
            return builder.load(result)

        return ntypes.boolean(), codegen

    def rb_interrupted():
        return check_signals()

    overload(runtime.interrupted, inline="never")(lambda: rb_interrupted)
    _poll_registered.append(True)


def compile_numba(gen: Generated, injected: dict[str, object], check: bool,
                  fastmath: bool = False) -> Callable:
    mod = load_module(gen.key, gen.source, "nb", injected)
    numba_linking.SLOT_CALLERS.add(mod.__name__)
    flags = {"fastmath": set(FASTMATH_FLAGS)} if fastmath else {}
    dispatcher = module_dispatcher(mod, gen.function_name, boundscheck=check, **flags)
    native.register(dispatcher, gen, injected, check, fastmath)
    return dispatcher


def user_function(rule) -> LazyImpl:
    """What generated code calls for a registered user function (one per fingerprint),
    or for a helper of :mod:`revbench.backends.runtime` (checked integers, float shifts):
    made for Numba when Numba compiles a caller (:class:`LazyImpl`)."""
    key = (rule.name, rule.fingerprint)
    if key not in _user_cache:
        _user_cache[key] = LazyImpl(rule)
    return _user_cache[key]


class LazyImpl:
    """A user function (or runtime helper) as Numba code calls it, made when a caller is
    compiled by Numba (:class:`LazyDispatcher`): the intrinsic of a runtime helper
    (:func:`numba_checks.inline_helper`) or a stand-in compiled once per argument types.

    ``__wrapped__`` is the function itself, renamed with its fingerprint
    (:func:`with_identity`): what the native path inlines (``rules.special``) -- and
    what Python runs, were it called there."""

    def __init__(self, rule):
        self.rule = rule
        self.__wrapped__ = with_identity(rule.user_function, rule.fingerprint)
        self._made: Callable | None = None

    @property
    def numba(self) -> Callable:
        if self._made is None:
            with LOCK:
                if self._made is None:
                    inline = numba_checks.inline_helper(self.rule.user_function)
                    self._made = (inline if inline is not None
                                  else typed_once(self.__wrapped__, self.rule.name))
        return self._made

    def __call__(self, *args):
        return self.__wrapped__(*args)


def with_identity(fn: Callable, fingerprint: str) -> Callable:
    """``fn`` as Numba should compile it into cached code: a copy whose qualified name
    carries ``fingerprint`` (a digest of its code and of everything it reads).

    Numba names a compiled function by module, qualified name, a *process-local*
    counter and the argument types, and the machine code of a cached kernel keeps the
    functions it calls under those names (as weak symbols).  Two processes can give the
    counter's same value to two different functions of one qualified name -- closures
    of one factory, a notebook's function redefined -- and a third process that loads
    both kernels from the cache links both calls to whichever it loaded first: the wrong
    code, silently.  A name that carries the code's digest cannot collide with other
    code.  The user's own function object is left as it is.
    """
    fn = getattr(fn, "py_func", fn)  # a Numba dispatcher: a renamed copy of its Python
    code = getattr(fn, "__code__", None)
    if code is None:
        return fn
    copy = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__,
                              fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__qualname__ = f"{fn.__qualname__}__rb{fingerprint}"
    copy.__module__ = fn.__module__
    return copy


#: what a stand-in's compile error names (``the external function mvp``) -> (the reversible
#: function it belongs to, the user's code to rewrite, the fix where that function is the
#: one called)
_STAND_INS: dict[str, tuple[str, str, str]] = {}

#: what a stand-in's compile error adds to its fix, not knowing who calls the function
_CALLERS_TOO = (", and give backend='python' to the reversible functions that call it, if "
                "any: a function compiled by Numba compiles every function it calls with "
                "Numba, whatever their own backend= says")


def _fix_for_the_caller(first: str, function: str) -> str:
    """A stand-in's compile error (``first``), met running ``function`` (compiled by
    Numba), with its fix made exact: the function's own backend where ``function`` is
    the stand-in's function; else ``function``'s, which decides for all it calls --
    giving the callee backend='python' does not help (a user had)."""
    function = function.lstrip("~")  # an inverse has its function's backend
    for what, (subject, code, fix) in _STAND_INS.items():
        if first.startswith(what + " cannot be compiled") and first.endswith(fix + _CALLERS_TOO):
            head = first[:-len(fix + _CALLERS_TOO)]
            if subject == function:
                return head + fix
            return head + (
                f"{subject} runs here as part of {function}, which has backend='numba': a "
                "function compiled by Numba compiles every function it calls with Numba, "
                f"whatever their own backend= says. To call other Python, give {function} "
                f"backend='python' (it then runs {subject} as Python, whatever {subject}'s "
                f"own backend), or write {code} in the Python that Numba compiles")
    return first


def external_callable(fn: Callable, name: str, fingerprint: str) -> Callable:
    """What generated code calls for an external function (:mod:`revbench.ad.external`):
    ``fn`` compiled once per argument types; a function Numba cannot compile is reported
    as such, by name, when the caller is typed."""
    def result(disp, args):
        return _named(lambda *args: disp(*args), f"rb_external_{name}__rb{fingerprint}")

    return _opaque_stand_in(fn, (f"external:{name}", fingerprint), f"rb_external_{name}",
                            f"the external function {name}",
                            f"to call other Python, define {name} with "
                            f"revbench.external({name}, ..., backend='python')", result,
                            subject=name, code=name)


def adjoint_callable(fn: Callable, label: str, function: str, fingerprint: str,
                     n_adjoints: int) -> Callable:
    """What generated code calls for a custom adjoint (:mod:`revbench.rules.adjoints`):
    ``fn`` compiled once per argument types, always returning a tuple -- of
    ``n_adjoints`` adjoints, or the caller's typing fails with a message that says so."""
    from numba.core import types as ntypes
    from numba.core.errors import TypingError

    def result(disp, args):
        ret = disp.overloads[tuple(args)].signature.return_type
        n = len(ret) if isinstance(ret, ntypes.BaseTuple) else 1
        if n != n_adjoints:
            raise TypingError(
                f"the custom adjoint {label} of {function} returns {n} value(s), but {function} "
                f"has {n_adjoints} float or complex argument(s): return their adjoints at entry, "
                "in order (a tuple)")
        name = f"rb_adjoint_{function}__rb{fingerprint}"
        if isinstance(ret, ntypes.BaseTuple):
            return _named(lambda *args: disp(*args), name)
        return _named(lambda *args: (disp(*args),), name)

    return _opaque_stand_in(fn, (f"adjoint:{function}:{n_adjoints}", fingerprint),
                            f"rb_adjoint_{function}", f"the custom adjoint {label} of {function}",
                            f"to call other Python, give {function} backend='python'", result,
                            subject=function, code=label)


def _opaque_stand_in(fn: Callable, key: tuple, symbol: str, what: str, fix: str,
                     result: Callable, subject: str, code: str) -> Callable:
    """A stand-in for a user's function that is not an expression rule, compiled while
    the caller is typed: a function Numba cannot compile is reported as the user's
    mistake -- naming it (``what``) and how to fix it -- rather than as Numba's typing
    trace of generated code.  ``result(dispatcher, arg_types)`` checks what it returns
    and gives the implementation.  One stand-in per fingerprint: edited code is new code.

    ``fix`` is the fix when ``subject`` (the reversible function the code belongs to) is
    the function called, on the Numba backend; the error adds the callers' part, which
    :func:`translate_numba_error`, knowing the function called, makes exact.
    """
    _STAND_INS[what] = (subject, code, fix)
    if key in _user_cache:
        return _user_cache[key]
    import numba
    from numba.core.errors import TypingError
    from numba.extending import overload

    disp = numba.njit(with_identity(fn, key[1]))

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
                              f"math); {fix}{_CALLERS_TOO}") from None
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
    stand_in.__wrapped__ = impl  # (what the native code generator reads: backends/native)
    # no cache of its own: the callers' cached machine code holds it (and a user's function
    # defined in a notebook cell has no file Numba could cache it beside)
    overload(stand_in, prefer_literal=False, strict=False, inline="never")(lambda *args: impl)
    return stand_in


def _named(fn: Callable, qualname: str) -> Callable:
    """``fn`` renamed: each function compiled into cached code needs a name of its own
    (see :func:`with_identity`)."""
    fn.__name__ = fn.__qualname__ = qualname
    return fn


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
            first = _fix_for_the_caller(own[own.index(marker):], function)
            break
    if where:
        table, line = where
        text = table.source_lines.get(line, "").strip()
        return ReversibilityTypeError(
            f"Numba could not compile this statement: {first}\n  in reversible function "
            f"{table.function}, {shown_file(table.filename)}, line {line}: {text}",
            function=table.function, filename=table.filename, lineno=line, stage="numba")
    return ReversibilityTypeError(f"Numba could not compile {function}: {first}",
                                  function=function, stage="numba")


_helpers: dict[Callable, Callable] = {}


def helper(fn: Callable) -> Callable:
    """A function of revbench's own modules that generated code calls (a checkpointed
    loop's schedule, :mod:`revbench.checkpoint.actions`), compiled once per process.  The
    functions it calls in turn are those its module names in ``NUMBA_CALLS``: they are
    compiled too, and the copy compiled of ``fn`` sees them (the module stays Python)."""
    with LOCK:
        dispatcher = _helpers.get(fn)
        if dispatcher is None:
            import numba

            calls = set(fn.__globals__.get("NUMBA_CALLS", ())) & set(fn.__code__.co_names)
            copy = numba_checks.copy_function(
                fn, **{name: helper(fn.__globals__[name]) for name in calls
                       if fn.__globals__[name] is not fn})
            # (not cached on disk: Numba cannot compile a caller of a generator it loaded
            # from its cache -- the generator's implementation is registered only when it
            # is compiled; a cached *caller* has it linked in and needs nothing)
            dispatcher = _helpers[fn] = numba.njit(cache=False)(copy)
        return dispatcher


@functools.cache
def helper_fingerprint(fn: Callable) -> str:
    """A digest of the module that defines ``fn`` (a helper of :func:`helper`): generated
    code that calls a helper names it, so a new version of the helper is a new module --
    Numba's cache of the old one, which has the old helper compiled in, is never loaded."""
    import hashlib
    import inspect

    try:
        text = inspect.getsource(inspect.getmodule(fn))
    except (OSError, TypeError):
        text = fn.__code__.co_code.hex()
    return hashlib.sha256(text.encode()).hexdigest()[:16]
