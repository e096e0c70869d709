"""Generated kernel source -> LLVM IR, for the types of one call.

The input is the source revbench generates for a kernel (:mod:`revbench.backends.codegen`),
parsed with :mod:`ast`; the output is LLVM IR text for one module holding the kernel, every
generated kernel it calls (each once), and an entry point Python calls through ctypes.

Each kernel becomes ``i32 @name(ptr err, params...)``: a scalar parameter is a pointer to an
8-byte slot (read at entry, the final value written back on return, as the Python function
returns its arguments), an array is its data pointer, shape and strides (bytes).  The
result is a status: 0, or a failure (:data:`STATUS`) with the details in ``err``.  Arrays a
kernel allocates live in its own arena, freed on every return: generated code never lets
an allocation escape (a kernel returns its parameters).

Everything the subset does not cover raises :class:`Unsupported` while lowering; the
caller then compiles with Numba.  Each operation is lowered as Numba lowers it, so the
results agree to the bit (see the notes at each rule).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import platform
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from revbench.backends import runtime
from revbench.backends.native import inline, runtime_ir
from revbench.rules import functions as fn_rules
from revbench.rules import special


class Unsupported(Exception):
    """Generated code this lowering does not handle (Numba compiles it instead)."""


#: failure statuses a kernel returns (0: success); ``err[0]`` repeats it
STATUS = {"check": 1, "interrupt": 2, "index": 3, "zerodiv": 4, "assert": 5, "value": 6,
          "raise": 7, "python": 8}
#: revbench's own exception classes generated code raises with numbers, by the name the
#: ``raise`` status carries in the message table: the engine raises the same
EXCEPTIONS: dict[str, type] = {}

#: ``err`` layout: status, message number (or module), check number, value count, then up
#: to MAX_VALUES (tag, bits) pairs; its last slot holds a function's returned int
MAX_VALUES = 16
ERR_SLOTS = 4 + 2 * MAX_VALUES + 1
RESULT_SLOT = ERR_SLOTS - 1
#: value tags in ``err`` (a complex value takes two entries: its real part, then its imaginary)
TAG_INT, TAG_FLOAT, TAG_BOOL, TAG_COMPLEX = 0, 1, 2, 3

I64, F64, BOOL = "i64", "double", "i1"
#: a complex128 scalar: its real and imaginary parts, as in memory (and in NumPy's arrays)
C128 = "{ double, double }"
#: an element type of arrays only (rows of a schedule): read as an int64, never written
I32 = "i32"


@dataclass(frozen=True)
class Arr:
    """An array type: element kind (I64, F64, BOOL or C128), rank, whether it is known to
    be C-contiguous (then indexing uses the shape alone, which LLVM can vectorise), and
    whether it may be written (a read-only argument: a kernel that writes it goes to Numba,
    which refuses it as the Python backend does)."""

    dtype: str
    ndim: int
    contiguous: bool
    writeable: bool = True

    @property
    def item_bytes(self) -> int:
        return 1 if self.dtype == BOOL else 4 if self.dtype == I32 else 16 if self.dtype == C128 else 8

    @property
    def mem(self) -> str:  # the element as stored in memory
        return "i8" if self.dtype == BOOL else self.dtype


@dataclass(frozen=True)
class ShapeT:
    ndim: int


@dataclass(frozen=True)
class DTypeT:
    """An array's ``dtype`` as a value (``np.zeros(shape, a.dtype)``)."""

    dtype: str


Type = str | Arr | ShapeT | DTypeT


@dataclass
class Val:
    t: Type
    ref: str = ""  # a scalar's SSA value
    ptr: str = ""  # an array's data pointer
    dims: tuple[str, ...] = ()  # shape entries (arrays and shapes)
    strides: tuple[str, ...] = ()


def _float_text(v: float) -> str:
    return f"0x{struct.unpack('<Q', struct.pack('<d', v))[0]:016X}"


def const(t: str, v) -> Val:
    if t == C128:
        v = complex(v)
        return Val(C128, f"{{ double {_float_text(v.real)}, double {_float_text(v.imag)} }}")
    if t == F64:
        return Val(F64, _float_text(float(v)))
    if t == BOOL:
        return Val(BOOL, "true" if v else "false")
    return Val(I64, str(int(v)))


_INT64_MIN, _INT64_MAX = runtime.INT64_MIN, runtime.INT64_MAX

#: the functions Numba calls as LLVM intrinsics (which LLVM turns into the same C library
#: calls); the others are called by their C name, as Numba does
_INTRINSICS = frozenset({"exp", "log", "log10", "log2", "sin", "cos"})


@functools.cache
def _c_functions() -> dict[str, str]:
    """Generated-code spelling (``_rb_np.arcsin``) -> the C library function compiled code
    calls for it (``asin``): every function of the rule table that ``backends/libm.py``
    lists as the C library's -- adding a math function there adds it here."""
    from revbench.backends import libm
    from revbench.rules.functions import BUILTIN_FUNCTIONS

    return {r.impl: r.name for r in BUILTIN_FUNCTIONS.values() if r.name in libm.FUNCTIONS}


_LIBM2 = {"atan2": "atan2", "arctan2": "atan2", "hypot": "hypot", "pow": "pow"}
_CONSTANTS = {"pi": 3.141592653589793, "e": 2.718281828459045, "inf": float("inf"),
              "nan": float("nan"), "tau": 6.283185307179586}
_DTYPES = {"float64": F64, "int64": I64, "bool_": BOOL, "complex128": C128}
#: module names generated code calls functions of: NumPy and math (``_rb_*``: the kernels'
#: spelling, ``np``: the batched drivers')
#: the complex functions: generated code's name -> (the C library's function, a scale)
#: (``_rb_np.exp(z)``, or the symbol of the function compiled code calls: ``_rb_cexp(z)``)
_COMPLEX_C = dict(special.COMPLEX_C)
_COMPLEX_HELPERS = {fn_rules.COMPILED_COMPLEX[name].impl: v for name, v in _COMPLEX_C.items()}
#: whether ``double complex`` passes as two doubles and returns as ``{ double, double }``
_C_COMPLEX_ABI = platform.machine().lower() in ("x86_64", "amd64")


#: lang/types.py's dtypes -> the lowering's
_OF_DTYPE = {"bool": BOOL, "int": I64, "float": F64, "complex": C128}


def _common(a: str, b: str) -> str:
    """The type two numbers compute in: complex, float or int."""
    return C128 if C128 in (a, b) else F64 if F64 in (a, b) else I64


_MODULES = {"_rb_np": "_rb_np", "_rb_math": "_rb_math", "_rb_libm": "_rb_np", "np": "_rb_np"}
#: checked integer helpers (``codegen.INT_HELPERS``): name -> operand count
_INT_HELPERS = {"_rb_iadd": 2, "_rb_isub": 2, "_rb_imul": 2, "_rb_ifloordiv": 2,
                "_rb_ipow": 2, "_rb_ineg": 1, "_rb_iabs": 1}
#: unchecked integer helpers (``codegen.WRAP_HELPERS``): name -> operand count; each is one
#: machine instruction without ``nsw`` (they wrap around in int64)
_WRAP_HELPERS = {"_rb_wadd": 2, "_rb_wsub": 2, "_rb_wmul": 2, "_rb_wpow": 2, "_rb_wneg": 1,
                 "_rb_wabs": 1}


@dataclass
class Kernel:
    """One generated kernel as the lowering needs it: its parsed function and what its
    module's names mean (``callees``: symbol -> the callee's Kernel source and its module
    key, resolved by the engine)."""

    source: str
    function_name: str
    module_key: int
    resolve: Callable[[str], Kernel | None]  # a `_rb_call_*` symbol -> its kernel
    check: bool = True  # bounds checks (Numba's boundscheck follows the checks)
    tree: ast.FunctionDef | None = None
    fastmath: bool = False
    #: a symbol -> revbench's own Python function it names, lowered inline (a schedule)
    resolve_python: Callable[[str], Callable | None] = lambda symbol: None
    #: a symbol -> revbench's own exception class it names (raised with numbers)
    resolve_exception: Callable[[str], type | None] = lambda symbol: None
    #: a variable -> the type ``lang/types.py`` gave it (a ``VarType``: dtype and rank),
    #: for a kernel generated from the typed IR: every value the kernel stores in one must
    #: have that type (:meth:`FunctionLowering.store_var`), so the lowering's types are the
    #: typed IR's, not a second inference that could differ
    declared: dict = field(default_factory=dict)

    def function(self) -> ast.FunctionDef:
        if self.tree is None:
            mod = ast.parse(self.source)
            for node in mod.body:
                if isinstance(node, ast.FunctionDef) and node.name == self.function_name:
                    self.tree = node
            if self.tree is None:
                raise Unsupported(f"no function {self.function_name}")
            if "# fastmath:" in self.source:
                raise Unsupported("fastmath")
        return self.tree


@dataclass
class ModuleBuilder:
    """The LLVM module being built: function definitions, declarations, and the
    kernels lowered so far (by kernel and argument types)."""

    functions: list[str] = field(default_factory=list)
    declared: dict[str, str] = field(default_factory=dict)
    lowered: dict[tuple, tuple[str, tuple]] = field(default_factory=dict)  # -> (name, returns)
    messages: list[str] = field(default_factory=list)  # assert / error messages by number
    #: where a NumPy array object keeps its data, shape and strides (``ARRAY_FIELDS``,
    #: checked by the engine): what an array Python code returns is read from
    fields: tuple[int, int, int] | None = None
    _n: int = 0

    def declare(self, name: str, text: str) -> None:
        self.declared.setdefault(name, text)

    def message(self, text: str) -> int:
        if text in self.messages:
            return self.messages.index(text)
        self.messages.append(text)
        return len(self.messages) - 1

    def kernel(self, k: Kernel, types: tuple[Type, ...]) -> tuple[str, tuple]:
        """The LLVM name of ``k`` lowered for ``types`` (lowered now if new), and what it
        returns: the indices of the parameters its return tuple lists."""
        key = (k.source, types)
        if key not in self.lowered:
            self._n += 1
            name = f"rbk{self._n}_{k.function_name}"
            self.lowered[key] = (name, ())  # (a recursive call: refused by the compiler)
            fl = FunctionLowering(self, k, types, name)
            text, returns = fl.lower()
            self.functions.append(text)
            self.lowered[key] = (name, returns)
        return self.lowered[key]

    def text(self) -> str:
        return "\n".join([*self.declared.values(), runtime_ir.RUNTIME, *self.functions]) + "\n"




@dataclass
class _Inlined:
    """A function being lowered inline: where its ``return`` goes (``end``) and the
    variable its value goes in; for a generator, the loop it feeds -- its ``target``, the
    ``body`` a ``yield`` jumps to, the slot noting which yield it came from (``resume``)
    and the places to come back to."""

    end: str
    result: str
    generator: bool
    target: ast.expr | None = None
    body: str = ""
    resume: str = ""
    resumes: list[str] = field(default_factory=list)
    returns_value: bool = False
    #: the number of values each ``return`` gives, for a call unpacked into a tuple of
    #: targets (``s, on_disk = storage(n, knob)``); None for one value
    width: int | None = None


class FunctionLowering:
    """One kernel, lowered for one set of argument types: a visitor over its statements
    (``s_<Node>``) and expressions (``x_<Node>``) writing LLVM IR with a variable per
    name in memory (LLVM's mem2reg makes registers of them)."""

    def __init__(self, mod: ModuleBuilder, k: Kernel, types: tuple[Type, ...], name: str):
        self.mod, self.k, self.name = mod, k, name
        self.fn = k.function()
        self.arg_types = types
        self.lines: list[str] = []
        self.allocas: list[str] = []
        #: slots of Python objects the function holds (a disk store's array), released on
        #: every return
        self.held: list[str] = []
        self.vars: dict[str, tuple[Type, tuple[str, ...]]] = {}
        self._n = 0
        self.check = k.check
        # names holding a tuple (a kernel's results, a yielded action) -> its parts'
        # variables: each assignment makes new ones (two branches may assign tuples of
        # other types to one name, as in Numba, where each is read in its own branch)
        self.tuples: dict[str, tuple[str, ...]] = {}
        self.loops: list[tuple[str, str]] = []  # (continue, break) labels, innermost last
        self.ctx: _Inlined | None = None  # the inlined function being lowered, if any
        self.inline_fns: dict[str, Callable] = {}  # symbols of inlined code's callees
        self.inlining: list[Callable] = []  # (a function inlined into itself: refused)

    # -- plumbing -------------------------------------------------------------
    def tmp(self, hint: str = "t") -> str:
        self._n += 1
        return f"%{hint}{self._n}"

    def label(self, hint: str) -> str:
        self._n += 1
        return f"{hint}{self._n}"

    def emit(self, line: str) -> None:
        self.lines.append("  " + line)

    def start(self, label: str) -> None:
        self.lines.append(f"{label}:")

    def br(self, label: str) -> None:
        self.emit(f"br label %{label}")

    def cbr(self, cond: str, yes: str, no: str) -> None:
        self.emit(f"br i1 {cond}, label %{yes}, label %{no}")

    def slot(self, llty: str, hint: str = "v") -> str:
        name = self.tmp(hint)
        self.allocas.append(f"  {name} = alloca {llty}")
        return name

    # -- variables ------------------------------------------------------------
    def declare_var(self, name: str, t: Type) -> tuple[str, ...]:
        if name in self.vars:
            old, slots = self.vars[name]
            if old == t:
                return slots
            if isinstance(old, Arr) and isinstance(t, Arr) and (old.dtype, old.ndim) == (
                    t.dtype, t.ndim):
                # one name, contiguous and strided arrays: index it by its strides
                if old.contiguous and not t.contiguous:
                    raise Unsupported(f"{name}: contiguous, then strided")
                return slots
            raise Unsupported(f"{name} changes type ({old} -> {t})")
        if isinstance(t, Arr):
            slots = (self.slot("ptr", "p"),) + tuple(
                self.slot("i64", "d") for _ in range(2 * t.ndim))
        elif isinstance(t, ShapeT):
            slots = tuple(self.slot("i64", "d") for _ in range(t.ndim))
        else:
            slots = (self.slot(t, "v"),)
        self.vars[name] = (t, slots)
        return slots

    def store_var(self, name: str, v: Val) -> None:
        self.as_declared(name, v.t)
        slots = self.declare_var(name, v.t)
        t = self.vars[name][0]
        if isinstance(t, Arr):
            self.emit(f"store ptr {v.ptr}, ptr {slots[0]}")
            for s, d in zip(slots[1:], (*v.dims, *v.strides)):
                self.emit(f"store i64 {d}, ptr {s}")
        elif isinstance(t, ShapeT):
            for s, d in zip(slots, v.dims):
                self.emit(f"store i64 {d}, ptr {s}")
        else:
            self.emit(f"store {t} {v.ref}, ptr {slots[0]}")

    def as_declared(self, name: str, t: Type) -> None:
        """Refuse a value of type ``t`` for ``name`` where the typed IR gave ``name``
        another type (revbench's own inlined code has no declarations)."""
        vt = self.k.declared.get(name) if not self.inlining else None
        if vt is None:
            return
        want = _OF_DTYPE.get(vt.dtype)
        if vt.ndim == 0 and t == want:
            return
        if vt.ndim and isinstance(t, Arr) and (t.dtype, t.ndim) == (want, vt.ndim):
            return
        raise Unsupported(f"{name}: {t}, where the typed IR has {vt}")

    def load_var(self, name: str) -> Val:
        if name not in self.vars:
            if name == "_RB_MODULE":
                return const(I64, self.k.module_key)
            raise Unsupported(f"name {name}")
        t, slots = self.vars[name]
        if isinstance(t, (Arr, ShapeT)):
            loaded = []
            for s in slots:
                r = self.tmp()
                self.emit(f"{r} = load {'ptr' if not loaded and isinstance(t, Arr) else 'i64'}, "
                          f"ptr {s}")
                loaded.append(r)
            if isinstance(t, ShapeT):
                return Val(t, dims=tuple(loaded))
            return Val(t, ptr=loaded[0], dims=tuple(loaded[1:1 + t.ndim]),
                       strides=tuple(loaded[1 + t.ndim:]))
        r = self.tmp()
        self.emit(f"{r} = load {t}, ptr {slots[0]}")
        return Val(t, r)

    # -- failures -------------------------------------------------------------
    def fail(self, status: str, message: int = 0, values: tuple[Val, ...] = (),
             check_no: Val | None = None, module: Val | None = None) -> None:
        """Record a failure in ``err`` and return its status (freeing the arena).  A
        failed check records the module that raised it (``CheckFailed``'s first value,
        which finds its message table), its number and its values."""
        code = STATUS[status]
        self.emit(f"store i64 {code}, ptr %err")
        self._err_store(1, self.convert(module, I64).ref if module is not None else str(message))
        self._err_store(2, check_no.ref if check_no is not None else "0")
        entries: list[tuple[int, str]] = []
        for v in values:
            if v.t == C128:
                for part in self.parts(v):
                    bits = self.tmp()
                    self.emit(f"{bits} = bitcast double {part} to i64")
                    entries.append((TAG_COMPLEX, bits))
                continue
            if v.t == F64:
                tag, bits = TAG_FLOAT, self.tmp()
                self.emit(f"{bits} = bitcast double {v.ref} to i64")
            elif v.t == BOOL:
                tag, bits = TAG_BOOL, self.tmp()
                self.emit(f"{bits} = zext i1 {v.ref} to i64")
            elif v.t == I64:
                tag, bits = TAG_INT, v.ref
            else:
                raise Unsupported("an array in a check's values")
            entries.append((tag, bits))
        if len(entries) > MAX_VALUES:
            raise Unsupported("too many values in a check")
        self._err_store(3, str(len(entries)))
        for j, (tag, bits) in enumerate(entries):
            self._err_store(4 + 2 * j, str(tag))
            self._err_store(5 + 2 * j, bits)
        self.emit(f"store i32 {code}, ptr %status")
        self.br("exit")

    def _err_store(self, k: int, value: str) -> None:
        p = self.tmp("e")
        self.emit(f"{p} = getelementptr i64, ptr %err, i64 {k}")
        self.emit(f"store i64 {value}, ptr {p}")

    def fail_if(self, cond: str, status: str, message: int = 0,
                values: tuple[Val, ...] = (), check_no: Val | None = None,
                module: Val | None = None) -> None:
        bad, ok = self.label("fail"), self.label("ok")
        self.emit(f"br i1 {cond}, label %{bad}, label %{ok}, !prof !0")
        self.start(bad)
        self.fail(status, message, values, check_no, module)
        self.start(ok)

    # -- the function ---------------------------------------------------------
    def lower(self) -> tuple[str, tuple]:
        fn = self.fn
        a = fn.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.defaults or a.posonlyargs:
            raise Unsupported("parameters")
        params = [p.arg for p in a.args]
        if len(params) != len(self.arg_types):
            raise Unsupported("arity")
        sig = ["ptr %err", "ptr %ret"]
        self.params = params
        entry_code = []
        for p, t in zip(params, self.arg_types):
            self.as_declared(p, t)
            safe = _llname(p)
            if isinstance(t, Arr):
                sig.append(f"ptr %a.{safe}")
                sig += [f"i64 %a.{safe}.d{j}" for j in range(t.ndim)]
                sig += [f"i64 %a.{safe}.s{j}" for j in range(t.ndim)]
                slots = self.declare_var(p, t)
                entry_code.append(f"store ptr %a.{safe}, ptr {slots[0]}")
                for j in range(t.ndim):
                    entry_code.append(f"store i64 %a.{safe}.d{j}, ptr {slots[1 + j]}")
                    entry_code.append(f"store i64 %a.{safe}.s{j}, ptr {slots[1 + t.ndim + j]}")
            elif isinstance(t, ShapeT):  # a tuple of ints (a schedule's knob): by value
                sig += [f"i64 %a.{safe}.d{j}" for j in range(t.ndim)]
                slots = self.declare_var(p, t)
                entry_code += [f"store i64 %a.{safe}.d{j}, ptr {slots[j]}"
                               for j in range(t.ndim)]
            elif isinstance(t, str):
                sig.append(f"ptr %a.{safe}")
                slots = self.declare_var(p, t)
                r = f"%in.{safe}"
                if t == BOOL:
                    entry_code += [f"{r}.w = load i64, ptr %a.{safe}",
                                   f"{r} = trunc i64 {r}.w to i1"]
                else:
                    entry_code.append(f"{r} = load {t}, ptr %a.{safe}")
                entry_code.append(f"store {t} {r}, ptr {slots[0]}")
            else:
                raise Unsupported("parameter type")
        self.start("body")
        self.block(fn.body)
        # falling off the end: Python returns None, which no kernel does
        self.emit("unreachable")
        returns = getattr(self, "returns", None)
        if returns is None:
            raise Unsupported("no return")
        head = [f"define internal i32 @{self.name}({', '.join(sig)}) {{", "entry:",
                "  %arena = alloca ptr", "  store ptr null, ptr %arena",
                "  %status = alloca i32", *self.allocas, *("  " + c for c in entry_code),
                "  br label %body"]
        release = [f"  %held{j} = load ptr, ptr {slot}\n  call void @rb_release(ptr %held{j})"
                   for j, slot in enumerate(self.held)]
        tail = ["exit:", *release, "  call void @rb_free_all(ptr %arena)",
                "  %st = load i32, ptr %status", "  ret i32 %st", "}"]
        return "\n".join(head + self.lines + tail), returns

    def block(self, body: list[ast.stmt]) -> None:
        for st in body:
            method = getattr(self, "s_" + type(st).__name__, None)
            if method is None:
                raise Unsupported(type(st).__name__)
            method(st)

    def dead(self) -> None:
        """Start a block no path reaches (after a return or a raise), so later
        statements of the same Python block still have one to go into."""
        self.start(self.label("dead"))

    # -- statements -----------------------------------------------------------
    def s_Pass(self, st: ast.Pass) -> None:
        pass

    def s_Expr(self, st: ast.Expr) -> None:
        if isinstance(st.value, ast.Constant):  # a docstring
            return
        if isinstance(st.value, ast.Yield):
            return self.do_yield(st.value.value)
        if self.is_kernel_call(st.value):  # (its results unused: arrays it updated)
            self.call_kernel(st.value)
            return
        call = st.value
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                and call.func.id == "print" and "print" not in self.vars and not call.keywords):
            return self.do_print(call.args)
        self.x(st.value)

    def do_print(self, args: list[ast.expr]) -> None:
        """``print(...)`` of text and numbers: Python's own ``print`` called with the values
        boxed as Python objects -- the same text, to the same ``sys.stdout`` (a notebook's
        cell output too), as on the Python backend.  The interpreter lock is taken for it
        (``PyGILState_Ensure``: a batched driver's workers run without it)."""
        values = []
        for a in args:
            if isinstance(a, ast.Constant) and isinstance(a.value, str):
                values.append(a.value)
                continue
            v = self.x(a)
            if v.t not in (F64, I64, BOOL, C128):
                raise Unsupported("print of an array")
            values.append(v)
        self.python_api()
        gil, tup = self.tmp(), self.tmp()
        self.emit(f"{gil} = call i32 @PyGILState_Ensure()")
        self.emit(f"{tup} = call ptr @PyTuple_New(i64 {len(values)})")
        for k, v in enumerate(values):
            obj = self.tmp()
            if isinstance(v, str):
                data = v.encode()
                g = self.string_constant(v)
                self.emit(f"{obj} = call ptr @PyUnicode_FromStringAndSize(ptr {g}, i64 {len(data)})")
            elif v.t == F64:
                self.emit(f"{obj} = call ptr @PyFloat_FromDouble(double {v.ref})")
            elif v.t == C128:
                re, im = self.parts(v)
                self.emit(f"{obj} = call ptr @PyComplex_FromDoubles(double {re}, double {im})")
            elif v.t == I64:
                self.emit(f"{obj} = call ptr @PyLong_FromLongLong(i64 {v.ref})")
            else:
                w = self.tmp()
                self.emit(f"{w} = zext i1 {v.ref} to i64")
                self.emit(f"{obj} = call ptr @PyBool_FromLong(i64 {w})")
            self.emit(f"call i32 @PyTuple_SetItem(ptr {tup}, i64 {k}, ptr {obj})")  # (steals)
        mod, fn, res, failed = self.tmp(), self.tmp(), self.tmp(), self.tmp()
        self.emit(f"{mod} = call ptr @PyImport_ImportModule(ptr {self.string_constant('builtins')})")
        self.emit(f"{fn} = call ptr @PyObject_GetAttrString(ptr {mod}, "
                  f"ptr {self.string_constant('print')})")
        self.emit(f"{res} = call ptr @PyObject_Call(ptr {fn}, ptr {tup}, ptr null)")
        self.emit(f"call void @Py_DecRef(ptr {tup})")
        self.emit(f"call void @Py_DecRef(ptr {fn})")
        self.emit(f"call void @Py_DecRef(ptr {mod})")
        self.emit(f"{failed} = icmp eq ptr {res}, null")
        ok, bad, done = self.label("printed"), self.label("unprinted"), self.label("print_end")
        self.emit(f"br i1 {failed}, label %{bad}, label %{ok}")
        self.start(ok)
        self.emit(f"call void @Py_DecRef(ptr {res})")
        self.emit(f"call void @PyGILState_Release(i32 {gil})")
        self.br(done)
        self.start(bad)
        self.emit("call void @PyErr_Clear()")
        self.emit(f"call void @PyGILState_Release(i32 {gil})")
        self.fail("value", self.mod.message("print() failed: sys.stdout could not be written"))
        self.start(done)

    def string_constant(self, text: str) -> str:
        """The address of ``text``, NUL-terminated UTF-8, a constant of the module."""
        data = text.encode() + b"\0"
        name = f"@rb_str_{hashlib.sha256(data).hexdigest()[:16]}"
        body = "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\{b:02X}"
                       for b in data)
        self.mod.declare(name, f'{name} = private unnamed_addr constant [{len(data)} x i8] c"{body}"')
        return name

    def s_With(self, st: ast.With) -> None:
        """The one ``with`` generated code holds: a checkpointed loop's second-level store,
        ``with _rb_objmode(d=...): d = _rb_disk_store(n, like, directory, label)`` (Numba's
        object mode).  Here each store is made by a call of Python --
        :func:`revbench.checkpoint.disk.mapped_shaped`, the interpreter lock taken -- and
        read as an array; the kernel holds the array object until it returns (the mapping
        is all that keeps the file's blocks).  A Python exception it raises is the
        kernel's failure, raised as it is."""
        if (len(st.items) != 1 or not isinstance(st.items[0].context_expr, ast.Call)
                or not isinstance(st.items[0].context_expr.func, ast.Name)
                or st.items[0].context_expr.func.id != "_rb_objmode"):
            raise Unsupported("With")
        for a in st.body:
            call = a.value if isinstance(a, ast.Assign) else None
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                    and call.func.id == "_rb_disk_store" and len(call.args) == 4
                    and len(a.targets) == 1 and isinstance(a.targets[0], ast.Name)
                    and all(isinstance(c, ast.Constant) for c in call.args[2:])):
                raise Unsupported("With")
            n, like = self.x(call.args[0]), self.x(call.args[1])
            if not isinstance(like.t, Arr) or self.mod.fields is None:
                raise Unsupported("With")
            self.store_var(a.targets[0].id, self.disk_store(
                self.convert(n, I64), like, call.args[2].value, call.args[3].value))

    def python_api(self) -> None:
        """Declare the CPython functions kernels call (``print``, a disk store)."""
        for name, sig in (("PyGILState_Ensure", "i32 @PyGILState_Ensure()"),
                          ("PyGILState_Release", "void @PyGILState_Release(i32)"),
                          ("PyTuple_New", "ptr @PyTuple_New(i64)"),
                          ("PyTuple_SetItem", "i32 @PyTuple_SetItem(ptr, i64, ptr)"),
                          ("PyUnicode_FromStringAndSize",
                           "ptr @PyUnicode_FromStringAndSize(ptr, i64)"),
                          ("PyFloat_FromDouble", "ptr @PyFloat_FromDouble(double)"),
                          ("PyComplex_FromDoubles", "ptr @PyComplex_FromDoubles(double, double)"),
                          ("PyLong_FromLongLong", "ptr @PyLong_FromLongLong(i64)"),
                          ("PyBool_FromLong", "ptr @PyBool_FromLong(i64)"),
                          ("PyImport_ImportModule", "ptr @PyImport_ImportModule(ptr)"),
                          ("PyObject_GetAttrString", "ptr @PyObject_GetAttrString(ptr, ptr)"),
                          ("PyObject_Call", "ptr @PyObject_Call(ptr, ptr, ptr)"),
                          ("PyErr_Clear", "void @PyErr_Clear()"),
                          ("PyErr_Fetch", "void @PyErr_Fetch(ptr, ptr, ptr)"),
                          ("PyErr_NormalizeException",
                           "void @PyErr_NormalizeException(ptr, ptr, ptr)"),
                          ("Py_IncRef", "void @Py_IncRef(ptr)"),
                          ("Py_DecRef", "void @Py_DecRef(ptr)")):
            self.mod.declare(name, f"declare {sig}")

    def py_string(self, text: str) -> str:
        """A new Python ``str`` of ``text`` (the GIL held)."""
        r = self.tmp()
        self.emit(f"{r} = call ptr @PyUnicode_FromStringAndSize(ptr {self.string_constant(text)}, "
                  f"i64 {len(text.encode())})")
        return r

    def py_call(self, module: str, function: str, items: list[str]) -> str:
        """``module.function(*items)`` (new references, stolen): its result, or null with
        Python's error set (the GIL held)."""
        tup, mod, fn, res = self.tmp(), self.tmp(), self.tmp(), self.tmp()
        self.emit(f"{tup} = call ptr @PyTuple_New(i64 {len(items)})")
        for k, obj in enumerate(items):
            self.emit(f"call i32 @PyTuple_SetItem(ptr {tup}, i64 {k}, ptr {obj})")
        self.emit(f"{mod} = call ptr @PyImport_ImportModule(ptr {self.string_constant(module)})")
        self.emit(f"{fn} = call ptr @PyObject_GetAttrString(ptr {mod}, "
                  f"ptr {self.string_constant(function)})")
        self.emit(f"{res} = call ptr @PyObject_Call(ptr {fn}, ptr {tup}, ptr null)")
        for obj in (tup, fn, mod):
            self.emit(f"call void @Py_DecRef(ptr {obj})")
        return res

    def disk_store(self, n: Val, like: Val, directory: str | None, label: str) -> Val:
        self.python_api()
        self.mod.declare("rb_release", runtime_ir.RELEASE)
        gil = self.tmp()
        self.emit(f"{gil} = call i32 @PyGILState_Ensure()")
        shape = self.tmp()
        self.emit(f"{shape} = call ptr @PyTuple_New(i64 {like.t.ndim})")
        for j, d in enumerate(like.dims):
            dim = self.tmp()
            self.emit(f"{dim} = call ptr @PyLong_FromLongLong(i64 {d})")
            self.emit(f"call i32 @PyTuple_SetItem(ptr {shape}, i64 {j}, ptr {dim})")
        count = self.tmp()
        self.emit(f"{count} = call ptr @PyLong_FromLongLong(i64 {n.ref})")
        dtype = {F64: "float64", I64: "int64", BOOL: "bool", C128: "complex128"}[like.t.dtype]
        where = self.py_string(directory) if directory is not None else None
        if where is None:  # (None: the schedule's default folder)
            where = self.tmp()
            self.mod.declare("Py_BuildValue", "declare ptr @Py_BuildValue(ptr, ...)")
            self.emit(f"{where} = call ptr (ptr, ...) @Py_BuildValue(ptr "
                      f"{self.string_constant('')})")  # (a new reference to None)
        res = self.py_call("revbench.checkpoint.disk", "mapped_shaped",
                           [count, shape, self.py_string(dtype), where, self.py_string(label)])
        failed = self.tmp()
        self.emit(f"{failed} = icmp eq ptr {res}, null")
        bad, ok = self.label("unmapped"), self.label("mapped")
        self.emit(f"br i1 {failed}, label %{bad}, label %{ok}")
        self.start(bad)
        kind, value, tb = self.slot("ptr", "etype"), self.slot("ptr", "evalue"), self.slot("ptr", "etb")
        self.emit(f"call void @PyErr_Fetch(ptr {kind}, ptr {value}, ptr {tb})")
        self.emit(f"call void @PyErr_NormalizeException(ptr {kind}, ptr {value}, ptr {tb})")
        exc = self.tmp()
        self.emit(f"{exc} = load ptr, ptr {value}")
        for slot in (kind, tb):
            other = self.tmp()
            self.emit(f"{other} = load ptr, ptr {slot}")
            self.emit(f"call void @rb_release_held(ptr {other})")
        self.emit(f"call void @PyGILState_Release(i32 {gil})")
        address = self.tmp()
        self.emit(f"{address} = ptrtoint ptr {exc} to i64")
        self.fail("python", module=Val(I64, address))  # (the exception object, owned)
        self.start(ok)
        held = self.slot("ptr", "held")
        self.allocas.append(f"  store ptr null, ptr {held}")
        self.held.append(held)
        self.emit(f"store ptr {res}, ptr {held}")
        self.emit(f"call void @PyGILState_Release(i32 {gil})")
        data, dims, strides = self.mod.fields
        t = Arr(like.t.dtype, like.t.ndim + 1, True)
        loaded = []
        for offset in (data, dims, strides):
            p, v = self.tmp(), self.tmp()
            self.emit(f"{p} = getelementptr i8, ptr {res}, i64 {offset}")
            self.emit(f"{v} = load ptr, ptr {p}")
            loaded.append(v)
        parts: dict[str, list[str]] = {"dims": [], "strides": []}
        for what, base in (("dims", loaded[1]), ("strides", loaded[2])):
            for j in range(t.ndim):
                p, v = self.tmp(), self.tmp()
                self.emit(f"{p} = getelementptr i64, ptr {base}, i64 {j}")
                self.emit(f"{v} = load i64, ptr {p}")
                parts[what].append(v)
        return Val(t, ptr=loaded[0], dims=tuple(parts["dims"]), strides=tuple(parts["strides"]))

    def s_Break(self, st: ast.Break) -> None:
        self.br(self.loops[-1][1])
        self.dead()

    def s_Continue(self, st: ast.Continue) -> None:
        self.br(self.loops[-1][0])
        self.dead()

    def s_Return(self, st: ast.Return) -> None:
        if self.ctx is not None:  # the end of an inlined function's copy
            if st.value is not None:
                if self.ctx.generator:
                    raise Unsupported("a generator returning a value")
                width = self.ctx.width
                if width is None:
                    self.store_var(self.ctx.result, self.x(st.value))
                elif isinstance(st.value, ast.Tuple) and len(st.value.elts) == width:
                    values = [self.x(e) for e in st.value.elts]  # (all first: a swap)
                    for k, v in enumerate(values):
                        self.store_var(f"{self.ctx.result}{k}", v)
                else:
                    raise Unsupported("unpacking")
                self.ctx.returns_value = True
            self.br(self.ctx.end)
            self.dead()
            return
        if not isinstance(st.value, ast.Tuple):
            return self.return_value(st.value)
        returns = []
        for e in st.value.elts:
            if not (isinstance(e, ast.Name) and e.id in self.params):
                raise Unsupported("returns a non-parameter")
            returns.append(self.params.index(e.id))
        if getattr(self, "returns", returns) != returns:
            raise Unsupported("two different returns")
        self.returns = tuple(returns)
        for p, t in zip(self.params, self.arg_types):
            if isinstance(t, ShapeT):  # (a knob: never rebound, given back as it came)
                continue
            if isinstance(t, Arr):
                # an array parameter rebound to another array cannot be returned in place
                v = self.load_var(p)
                same = self.tmp()
                self.emit(f"{same} = icmp eq ptr {v.ptr}, %a.{_llname(p)}")
                self.fail_if(self._not(same), "value",
                             self.mod.message(f"array parameter {p} rebound"))
            else:
                v = self.load_var(p)
                if t == BOOL:
                    w = self.tmp()
                    self.emit(f"{w} = zext i1 {v.ref} to i64")
                    self.emit(f"store i64 {w}, ptr %a.{_llname(p)}")
                else:
                    self.emit(f"store {t} {v.ref}, ptr %a.{_llname(p)}")
        self.emit("store i32 0, ptr %status")
        self.br("exit")
        self.dead()

    def return_value(self, e: ast.expr | None) -> None:
        """``return i``: a function that returns an int (a batched driver: the first
        failing item, or -1), through ``%ret``; its arguments are not given back."""
        if e is None or getattr(self, "returns", "value") != "value":
            raise Unsupported("return")
        v = self.x(e)
        if v.t not in (I64, BOOL):
            raise Unsupported("returns a non-int")
        self.returns = "value"
        self.emit(f"store i64 {self.convert(v, I64).ref}, ptr %ret")
        self.emit("store i32 0, ptr %status")
        self.br("exit")
        self.dead()

    def _not(self, cond: str) -> str:
        r = self.tmp()
        self.emit(f"{r} = xor i1 {cond}, true")
        return r

    def s_Assign(self, st: ast.Assign) -> None:
        if len(st.targets) != 1:
            raise Unsupported("chained assignment")
        target = st.targets[0]
        if isinstance(target, ast.Tuple):
            if isinstance(st.value, ast.Tuple):  # a swap: every value first, then the stores
                values = [self.x(e) for e in st.value.elts]
            elif self.is_kernel_call(st.value):
                values = self.call_kernel(st.value)
            elif (isinstance(st.value, ast.Call) and isinstance(st.value.func, ast.Name)
                  and not st.value.keywords and st.value.func.id not in self.vars
                  and self.python_callee(st.value.func.id) is not None):
                # revbench's own function returning a tuple, inline
                values = self.inline_call(self.python_callee(st.value.func.id),
                                          st.value.args, width=len(target.elts))
            else:
                raise Unsupported("tuple assignment")
            if len(values) != len(target.elts):
                raise Unsupported("unpacking")
            for t, v in zip(target.elts, values):
                self.assign(t, v)
            return
        if isinstance(target, ast.Name) and self.is_kernel_call(st.value):
            # r = kernel(...): a tuple; r[k] reads its parts (one variable each)
            self.store_tuple(target.id, self.call_kernel(st.value))
            return
        value = st.value
        if (isinstance(target, ast.Subscript) and isinstance(value, ast.UnaryOp)
                and isinstance(value.op, ast.USub)):
            # ``view[...] = -a``: each element negated as it is stored (a loop's seed of
            # the adjoint of its inverse); a number's negation is the usual one
            operand = self.x(value.operand)  # (the value first, then the target: as always)
            if isinstance(operand.t, Arr):
                view = self.subarray(target)
                if view is None:
                    raise Unsupported("an array where a number is expected")
                self.store_into(view, operand, negate=True)
                return
            self.assign(target, self.negate(operand))
            return
        self.assign(target, self.x(value))

    def store_tuple(self, name: str, values: list[Val]) -> None:
        parts = tuple(f"{name}#{len(self.vars)}#{k}" for k in range(len(values)))
        for part, v in zip(parts, values):
            self.store_var(part, v)
        self.tuples[name] = parts

    def is_kernel_call(self, e: ast.expr) -> bool:
        return (isinstance(e, ast.Call) and isinstance(e.func, ast.Name)
                and e.func.id not in self.vars and self.k.resolve(e.func.id) is not None)

    def assign(self, target: ast.expr, v: Val) -> None:
        if isinstance(target, ast.Name):
            if target.id in self.vars:
                old = self.vars[target.id][0]
                if isinstance(old, str) and isinstance(v.t, str) and old != v.t:
                    raise Unsupported(f"{target.id} changes type")
            self.store_var(target.id, v)
        elif isinstance(target, ast.Subscript):
            view = self.subarray(target)
            if view is not None:  # a[i] = row, a[:] = b, a[i, k, :] = v: element by element
                self.store_into(view, v)
                return
            arr, ptr = self.element(target)
            self.emit(f"store {arr.mem} {self.to_mem(self.convert(v, arr.dtype), arr)}, "
                      f"ptr {ptr}")
        else:
            raise Unsupported("assignment target")

    def subarray(self, e: ast.Subscript) -> Val | None:
        """The view ``e`` names when it names more than one element, else None."""
        base = self.x(e.value)
        if not isinstance(base.t, Arr):
            raise Unsupported("subscript of a non-array")
        idx = _indices(e)
        if len(idx) < base.t.ndim or any(isinstance(i, ast.Slice) for i in idx):
            return self.view(base, idx)
        return None

    def store_into(self, view: Val, v: Val, op: ast.operator | None = None,
                   negate: bool = False) -> None:
        """``view[...] = v`` (or ``op=``; ``-v`` with ``negate``): an array of the same
        shape, or one number."""
        t = view.t
        if isinstance(v.t, Arr):
            def body(dst: str, src: str | None) -> None:
                value = self.from_mem(v.t, src)
                if negate:
                    value = self.negate(value)
                if op is not None:
                    value = self.binop(op, self.from_mem(t, dst), value)
                self.emit(f"store {t.mem} {self.to_mem(self.convert(value, t.dtype), t)}, "
                          f"ptr {dst}")
            self.each_element(view, v, body)
            return
        if not isinstance(v.t, str):
            raise Unsupported("store of a shape")

        def one(dst: str, _: str | None) -> None:
            value = v if op is None else self.binop(op, self.from_mem(t, dst), v)
            self.emit(f"store {t.mem} {self.to_mem(self.convert(value, t.dtype), t)}, ptr {dst}")
        self.each_element(view, None, one)

    def s_AugAssign(self, st: ast.AugAssign) -> None:
        if isinstance(st.target, ast.Name):
            old = self.load_var(st.target.id)
            new = self.binop(st.op, old, self.x(st.value))
            self.assign(st.target, new)
        elif isinstance(st.target, ast.Subscript):
            view = self.subarray(st.target)
            if view is not None:
                self.store_into(view, self.x(st.value), st.op)
                return
            arr, ptr = self.element(st.target)
            old = self.from_mem(arr, ptr)
            new = self.binop(st.op, old, self.x(st.value))
            self.emit(f"store {arr.mem} {self.to_mem(self.convert(new, arr.dtype), arr)}, "
                      f"ptr {ptr}")
        else:
            raise Unsupported("augmented target")

    def s_If(self, st: ast.If) -> None:
        cond = self.truth(self.x(st.test))
        yes, no, end = self.label("then"), self.label("else"), self.label("endif")
        self.cbr(cond, yes, no)
        self.start(yes)
        self.block(st.body)
        self.br(end)
        self.start(no)
        self.block(st.orelse)
        self.br(end)
        self.start(end)

    def s_While(self, st: ast.While) -> None:
        if st.orelse:
            raise Unsupported("while-else")
        head, body, end = self.label("while"), self.label("wbody"), self.label("wend")
        self.br(head)
        self.start(head)
        cond = self.truth(self.x(st.test))
        self.cbr(cond, body, end)
        self.start(body)
        self.loop_body(st.body, head, end)
        self.start(end)

    def loop_body(self, body: list[ast.stmt], next_label: str, end: str) -> None:
        """A loop's body, where ``continue`` and its own end go to ``next_label`` (the
        test, the counter, or a generator's next yield) and ``break`` to ``end``."""
        self.loops.append((next_label, end))
        self.block(body)
        self.loops.pop()
        self.br(next_label)

    def s_For(self, st: ast.For) -> None:
        it = st.iter
        if (not st.orelse and isinstance(it, ast.Call) and isinstance(it.func, ast.Name)
                and not it.keywords):
            fn = self.python_callee(it.func.id)
            if fn is not None:
                return self.for_generator(st, fn, it.args)
        if (st.orelse or not isinstance(st.target, ast.Name)
                or not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name)
                        and it.func.id == "range" and not it.keywords
                        and 1 <= len(it.args) <= 3)):
            raise Unsupported("for")
        bounds = [self.int_value(self.x(a)) for a in it.args]
        if len(bounds) == 1:
            start, stop, step = "0", bounds[0], None
        else:
            start, stop = bounds[0], bounds[1]
            step = bounds[2] if len(bounds) == 3 else None
        step_const = None
        if step is None:
            step_const = 1
        else:
            node = it.args[2]
            if isinstance(node, ast.Constant):
                step_const = node.value
            elif (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
                    and isinstance(node.operand, ast.Constant)):
                step_const = -node.operand.value
        if step_const == 0:
            raise Unsupported("range step 0")
        if step_const is None:
            zero = self.tmp()
            self.emit(f"{zero} = icmp eq i64 {step}, 0")
            self.fail_if(zero, "value", self.mod.message("range() arg 3 must not be zero"))
        counter = self.slot("i64", "i")
        self.emit(f"store i64 {start}, ptr {counter}")
        # the bounds in memory too: a yield in the body (an inlined generator) makes paths
        # into the loop that do not pass here (mem2reg makes registers of them again)
        bounds_slot = self.slot("i64", "stop"), self.slot("i64", "step")
        self.emit(f"store i64 {stop}, ptr {bounds_slot[0]}")
        if step_const is None:
            self.emit(f"store i64 {step}, ptr {bounds_slot[1]}")
        self.declare_var(st.target.id, I64)
        # A next value beyond int64 ends the loop, as in Python (range(2**63 - 2, 2**63 - 1,
        # 2) has one element): with a step of 1 or -1 it cannot happen (i < stop <= the
        # largest int64), any other step notes the overflow of its add in ``past``.
        past = self.slot("i1", "past") if step_const not in (1, -1) else None
        if past is not None:
            self.emit(f"store i1 false, ptr {past}")
        head, body, end = self.label("for"), self.label("fbody"), self.label("fend")
        self.br(head)
        self.start(head)
        i, stop = self.tmp("i"), self.tmp("stop")
        self.emit(f"{i} = load i64, ptr {counter}")
        self.emit(f"{stop} = load i64, ptr {bounds_slot[0]}")
        if step_const is None:
            step = self.tmp("step")
            self.emit(f"{step} = load i64, ptr {bounds_slot[1]}")
        step_text = str(step_const) if step_const is not None else step
        go = self.tmp()
        if step_const is not None:
            self.emit(f"{go} = icmp {'slt' if step_const > 0 else 'sgt'} i64 {i}, {stop}")
        else:
            up, down, pos = self.tmp(), self.tmp(), self.tmp()
            self.emit(f"{up} = icmp slt i64 {i}, {stop}")
            self.emit(f"{down} = icmp sgt i64 {i}, {stop}")
            self.emit(f"{pos} = icmp sgt i64 {step}, 0")
            self.emit(f"{go} = select i1 {pos}, i1 {up}, i1 {down}")
        if past is not None:
            was, beyond, inside = self.tmp(), self.tmp(), self.tmp()
            self.emit(f"{was} = load i1, ptr {past}")
            self.emit(f"{beyond} = xor i1 {was}, true")
            self.emit(f"{inside} = and i1 {go}, {beyond}")
            go = inside
        self.cbr(go, body, end)
        self.start(body)
        self.store_var(st.target.id, Val(I64, i))
        nxt = self.tmp()
        if past is None:
            self.emit(f"{nxt} = add i64 {i}, {step_text}")
        else:
            intr = "llvm.sadd.with.overflow.i64"
            self.mod.declare(intr, f"declare {{i64, i1}} @{intr}(i64, i64)")
            pair, over = self.tmp(), self.tmp()
            self.emit(f"{pair} = call {{i64, i1}} @{intr}(i64 {i}, i64 {step_text})")
            self.emit(f"{nxt} = extractvalue {{i64, i1}} {pair}, 0")
            self.emit(f"{over} = extractvalue {{i64, i1}} {pair}, 1")
            self.emit(f"store i1 {over}, ptr {past}")
        self.emit(f"store i64 {nxt}, ptr {counter}")
        self.loop_body(st.body, head, end)
        self.start(end)

    # -- revbench's own functions, inline (:mod:`.inline`) -----------------------
    def python_callee(self, name: str) -> Callable | None:
        """The Python function a call of ``name`` is lowered inline from, if any."""
        fn = self.inline_fns.get(name)
        if fn is None and name not in self.vars:
            fn = self.k.resolve_python(name)
        return fn

    def _prepare(self, fn: Callable, args: list[ast.expr]) -> inline.Prepared:
        """A fresh copy of ``fn``, its parameters bound to ``args`` (evaluated first)."""
        if fn in self.inlining or len(self.inlining) > 16:
            raise Unsupported(f"recursion in {fn.__qualname__}")
        try:
            p = inline.prepared(fn)
        except inline.NotInlinable as exc:
            raise Unsupported(str(exc)) from None
        if len(args) != len(p.params):
            raise Unsupported(f"arity of {fn.__qualname__}")
        values = [self.x(a) for a in args]
        for name, v in zip(p.params, values):
            self.store_var(name, v)
        self.inline_fns.update(p.calls)
        return p

    def _inlined_body(self, fn: Callable, p: inline.Prepared, ctx: _Inlined) -> None:
        """``p``'s body here, in its own context (its loops, its returns), then to its end."""
        saved = (self.ctx, self.loops)
        self.ctx, self.loops = ctx, []
        self.inlining.append(fn)
        self.block(p.body)
        self.inlining.pop()
        self.ctx, self.loops = saved
        self.br(ctx.end)

    def inline_call(self, fn: Callable, args: list[ast.expr], width: int | None = None):
        """A call of a plain function: its body here, each ``return`` a jump to its end.
        Its value; with ``width``, the list of the ``width`` values each of its returns
        gives (a tuple unpacked into as many targets)."""
        p = self._prepare(fn, args)
        if p.generator:
            raise Unsupported(f"{fn.__qualname__}: a generator outside a for loop")
        ctx = _Inlined(self.label("ret"), f"{p.params[0] if p.params else '_rbi'}#result",
                       generator=False, width=width)
        self._inlined_body(fn, p, ctx)
        self.start(ctx.end)
        if width is not None:
            if not ctx.returns_value:
                raise Unsupported("unpacking")
            return [self.load_var(f"{ctx.result}{k}") for k in range(width)]
        if ctx.returns_value:
            return self.load_var(ctx.result)
        return const(BOOL, False)  # (None: a statement's value, unused)

    def for_generator(self, st: ast.For, fn: Callable, args: list[ast.expr]) -> None:
        """``for x in gen(...): body``, the generator inline: each ``yield`` sets ``x``,
        notes where it stands and jumps to ``body``, which ends (or ``continue``s) in a
        switch back to the place after that yield; ``break`` and the generator's end
        leave the loop.  The body is written once, however many yields lead to it."""
        p = self._prepare(fn, args)
        if not p.generator:
            raise Unsupported(f"for over {fn.__qualname__}")
        body, dispatch, end = self.label("gbody"), self.label("gnext"), self.label("gend")
        ctx = _Inlined(end, "", generator=True, target=st.target, body=body,
                       resume=self.slot("i32", "resume"))
        self._inlined_body(fn, p, ctx)
        self.start(body)
        self.loop_body(st.body, dispatch, end)
        self.start(dispatch)
        at = self.tmp()
        self.emit(f"{at} = load i32, ptr {ctx.resume}")
        cases = " ".join(f"i32 {k}, label %{label}" for k, label in enumerate(ctx.resumes))
        self.emit(f"switch i32 {at}, label %{end} [{cases}]")
        self.start(end)

    def do_yield(self, e: ast.expr | None) -> None:
        ctx = self.ctx
        if ctx is None or not ctx.generator or e is None:
            raise Unsupported("yield")
        if isinstance(e, ast.Tuple):
            values = [self.x(v) for v in e.elts]
        elif isinstance(e, ast.Name) and e.id in self.tuples:
            values = [self.load_var(part) for part in self.tuples[e.id]]
        else:
            values = [self.x(e)]
        target = ctx.target
        if isinstance(target, ast.Tuple):
            if len(target.elts) != len(values):
                raise Unsupported("unpacking")
            for t, v in zip(target.elts, values):
                self.assign(t, v)
        elif isinstance(target, ast.Name):
            if len(values) == 1:
                self.assign(target, values[0])
            else:
                # (one set of variables for every yield: the body reads them wherever from)
                parts = tuple(f"{target.id}#y#{k}" for k in range(len(values)))
                for part, v in zip(parts, values):
                    self.store_var(part, v)
                self.tuples[target.id] = parts
        else:
            raise Unsupported("for target")
        resume = self.label("resume")
        self.emit(f"store i32 {len(ctx.resumes)}, ptr {ctx.resume}")
        ctx.resumes.append(resume)
        self.br(ctx.body)
        self.start(resume)

    def s_Raise(self, st: ast.Raise) -> None:
        exc = st.exc
        if not (isinstance(exc, ast.Call) and isinstance(exc.func, ast.Name)) or st.cause:
            raise Unsupported("raise")
        if exc.func.id == "_RbInterrupted":
            self.fail("interrupt")
        elif (exc.func.id == "ValueError" and "ValueError" not in self.vars and not exc.keywords
              and len(exc.args) == 1 and isinstance(exc.args[0], ast.Constant)
              and isinstance(exc.args[0].value, str)):
            # (a library function inlined: checkpoint_schedules' n_advance)
            self.fail("value", self.mod.message(exc.args[0].value))
        elif exc.func.id == "_RbCheckFailed":
            args = [self.x(a) for a in exc.args]
            if len(args) < 2 or any(not isinstance(a.t, str) for a in args):
                raise Unsupported("check arguments")
            self.fail("check", 0, tuple(args[2:]), check_no=self.convert(args[1], I64),
                      module=args[0])
        else:
            cls = self.k.resolve_exception(exc.func.id)
            args = [self.x(a) for a in exc.args]
            if cls is None or exc.keywords or any(not isinstance(a.t, str) for a in args):
                raise Unsupported(f"raise {exc.func.id}")
            name = f"{cls.__module__}.{cls.__qualname__}"
            EXCEPTIONS[name] = cls
            self.fail("raise", self.mod.message(name), tuple(args))
        self.dead()

    def s_Assert(self, st: ast.Assert) -> None:
        if not (st.msg is None or (isinstance(st.msg, ast.Constant)
                                   and isinstance(st.msg.value, str))):
            raise Unsupported("assert message")
        cond = self.truth(self.x(st.test))
        msg = self.mod.message(st.msg.value if st.msg is not None else "")
        self.fail_if(self._not(cond), "assert", msg)

    # -- expressions ----------------------------------------------------------
    def x(self, e: ast.expr) -> Val:
        method = getattr(self, "x_" + type(e).__name__, None)
        if method is None:
            raise Unsupported(type(e).__name__)
        return method(e)

    def x_Constant(self, e: ast.Constant) -> Val:
        v = e.value
        if isinstance(v, bool):
            return const(BOOL, v)
        if isinstance(v, int):
            if not _INT64_MIN <= v <= _INT64_MAX:
                raise Unsupported("a big int")
            return const(I64, v)
        if isinstance(v, float):
            return const(F64, v)
        if isinstance(v, complex):
            return const(C128, v)
        raise Unsupported(f"constant {type(v).__name__}")

    def x_Name(self, e: ast.Name) -> Val:
        return self.load_var(e.id)

    def x_Attribute(self, e: ast.Attribute) -> Val:
        if isinstance(e.value, ast.Name) and e.value.id in ("_rb_np", "_rb_math"):
            if e.attr in _CONSTANTS:
                return const(F64, _CONSTANTS[e.attr])
            raise Unsupported(f"{e.value.id}.{e.attr}")
        if e.attr in ("real", "imag"):
            v = self.x(e.value)
            if v.t == C128:
                return Val(F64, self.parts(v)[e.attr == "imag"])
            if v.t == F64:
                return v if e.attr == "real" else const(F64, 0.0)
            raise Unsupported(f"{e.attr} of {v.t}")
        if e.attr == "dtype":
            v = self.x(e.value)
            if not isinstance(v.t, Arr):
                raise Unsupported("dtype of a non-array")
            return Val(DTypeT(v.t.dtype))
        if e.attr in ("shape", "size"):
            v = self.x(e.value)
            if not isinstance(v.t, Arr):
                raise Unsupported("shape of a non-array")
            if e.attr == "size":
                return Val(I64, self.count(v.dims))
            return Val(ShapeT(v.t.ndim), dims=v.dims)
        raise Unsupported(f"attribute {e.attr}")

    def x_Subscript(self, e: ast.Subscript) -> Val:
        if self.is_kernel_call(e.value):  # ``kernel(...)[k]``: one of its results
            k = e.slice
            values = self.call_kernel(e.value)
            if not (isinstance(k, ast.Constant) and type(k.value) is int
                    and 0 <= k.value < len(values)):
                raise Unsupported("tuple index")
            return values[k.value]
        if isinstance(e.value, ast.Name) and e.value.id in self.tuples:
            k = e.slice
            parts = self.tuples[e.value.id]
            if not (isinstance(k, ast.Constant) and type(k.value) is int
                    and 0 <= k.value < len(parts)):
                raise Unsupported("tuple index")
            return self.load_var(parts[k.value])
        base = self.x(e.value)
        if isinstance(base.t, ShapeT):
            k = _constant_int(e.slice)  # (``x.shape[-1]``: a negative constant counts from the end)
            if k is None or not -base.t.ndim <= k < base.t.ndim:
                raise Unsupported("shape index")
            return Val(I64, base.dims[k])
        idx = _indices(e)
        if any(isinstance(i, ast.Slice) for i in idx) or (
                isinstance(base.t, Arr) and len(idx) < base.t.ndim):
            return self.view(base, idx)  # (a[i] of a matrix: its row)
        arr, ptr = self.element(e, base)
        return self.from_mem(arr, ptr)

    def index(self, node: ast.expr, dim: str) -> str:
        """An int index into an axis of length ``dim``: negative counts from the end,
        and with checks on it must fall inside (Numba's ``boundscheck``)."""
        v = self.x(node)
        if v.t != I64:
            raise Unsupported("a non-int index")
        i = v.ref
        if not (isinstance(node, ast.Constant) and node.value >= 0):
            neg, wrapped, fixed = self.tmp(), self.tmp(), self.tmp()
            self.emit(f"{neg} = icmp slt i64 {i}, 0")
            self.emit(f"{wrapped} = add i64 {i}, {dim}")
            self.emit(f"{fixed} = select i1 {neg}, i64 {wrapped}, i64 {i}")
            i = fixed
        if self.check:
            out = self.tmp()
            self.emit(f"{out} = icmp uge i64 {i}, {dim}")
            self.fail_if(out, "index")
        return i

    def view(self, base: Val, idx: list[ast.expr]) -> Val:
        """``a[i, lo:hi, :]``: a view (no copy) -- ints pick, slices keep an axis, bounds
        clamped as Python clamps them; steps are left to Numba."""
        t = base.t
        if not isinstance(t, Arr) or len(idx) > t.ndim:
            raise Unsupported("a subarray")
        idx = list(idx) + [ast.Slice() for _ in range(t.ndim - len(idx))]
        starts, dims, strides = [], [], []
        contiguous, seen_slice = t.contiguous, False
        for k, node in enumerate(idx):
            if isinstance(node, ast.Slice):
                if node.step is not None:
                    raise Unsupported("a slice step")
                if seen_slice and (node.lower is not None or node.upper is not None):
                    contiguous = False
                seen_slice = True
                lo = self._slice_bound(node.lower, base.dims[k], "0")
                hi = self._slice_bound(node.upper, base.dims[k], base.dims[k])
                n, empty, length = self.tmp(), self.tmp(), self.tmp()
                self.emit(f"{n} = sub i64 {hi}, {lo}")
                self.emit(f"{empty} = icmp slt i64 {n}, 0")
                self.emit(f"{length} = select i1 {empty}, i64 0, i64 {n}")
                dims.append(length)
                strides.append(base.strides[k])
                start = lo
            else:
                if seen_slice:
                    contiguous = False
                start = self.index(node, base.dims[k])
            starts.append(start)
        return Val(Arr(t.dtype, len(dims), contiguous, t.writeable), ptr=self.address(base, starts),
                   dims=tuple(dims), strides=tuple(strides))

    def _slice_bound(self, node: ast.expr | None, dim: str, default: str) -> str:
        """A slice bound as Python takes it: negative counts from the end, then clamped
        to ``[0, dim]``."""
        if node is None:
            return default
        v = self.int_value(self.x(node))
        neg, wrapped, fixed, lo, clamped, hi, r = (self.tmp() for _ in range(7))
        self.emit(f"{neg} = icmp slt i64 {v}, 0")
        self.emit(f"{wrapped} = add i64 {v}, {dim}")
        self.emit(f"{fixed} = select i1 {neg}, i64 {wrapped}, i64 {v}")
        self.emit(f"{lo} = icmp slt i64 {fixed}, 0")
        self.emit(f"{clamped} = select i1 {lo}, i64 0, i64 {fixed}")
        self.emit(f"{hi} = icmp sgt i64 {clamped}, {dim}")
        self.emit(f"{r} = select i1 {hi}, i64 {dim}, i64 {clamped}")
        return r

    def element(self, e: ast.Subscript, base: Val | None = None) -> tuple[Arr, str]:
        """The address of the element ``e`` names (``a[i, j]``), bounds-checked with checks
        on (Numba's ``boundscheck``); negative indices count from the end, as in Numba."""
        if base is None:
            base = self.x(e.value)
        t = base.t
        if not isinstance(t, Arr):
            raise Unsupported("subscript of a non-array")
        idx = _indices(e)
        if len(idx) != t.ndim or any(isinstance(i, ast.Slice) for i in idx):
            raise Unsupported("a subarray")
        offsets = [self.index(node, base.dims[k]) for k, node in enumerate(idx)]
        if t.contiguous:
            flat = offsets[0]
            for k in range(1, t.ndim):
                flat = self.mul_add(flat, base.dims[k], offsets[k])
            ptr = self.tmp("q")
            self.emit(f"{ptr} = getelementptr {t.mem}, ptr {base.ptr}, i64 {flat}")
            return t, ptr
        return t, self.address(base, offsets)

    def address(self, base: Val, starts: list[str]) -> str:
        """``base``'s data pointer moved by ``starts`` along its axes (through its strides)."""
        offset = "0"
        for start, stride in zip(starts, base.strides):
            offset = self.mul_add(start, stride, offset)
        ptr = self.tmp("q")
        self.emit(f"{ptr} = getelementptr i8, ptr {base.ptr}, i64 {offset}")
        return ptr

    def mul_add(self, a: str, b: str, c: str) -> str:
        """``a * b + c`` in int64 (index arithmetic)."""
        m, r = self.tmp(), self.tmp()
        self.emit(f"{m} = mul i64 {a}, {b}")
        self.emit(f"{r} = add i64 {m}, {c}")
        return r

    def from_mem(self, arr: Arr, ptr: str) -> Val:
        r = self.tmp()
        self.emit(f"{r} = load {arr.mem}, ptr {ptr}")
        if arr.dtype == I32:
            w = self.tmp()
            self.emit(f"{w} = sext i32 {r} to i64")
            return Val(I64, w)
        if arr.dtype == BOOL:
            b = self.tmp()
            self.emit(f"{b} = icmp ne i8 {r}, 0")
            return Val(BOOL, b)
        return Val(arr.dtype, r)

    def to_mem(self, v: Val, arr: Arr) -> str:
        """``v`` as an element of ``arr`` is stored (every store into an array comes here)."""
        if not arr.writeable:
            raise Unsupported("a write into a read-only array")
        if arr.dtype == BOOL:
            r = self.tmp()
            self.emit(f"{r} = zext i1 {v.ref} to i8")
            return r
        return v.ref

    def x_Tuple(self, e: ast.Tuple) -> Val:
        dims = tuple(self.int_value(self.x(el)) for el in e.elts)
        return Val(ShapeT(len(dims)), dims=dims)

    def x_UnaryOp(self, e: ast.UnaryOp) -> Val:
        v = self.x(e.operand)
        if isinstance(e.op, ast.Not):
            return Val(BOOL, self._not(self.truth(v)))
        if isinstance(e.op, ast.UAdd):
            return self.convert(v, I64) if v.t == BOOL else v
        if isinstance(e.op, ast.USub):
            return self.negate(v)
        raise Unsupported("unary ~")

    def negate(self, v: Val) -> Val:
        """``-v`` of a number (the generated source wraps checked negations in helpers)."""
        if v.t == C128:
            re, im = self.parts(v)
            return self.make_complex(self.fop("fneg", re), self.fop("fneg", im))
        if v.t == F64:
            r = self.tmp()
            self.emit(f"{r} = fneg double {v.ref}")
            return Val(F64, r)
        v = self.convert(v, I64)
        r = self.tmp()
        self.emit(f"{r} = sub i64 0, {v.ref}")
        return Val(I64, r)

    def x_BinOp(self, e: ast.BinOp) -> Val:
        if isinstance(e.op, ast.Pow) and isinstance(e.right, ast.Constant) \
                and type(e.right.value) is int:
            return self.static_power(self.x(e.left), e.right.value)
        if (isinstance(e.op, ast.Pow) and isinstance(e.right, ast.UnaryOp)
                and isinstance(e.right.op, ast.USub) and isinstance(e.right.operand, ast.Constant)
                and type(e.right.operand.value) is int):
            return self.static_power(self.x(e.left), -e.right.operand.value)
        return self.binop(e.op, self.x(e.left), self.x(e.right))

    def binop(self, op: ast.operator, a: Val, b: Val) -> Val:
        if isinstance(op, ast.Add) and isinstance(a.t, ShapeT) and isinstance(b.t, ShapeT):
            return Val(ShapeT(a.t.ndim + b.t.ndim), dims=a.dims + b.dims)  # (shapes joined)
        if not (isinstance(a.t, str) and isinstance(b.t, str)):
            raise Unsupported("arithmetic on arrays")
        if isinstance(op, ast.LShift) and self.inlining and I64 == a.t == b.t:
            # (revbench's own code, shifting by a count it knows to lie in 0..62:
            # ``special.tanh``'s power of two)
            r = self.tmp()
            self.emit(f"{r} = shl i64 {a.ref}, {b.ref}")
            return Val(I64, r)
        if isinstance(op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
            ins = {ast.BitAnd: "and", ast.BitOr: "or", ast.BitXor: "xor"}[type(op)]
            if a.t == BOOL and b.t == BOOL:
                r = self.tmp()
                self.emit(f"{r} = {ins} i1 {a.ref}, {b.ref}")
                return Val(BOOL, r)
            if F64 in (a.t, b.t):
                raise Unsupported("bit operation on floats")
            a, b = self.convert(a, I64), self.convert(b, I64)
            r = self.tmp()
            self.emit(f"{r} = {ins} i64 {a.ref}, {b.ref}")
            return Val(I64, r)
        if C128 in (a.t, b.t):
            return self.complex_binop(op, self.convert(a, C128), self.convert(b, C128))
        if isinstance(op, ast.Div):  # true division: floats (Numba raises on a zero divisor)
            a, b = self.convert(a, F64), self.convert(b, F64)
            if not (self.inlining and getattr(self.inlining[-1], "__code__", None)
                    in special.NONZERO_DIVISORS):
                # (a function whose divisors are never zero needs no test: a loop of it
                # vectorises, which one that may leave it cannot)
                zero = self.tmp()
                self.emit(f"{zero} = fcmp oeq double {b.ref}, 0.0")
                self.fail_if(zero, "zerodiv", self.mod.message("division by zero"))
            r = self.tmp()
            self.emit(f"{r} = fdiv double {a.ref}, {b.ref}")
            return Val(F64, r)
        if isinstance(op, ast.Pow):
            if F64 in (a.t, b.t):
                if b.t != F64:  # a float to an int power: Numba multiplies (int_power)
                    return self.int_power(self.convert(a, F64), self.convert(b, I64))
                a, b = self.convert(a, F64), self.convert(b, F64)
                return self.call_math("llvm.pow.f64", a, b)
            raise Unsupported("int ** int")
        kind = F64 if F64 in (a.t, b.t) else I64
        a, b = self.convert(a, kind), self.convert(b, kind)
        r = self.tmp()
        if isinstance(op, (ast.Add, ast.Sub, ast.Mult)):
            ins = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul"}[type(op)]
            self.emit(f"{r} = {'f' + ins if kind == F64 else ins} {kind} {a.ref}, {b.ref}")
            return Val(kind, r)
        if isinstance(op, (ast.FloorDiv, ast.Mod)):
            quotient = isinstance(op, ast.FloorDiv)
            if kind == I64:
                return self.int_divmod(a, b, quotient)
            return self.float_divmod(a, b, quotient)
        raise Unsupported(f"operator {type(op).__name__} on {kind}")

    def int_divmod(self, a: Val, b: Val, quotient: bool) -> Val:
        """Python's floor division and modulo of int64, as Numba computes them
        (``int_divmod_signed``: ``INT64_MIN // -1`` gives 0)."""
        zero = self.tmp()
        self.emit(f"{zero} = icmp eq i64 {b.ref}, 0")
        self.fail_if(zero, "zerodiv", self.mod.message(
            "integer division by zero" if quotient else "integer modulo by zero"))
        fn = "rb_ifloordiv" if quotient else "rb_imod"
        self.mod.declare(fn, runtime_ir.INT_DIVMOD.replace("@rb_fn", f"@{fn}").replace(
            "RESULT", "%q" if quotient else "%r"))
        r = self.tmp()
        self.emit(f"{r} = call i64 @{fn}(i64 {a.ref}, i64 {b.ref})")
        return Val(I64, r)

    def float_divmod(self, a: Val, b: Val, quotient: bool) -> Val:
        """Python's ``//`` and ``%`` of floats, as Numba computes them (``real_divmod``)."""
        zero = self.tmp()
        self.emit(f"{zero} = fcmp oeq double {b.ref}, 0.0")
        self.fail_if(zero, "zerodiv", self.mod.message(
            "division by zero" if quotient else "modulo by zero"))
        self.mod.declare("llvm.floor.f64", "declare double @llvm.floor.f64(double)")
        self.mod.declare("rb_fdivmod", runtime_ir.FLOAT_DIVMOD)
        pmod, q = self.slot("double", "mod"), self.tmp()
        self.emit(f"{q} = call double @rb_fdivmod(double {a.ref}, double {b.ref}, ptr {pmod})")
        if quotient:
            return Val(F64, q)
        m = self.tmp()
        self.emit(f"{m} = load double, ptr {pmod}")
        return Val(F64, m)

    def static_power(self, base: Val, exp: int) -> Val:
        """``x ** n`` for a literal int ``n``: products unrolled as Numba does
        (``static_power_impl``); an int to a literal ``n >= 0`` wraps around."""
        if base.t == C128:
            raise Unsupported("complex power")
        if base.t != F64 and base.t != I64 and base.t != BOOL:
            raise Unsupported("power")
        if base.t != F64:
            if exp < 0:
                raise Unsupported("int ** negative literal")
            return self.int_literal_power(self.convert(base, I64), exp)
        if abs(exp) > 0x10000:
            return self.int_power(base, const(I64, exp))
        invert = exp < 0
        res = self.products(base.ref, abs(exp), "fmul double", _float_text(1.0))
        if invert:
            r = self.tmp()
            self.emit(f"{r} = fdiv double 1.0, {res}")
            res = r
        return Val(F64, res)

    def int_power(self, base: Val, exp: Val) -> Val:
        self.mod.declare("rb_fpowi", runtime_ir.FLOAT_INT_POWER)
        self.mod.declare("llvm.pow.f64", "declare double @llvm.pow.f64(double, double)")
        r = self.tmp()
        self.emit(f"{r} = call double @rb_fpowi(double {base.ref}, i64 {exp.ref})")
        return Val(F64, r)

    def x_BoolOp(self, e: ast.BoolOp) -> Val:
        """``and`` / ``or`` of bools, short-circuiting as Python does."""
        is_and = isinstance(e.op, ast.And)
        end = self.label("bend")
        incoming = []
        for k, operand in enumerate(e.values):
            v = self.x(operand)
            if v.t != BOOL:
                raise Unsupported("and/or of non-bools")
            here = self.current_block()
            if k == len(e.values) - 1:
                incoming.append((v.ref, here))
                self.br(end)
            else:
                nxt = self.label("bnext")
                incoming.append(("false" if is_and else "true", here))
                if is_and:
                    self.cbr(v.ref, nxt, end)
                else:
                    self.cbr(v.ref, end, nxt)
                self.start(nxt)
        self.start(end)
        r = self.tmp()
        self.emit(f"{r} = phi i1 " + ", ".join(f"[{v}, %{b}]" for v, b in incoming))
        return Val(BOOL, r)

    def current_block(self) -> str:
        for line in reversed(self.lines):
            if not line.startswith("  "):
                return line[:-1]
        return "body"

    def x_Compare(self, e: ast.Compare) -> Val:
        """A comparison chain, short-circuiting as Python does (each operand once)."""
        left = self.x(e.left)
        if len(e.ops) == 1:
            return Val(BOOL, self.compare(e.ops[0], left, self.x(e.comparators[0])))
        end = self.label("cend")
        incoming = []
        for k, (op, right_e) in enumerate(zip(e.ops, e.comparators)):
            right = self.x(right_e)
            c = self.compare(op, left, right)
            here = self.current_block()
            if k == len(e.ops) - 1:
                incoming.append((c, here))
                self.br(end)
            else:
                nxt = self.label("cnext")
                incoming.append(("false", here))
                self.cbr(c, nxt, end)
                self.start(nxt)
            left = right
        self.start(end)
        r = self.tmp()
        self.emit(f"{r} = phi i1 " + ", ".join(f"[{v}, %{b}]" for v, b in incoming))
        return Val(BOOL, r)

    def compare(self, op: ast.cmpop, a: Val, b: Val) -> str:
        if isinstance(a.t, ShapeT) and isinstance(b.t, ShapeT) and isinstance(
                op, (ast.Eq, ast.NotEq)):
            return self.compare_shapes(isinstance(op, ast.Eq), a, b)
        if not (isinstance(a.t, str) and isinstance(b.t, str)):
            raise Unsupported("comparison of arrays")
        r = self.tmp()
        if isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)):
            raise Unsupported("is / in")
        if C128 in (a.t, b.t):
            if not isinstance(op, (ast.Eq, ast.NotEq)):
                raise Unsupported("an order of complex numbers")
            (ar, ai), (br, bi) = self.parts(self.convert(a, C128)), self.parts(self.convert(b, C128))
            pred, join = ("oeq", "and") if isinstance(op, ast.Eq) else ("une", "or")
            c1, c2 = self.tmp(), self.tmp()
            self.emit(f"{c1} = fcmp {pred} double {ar}, {br}")
            self.emit(f"{c2} = fcmp {pred} double {ai}, {bi}")
            self.emit(f"{r} = {join} i1 {c1}, {c2}")
            return r
        if a.t == BOOL and b.t == BOOL and isinstance(op, (ast.Eq, ast.NotEq)):
            self.emit(f"{r} = icmp {'eq' if isinstance(op, ast.Eq) else 'ne'} i1 {a.ref}, {b.ref}")
            return r
        if F64 in (a.t, b.t):
            a, b = self.convert(a, F64), self.convert(b, F64)
            pred = {ast.Lt: "olt", ast.LtE: "ole", ast.Gt: "ogt", ast.GtE: "oge",
                    ast.Eq: "oeq", ast.NotEq: "une"}[type(op)]
            self.emit(f"{r} = fcmp {pred} double {a.ref}, {b.ref}")
            return r
        a, b = self.convert(a, I64), self.convert(b, I64)
        pred = {ast.Lt: "slt", ast.LtE: "sle", ast.Gt: "sgt", ast.GtE: "sge",
                ast.Eq: "eq", ast.NotEq: "ne"}[type(op)]
        self.emit(f"{r} = icmp {pred} i64 {a.ref}, {b.ref}")
        return r

    def compare_shapes(self, equal: bool, a: Val, b: Val) -> str:
        """``a.shape == b.shape`` (``!=``): tuples of the same length, entry by entry."""
        if len(a.dims) != len(b.dims):
            return "false" if equal else "true"
        same = "true"
        for x, y in zip(a.dims, b.dims):
            c, both = self.tmp(), self.tmp()
            self.emit(f"{c} = icmp eq i64 {x}, {y}")
            self.emit(f"{both} = and i1 {same}, {c}")
            same = both
        return same if equal else self._not(same)

    def x_IfExp(self, e: ast.IfExp) -> Val:
        cond = self.truth(self.x(e.test))
        yes, no, end = self.label("ythen"), self.label("yelse"), self.label("yend")
        self.cbr(cond, yes, no)
        self.start(yes)
        a = self.x(e.body)
        a_end = self.current_block()
        a_lines = len(self.lines)
        self.br(end)
        self.start(no)
        b = self.x(e.orelse)
        if not (isinstance(a.t, str) and isinstance(b.t, str)):
            raise Unsupported("conditional arrays")
        kind = a.t if a.t == b.t else _common(a.t, b.t)
        b = self.convert(b, kind)
        b_end = self.current_block()
        self.br(end)
        if a.t != kind:  # convert on the first branch, before its jump
            saved = self.lines[a_lines:]
            del self.lines[a_lines:]
            a = self.convert(a, kind)
            self.lines += saved
        self.start(end)
        r = self.tmp()
        self.emit(f"{r} = phi {kind} [{a.ref}, %{a_end}], [{b.ref}, %{b_end}]")
        return Val(kind, r)

    # -- calls ----------------------------------------------------------------
    def x_Call(self, e: ast.Call) -> Val:
        f = e.func
        if isinstance(f, ast.Attribute):
            if isinstance(f.value, ast.Name) and f.value.id in _MODULES:
                return self.numpy_call(_MODULES[f.value.id], f.attr, e)
            return self.method(self.x(f.value), f.attr, e)
        if not isinstance(f, ast.Name) or e.keywords:
            raise Unsupported("call")
        name = f.id
        if name in _COMPLEX_HELPERS and len(e.args) == 1 and not e.keywords:
            return self.complex_function(*_COMPLEX_HELPERS[name],
                                         self.convert(self.x(e.args[0]), C128))
        if name == "complex" and len(e.args) == 2:  # (revbench's own inlined code)
            re, im = (self.convert(self.x(a), F64) for a in e.args)
            return self.make_complex(re.ref, im.ref)
        if name == "complex" and len(e.args) == 1:
            return self.convert(self.x(e.args[0]), C128)
        if name not in self.vars and self.python_callee(name) is not None:
            return self.inline_call(self.python_callee(name), e.args)
        if name == "_rb_range_len" and len(e.args) == 3:  # (runtime.range_len)
            n = self.range_length(e)
            huge = self.tmp()
            self.emit(f"{huge} = icmp slt i64 {n.ref}, 0")  # (more than INT64_MAX elements)
            self.fail_if(huge, "value", self.mod.message(runtime.RANGE_TOO_LONG))
            return n
        if name == "len" and e.args and isinstance(e.args[0], ast.Call):
            args = []
        else:
            args = [self.x(a) for a in e.args]
        if name == "_rb_interrupted" and not args:
            return self.poll()
        if name == "_rb_float_shift":
            return self.float_shift(args)
        if name == "_rb_matmul_update":
            return self.matmul_update(args)
        if name == "_rb_matmul_failed":
            return self.matmul_failed(args)
        if name in _INT_HELPERS:
            return self.int_helper(name, args)
        if name in _WRAP_HELPERS:
            return self.wrap_helper(name, args, e.args)
        if name == "_rb_fpowi" and len(args) == 2:  # (runtime.float_int_power)
            return self.int_power(self.convert(args[0], F64), self.convert(args[1], I64))
        if name == "abs" and len(args) == 1:
            v = args[0]
            if v.t == C128:  # (the C library's hypot, as Python's abs and NumPy's)
                return self.call_math("hypot", *(Val(F64, p) for p in self.parts(v)))
            if v.t == F64:
                return self.call_math("llvm.fabs.f64", v)
            return self._iabs(self.convert(v, I64))
        if name in ("min", "max") and len(args) == 2:
            return self.minmax(name, *args)
        if name == "float" and len(args) == 1:
            return self.convert(args[0], F64)
        if name == "bool" and len(args) == 1:
            return Val(BOOL, self.truth(args[0]))
        if name == "len" and len(args) == 1 and isinstance(args[0].t, Arr):
            return Val(I64, args[0].dims[0])
        if name == "int" and len(args) == 1 and args[0].t in (I64, BOOL):
            return self.convert(args[0], I64)
        if name == "int" and len(args) == 1 and args[0].t == F64 and self.inlining:
            # (revbench's own code, of a float it knows to be a small integer: complex_pow)
            r = self.tmp()
            self.emit(f"{r} = fptosi double {args[0].ref} to i64")
            return Val(I64, r)
        if (name == "len" and len(e.args) == 1 and isinstance(e.args[0], ast.Call)
                and isinstance(e.args[0].func, ast.Name) and e.args[0].func.id == "range"):
            return self.range_length(e.args[0])
        if name.startswith("_rb_call_"):
            raise Unsupported("a kernel call in an expression")
        raise Unsupported(f"call of {name}")

    def method(self, v: Val, name: str, e: ast.Call) -> Val:
        """An array's ``copy()``, ``reshape(-1)``, ``ravel()`` (of a contiguous array: a
        view, as in NumPy) and ``fill(value)``."""
        if not isinstance(v.t, Arr) or e.keywords:
            raise Unsupported(f"method {name}")
        if name == "copy" and not e.args:
            return self.copy(v)
        if (name == "ravel" and not e.args) or (
                name == "reshape" and len(e.args) == 1 and isinstance(e.args[0], ast.UnaryOp)
                and isinstance(e.args[0].op, ast.USub) and isinstance(e.args[0].operand, ast.Constant)
                and e.args[0].operand.value == 1):
            if not v.t.contiguous:
                raise Unsupported("reshape of a strided array")
            return Val(Arr(v.t.dtype, 1, True, v.t.writeable), ptr=v.ptr, dims=(self.count(v.dims),),
                       strides=(str(v.t.item_bytes),))
        if name == "fill" and len(e.args) == 1:
            value = self.convert(self.x(e.args[0]), v.t.dtype)
            self.each_element(v, None, lambda ptr, _: self.emit(
                f"store {v.t.mem} {self.to_mem(value, v.t)}, ptr {ptr}"))
            return const(BOOL, False)  # (None in Python: a statement's value, unused)
        raise Unsupported(f"method {name}")

    def count(self, dims: tuple[str, ...]) -> str:
        n = "1"
        for d in dims:
            m = self.tmp()
            self.emit(f"{m} = mul i64 {n}, {d}")
            n = m
        return n

    def each_element(self, target: Val, source: Val | None,
                     body: Callable[[str, str | None], None]) -> None:
        """Loops over every element of ``target`` (and the same element of ``source``,
        whose shape must be the same: NumPy's error otherwise), calling ``body`` with the
        two elements' addresses."""
        t = target.t
        if source is not None:
            if source.t.ndim != t.ndim:
                raise Unsupported("broadcasting")
            for a, b in zip(target.dims, source.dims):
                bad = self.tmp()
                self.emit(f"{bad} = icmp ne i64 {a}, {b}")
                self.fail_if(bad, "value", self.mod.message(
                    "could not broadcast input array into an array of another shape"))
        if t.contiguous and (source is None or source.t.contiguous):
            # one flat loop over both (their elements in the same order): LLVM vectorises
            # it, or makes a memset of a fill, as Numba's loops over C-contiguous arrays
            self._each_flat(target, source, body)
            return
        counters = []
        for k in range(t.ndim):
            c = self.slot("i64", "c")
            self.emit(f"store i64 0, ptr {c}")
            head, body_l, end = self.label("eh"), self.label("eb"), self.label("ee")
            self.br(head)
            self.start(head)
            i = self.tmp()
            self.emit(f"{i} = load i64, ptr {c}")
            go = self.tmp()
            self.emit(f"{go} = icmp slt i64 {i}, {target.dims[k]}")
            self.cbr(go, body_l, end)
            self.start(body_l)
            counters.append((c, i, head, end))
        index = [i for _, i, _, _ in counters]
        body(self.address(target, index), self.address(source, index) if source else None)
        for c, i, head, end in reversed(counters):
            n = self.tmp()
            self.emit(f"{n} = add i64 {i}, 1")
            self.emit(f"store i64 {n}, ptr {c}")
            self.br(head)
            self.start(end)

    def _each_flat(self, target: Val, source: Val | None,
                   body: Callable[[str, str | None], None]) -> None:
        def element(i: str) -> None:
            dst = self.tmp("q")
            self.emit(f"{dst} = getelementptr {target.t.mem}, ptr {target.ptr}, i64 {i}")
            src = None
            if source is not None:
                src = self.tmp("q")
                self.emit(f"{src} = getelementptr {source.t.mem}, ptr {source.ptr}, i64 {i}")
            body(dst, src)

        self._count_loop("0", self.count(target.dims), element)

    def range_length(self, e: ast.Call) -> Val:
        """``len(range(start, stop, step))``, as Python counts it."""
        if e.keywords or not 1 <= len(e.args) <= 3:
            raise Unsupported("range")
        b = [self.int_value(self.x(a)) for a in e.args]
        start, stop, step = ("0", b[0], "1") if len(b) == 1 else (
            b[0], b[1], b[2] if len(b) == 3 else "1")
        zero = self.tmp()
        self.emit(f"{zero} = icmp eq i64 {step}, 0")
        self.fail_if(zero, "value", self.mod.message("range() arg 3 must not be zero"))
        self.mod.declare("rb_range_len", runtime_ir.RANGE_LEN)
        r = self.tmp()
        self.emit(f"{r} = call i64 @rb_range_len(i64 {start}, i64 {stop}, i64 {step})")
        return Val(I64, r)

    def numpy_call(self, owner: str, name: str, e: ast.Call) -> Val:
        if name in ("empty", "zeros"):
            return self.allocate(e, zero=name == "zeros")
        if name == "ones":  # (revbench's own code: Multistage's storage)
            ones = self.allocate(e, zero=False)
            self.store_into(ones, const(I64, 1))
            return ones
        if name in ("empty_like", "zeros_like") and len(e.args) == 1 and not e.keywords:
            like = self.x(e.args[0])
            if not isinstance(like.t, Arr):
                raise Unsupported(f"{name} of a non-array")
            return self.new_array(Arr(like.t.dtype, like.t.ndim, True), like.dims,
                                  zero=name == "zeros_like")
        if e.keywords:
            raise Unsupported(f"{name} with keywords")
        args = [self.x(a) for a in e.args]
        if name == "float64" and len(args) == 1:
            return self.convert(args[0], F64)
        if name == "int64" and len(args) == 1 and args[0].t in (I64, BOOL):
            return self.convert(args[0], I64)
        if owner == "_rb_math" and name in ("floor", "ceil") and len(args) == 1:
            # an int, as in Python 3 and Numba (which rounds, then converts with fptosi)
            if args[0].t in (I64, BOOL):
                return self.convert(args[0], I64)
            rounded, r = self.call_math(f"llvm.{name}.f64", self.convert(args[0], F64)), self.tmp()
            self.emit(f"{r} = fptosi double {rounded.ref} to i64")
            return Val(I64, r)
        if name in ("add", "subtract") and len(args) == 3 and ast.dump(e.args[0]) == ast.dump(
                e.args[2]) and isinstance(args[0].t, Arr):
            # ``np.add(a, b, a)``: a += b, element by element (same shapes, as NumPy's
            # out= demands of an operand it writes)
            op = ast.Add() if name == "add" else ast.Sub()
            self.store_into(args[0], args[1], op)
            return args[0]
        if name in ("real", "imag", "conj", "conjugate") and len(args) == 1 and args[0].t == C128:
            re, im = self.parts(args[0])
            if name == "real":
                return Val(F64, re)
            if name == "imag":
                return Val(F64, im)
            return self.make_complex(re, self.fop("fneg", im))
        if name in ("conj", "conjugate") and len(args) == 1 and args[0].t == F64:
            return args[0]
        if name in _COMPLEX_C and len(args) == 1 and args[0].t == C128:
            return self.complex_function(*_COMPLEX_C[name], args[0])
        if name in ("real", "imag") and len(args) == 1 and args[0].t == F64:
            return args[0] if name == "real" else const(F64, 0.0)  # (of a real number)
        # (math's and NumPy's functions of a float are the same C functions in Numba)
        fn = _c_functions().get(f"{owner}.{name}") or _c_functions().get(f"_rb_np.{name}")
        if fn is not None and len(args) == 1:
            v = self.convert(args[0], F64)
            return self.call_math(f"llvm.{fn}.f64" if fn in _INTRINSICS else fn, v)
        if owner == "_rb_math" and name == "copysign" and len(args) == 2 and self.inlining:
            self.mod.declare("llvm.copysign.f64",
                             "declare double @llvm.copysign.f64(double, double)")
            return self.call_math("llvm.copysign.f64", *(self.convert(a, F64) for a in args))
        if name in _LIBM2 and len(args) == 2:
            a, b = self.convert(args[0], F64), self.convert(args[1], F64)
            return self.call_math(_LIBM2[name], a, b)
        raise Unsupported(f"numpy/math {name}")

    def call_math(self, fn: str, *args: Val) -> Val:
        params = ", ".join("double" for _ in args)
        self.mod.declare(fn, f"declare double @{fn}({params})")
        r = self.tmp()
        self.emit(f"{r} = call double @{fn}({', '.join('double ' + a.ref for a in args)})")
        return Val(F64, r)

    def minmax(self, name: str, a: Val, b: Val) -> Val:
        """Python's two-argument ``min``/``max`` as Numba's ``do_minmax``: ``b`` if
        ``b < a`` (``b > a``), else ``a`` -- a nan second argument loses."""
        if not (isinstance(a.t, str) and isinstance(b.t, str)):
            raise Unsupported("min/max of arrays")
        kind = a.t if a.t == b.t else _common(a.t, b.t)
        if kind == C128:
            raise Unsupported("min/max of complex numbers")
        if kind == BOOL:
            kind = I64  # (Numba unifies bools to... leave it to Numba)
            raise Unsupported("min/max of bools")
        a, b = self.convert(a, kind), self.convert(b, kind)
        c = self.compare(ast.Lt() if name == "min" else ast.Gt(), b, a)
        r = self.tmp()
        self.emit(f"{r} = select i1 {c}, {kind} {b.ref}, {kind} {a.ref}")
        return Val(kind, r)

    def float_shift(self, args: list[Val]) -> Val:
        """``runtime.float_shift``: ``old +/- value``, then the finiteness test."""
        if len(args) != 5 or args[0].t not in (F64, C128):
            raise Unsupported("float shift")
        kind = args[0].t
        old, value = args[0], self.convert(args[1], kind)
        sub_node = args[2]
        if sub_node.ref not in ("true", "false"):
            raise Unsupported("float shift direction")
        k = self.convert(args[4], I64)
        self.mod.declare("llvm.fabs.f64", "declare double @llvm.fabs.f64(double)")
        if kind == C128:
            new_v = self.complex_binop(ast.Sub() if sub_node.ref == "true" else ast.Add(),
                                       old, value)
            new = new_v.ref
        else:
            new = self.tmp()
            self.emit(f"{new} = {'fsub' if sub_node.ref == 'true' else 'fadd'} double "
                      f"{old.ref}, {value.ref}")
            new_v = Val(F64, new)
        finite = self._finite_value(new_v)
        bad, ok = self.label("shiftbad"), self.label("shiftok")
        self.emit(f"br i1 {finite}, label %{ok}, label %{bad}, !prof !1")
        self.start(bad)
        v_fin = self._finite_value(value)
        vbad, vok = self.label("valbad"), self.label("valok")
        self.cbr(v_fin, vok, vbad)
        self.start(vbad)
        self.fail("check", 0, (const(I64, 0), value), check_no=k, module=args[3])
        self.start(vok)
        o_fin = self._finite_value(old)
        obad = self.label("oldbad")
        self.cbr(o_fin, obad, ok)
        self.start(obad)
        k1 = self.tmp()
        self.emit(f"{k1} = add i64 {k.ref}, 1")
        self.fail("check", 0, (old, new_v), check_no=Val(I64, k1), module=args[3])
        self.start(ok)
        return new_v

    # -- C += op(A) @ op(B): the routine every backend calls (backends/blas.py) ---------
    def byte_strides(self, v: Val) -> tuple[str, ...]:
        """An array's strides in bytes (a contiguous one's from its shape)."""
        if v.strides:
            return v.strides
        out, acc = [], str(v.t.item_bytes)
        for d in reversed(v.dims):
            out.append(acc)
            nxt = self.tmp()
            self.emit(f"{nxt} = mul i64 {acc}, {d}")
            acc = nxt
        return tuple(reversed(out))

    def matmul_geometry(self, C: Val, A: Val, B: Val, ta: bool, tb: bool) -> tuple[str, ...]:
        """``(m, n, k, cs0, cs1, as0, as1, bs0, bs1)`` as :func:`blas.geometry` gives them
        (the statement's shapes were asserted before it)."""
        dims = (C.t.ndim, A.t.ndim, B.t.ndim)
        (cs, as_, bs) = (self.byte_strides(v) for v in (C, A, B))
        if dims == (2, 1, 1):  # (np.outer: a column times a row)
            return (A.dims[0], B.dims[0], "1", *cs, as_[0], "0", "0", bs[0])
        if A.t.ndim == 2:
            m, k, as0, as1 = (A.dims[1], A.dims[0], as_[1], as_[0]) if ta else (*A.dims, *as_)
        else:
            m, k, as0, as1 = "1", A.dims[0], "0", as_[0]
        if B.t.ndim == 2:
            n, bs0, bs1 = (B.dims[0], bs[1], bs[0]) if tb else (B.dims[1], *bs)
        else:
            n, bs0, bs1 = "1", bs[0], "0"
        if dims == (2, 2, 2):
            c0, c1 = cs
        elif dims == (1, 2, 1):
            c0, c1 = cs[0], "0"
        elif dims == (1, 1, 2):
            c0, c1 = "0", cs[0]
        else:
            raise Unsupported(f"a matrix product of ranks {dims}")
        return (m, n, k, c0, c1, as0, as1, bs0, bs1)

    def _matmul_args(self, args: list[Val], count: int) -> tuple[Val, Val, Val, bool, bool, bool]:
        if len(args) != count or any(not isinstance(v.t, Arr) or v.t.dtype != F64
                                     for v in args[:3]):
            raise Unsupported("matmul update")
        flags = [v.ref for v in args[3:6]]
        if any(f not in ("true", "false") for f in flags):
            raise Unsupported("matmul update flags")
        return (*args[:3], *(f == "true" for f in flags))

    def call_matmul(self, C: Val, A: Val, B: Val, g: tuple[str, ...], subtract: bool,
                    check: bool) -> str:
        """One call of ``rb_matmul`` (:mod:`revbench.backends.blas`, linked by name)."""
        m, n, k, cs0, cs1, as0, as1, bs0, bs1 = g
        self.mod.declare("rb_matmul", "declare i64 @rb_matmul(ptr, i64, i64, ptr, i64, i64, "
                                      "ptr, i64, i64, i64, i64, i64, i64, i64)")
        r = self.tmp("mm")
        self.emit(f"{r} = call i64 @rb_matmul(ptr {C.ptr}, i64 {cs0}, i64 {cs1}, ptr {A.ptr}, "
                  f"i64 {as0}, i64 {as1}, ptr {B.ptr}, i64 {bs0}, i64 {bs1}, i64 {m}, i64 {n}, "
                  f"i64 {k}, i64 {int(subtract)}, i64 {int(check)})")
        oom = self.tmp()
        self.emit(f"{oom} = icmp eq i64 {r}, -2")
        self.fail_if(oom, "value", self.mod.message("matmul_update: no memory for the product"))
        return r

    def matmul_update(self, args: list[Val]) -> Val:
        """``blas.matmul_update(C, A, B, trans_a, trans_b, subtract, check)``."""
        C, A, B, ta, tb, sub = self._matmul_args(args, 7)
        if args[6].ref not in ("true", "false"):
            raise Unsupported("matmul update check")
        g = self.matmul_geometry(C, A, B, ta, tb)
        return Val(I64, self.call_matmul(C, A, B, g, sub, args[6].ref == "true"))

    def matmul_failed(self, args: list[Val]) -> Val:
        """``blas.matmul_failed(C, A, B, trans_a, trans_b, subtract, index, module, k)``: the
        product again, into scratch memory filled with -0.0 (so it holds the product's bits),
        then, from element ``index`` on, what a checked float ``+=`` of each element does."""
        C, A, B, ta, tb, sub = self._matmul_args(args, 9)
        index, module, k = self.convert(args[6], I64), args[7], self.convert(args[8], I64)
        m, n, kk, cs0, cs1, *rest = self.matmul_geometry(C, A, B, ta, tb)
        P = self.new_array(Arr(F64, 2, True), (m, n), zero=False)
        total = self.count((m, n))
        minus_zero = _float_text(-0.0)

        def fill(f: str) -> None:
            q = self.tmp("q")
            self.emit(f"{q} = getelementptr double, ptr {P.ptr}, i64 {f}")
            self.emit(f"store double {minus_zero}, ptr {q}")

        self._count_loop("0", total, fill)
        row = self.tmp()
        self.emit(f"{row} = mul i64 {n}, 8")
        self.call_matmul(P, A, B, (m, n, kk, row, "8", *rest), False, False)
        self.mod.declare("llvm.fabs.f64", "declare double @llvm.fabs.f64(double)")

        def element(f: str) -> None:
            i, j, off0, off1, off, addr, q = (self.tmp() for _ in range(7))
            self.emit(f"{i} = sdiv i64 {f}, {n}")
            self.emit(f"{j} = srem i64 {f}, {n}")
            self.emit(f"{off0} = mul i64 {i}, {cs0}")
            self.emit(f"{off1} = mul i64 {j}, {cs1}")
            self.emit(f"{off} = add i64 {off0}, {off1}")
            self.emit(f"{addr} = getelementptr i8, ptr {C.ptr}, i64 {off}")
            self.emit(f"{q} = getelementptr double, ptr {P.ptr}, i64 {f}")
            old, value, new = Val(F64, self.tmp()), Val(F64, self.tmp()), Val(F64, self.tmp())
            self.emit(f"{old.ref} = load double, ptr {addr}, align 1")
            self.emit(f"{value.ref} = load double, ptr {q}")
            self.emit(f"{new.ref} = {'fsub' if sub else 'fadd'} double {old.ref}, {value.ref}")
            bad, store = self.label("mmbad"), self.label("mmstore")
            self.cbr(self._finite(new.ref), store, bad)
            self.start(bad)
            vbad, vok = self.label("mmval"), self.label("mmold")
            self.cbr(self._finite(value.ref), vok, vbad)
            self.start(vbad)
            self.fail("check", 0, (const(I64, 0), value), check_no=k, module=module)
            self.start(vok)
            obad = self.label("mmover")
            self.cbr(self._finite(old.ref), obad, store)
            self.start(obad)
            k1 = self.tmp()
            self.emit(f"{k1} = add i64 {k.ref}, 1")
            self.fail("check", 0, (old, new), check_no=Val(I64, k1), module=module)
            self.start(store)
            self.emit(f"store double {new.ref}, ptr {addr}, align 1")

        self._count_loop(index.ref, total, element)
        return const(I64, 0)

    def _count_loop(self, first: str, stop: str, body: Callable[[str], None]) -> None:
        """``for f in range(first, stop): body(f)``."""
        c = self.slot("i64", "c")
        self.emit(f"store i64 {first}, ptr {c}")
        head, body_l, end = self.label("ch"), self.label("cb"), self.label("ce")
        self.br(head)
        self.start(head)
        f, go = self.tmp(), self.tmp()
        self.emit(f"{f} = load i64, ptr {c}")
        self.emit(f"{go} = icmp slt i64 {f}, {stop}")
        self.cbr(go, body_l, end)
        self.start(body_l)
        body(f)
        nxt = self.tmp()
        self.emit(f"{nxt} = add i64 {f}, 1")
        self.emit(f"store i64 {nxt}, ptr {c}")
        self.br(head)
        self.start(end)

    def _finite_value(self, v: Val) -> str:
        """Whether a float, or both parts of a complex number, are finite."""
        if v.t != C128:
            return self._finite(v.ref)
        re, im = self.parts(v)
        a, b, both = self._finite(re), self._finite(im), self.tmp()
        self.emit(f"{both} = and i1 {a}, {b}")
        return both

    def _finite(self, ref: str) -> str:
        a, c = self.tmp(), self.tmp()
        self.emit(f"{a} = call double @llvm.fabs.f64(double {ref})")
        self.emit(f"{c} = fcmp olt double {a}, 0x7FF0000000000000")
        return c

    def int_helper(self, name: str, args: list[Val]) -> Val:
        """The checked int64 operations (``runtime.int_add`` ...): the exact result, or
        check ``k`` fails with the operands."""
        n = _INT_HELPERS[name]
        if len(args) != n + 2:
            raise Unsupported(name)
        ops = [self.convert(a, I64) for a in args[:n]]
        k = self.convert(args[n + 1], I64)
        module = args[n]
        if name in ("_rb_iadd", "_rb_isub", "_rb_imul"):
            op = {"_rb_iadd": "sadd", "_rb_isub": "ssub", "_rb_imul": "smul"}[name]
            intr = f"llvm.{op}.with.overflow.i64"
            self.mod.declare(intr, f"declare {{i64, i1}} @{intr}(i64, i64)")
            pair, r, o = self.tmp(), self.tmp(), self.tmp()
            self.emit(f"{pair} = call {{i64, i1}} @{intr}(i64 {ops[0].ref}, i64 {ops[1].ref})")
            self.emit(f"{r} = extractvalue {{i64, i1}} {pair}, 0")
            self.emit(f"{o} = extractvalue {{i64, i1}} {pair}, 1")
            self.fail_if(o, "check", 0, tuple(ops), check_no=k, module=module)
            return Val(I64, r)
        if name in ("_rb_ineg", "_rb_iabs"):
            a = ops[0]
            is_min = self.tmp()
            self.emit(f"{is_min} = icmp eq i64 {a.ref}, {_INT64_MIN}")
            self.fail_if(is_min, "check", 0, (a, a), check_no=k, module=module)
            if name == "_rb_ineg":
                r = self.tmp()
                self.emit(f"{r} = sub i64 0, {a.ref}")
                return Val(I64, r)
            return self._iabs(a)
        if name == "_rb_ifloordiv":
            a, b = ops
            m1, mn, both = self.tmp(), self.tmp(), self.tmp()
            self.emit(f"{m1} = icmp eq i64 {b.ref}, -1")
            self.emit(f"{mn} = icmp eq i64 {a.ref}, {_INT64_MIN}")
            self.emit(f"{both} = and i1 {m1}, {mn}")
            self.fail_if(both, "check", 0, (a, b), check_no=k, module=module)
            return self.int_divmod(a, b, True)
        if name == "_rb_ipow":
            self.mod.declare("llvm.smul.with.overflow.i64",
                             "declare {i64, i1} @llvm.smul.with.overflow.i64(i64, i64)")
            self.mod.declare("rb_ipow", runtime_ir.CHECKED_INT_POWER)
            a, b = ops
            flag, r, bad = self.slot("i1", "f"), self.tmp(), self.tmp()
            self.emit(f"{r} = call i64 @rb_ipow(i64 {a.ref}, i64 {b.ref}, ptr {flag})")
            self.emit(f"{bad} = load i1, ptr {flag}")
            self.fail_if(bad, "check", 0, (a, b), check_no=k, module=module)
            return Val(I64, r)
        raise Unsupported(name)

    def wrap_helper(self, name: str, args: list[Val], nodes: list[ast.expr]) -> Val:
        """The unchecked int64 operations (``runtime.int_wadd`` ...): wrapping around."""
        if len(args) != _WRAP_HELPERS[name]:
            raise Unsupported(name)
        ops = [self.convert(a, I64) for a in args]
        if name == "_rb_wneg":
            r = self.tmp()
            self.emit(f"{r} = sub i64 0, {ops[0].ref}")
            return Val(I64, r)
        if name == "_rb_wabs":
            return self._iabs(ops[0])
        if name == "_rb_wpow":
            n = nodes[1]
            if not (isinstance(n, ast.Constant) and type(n.value) is int and n.value >= 0):
                raise Unsupported("int ** variable")
            return self.int_literal_power(ops[0], n.value)
        ins = {"_rb_wadd": "add", "_rb_wsub": "sub", "_rb_wmul": "mul"}[name]
        r = self.tmp()
        self.emit(f"{r} = {ins} i64 {ops[0].ref}, {ops[1].ref}")
        return Val(I64, r)

    def int_literal_power(self, base: Val, n: int) -> Val:
        """``base ** n`` of an int64 for a literal ``n >= 0``: square and multiply, each
        product wrapping around (``runtime.int_wpow``: the exact power modulo 2**64)."""
        return Val(I64, self.products(base.ref, n, "mul i64", "1"))

    def products(self, base: str, n: int, mul: str, one: str) -> str:
        """``base ** n`` for a literal ``n >= 0`` by square and multiply from ``one``, each
        product the instruction ``mul`` (``fmul double``, ``mul i64``): the order of
        products Numba's ``static_power`` and ``int_power`` make, so the same bits."""
        result, k = one, n
        while k:
            if k & 1:
                r = self.tmp()
                self.emit(f"{r} = {mul} {result}, {base}")
                result = r
            k >>= 1
            if k:
                sq = self.tmp()
                self.emit(f"{sq} = {mul} {base}, {base}")
                base = sq
        return result

    def _iabs(self, a: Val) -> Val:
        neg, n, r = self.tmp(), self.tmp(), self.tmp()
        self.emit(f"{neg} = icmp slt i64 {a.ref}, 0")
        self.emit(f"{n} = sub i64 0, {a.ref}")
        self.emit(f"{r} = select i1 {neg}, i64 {n}, i64 {a.ref}")
        return Val(I64, r)

    def poll(self) -> Val:
        """``runtime.interrupted``: every POLL_EVERY-th poll asks CPython whether Ctrl-C
        was pressed (only while this thread holds the GIL), as the Numba backend does."""
        self.mod.declare("rb_poll", runtime_ir.POLL.replace("EVERY", str(runtime.POLL_EVERY - 1)))
        r = self.tmp()
        self.emit(f"{r} = call i1 @rb_poll()")
        return Val(BOOL, r)

    def allocate(self, e: ast.Call, zero: bool) -> Val:
        kw = {k.arg: k.value for k in e.keywords}
        if not 1 <= len(e.args) <= 2 or set(kw) - {"dtype"} or len(e.args) + len(kw) > 2:
            raise Unsupported("allocation")
        dt = kw.get("dtype", e.args[1] if len(e.args) == 2 else None)
        if dt is None:
            dtype = F64
        elif (isinstance(dt, ast.Attribute) and isinstance(dt.value, ast.Name)
                and _MODULES.get(dt.value.id) == "_rb_np" and dt.attr in _DTYPES):
            dtype = _DTYPES[dt.attr]
        else:
            d = self.x(dt)  # (``a.dtype``)
            if not isinstance(d.t, DTypeT):
                raise Unsupported("dtype")
            dtype = d.t.dtype
        shape = self.x(e.args[0])
        if isinstance(shape.t, str):
            shape = Val(ShapeT(1), dims=(self.int_value(shape),))
        if not isinstance(shape.t, ShapeT):
            raise Unsupported("shape")
        return self.new_array(Arr(dtype, shape.t.ndim, True), shape.dims, zero)

    def new_array(self, t: Arr, dims: tuple[str, ...], zero: bool) -> Val:
        count = "1"
        for d in dims:
            neg = self.tmp()
            self.emit(f"{neg} = icmp slt i64 {d}, 0")
            self.fail_if(neg, "value", self.mod.message("negative dimensions not allowed"))
            c = self.tmp()
            self.emit(f"{c} = mul i64 {count}, {d}")
            count = c
        nbytes, p = self.tmp(), self.tmp("arr")
        self.emit(f"{nbytes} = mul i64 {count}, {t.item_bytes}")
        self.emit(f"{p} = call ptr @rb_alloc(ptr %arena, i64 {nbytes})")
        isnull = self.tmp()
        self.emit(f"{isnull} = icmp eq ptr {p}, null")
        self.fail_if(isnull, "value", self.mod.message("out of memory"))
        if zero:
            self.emit(f"call void @llvm.memset.p0.i64(ptr {p}, i8 0, i64 {nbytes}, i1 false)")
        strides, acc = [], str(t.item_bytes)
        for d in reversed(dims):
            strides.append(acc)
            s = self.tmp()
            self.emit(f"{s} = mul i64 {acc}, {d}")
            acc = s
        return Val(t, ptr=p, dims=tuple(dims), strides=tuple(reversed(strides)))

    def copy(self, v: Val) -> Val:
        """``a.copy()``: a new C-contiguous array with ``a``'s elements."""
        if not isinstance(v.t, Arr):
            raise Unsupported("copy of a non-array")
        new = self.new_array(Arr(v.t.dtype, v.t.ndim, True), v.dims, zero=False)
        mem = v.t.mem

        def move(dst: str, src: str | None) -> None:
            r = self.tmp()
            self.emit(f"{r} = load {mem}, ptr {src}")
            self.emit(f"store {mem} {r}, ptr {dst}")
        self.each_element(new, v, move)
        return new

    def call_kernel(self, e: ast.Call) -> list[Val]:
        """``a, b = _rb_call_g_<key>(a, b, atol, rtol)``: the callee lowered into this
        module; scalars passed through slots, arrays by pointer, a failure passed on."""
        if e.keywords:
            raise Unsupported("keywords")
        callee = self.k.resolve(e.func.id)
        if callee is None:
            raise Unsupported(f"callee {e.func.id}")
        args = [self.x(a) for a in e.args]
        types = tuple(a.t for a in args)
        if any(isinstance(t, ShapeT) for t in types):
            raise Unsupported("a shape argument")
        name, returns = self.mod.kernel(callee, types)
        if returns == "value":
            raise Unsupported("a call of a function that returns a value")
        call_args, slots = ["ptr %err", f"ptr {self.slot('i64', 'ret')}"], []
        for a in args:
            if isinstance(a.t, Arr):
                call_args.append(f"ptr {a.ptr}")
                call_args += [f"i64 {d}" for d in (*a.dims, *a.strides)]
                slots.append(None)
            else:
                s = self.slot(C128 if a.t == C128 else "i64", "arg")
                if a.t == BOOL:
                    w = self.tmp()
                    self.emit(f"{w} = zext i1 {a.ref} to i64")
                    self.emit(f"store i64 {w}, ptr {s}")
                else:
                    self.emit(f"store {a.t} {a.ref}, ptr {s}")
                call_args.append(f"ptr {s}")
                slots.append(s)
        st = self.tmp()
        self.emit(f"{st} = call i32 @{name}({', '.join(call_args)})")
        failed = self.tmp()
        self.emit(f"{failed} = icmp ne i32 {st}, 0")
        bad, ok = self.label("callbad"), self.label("callok")
        self.emit(f"br i1 {failed}, label %{bad}, label %{ok}, !prof !0")
        self.start(bad)
        self.emit(f"store i32 {st}, ptr %status")
        self.br("exit")
        self.start(ok)
        out = []
        for j in returns:
            a = args[j]
            if isinstance(a.t, Arr):
                out.append(a)
            elif a.t == BOOL:
                w, b = self.tmp(), self.tmp()
                self.emit(f"{w} = load i64, ptr {slots[j]}")
                self.emit(f"{b} = trunc i64 {w} to i1")
                out.append(Val(BOOL, b))
            else:
                r = self.tmp()
                self.emit(f"{r} = load {a.t}, ptr {slots[j]}")
                out.append(Val(a.t, r))
        return out

    # -- complex numbers -------------------------------------------------------
    # Python's arithmetic (CPython's, which Numba and NumPy's multiplication follow): a real
    # operand is made complex first (imaginary part +0.0), then ``+ -`` are the parts'
    # and ``*`` and ``/`` CPython's formulas; the functions are the C library's, as NumPy
    # calls them (``backends/libm.py``, docs/language.md section 9).
    def parts(self, v: Val) -> tuple[str, str]:
        if v.ref.startswith("{"):  # a constant
            re, im = (p.split()[-1] for p in v.ref.strip("{} ").split(","))
            return re, im
        re, im = self.tmp(), self.tmp()
        self.emit(f"{re} = extractvalue {C128} {v.ref}, 0")
        self.emit(f"{im} = extractvalue {C128} {v.ref}, 1")
        return re, im

    def make_complex(self, re: str, im: str) -> Val:
        a, b = self.tmp(), self.tmp()
        self.emit(f"{a} = insertvalue {C128} undef, double {re}, 0")
        self.emit(f"{b} = insertvalue {C128} {a}, double {im}, 1")
        return Val(C128, b)

    def fop(self, ins: str, a: str, b: str | None = None) -> str:
        r = self.tmp()
        self.emit(f"{r} = {ins} double {a}" + (f", {b}" if b is not None else ""))
        return r

    def complex_binop(self, op: ast.operator, a: Val, b: Val) -> Val:
        (ar, ai), (br, bi) = self.parts(a), self.parts(b)
        f = self.fop
        if isinstance(op, (ast.Add, ast.Sub)):
            ins = "fadd" if isinstance(op, ast.Add) else "fsub"
            return self.make_complex(f(ins, ar, br), f(ins, ai, bi))
        if isinstance(op, ast.Mult):
            return self.make_complex(f("fsub", f("fmul", ar, br), f("fmul", ai, bi)),
                                     f("fadd", f("fmul", ar, bi), f("fmul", ai, br)))
        if isinstance(op, ast.Div):
            return self.complex_divide(ar, ai, br, bi)
        raise Unsupported(f"operator {type(op).__name__} on complex numbers")

    def complex_divide(self, ar: str, ai: str, br: str, bi: str) -> Val:
        """CPython's ``_Py_c_quot`` (Numba's too): scaled by the larger part of the divisor;
        a zero divisor raises, a nan one gives nan."""
        zr, zi, zero = self.tmp(), self.tmp(), self.tmp()
        self.emit(f"{zr} = fcmp oeq double {br}, 0.0")
        self.emit(f"{zi} = fcmp oeq double {bi}, 0.0")
        self.emit(f"{zero} = and i1 {zr}, {zi}")
        self.fail_if(zero, "zerodiv", self.mod.message("complex division by zero"))
        self.mod.declare("llvm.fabs.f64", "declare double @llvm.fabs.f64(double)")
        self.mod.declare("rb_cdiv", runtime_ir.COMPLEX_DIVIDE)
        r = self.tmp()
        self.emit(f"{r} = call {C128} @rb_cdiv(double {ar}, double {ai}, double {br}, double {bi})")
        return Val(C128, r)

    def complex_function(self, c_name: str, scale: float | None, z: Val) -> Val:
        """A complex function: the C library's ``c_name`` (``clog``), its parts multiplied by
        ``scale`` where NumPy does (``log2``, ``log10``).  The C type ``double complex``
        travels as ``{ double, double }`` from two doubles (the x86-64 convention)."""
        if not _C_COMPLEX_ABI:
            raise Unsupported("complex functions on this platform")
        self.mod.declare(c_name, f"declare {C128} @{c_name}(double, double)")
        re, im = self.parts(z)
        r = self.tmp()
        self.emit(f"{r} = call {C128} @{c_name}(double {re}, double {im})")
        v = Val(C128, r)
        if scale is None:
            return v
        re, im = self.parts(v)
        k = _float_text(scale)
        return self.make_complex(self.fop("fmul", re, k), self.fop("fmul", im, k))

    # -- conversions ----------------------------------------------------------
    def convert(self, v: Val, to: str) -> Val:
        if v.t == to:
            return v
        if not isinstance(v.t, str):
            raise Unsupported("an array where a number is expected")
        if to == C128:  # a real number: its value and an imaginary part of +0.0
            re = self.convert(v, F64)
            return self.make_complex(re.ref, _float_text(0.0))
        if v.t == C128:
            raise Unsupported(f"complex to {to}")
        r = self.tmp()
        if to == F64:
            ins = "uitofp i1" if v.t == BOOL else "sitofp i64"
            self.emit(f"{r} = {ins} {v.ref} to double")
        elif to == I64:
            if v.t != BOOL:
                raise Unsupported("float to int")
            self.emit(f"{r} = zext i1 {v.ref} to i64")
        elif to == BOOL:
            return Val(BOOL, self.truth(v))
        else:
            raise Unsupported(f"convert to {to}")
        return Val(to, r)

    def int_value(self, v: Val) -> str:
        if v.t not in (I64, BOOL):
            raise Unsupported("a non-int bound or size")
        return self.convert(v, I64).ref

    def truth(self, v: Val) -> str:
        if v.t == BOOL:
            return v.ref
        r = self.tmp()
        if v.t == I64:
            self.emit(f"{r} = icmp ne i64 {v.ref}, 0")
        elif v.t == F64:
            self.emit(f"{r} = fcmp une double {v.ref}, 0.0")
        elif v.t == C128:
            return self.compare(ast.NotEq(), v, const(C128, 0j))
        else:
            raise Unsupported("truth of an array")
        return r


def _indices(e: ast.Subscript) -> list[ast.expr]:
    """The indices of ``a[i, j]``; ``a[...]`` has none (the whole array, as a view)."""
    if isinstance(e.slice, ast.Constant) and e.slice.value is Ellipsis:
        return []
    return list(e.slice.elts) if isinstance(e.slice, ast.Tuple) else [e.slice]


def _constant_int(e: ast.expr) -> int | None:
    """The value of an int constant, ``-k`` included (a negative number is a unary minus
    of a constant in Python's syntax tree), or None."""
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        k = _constant_int(e.operand)
        return None if k is None else -k
    if isinstance(e, ast.Constant) and type(e.value) is int:
        return e.value
    return None


def _llname(name: str) -> str:
    """``name`` as an LLVM identifier (Python's may hold any letter; LLVM's are ASCII)."""
    if name.isascii() and name.replace("_", "").isalnum():
        return name
    return "u" + name.encode().hex()








#: where a NumPy array object keeps its data pointer, shape pointer and strides pointer
#: (``PyArrayObject_fields``: after the object header, ``data``, ``nd``, ``dimensions``,
#: ``strides``); the engine checks them against a real array before using them
ARRAY_FIELDS = (16, 32, 40)


def complex_slot(types: tuple[Type, ...], k: int) -> int:
    """Where complex argument ``k``'s real part goes in ``floats`` (its imaginary part
    after it): past one slot per argument, two per argument."""
    return len(types) + 2 * k


def entry_point(mod: ModuleBuilder, kernel_name: str, types: tuple[Type, ...],
                fields: tuple[int, int, int] = ARRAY_FIELDS) -> str:
    """``i32 @rb_entry(ptr ints, ptr floats, ptr err)``: the kernel called with its
    arguments from two arrays of 8-byte slots, one per argument (:mod:`.engine` fills
    them): a float in ``floats``, a complex number in two of them (:func:`complex_slot`), an
    int or bool in ``ints`` -- in and out -- and an array
    as the address of its NumPy object in ``ints``, whose data pointer, shape and strides
    are read here (``fields``: their offsets), so Python passes ``id(a)`` and nothing more."""
    lines = ["define i32 @rb_entry(ptr %ints, ptr %floats, ptr %err) {", "entry:",
             f"  %ret = getelementptr i64, ptr %err, i64 {RESULT_SLOT}"]
    args = ["ptr %err", "ptr %ret"]
    for k, t in enumerate(types):
        if isinstance(t, Arr):
            lines += [f"  %o{k}.p = getelementptr i64, ptr %ints, i64 {k}",
                      f"  %o{k}.i = load i64, ptr %o{k}.p",
                      f"  %o{k} = inttoptr i64 %o{k}.i to ptr",
                      f"  %o{k}.dp = getelementptr i8, ptr %o{k}, i64 {fields[0]}",
                      f"  %a{k} = load ptr, ptr %o{k}.dp",
                      f"  %o{k}.sp = getelementptr i8, ptr %o{k}, i64 {fields[1]}",
                      f"  %o{k}.shape = load ptr, ptr %o{k}.sp",
                      f"  %o{k}.tp = getelementptr i8, ptr %o{k}, i64 {fields[2]}",
                      f"  %o{k}.strides = load ptr, ptr %o{k}.tp"]
            args.append(f"ptr %a{k}")
            for what in ("shape", "strides"):
                for j in range(t.ndim):
                    lines += [f"  %o{k}.{what}{j}.p = getelementptr i64, ptr %o{k}.{what}, i64 {j}",
                              f"  %o{k}.{what}{j} = load i64, ptr %o{k}.{what}{j}.p"]
                    args.append(f"i64 %o{k}.{what}{j}")
        elif isinstance(t, ShapeT):  # (the address of its ints)
            lines += [f"  %t{k}.p = getelementptr i64, ptr %ints, i64 {k}",
                      f"  %t{k}.i = load i64, ptr %t{k}.p",
                      f"  %t{k} = inttoptr i64 %t{k}.i to ptr"]
            for j in range(t.ndim):
                lines += [f"  %t{k}.{j}.p = getelementptr i64, ptr %t{k}, i64 {j}",
                          f"  %t{k}.{j} = load i64, ptr %t{k}.{j}.p"]
                args.append(f"i64 %t{k}.{j}")
        elif t == C128:  # (its two parts, from floats[n + 2k])
            lines.append(f"  %s{k} = getelementptr double, ptr %floats, i64 {complex_slot(types, k)}")
            args.append(f"ptr %s{k}")
        else:
            where = "%floats" if t == F64 else "%ints"
            lines.append(f"  %s{k} = getelementptr i64, ptr {where}, i64 {k}")
            args.append(f"ptr %s{k}")
    lines += [f"  %st = call i32 @{kernel_name}({', '.join(args)})", "  ret i32 %st", "}"]
    return "\n".join(lines)


_METADATA = '!0 = !{!"branch_weights", i32 1, i32 2000}\n!1 = !{!"branch_weights", i32 2000, i32 1}\n'


def lower_module(k: Kernel, types: tuple[Type, ...],
                 fields: tuple[int, int, int] = ARRAY_FIELDS) -> tuple[str, tuple, list[str]]:
    """LLVM IR for ``k`` called with ``types``: the module's text, the returned parameter
    indices, and the module's message table."""
    mod = ModuleBuilder(fields=fields)
    name, returns = mod.kernel(k, types)
    text = mod.text() + entry_point(mod, name, types, fields) + "\n" + _METADATA
    return text, returns, mod.messages
