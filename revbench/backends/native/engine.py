"""Compile lowered kernels, call them from Python, and fall back to Numba.

:func:`register` records, on each Numba dispatcher the Numba backend makes, the generated
source it compiles; :func:`runner` gives the callable Python code uses instead of the
dispatcher: it lowers the kernel (and its callees) for the argument types of a call
(:mod:`.lower`), compiles the module once per type signature with Numba's own LLVM code
generator, and calls it through ctypes.  A call whose types or code the lowering does not
cover goes to the Numba dispatcher, which compiles it as before; so does everything that
calls kernels from compiled code (batched and checkpointed drivers, ``f.kernel``).

Compiled modules are cached on disk, keyed by a digest of the LLVM IR and of the
compiler (Numba's own cache format for code libraries: object code, linked when loaded).
``REVBENCH_NATIVE=0`` turns the native path off (everything compiles with Numba).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from revbench.backends import runtime
from revbench.backends.native import inline, lower, pycall
from revbench.backends.native.lower import BOOL, F64, I64, Arr, Kernel, Unsupported

#: set on each dispatcher the Numba backend makes: what it compiles
_SOURCE_ATTR = "_rb_native_source"
_RUNNER_ATTR = "_rb_native_runner"

#: the JIT and its table of loaded modules (held while LLVM compiles a module); each runner
#: has a lock of its own for its lowering and its specialisations, so lowering a kernel
#: (a tiered call deciding where to run) never waits for another kernel's compilation
_LOCK = threading.RLock()
_RUNNERS = threading.Lock()

#: counts, for tests and benchmarks: modules compiled, loaded from disk, found compiled in
#: this process already (the same IR for another function), calls left to Numba
stats = {"compiled": 0, "loaded": 0, "reused": 0, "fallbacks": 0}
#: why kernels were left to Numba: the lowering's reason -> how often
refused: dict[str, int] = {}
#: lowered modules LLVM rejected (a defect here, never the user's: the call runs on Numba;
#: the test suite fails any test that adds one)
errors: list[str] = []

#: the entry's C type: int32 entry(int64 *ints, double *floats, int64 *err), called with
#: the GIL held (its Ctrl-C poll asks CPython, as compiled Numba code does).  The pointers
#: go as plain addresses (``c_void_p`` from an int): ctypes converts those in half the
#: time it takes for arrays
_PROTO = ctypes.PYFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_Err = ctypes.c_int64 * lower.ERR_SLOTS
_ERR_RECORD = struct.Struct(f"={lower.ERR_SLOTS}q")
#: the same, releasing the GIL while it runs (a batched driver's workers run in threads)
_PROTO_NOGIL = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p,
                                ctypes.c_void_p)


def enabled() -> bool:
    """Whether the native path is on (``REVBENCH_NATIVE`` is not ``0``), asked at every call."""
    if _ENV_DATA is not None:
        off = _ENV_DATA.get(_ENV_KEY) == _ENV_OFF
    else:
        off = os.environ.get("REVBENCH_NATIVE", "1") == "0"
    return not off and _array_fields() is not None


# ``os.environ.get`` encodes the key and decodes the value: 0.7 us, on every kernel call.
# Its dictionary of encoded strings (CPython's ``os.environ._data``, which every change to
# ``os.environ`` updates in place) answers in 20 ns.
_ENV_DATA = getattr(os.environ, "_data", None)
try:
    _ENV_KEY = os.environ.encodekey("REVBENCH_NATIVE")  # type: ignore[attr-defined]
    _ENV_OFF = os.environ.encodevalue("0")  # type: ignore[attr-defined]
except AttributeError:
    _ENV_DATA = None
if not isinstance(_ENV_DATA, dict):
    _ENV_DATA = None


_FIELDS: list = []


def _array_fields() -> tuple[int, int, int] | None:
    """Where this NumPy keeps an array's data, shape and strides pointers in the array
    object (``lower.ARRAY_FIELDS``), checked once against a real array; None where they
    are elsewhere (another CPython object header): then Numba compiles everything."""
    if not _FIELDS:
        a = np.zeros((3, 5))[:, 1:]
        data, shape, strides = lower.ARRAY_FIELDS
        ptr = ctypes.c_void_p.from_address
        ok = False
        try:
            sp, tp = ptr(id(a) + shape).value, ptr(id(a) + strides).value
            ok = (ptr(id(a) + data).value == a.ctypes.data
                  and tuple((ctypes.c_int64 * 2).from_address(sp)) == a.shape
                  and tuple((ctypes.c_int64 * 2).from_address(tp)) == a.strides)
        except (ValueError, OSError):
            ok = False
        _FIELDS.append(lower.ARRAY_FIELDS if ok else None)
    return _FIELDS[0]


def _fast_layout() -> bool:
    """Whether the compiled call wrapper (:mod:`.pycall`) reads this CPython's and
    NumPy's objects where they are: a float's value, an array's rank, dtype and flags,
    checked once against real objects (else calls go through ctypes)."""
    if not _FAST:
        ok = False
        if _array_fields() is not None:
            a = np.zeros((3, 5))[:, 1:]
            ptr = ctypes.c_void_p.from_address
            i32 = ctypes.c_int32.from_address
            try:
                ok = (ctypes.c_double.from_address(id(x := 1.5) + pycall.FLOAT_VALUE).value == x
                      and i32(id(a) + pycall.ARRAY_NDIM).value == a.ndim
                      and ptr(id(a) + pycall.ARRAY_DESCR).value == id(a.dtype)
                      and i32(id(a) + pycall.ARRAY_FLAGS).value == a.flags.num
                      and a.dtype is np.dtype(np.float64))
            except (ValueError, OSError):
                ok = False
        _FAST.append(ok)
    return _FAST[0]


_FAST: list = []


def _py_table() -> list[int]:
    """The addresses :data:`pycall.TABLE` names, in this process."""
    objects = {"float": float, "int": int, "True": True, "False": False, "ndarray": np.ndarray,
               "NotImplemented": NotImplemented, "dtype:float64": np.dtype(np.float64),
               "dtype:int64": np.dtype(np.int64), "dtype:int32": np.dtype(np.int32),
               "dtype:bool": np.dtype(np.bool_), "complex": complex,
               "dtype:complex128": np.dtype(np.complex128)}
    return [id(objects[name]) for name in pycall.TABLE]


class _MethodDef(ctypes.Structure):
    _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", ctypes.c_void_p),
                ("ml_flags", ctypes.c_int), ("ml_doc", ctypes.c_char_p)]


_METH_FASTCALL = 0x80
_NEW_FUNCTION = ctypes.pythonapi.PyCFunction_NewEx
_NEW_FUNCTION.restype = ctypes.py_object
_NEW_FUNCTION.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.c_void_p]


def _builtin(address: int, name: str) -> tuple[Callable, _MethodDef]:
    """A Python callable for the ``METH_FASTCALL`` C function at ``address`` (and the
    method table entry it points to, which must live as long as it)."""
    definition = _MethodDef(name.encode(), address, _METH_FASTCALL, None)
    return _NEW_FUNCTION(ctypes.addressof(definition), None, None), definition


class Source:
    """A generated module as the native path needs it: its text, function, key, the
    globals it was loaded with (its callees' dispatchers among them), whether its checks
    are on."""

    def __init__(self, gen, injected: dict[str, object], check: bool, fastmath: bool,
                 nogil: bool = False):
        self.kernel = Kernel(gen.source, gen.function_name, gen.module_key, self._resolve,
                             check=check, fastmath=fastmath,
                             resolve_python=self._resolve_python,
                             resolve_exception=self._resolve_exception,
                             declared=getattr(gen, "types", {}))
        self.injected = injected
        self.check = check
        self.fastmath = fastmath
        self.nogil = nogil  # called from worker threads: released the GIL while it runs

    def _resolve(self, symbol: str) -> Kernel | None:
        src = getattr(self.injected.get(symbol), _SOURCE_ATTR, None)
        return src.kernel if src is not None else None

    def _resolve_python(self, symbol: str) -> Callable | None:
        """revbench's own function ``symbol`` names (a checkpointed loop's schedule),
        lowered inline (:mod:`.inline`)."""
        return inline.python_function(self.injected.get(symbol))

    def _resolve_exception(self, symbol: str) -> type | None:
        """revbench's own exception class ``symbol`` names, raised with numbers."""
        cls = self.injected.get(symbol)
        if (isinstance(cls, type) and issubclass(cls, Exception)
                and cls.__module__.startswith("revbench.")):
            return cls
        return None


@dataclass(frozen=True)
class DriverSource:
    """A driver's generated source (batched, checkpointed), as the lowering reads a
    generated kernel's: its text, content key and function."""

    source: str
    key: str
    function_name: str = "driver"

    @property
    def module_key(self) -> int:
        return int(self.key[:15], 16)


def register(dispatcher: Any, gen, injected: dict[str, object], check: bool,
             fastmath: bool, nogil: bool = False) -> None:
    """Remember what ``dispatcher`` compiles (the Numba backend calls this, and the batched
    driver with ``nogil``: its workers run chunks of the items in threads)."""
    if getattr(dispatcher, _SOURCE_ATTR, None) is None:
        setattr(dispatcher, _SOURCE_ATTR, Source(gen, injected, check, fastmath, nogil))


def runner(dispatcher: Any) -> Callable | None:
    """The callable Python calls instead of ``dispatcher``: native code where the
    lowering covers the call, else the dispatcher.  None when there is no native path
    (turned off, or a dispatcher the Numba backend did not register)."""
    if not enabled():
        return None
    r = getattr(dispatcher, _RUNNER_ATTR, None)
    if r is None:  # (the first call)
        src = getattr(dispatcher, _SOURCE_ATTR, None)
        if src is None or src.fastmath:
            return None
        with _RUNNERS:
            r = getattr(dispatcher, _RUNNER_ATTR, None)
            if r is None:
                r = NativeRunner(dispatcher, src)
                setattr(dispatcher, _RUNNER_ATTR, r)
    return r


def has_code(dispatcher: Any) -> bool:
    """Whether the native path holds compiled code for ``dispatcher`` (any types)."""
    r = getattr(dispatcher, _RUNNER_ATTR, None)
    return r is not None and any(c is not None for c in r.compiled.values())


def _arg_type(a: Any):
    """The lowering's type of one argument, or None where only Numba takes it."""
    t = type(a)
    if t is float:
        return F64
    if t is complex:
        return lower.C128
    if t is bool:
        return BOOL
    if t is int:
        return I64 if lower._INT64_MIN <= a <= lower._INT64_MAX else None
    if t is tuple:  # (a schedule's knob)
        if 0 < len(a) <= 4 and all(type(v) is int and lower._INT64_MIN <= v <= lower._INT64_MAX
                                   for v in a):
            return lower.ShapeT(len(a))
        return None
    if t is np.ndarray or isinstance(a, np.ndarray):  # (a subclass: a memmap, a recarray)
        key = (a.dtype, a.ndim, a.flags.num)  # (one dictionary lookup per array and call)
        found = _ARRAY_TYPES.get(key)
        if found is None:
            found = _ARRAY_TYPES[key] = (_array_type(a),)
        return found[0]
    return None


#: (dtype, ndim, flag bits) -> (the array's type, or None)
_ARRAY_TYPES: dict[tuple, tuple] = {}


def _array_type(a: np.ndarray):
    flags = a.flags
    if not flags.aligned or not a.dtype.isnative:
        return None
    kind = _DTYPES.get(a.dtype.num)
    if kind is None or a.ndim == 0:
        return None
    return Arr(kind, a.ndim, bool(flags.c_contiguous), bool(flags.writeable))


_DTYPES = {np.dtype(np.float64).num: F64, np.dtype(np.int64).num: I64,
           np.dtype(np.int32).num: lower.I32, np.dtype(np.complex128).num: lower.C128,
           np.dtype(np.bool_).num: BOOL}


class NativeRunner:
    """Calls one kernel: a compiled native function per argument-type signature (None
    where the lowering refused it: those calls go to Numba)."""

    def __init__(self, dispatcher: Any, src: Source):
        self.dispatcher = dispatcher
        self.src = src
        self.compiled: dict[tuple, _Compiled | None] = {}
        self._lowered: dict[tuple, tuple | None] = {}
        self._lock = threading.RLock()
        #: the code of the types called last, whose compiled call wrapper is tried first
        #: (its own type checks send other calls on to the dispatch in ``__call__``)
        self.last: _Compiled | None = None

    def signature(self, args: tuple) -> tuple | None:
        types = tuple([_arg_type(a) for a in args])
        return None if None in types else types

    def has(self, types: tuple) -> bool:
        return self.compiled.get(types) is not None

    def __call__(self, *args):
        last = self.last
        if last is not None:  # the compiled wrapper of the last types called (pycall)
            r = last.fast(*args)
            if r is not NotImplemented:
                if type(r) is bytes:  # a failure: the err record, its status first
                    err = _ERR_RECORD.unpack(r)
                    raise last.error(err[0], err)
                return r
        types = self.signature(args)
        if types is None:
            stats["fallbacks"] += 1
            for a in args:  # (counted as refusals: what the lowering never saw)
                if _arg_type(a) is None:
                    why = f"an argument of type {type(a).__name__}"
                    refused[why] = refused.get(why, 0) + 1
            return self.dispatcher(*args)
        c = self.compiled.get(types, False)
        if c is False:
            c = self.compile(types)
        if c is None:
            stats["fallbacks"] += 1
            return self.dispatcher(*args)
        if c.fast is not None:
            self.last = c
        return c.call(args)

    def lowered(self, types: tuple) -> tuple | None:
        """The kernel lowered for ``types`` (the IR text, what it returns, its messages),
        or None where the lowering refuses it (then Numba compiles it)."""
        with self._lock:
            if types not in self._lowered:
                try:
                    text, returns, messages = lower.lower_module(self.src.kernel, types,
                                                                 _array_fields())
                    if not self.src.nogil and pycall.supported(types) and _fast_layout():
                        text += _undeclared(pycall.fast_call(types, returns), text)
                    self._lowered[types] = (text, returns, messages)
                except Unsupported as exc:
                    self._lowered[types] = None
                    refused[str(exc)] = refused.get(str(exc), 0) + 1
            return self._lowered[types]

    def lowerable(self, types: tuple) -> bool:
        return self.lowered(types) is not None

    def is_cached(self, types: tuple) -> bool:
        """Whether an earlier process left this code in the disk cache (loading it takes
        milliseconds)."""
        low = self.lowered(types)
        if low is None:
            return False
        path = _cache_file(_digest(low[0]))
        return path is not None and os.path.exists(path)

    def compile(self, types: tuple):
        """The compiled code for ``types`` (compiled now, or loaded from disk), or None
        where the lowering refuses it (the tiering thread calls this too)."""
        with self._lock:
            c = self.compiled.get(types, False)
            if c is False:
                low = self.lowered(types)
                c = None
                if low is not None:
                    try:
                        c = _Compiled(_build(low[0]), types, *low[1:], nogil=self.src.nogil)
                    except Exception as exc:  # a defect of the lowering: Numba runs it
                        errors.append(f"{self.src.kernel.function_name}: {exc}")
                self.compiled[types] = c
            return c


def _undeclared(extra: str, text: str) -> str:
    """``extra`` without the ``declare`` lines of functions ``text`` declares already (the
    call wrapper and a kernel's ``print`` both call CPython's API)."""
    declared = set(re.findall(r"^declare [^@\n]*@([\w.]+)\(", text, re.M))
    return "".join(line for line in extra.splitlines(keepends=True)
                   if not (line.startswith("declare ")
                           and re.search(r"@([\w.]+)\(", line).group(1) in declared))


class _Compiled:
    """One compiled entry point and how to call it: which slot each argument goes in.

    A call's argument buffers are reused: a pool of them (a list, whose ``pop`` and
    ``append`` are atomic under the GIL), so calls from several threads, or a call made
    while another is running, each get buffers of their own."""

    def __init__(self, addresses: tuple[int, int], types: tuple, returns: tuple | str,
                 messages: list[str], nogil: bool = False):
        address, call = addresses
        self.fn = (_PROTO_NOGIL if nogil else _PROTO)(address)
        # the compiled call wrapper (pycall), where the module has one
        self.fast, self._definition = _builtin(call, "rb_call") if call else (None, None)
        self.types = types
        self.returns = returns
        self.messages = messages
        n = max(len(types), 1)
        self.Ints, self.Floats = ctypes.c_int64 * n, ctypes.c_double * (3 * n)
        # which slot each argument goes in: arrays (their objects' addresses: the entry
        # reads them, lower.entry_point) and ints or bools in ``ints``, floats in
        # ``floats``, tuples of ints as the address of a copy
        self.objects = tuple(k for k, t in enumerate(types) if isinstance(t, Arr))
        self.floats = tuple(k for k, t in enumerate(types) if t == F64)
        self.tuples = tuple(k for k, t in enumerate(types) if isinstance(t, lower.ShapeT))
        self.complexes = tuple((k, lower.complex_slot(types, k))
                               for k, t in enumerate(types) if t == lower.C128)
        self.ints = tuple(k for k, t in enumerate(types) if k not in self.objects
                          and k not in self.floats and k not in self.tuples
                          and t != lower.C128)
        # what comes back: the arguments (0: an array, 1: a float, 2: an int, 3: a bool,
        # 4: a complex number), or one int ("value")
        self.out = None if returns == "value" else tuple(
            (j, 0 if isinstance(types[j], (Arr, lower.ShapeT)) else 1 if types[j] == F64 else
             2 if types[j] == I64 else 4 if types[j] == lower.C128 else 3) for j in returns)
        self._slot = dict(self.complexes)
        self._pool: list[tuple] = []

    def _buffers(self) -> tuple:
        ints, floats, err = self.Ints(), self.Floats(), _Err()
        return (ints, floats, err, ctypes.addressof(ints), ctypes.addressof(floats),
                ctypes.addressof(err))

    def call(self, args: tuple) -> tuple:
        pool = self._pool
        try:
            buffers = pool.pop()
        except IndexError:
            buffers = self._buffers()
        ints, floats, err, ip, fp, ep = buffers
        try:
            for k in self.objects:
                ints[k] = id(args[k])
            for k in self.floats:
                floats[k] = args[k]
            for k in self.ints:
                ints[k] = args[k]
            for k, j in self.complexes:
                z = args[k]
                floats[j], floats[j + 1] = z.real, z.imag
            held = []
            for k in self.tuples:
                t = (ctypes.c_int64 * len(args[k]))(*args[k])
                held.append(t)
                ints[k] = ctypes.addressof(t)
            status = self.fn(ip, fp, ep)
            if status:
                raise self.error(status, err)
            if self.out is None:
                return err[lower.RESULT_SLOT]
            return tuple([args[j] if kind == 0 else floats[j] if kind == 1 else ints[j]
                          if kind == 2 else bool(ints[j]) if kind == 3 else
                          complex(floats[self._slot[j]], floats[self._slot[j] + 1])
                          for j, kind in self.out])
        finally:
            pool.append(buffers)

    def error(self, status: int, err: np.ndarray) -> BaseException:
        """The exception the Numba-compiled kernel raises for the same failure."""
        S = lower.STATUS
        values: list = []
        imaginary_next = False
        for j in range(int(err[3])):
            tag, bits = int(err[4 + 2 * j]), err[5 + 2 * j]
            if tag == lower.TAG_FLOAT:
                values.append(struct.unpack("<d", struct.pack("<q", bits))[0])
            elif tag == lower.TAG_COMPLEX:  # (two entries: the real part, the imaginary)
                part = struct.unpack("<d", struct.pack("<q", bits))[0]
                if imaginary_next:
                    values[-1] = complex(values[-1], part)
                else:
                    values.append(part)
                imaginary_next = not imaginary_next
            elif tag == lower.TAG_BOOL:
                values.append(bool(bits))
            else:
                values.append(int(bits))
        if status == S["check"]:
            return runtime.CheckFailed(int(err[1]), int(err[2]), *values)
        if status == S["interrupt"]:
            return runtime.Interrupted()
        if status == S["index"]:
            return IndexError("index is out of bounds")
        message = self.messages[int(err[1])] if 0 <= err[1] < len(self.messages) else ""
        if status == S["python"]:  # Python code the kernel called raised: that exception
            exc = ctypes.cast(int(err[1]), ctypes.py_object).value
            ctypes.pythonapi.Py_DecRef(ctypes.py_object(exc))  # (the kernel's reference)
            return exc
        if status == S["raise"]:
            return lower.EXCEPTIONS[message](*values)
        if status == S["zerodiv"]:
            return ZeroDivisionError(message)
        if status == S["assert"]:
            return AssertionError(message) if message else AssertionError()
        return ValueError(message)


# --------------------------------------------------------------------------- #
# Compiling, and the disk cache
# --------------------------------------------------------------------------- #
#: LLVM's optimisation level for native kernels.  -O3 costs 3-5x the compile time of -O2
#: on large kernels (its extra loop passes), for no measured gain on revbench's kernels
OPT_LEVEL = 2


def opt_level() -> int:
    """The optimisation level native kernels are compiled at: ``OPT_LEVEL``, or Numba's
    own (``NUMBA_OPT``) where that is lower -- one knob for both compilers, for compiling
    faster at the price of slower code."""
    if not _OPT:
        numba_opt = _numba_setting("OPT", "NUMBA_OPT", str(OPT_LEVEL))
        try:
            level = int(numba_opt)
        except (TypeError, ValueError):  # ("max": Numba's highest)
            level = OPT_LEVEL
        _OPT.append(max(0, min(OPT_LEVEL, level)))
    return _OPT[0]


def _numba_setting(name: str, variable: str, default: str | None) -> str | None:
    """Numba's setting ``name``: from its configuration where Numba is imported already
    (it may have been changed there), else from the environment variable Numba reads it
    from -- the native path does not import Numba's compiler (0.4 s) to read two knobs."""
    import sys

    config = sys.modules.get("numba.core.config")
    if config is not None:
        value = getattr(config, name, default)
        return None if value is None else str(value)
    value = os.environ.get(variable, "")
    return value if value else default


_OPT: list = []

_JIT: list = []  # [(target machine, MCJIT engine)], made on first use
#: module digest -> its entry's and call wrapper's addresses (a module is added to the
#: JIT once per process)
_LOADED: dict[str, tuple[int, int]] = {}


def _jit():
    if not _JIT:
        import llvmlite.binding as llvm

        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        target = llvm.Target.from_default_triple()
        cpu, features = _target_cpu()
        tm = target.create_target_machine(cpu=cpu, features=features, opt=opt_level(), jit=True)
        ee = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
        _JIT.append((tm, ee))
    return _JIT[0]


def _target_cpu() -> tuple[str, str]:
    """The CPU the machine code is for: this one, or the one ``NUMBA_CPU_NAME`` /
    ``NUMBA_CPU_FEATURES`` name, as Numba reads them (``generic``: portable code, which a
    classroom image warms for machines other than the one that built it: binder/)."""
    import llvmlite.binding as llvm

    name = _numba_setting("CPU_NAME", "NUMBA_CPU_NAME", None)
    if name:
        return name, _numba_setting("CPU_FEATURES", "NUMBA_CPU_FEATURES", "") or ""
    return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


def _digest(text: str) -> str:
    import llvmlite

    cpu, features = _target_cpu()
    tag = f"{llvmlite.__version__}|{cpu}|{features}|O{opt_level()}|"
    return hashlib.sha256(tag.encode() + text.encode()).hexdigest()[:32]


def _cache_file(digest: str) -> str | None:
    from revbench.backends.cache_files import NATIVE_FOLDER
    from revbench.backends.loader import cache_dir, cache_writable

    folder = os.path.join(str(cache_dir()), NATIVE_FOLDER)
    if cache_writable():
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError:
            pass
    return os.path.join(folder, f"{digest}.o")


def _build(text: str) -> tuple[int, int]:
    """The addresses of the entry of module ``text`` and of its call wrapper (0 where it
    has none, :mod:`.pycall`): added to the JIT once per process, from the disk cache's
    object code when an earlier process compiled the same IR, else optimised, compiled
    and saved."""
    with _LOCK:
        digest = _digest(text)
        if digest in _LOADED:
            stats["reused"] += 1
            return _LOADED[digest]

        tm, ee = _jit()
        entry, call, table = f"rb_entry_{digest}", f"rb_call_{digest}", f"rb_py_{digest}"
        has_call = "@rb_call(" in text
        # (each module's symbols are its own: the JIT links every module into one space)
        text = text.replace("@rb_entry(", f"@{entry}(").replace("@rb_call(", f"@{call}(")
        text = text.replace("@rb_py ", f"@{table} ").replace("@rb_py,", f"@{table},")
        _link(text, digest, tm, ee)
        address = ee.get_function_address(entry)
        if not address:
            raise RuntimeError(f"native kernel {entry} did not link")
        wrapper = 0
        if has_call:
            wrapper = ee.get_function_address(call)
            slots = ee.get_global_value_address(table)
            if not (wrapper and slots):
                raise RuntimeError(f"native kernel {call} did not link")
            values = _py_table()
            (ctypes.c_int64 * len(values)).from_address(slots)[:] = values
        _LOADED[digest] = (address, wrapper)
        return _LOADED[digest]


#: external routines a kernel may ``declare`` and call by name -> what registers the
#: symbol with the JIT (``rb_matmul``: :func:`revbench.backends.blas.matmul_symbol`, put
#: here when that module is imported -- by the code generator, before any kernel exists)
SYMBOL_PROVIDERS: dict[str, Callable[[], object]] = {}


def _link(text: str, digest: str, tm, ee) -> None:
    """Add module ``text`` to the JIT: its object code from the disk cache (under
    ``digest``) when an earlier process compiled it, else optimised, compiled and saved."""
    import llvmlite.binding as llvm

    for name, provide in SYMBOL_PROVIDERS.items():  # (resolved by name: registered first)
        if re.search(rf"^declare [^\n]*@{name}\(", text, re.MULTILINE):
            provide()
    path = _cache_file(digest)
    obj = _read_object(path) if path is not None else None
    if obj is not None:
        stats["loaded"] += 1
    else:
        mod = llvm.parse_assembly(text)
        mod.verify()
        pto = llvm.create_pipeline_tuning_options(speed_level=opt_level())
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
        obj = tm.emit_object(mod)
        stats["compiled"] += 1
        if path is not None:
            _write_object(path, obj)
    ee.add_object_file(llvm.ObjectFileRef.from_data(obj))
    ee.finalize_object()


#: runtime module digest -> the addresses of the symbols asked for (:func:`build_runtime`)
_RUNTIMES: dict[str, tuple[int, ...]] = {}


def build_runtime(text: str, names: tuple[str, ...]) -> tuple[int, ...]:
    """The addresses of the functions and globals ``names`` of the runtime module
    ``text`` (LLVM IR defining them under those very names: ``rb_matmul`` of
    :mod:`revbench.backends.blas`), in the same JIT as the kernels and through the same
    disk cache as :func:`_build`: compiled once, loaded from the object code by a later
    process.  Its symbols are not renamed, so a module is added once per process (a
    second call with the same text answers from memory); the external symbols it calls
    must be registered first (``llvmlite.binding.add_symbol``)."""
    with _LOCK:
        digest = _digest(text)
        found = _RUNTIMES.get(digest)
        if found is not None:
            stats["reused"] += 1
            return found

        tm, ee = _jit()
        _link(text, digest, tm, ee)
        addresses = tuple(ee.get_global_value_address(name) for name in names)
        missing = [name for name, a in zip(names, addresses) if not a]
        if missing:
            raise RuntimeError(f"native runtime symbols {missing} did not link")
        _RUNTIMES[digest] = addresses
        return addresses


#: an object file in the cache: this tag, the SHA-256 of the object code, the code
_MAGIC = b"revbench-native-1\n"


def _read_object(path: str) -> bytes | None:
    """The object code cached at ``path``, or None: missing, unreadable, or damaged (its
    digest does not match: a torn write, a hand edit) -- then it is compiled again, and
    rewritten where the cache is writable."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    head = len(_MAGIC)
    obj = data[head + 32:]
    if data[:head] != _MAGIC or hashlib.sha256(obj).digest() != data[head:head + 32] or not obj:
        from revbench.backends.loader import warn_once

        warn_once("native-load", f"revbench: the cached machine code {path} is damaged; "
                  "it is compiled again")
        return None
    try:  # its last use, for revbench.cache.prune
        os.utime(path)
    except OSError:
        pass
    return obj


def _write_object(path: str, obj: bytes) -> None:
    from revbench.backends.loader import cache_writable

    if not cache_writable():
        return
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as fh:
            fh.write(_MAGIC + hashlib.sha256(obj).digest() + obj)
        os.replace(tmp, path)  # (atomic: a reader sees the old file or the whole new one)
    except OSError:
        from revbench.backends.loader import warn_once

        warn_once("native-save", f"revbench: machine code could not be saved in {path}; "
                  "it is kept in memory")
        try:
            os.unlink(tmp)
        except OSError:
            pass
