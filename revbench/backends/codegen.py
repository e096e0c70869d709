"""IR -> Python source: the code both backends run.

The generated code is deliberately plain: scalar arithmetic, element
accesses and explicit ``for`` loops (whole-array statements become nested
loops), no Python objects, so Numba compiles it to tight machine code.
Runtime checks (``check=True``) are ordinary ``if ...: raise`` lines that
report through :class:`~revbench.backends.runtime.CheckFailed`; with
``check=False`` none are emitted at all.

Every generated line remembers the user's line it came from (``linemap``),
so errors, tracebacks and Numba typing failures point at the user's code.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from revbench.backends import blas, libm, runtime
from revbench.backends.runtime import POLL_MASK, CheckInfo
from revbench.backends.source import same_value
from revbench.lang import ir, ranges
from revbench.lang.text import conditional_syntax, expr_text
from revbench.lang.types import NUMPY_NAMES, TypedFunction, VarType
from revbench.rules import functions as fn_rules
from revbench.rules import special
from revbench.rules.instructions import ADD, DIV, MUL, SUB, UPDATES
from revbench.transforms import cse, hoist
from revbench.transforms.invert import invert_body
from revbench.transforms.pipeline import Direction
from revbench.transforms.prune import size_names
from revbench.transforms.tangent import TANGENT_PREFIX

CODEGEN_VERSION = "3"  # 2: checked int64 helpers (their Numba versions are not in the text);
# 3: helpers typed once per argument types, loop buffers and accumulators


def _helpers_fingerprint() -> str:
    """A hash of the files that say what the helpers of generated code do (``runtime``:
    checks, checked integers; ``numba_backend`` and ``numba_checks``: their compiled
    versions).

    The helpers are called by name, so their code is not in the generated text, while
    Numba's cache of a generated file holds them compiled in: without this hash in every
    file's header, a changed helper would keep running, stale, from the cache (and a
    caller compiled against an older callee's cached code would mix the two)."""
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for name in ("runtime.py", "numba_backend.py", "numba_checks.py", "numba_linking.py",
                 "kernel_cache.py", "libm.py", "blas.py"):
        digest.update((here / name).read_bytes())
    return digest.hexdigest()[:12]


HELPERS_FINGERPRINT = _helpers_fingerprint()
#: the locals repeated elements are loaded into (transforms/hoist.py), and shared values
#: are held in (transforms/cse.py), in a check's text
_LOADED = re.compile(rf"\b(?:{hoist.LOCAL_PREFIX}|{cse.PREFIX})\d+\b")
#: a tangent variable in a check's text (forward mode), as a message writes it
_TANGENT = re.compile(rf"\b{TANGENT_PREFIX}(\w+)")


#: what ``fastmath=True`` allows: reassociating float sums (so reductions vectorise) and
#: fusing a multiply and an add.  Not ``nnan``/``ninf``: the checks test for inf and nan.
FASTMATH_FLAGS = frozenset({"reassoc", "contract"})
#: the zero each dtype's sum starts from
ZERO_CODE = {"int": "0", "float": "0.0", "complex": "0j", "bool": "0"}


def _extreme_start(dtype: str, largest: bool) -> str:
    """What a search for the largest (smallest) element starts from: below (above) all."""
    return {"float": "(-_rb_math.inf)" if largest else "_rb_math.inf",
            "int": "(-9223372036854775807 - 1)" if largest else "9223372036854775807",
            "bool": "False" if largest else "True"}[dtype]


def _post_order(e: ir.Expr):
    """Every sub-expression, children before their parent (inner sums first)."""
    for c in ir.sub_expressions(e):
        yield from _post_order(c)
    yield e


def _axis_step(e: ir.Elem, ax: int) -> int | None:
    """The step of element or sub-array ``e`` along its array's axis ``ax``: ``None`` for one
    index there, 1 for a plain slice or an axis not indexed."""
    part = e.indices[ax] if ax < len(e.indices) else None
    return ir.slice_step(part) if part is None or isinstance(part, ir.Slice) else None


def _progressions_meet(la: str, ha: str, sa: int, lb: str, hb: str,
                       sb: int) -> tuple[str, str, str]:
    """Code for "the indices ``la:ha:sa`` and ``lb:hb:sb`` share one" (an index ``i`` is
    ``i:i+1:1``), and for the least and the greatest shared index when they do.  The steps are constants, so
    the Chinese remainder theorem is solved here, once: the shared indices are ``x0 + L j``
    with ``L = lcm(sa, sb)``, where ``x0`` is the first of them from ``max(la, lb)``; they
    share one if the starts agree modulo ``gcd(sa, sb)`` and ``x0`` comes before either ends.
    (Comparing ranges alone took ``x[0:4:2]`` and ``x[1:7:3]``, {0, 2} and {1, 4}, to meet.)"""
    if sa == sb == 1:
        return f"{la} < {hb} and {lb} < {ha}", f"max({la}, {lb})", f"min({ha}, {hb}) - 1"
    g = math.gcd(sa, sb)
    m, lcm = sb // g, sa * sb // g
    inv = pow(sa // g, -1, m) if m > 1 else 0  # (sa / g) * inv == 1 modulo m
    lo = f"max({la}, {lb})"
    first_a = f"({la} + {sa} * ((({lb}) - ({la})) // {g} * {inv} % {m}))"  # == lb (mod sb)
    x0 = f"({lo} + ({first_a} - {lo}) % {lcm})"
    last = f"({x0} + {lcm} * ((min({ha}, {hb}) - 1 - {x0}) // {lcm}))"
    return f"(({lb}) - ({la})) % {g} == 0 and {x0} < min({ha}, {hb})", x0, last


def _finite(v) -> bool:
    return abs(v) < float("inf")


# --------------------------------------------------------------------------- #
# Checked int64 arithmetic
# --------------------------------------------------------------------------- #
def _helper_rule(name: str, fn, nargs: int, result: str = "int") -> fn_rules.FunctionRule:
    # injected like a registered function: fn itself in Python, an inlined version using
    # LLVM's overflow intrinsics under Numba (numba_backend.user_function)
    return fn_rules.FunctionRule(name, f"_rb_{name}", nargs, (), result=result, hidden=True,
                                 user_function=fn, fingerprint=fn_rules.fingerprint(fn))


#: operator -> the helper generated code calls for it on integers when checks are on
INT_HELPERS: dict[str, fn_rules.FunctionRule] = {
    op: _helper_rule(name, fn, nargs) for op, name, fn, nargs in (
        ("+", "iadd", runtime.int_add, 4), ("-", "isub", runtime.int_sub, 4),
        ("*", "imul", runtime.int_mul, 4), ("//", "ifloordiv", runtime.int_floordiv, 4),
        ("**", "ipow", runtime.int_pow, 4), ("neg", "ineg", runtime.int_neg, 3),
        ("abs", "iabs", runtime.int_abs, 3))
}
#: operator -> the helper generated code calls for it on integers with checks off, where
#: the result may not fit: it wraps around in int64 (``runtime.int_wadd`` ...; docs/language.md
#: section 9).  Every backend calls the same names: one rule, not four spellings of it.
WRAP_HELPERS: dict[str, fn_rules.FunctionRule] = {
    op: _helper_rule(name, fn, nargs) for op, name, fn, nargs in (
        ("+", "wadd", runtime.int_wadd, 2), ("-", "wsub", runtime.int_wsub, 2),
        ("*", "wmul", runtime.int_wmul, 2), ("**", "wpow", runtime.int_wpow, 2),
        ("neg", "wneg", runtime.int_wneg, 1), ("abs", "wabs", runtime.int_wabs, 1))
}
#: operator -> what the Python backend computes it with: a zero divisor raises as Python's
#: numbers do (NumPy's scalars give inf, nan or 0 there), as compiled code does
PY_DIVISION: dict[str, fn_rules.FunctionRule] = {
    op: _helper_rule(name, fn, 2, result="same") for op, name, fn in (
        ("/", "pydiv", runtime.py_truediv), ("//", "pyfloordiv", runtime.py_floordiv),
        ("%", "pymod", runtime.py_mod))
}
#: -2**63 as code: the literal 9223372036854775808 does not fit in int64 (Numba typed it as
#: unsigned and `n += -2**63` left n unchanged; the native generator refused it)
_INT64_MIN_CODE = "(-9223372036854775807 - 1)"
#: the exact number of elements of a ``range`` (``runtime.range_len``): what a loop whose
#: bounds may be negative counts with
RANGE_LEN = _helper_rule("range_len", runtime.range_len, 3)
#: a float to an int power (``runtime.float_int_power``): the products compiled code makes
FLOAT_INT_POWER = _helper_rule("fpowi", runtime.float_int_power, 2, result="float")
#: what a complex ``a ** b`` calls in compiled code (the Python backend imports its copy
#: reading C's functions, ``runtime.complex_pow``, under the same name)
COMPLEX_POW = _helper_rule("cpow", special.complex_pow, 2, result="float")
#: what a checked float ``+=`` / ``-=`` calls: the update and its test in one call
FLOAT_SHIFT = _helper_rule("float_shift", runtime.float_shift, 5, result="float")
#: what ``C += A @ B`` (:class:`ir.MatMul`) calls, and, where a checked one stopped at an
#: element it could not update, what finishes it as a checked float update would
MATMUL_UPDATE = _helper_rule("matmul_update", blas.matmul_update, 7)
MATMUL_FAILED = _helper_rule("matmul_failed", blas.matmul_failed, 9)


# --------------------------------------------------------------------------- #
# Source generation
# --------------------------------------------------------------------------- #
@dataclass
class Generated:
    """One generated module's source and what is needed to load and explain it."""

    source: str
    key: str  # content hash
    function_name: str  # the def in the module
    checks: list[CheckInfo]
    linemap: dict[int, int]  # generated line -> user line
    globals_needed: dict[str, object] = field(default_factory=dict)  # symbol -> object to inject
    #: the type ``lang/types.py`` gave each variable of the function: what the native code
    #: generator declares them as (it refuses a kernel whose values disagree)
    types: dict[str, VarType] = field(default_factory=dict)

    @property
    def module_key(self) -> int:
        return int(self.key[:15], 16)


@dataclass
class Options:
    check: bool = True
    atol: float | None = None  # None: the global tolerance, passed at call time
    rtol: float | None = None
    #: the backend that runs the code: plain Python wants whole-array NumPy calls where
    #: Numba wants explicit loops
    backend: str = "numba"
    #: compiled with Numba's reassociation and contraction flags (named in the header, so
    #: the content-hashed file, and Numba's cache beside it, differ from exact code's)
    fastmath: bool = False

    @property
    def interpreted(self) -> bool:
        """Whether the code runs in the interpreter (the Python backend) rather than
        compiled (native code, Numba, the GPU): the one place codegen asks the backend."""
        return self.backend == "python"


@dataclass(frozen=True)
class Fragment:
    """One statement, or one check of a control-flow statement, generated as a function of
    its own: ``name(*params, *extra, _rb_gatol, _rb_grtol)``, where ``params`` are the
    variables it reads or writes and ``extra`` values its caller computed (an ``if``'s
    condition, a loop's bounds).  It returns ``returns`` (for a statement: the scalar
    variables it writes; arrays change in place) and raises ``CheckFailed`` as the whole
    function's code does.  The debugger runs these one at a time
    (:mod:`revbench.backends.tracer`), so it means what compiled code means."""

    name: str
    source: str
    params: tuple[str, ...]
    extra: tuple[str, ...]
    returns: tuple[str, ...]


class Emitter:
    """IR -> the source of one generated function, a method per statement kind (``s_For``)
    and per expression form (:meth:`x`); a subclass retargets it (CUDA).  :meth:`fragment`
    gives one statement or one check on its own, for the debugger."""

    #: what every generated function takes after the user's parameters: the global
    #: tolerances of the call (its own, where it has them, win)
    EXTRA_PARAMS: tuple[str, ...] = ("_rb_gatol", "_rb_grtol")

    def __init__(self, typed: TypedFunction, direction: Direction, options: Options,
                 callee_symbol: Callable[[ir.Call, tuple[VarType, ...]], str],
                 callee_writes: Callable[[ir.Call], tuple[bool, ...]] | None = None):
        self.t = typed
        self.f = typed.func
        self.env = typed.env
        self.direction = direction
        self.opt = options
        #: the code runs in the interpreter (the Python backend), not compiled: what it
        #: calls for the same rule differs (NumPy's scalars there, C functions here)
        self.interpreted = options.interpreted
        self.callee_symbol = callee_symbol
        self.callee_writes = callee_writes or (lambda call: (True,) * len(call.args))
        self.lines: list[str] = []
        self.linemap: dict[int, int] = {}
        self.checks: list[CheckInfo] = []
        #: a loaded element's local (transforms/hoist.py) -> the element as the user wrote it
        self.loaded: dict[str, str] = {}
        self.level = 1
        self._tmp = 0
        self.user_functions: dict[str, object] = {}
        self._dtypes: dict[int, tuple[object, str]] = {}  # id(expr) -> (expr, its dtype)
        self._loc = ir.NO_LOC  # the statement being generated (for checks in expressions)
        self._sums: dict[int, tuple[ir.Reduce, str]] = {}  # id(Reduce) -> (it, its local)
        self._views: dict[int, tuple[ir.Elem, tuple]] = {}  # id(sub-array) -> (it, its codes)
        self._loops = 0  # loops around the statement being generated
        self.interruptible = False  # whether a loop polls for Ctrl-C
        self.uses_libm = False  # whether an expression calls revbench.backends.libm
        self.polls = False  # whether one counts iterations between polls (from the prologue)
        #: array elements held in a local across the loops being generated -> the local
        self._promoted: dict[ir.Elem, str] = {}
        #: the loops around the statement being generated: what their ranges prove
        #: (:mod:`revbench.lang.ranges`: integer sums that cannot overflow go unchecked)
        self._ranges: dict[str, ranges.LoopRange] = {}
        #: arrays allocated inside loops reuse one buffer per allocation site: (name, ndim, dtype)
        self.buffers: list[tuple[str, int, str]] = []
        #: the ancillas that hold sizes (``n, d = x.shape``): never negative (for ranges)
        self._sizes: frozenset[str] | None = None

    # -- plumbing -------------------------------------------------------------
    def emit(self, text: str, loc: ir.Loc | None = None) -> None:
        self.lines.append("    " * self.level + text)
        if loc is not None and loc.line:
            self.linemap[len(self.lines)] = loc.line

    def tmp(self, stem: str) -> str:
        self._tmp += 1
        return f"_rb_{stem}{self._tmp}"

    def check(self, kind: str, variable: str, loc: ir.Loc, detail: str = "") -> int:
        # a message names what the user wrote: x[i], not the local it was loaded into
        variable, detail = (_TANGENT.sub(r"tangent(\1)",
                                         _LOADED.sub(lambda m: self.loaded.get(m[0], m[0]), t))
                            for t in (variable, detail))
        self.checks.append(CheckInfo(kind, variable, loc.line, detail))
        return len(self.checks) - 1

    def fail(self, k: int, expected: str, actual: str, *index: str) -> str:
        """The line that reports failed check ``k`` (on the CPU: raises it)."""
        args = ", ".join(("_RB_MODULE", str(k), expected, actual, *index))
        return f"raise _RbCheckFailed({args})"

    def helper_call(self, impl: str, args: str, k: int) -> str:
        """A call of a checked helper (:mod:`revbench.backends.runtime`), told check ``k``
        to report if it fails."""
        return f"{impl}({args}, _RB_MODULE, {k})"

    # -- expressions ----------------------------------------------------------
    def type_of(self, name: str) -> VarType:
        return self.env[name]

    def x(self, e, ew: tuple[str, ...] = ()) -> str:
        """Python code for expression ``e``; ``ew`` are the loop indices of an
        elementwise statement (whole arrays in ``e`` are indexed with them)."""
        if isinstance(e, ir.Const):
            v = e.value
            if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
                return "_rb_math.nan" if v != v else ("_rb_math.inf" if v > 0 else "(-_rb_math.inf)")
            if type(v) is int and v == runtime.INT64_MIN:
                return _INT64_MIN_CODE
            r = repr(v)
            return f"({r})" if r.startswith("-") else r
        if isinstance(e, ir.Var):
            if ew and self.type_of(e.name).is_array:
                return f"{e.name}[{', '.join(ew)}]"
            return e.name
        if isinstance(e, ir.Elem):
            if e in self._promoted:
                return self._promoted[e]
            if self.is_view(e):
                return self.view_elem(e, ew) if ew else self.view_code(e)
            return f"{e.name}[{', '.join(self.x(i) for i in e.indices)}]"
        if isinstance(e, ir.BinOp):
            return self.binop(e, ew)
        if isinstance(e, ir.UnaryOp):
            if e.op == "not":
                return f"(not {self.x(e.operand, ew)})"
            t = self.dtype(e.operand)
            operand = self.cast(self.x(e.operand, ew), t, "int")
            if t in ("int", "bool") and self.opt.check:
                return self.int_helper("neg", e, operand)
            if t in ("int", "bool"):
                return self.wrap_helper("neg", operand)
            return f"(-{operand})"
        if isinstance(e, ir.Func):
            rule = fn_rules.lookup(e.name)
            if rule.user_function is not None:
                self.user_functions[rule.impl] = rule
            args = [self.x(a, ew) for a in e.args]
            dts = [self.dtype(a) for a in e.args]
            if rule.result == "float":
                # NumPy computes a bool in float16 (np.sqrt(True)), Numba in float32:
                # a bool argument is the float 0.0 or 1.0
                args = [self.cast(c, t, "float") if t == "bool" else c for c, t in zip(args, dts)]
            elif rule.result == "real":  # np.imag(3) is the int 0: the parts are floats
                args = [self.cast(c, t, "float") if t in ("int", "bool") else c
                        for c, t in zip(args, dts)]
            elif rule.result in ("promote", "same") and dts[0] != "complex":
                d = self.dtype(e)  # min(True, 2) is True in Python: compute in the result's type
                args = [self.cast(c, t, d) for c, t in zip(args, dts)]
                if rule.name == "abs" and d == "int" and self.opt.check:
                    return self.int_helper("abs", e, *args)  # abs(-2**63) overflows
                if rule.name == "abs" and d == "int":
                    return self.wrap_helper("abs", *args)
            if rule.name in fn_rules.OWN_REAL and "complex" not in dts:
                helper = fn_rules.OWN_REAL[rule.name]  # revbench's own, on every path
                self.user_functions[helper.impl] = helper
                args = [self.cast(c, t, "float") for c, t in zip(args, dts)]
                return f"{helper.impl}({', '.join(args)})"
            if (not self.interpreted and rule.name in fn_rules.COMPILED_COMPLEX
                    and "complex" in dts):
                helper = fn_rules.COMPILED_COMPLEX[rule.name]
                self.user_functions[helper.impl] = helper
                return f"{helper.impl}({', '.join(args)})"
            if (self.interpreted and rule.name in libm.FUNCTIONS
                    and all(t != "complex" for t in dts)):
                # the C library's function, as compiled code calls: bit-identical results
                self.uses_libm = True
                return f"_rb_libm.{rule.name}({', '.join(args)})"
            return f"{rule.impl}({', '.join(args)})"
        if isinstance(e, ir.Len):
            return f"{e.name}.shape[0]"
        if isinstance(e, ir.Shape):
            return f"{e.name}.shape[{e.axis}]"
        if isinstance(e, (ir.IfExp, ir.Compare, ir.BoolOp)):
            return "(" + conditional_syntax(e, lambda c: self.x(c, ew)) + ")"
        if isinstance(e, ir.Reduce):
            hit = self._sums.get(id(e))
            if hit is not None and hit[0] is e:
                return hit[1]
            # outside a statement (the debugger's tracer compiles single expressions): the
            # same sum, in the same order, as one expression
            lead = self.array_nodes(e.arg)[0]
            shape = f"{lead.name}.shape" if isinstance(lead, ir.Var) else f"{self.view_code(lead)}.shape"
            t = self.dtype(e)
            item = self.cast(self.x(e.arg, ("_rb_ix",)), self.dtype(e.arg), t)
            # a lambda's defaults are evaluated where it is written: the names it reads
            names = sorted(ir.names_used(e.arg))
            bound = "".join(f", {n}={n}" for n in names)
            if e.kind in ("max", "min"):
                return (f"_rb_loop_extreme(lambda _rb_ix{bound}: {item}, {shape}, "
                        f"{_extreme_start(t, e.kind == 'max')}, {e.kind == 'max'})")
            return f"_rb_loop_sum(lambda _rb_ix{bound}: {item}, {shape}, {ZERO_CODE[t]})"
        raise TypeError(f"cannot generate {type(e).__name__}")

    def dtype(self, e) -> str:
        """The dtype of expression ``e`` (memoised: expressions are typed bottom-up)."""
        hit = self._dtypes.get(id(e))
        if hit is None or hit[0] is not e:
            hit = self._dtypes[id(e)] = (e, self.t.expr_type(e).dtype)
        return hit[1]

    @staticmethod
    def cast(code: str, dtype: str, to: str) -> str:
        """``code`` (of ``dtype``) converted up to ``to``: bools compute as the ints 0 and 1
        (NumPy's ``np.bool_ + np.bool_`` is a logical or) and as the floats 0.0 and 1.0
        (Numba has no ``float(bool)``)."""
        if dtype == "bool" and to == "int":
            return f"int({code})"
        if dtype == "bool" and to in ("float", "complex"):
            return f"_rb_np.float64({code})"
        if dtype == "int" and to == "float":
            return f"float({code})"
        return code

    def binop(self, e: ir.BinOp, ew: tuple[str, ...]) -> str:
        lt, rt, d = self.dtype(e.left), self.dtype(e.right), self.dtype(e)
        left, right = self.x(e.left, ew), self.x(e.right, ew)
        if e.op == "**" and d == "complex":
            # CPython's complex power on every path (rules.special.complex_pow: the Python
            # backend runs runtime.complex_pow, compiled code the same function)
            left, right = (c if t == "complex" else f"complex({self.cast(c, t, 'float')})"
                           for c, t in ((left, lt), (right, rt)))
            if not self.interpreted:
                self.user_functions[COMPLEX_POW.impl] = COMPLEX_POW
            return f"_rb_cpow({left}, {right})"
        if e.op == "**" and d == "float":
            if rt == "float":
                # a negative base with a non-integer exponent: Python's float gives a
                # complex number, Numba nan; NumPy's float64 gives nan (and libm's pow
                # elsewhere, as Numba: np.power itself may differ in the last digit)
                return f"(_rb_np.float64({left}) ** {right})"
            # An int exponent: |k| products, as compiled code multiplies (NumPy's scalar
            # power is the C library's pow, another last bit; Numba's own raises for 0.0 **
            # -3): runtime.float_int_power, except a literal k >= 0 in compiled code, which
            # both compilers unroll into the same products
            k = ranges.const_int(e.right)
            if not self.interpreted and k is not None and k >= 0:
                return f"(_rb_np.float64({left}) ** {right})"
            self.user_functions[FLOAT_INT_POWER.impl] = FLOAT_INT_POWER
            return f"{FLOAT_INT_POWER.impl}({self.cast(left, lt, 'float')}, {self.cast(right, rt, 'int')})"
        left, right = self.cast(left, lt, "int"), self.cast(right, rt, "int")
        if d == "int" and e.op in INT_HELPERS and not ranges.cannot_overflow(e, self._ranges):
            if self.opt.check:
                return self.int_helper(e.op, e, left, right)
            if e.op == "//":
                # unchecked, INT64_MIN // -1 wraps around to INT64_MIN: a // -1 is -a
                # (compiled division gives 0 there)
                return (f"({self.wrap_helper('neg', left)} if {right} == -1 else "
                        f"{self.division(e.op, left, right)})")
            return self.wrap_helper(e.op, left, right)
        return self.division(e.op, left, right)

    def division(self, op: str, left: str, right: str) -> str:
        """``left op right``; on the Python backend a ``/``, ``//`` or ``%`` through
        :data:`PY_DIVISION`, which raises for a zero divisor as compiled code does."""
        if not self.interpreted or op not in PY_DIVISION:
            return f"({left} {op} {right})"
        rule = PY_DIVISION[op]
        self.user_functions[rule.impl] = rule
        return f"{rule.impl}({left}, {right})"

    def wrap_helper(self, op: str, *args: str) -> str:
        """``op`` on int64 operands, unchecked: the result wrapped around in int64."""
        rule = WRAP_HELPERS[op]
        self.user_functions[rule.impl] = rule
        return f"{rule.impl}({', '.join(args)})"

    def int_helper(self, op: str, e, *args: str) -> str:
        """``op`` on int64 operands, checked: it raises where the exact result does not fit."""
        rule = INT_HELPERS[op]
        self.user_functions[rule.impl] = rule
        text = expr_text(e)
        loc = e.loc if e.loc.line else self._loc
        k = self.check("overflow", text, loc, f"{op}\t{text}")
        return self.helper_call(rule.impl, ", ".join(args), k)

    def close(self, actual: str, expected: str, dtype: str) -> str:
        """A condition that holds when ``actual`` equals ``expected`` (within tolerance)."""
        return same_value(actual, expected, dtype in ("int", "bool"), "_rb_atol", "_rb_rtol")

    # -- statements -----------------------------------------------------------
    def head(self, name: str, params: tuple[str, ...]) -> None:
        """``def name(*params, _rb_gatol, _rb_grtol):`` and the tolerances its checks use."""
        self.level = 0
        self.emit(f"def {name}({', '.join((*params, *self.EXTRA_PARAMS))}):")
        self.level = 1
        if self.opt.check:
            # a function's own tolerance, else the global one passed in at call time
            for tol, own in (("atol", self.opt.atol), ("rtol", self.opt.rtol)):
                self.emit(f"_rb_{tol} = {own!r}" if own is not None else f"_rb_{tol} = _rb_g{tol}")

    def function(self, name: str) -> None:
        self.head(name, self.f.params)
        start = len(self.lines)
        self.body(self.f.body)
        # the loops' allocation buffers, empty until first used; the interrupt poll's count
        prologue = [f"{buf} = _rb_np.empty(({', '.join(['0'] * ndim)},), dtype={dt})"
                    for buf, ndim, dt in self.buffers] + (["_rb_ticks = 0"] if self.polls else [])
        self.lines[start:start] = ["    " + line for line in prologue]
        self.linemap = {(g + len(prologue) if g > start else g): u for g, u in self.linemap.items()}
        ret = ", ".join(self.f.params)
        self.emit(f"return ({ret}{',' if len(self.f.params) == 1 else ''})")

    def body(self, stmts) -> None:
        start = len(self.lines)
        for s in stmts:
            self.stmt(s)
        # a block may emit only comments (an empty `with inverted:`, a `del` without checks):
        # Python still needs a statement in it
        if all(line.lstrip().startswith("#") for line in self.lines[start:]):
            self.emit("pass")

    def stmt(self, s: ir.Stmt) -> None:
        outer, self._loc = self._loc, s.loc
        # sums are computed afresh for each statement (the same IR node may be emitted
        # again later, in an uncompute, where what it reads has changed)
        outer_sums, self._sums = self._sums, {}
        outer_views, self._views = self._views, {}
        kind = ir.statement_kind(s)
        for e in (*kind.before(s, self.opt.check), *kind.subarrays(s)):
            for n in _post_order(e):
                if isinstance(n, ir.Elem) and id(n) not in self._views and self.is_view(n):
                    self.prepare_view(n, s.loc)
                if isinstance(n, ir.Reduce) and id(n) not in self._sums:
                    self.reduction(n, s.loc)
        getattr(self, "s_" + type(s).__name__)(s)
        self._loc, self._sums, self._views = outer, outer_sums, outer_views

    # -- fragments: one statement, or one check, as a function of its own ------------
    def fragment(self, name: str, params, emit: Callable[[], Sequence[str] | None], loc: ir.Loc,
                 extra: tuple[str, ...] = ()) -> Fragment:
        """What ``emit()`` writes, as the function a :class:`Fragment` describes, taking the
        variables ``params`` then ``extra``; ``emit`` returns the code of what it returns."""
        saved = self.lines, self.linemap, self.level, self._loc
        self.lines, self.linemap, self._loc = [], {}, loc
        try:
            params = tuple(sorted(params))
            self.head(name, (*params, *extra))
            returns = tuple(emit() or ())
            self.emit(f"return ({', '.join(returns)}{',' if len(returns) == 1 else ''})")
            return Fragment(name, "\n".join(self.lines) + "\n", params, extra, returns)
        finally:
            self.lines, self.linemap, self.level, self._loc = saved

    def statement_fragment(self, s: ir.Stmt) -> Fragment:
        """A statement that is not control flow (an update, a swap, an allocation, a
        ``del``, a call, ``print``, ``assert``) as a :class:`Fragment` taking the variables
        it names and returning the scalar variables it writes (an allocation: the new
        variable)."""
        names: set[str] = set().union(*map(ir.names_used, ir.statement_expressions(s)))
        if isinstance(s, ir.Alloc):
            written: tuple[str, ...] = (s.name,)
        elif isinstance(s, ir.Dealloc):
            names.add(s.name)
            written = ()
        else:
            written = tuple(sorted(n for n in ir.names_written((s,)) if not self.env[n].is_array))

        def emit() -> tuple[str, ...]:
            self.stmt(s)
            return written

        return self.fragment(f"_rb_{type(s).__name__.lower()}", names, emit, s.loc)

    def extreme(self, e: ir.Reduce, loc: ir.Loc) -> None:
        """Find ``np.max(arg)`` (``np.min``) into a new local before the statement: a loop
        over the elements in index order; a nan wins, as in NumPy.  With checks on, an
        empty array raises (NumPy's max of nothing is an error, not -inf)."""
        lead = self.array_nodes(e.arg)[0]
        ndim = self.t.expr_type(lead).ndim
        t, largest = self.dtype(e), e.kind == "max"
        acc = self.tmp("ext")
        if self.opt.check:
            k = self.check("empty", expr_text(e), loc)
            size = " * ".join(self.shape_code(lead, ax) for ax in range(ndim))
            self.emit(f"if {size} == 0:", loc)
            self.emit("    " + self.fail(k, "0", "0"), loc)
        self.emit(f"{acc} = {_extreme_start(t, largest)}", loc)
        idx = self.elementwise_loops(lead, ndim, e.arg, loc)
        v = self.tmp("v")
        self.emit(f"{v} = {self.x(e.arg, idx)}", loc)
        nan = f" or {v} != {v}" if t == "float" else ""
        self.emit(f"if {v} {'>' if largest else '<'} {acc}{nan}:", loc)
        self.emit(f"    {acc} = {v}", loc)
        self.level -= ndim
        self._sums[id(e)] = (e, acc)

    def reduction(self, e: ir.Reduce, loc: ir.Loc) -> None:
        """Compute ``np.sum(arg)`` into a new local before the statement that uses it: a
        loop over the elements of the first array ``arg`` reads, in index order."""
        if e.kind in ("max", "min"):
            self.extreme(e, loc)
            return
        lead = self.array_nodes(e.arg)[0]
        ndim = self.t.expr_type(lead).ndim
        t = self.dtype(e)
        acc = self.tmp("sum")
        self.emit(f"{acc} = {ZERO_CODE[t]}", loc)
        idx = self.elementwise_loops(lead, ndim, e.arg, loc)
        item = self.cast(self.x(e.arg, idx), self.dtype(e.arg), t)
        if t == "int" and self.opt.check:
            rule = INT_HELPERS["+"]
            self.user_functions[rule.impl] = rule
            k = self.check("overflow", expr_text(e), loc, f"+\t{expr_text(e)}")
            self.emit(f"{acc} = {self.helper_call(rule.impl, f'{acc}, {item}', k)}", loc)
        elif t == "int":
            self.emit(f"{acc} = {self.wrap_helper('+', acc, item)}", loc)
        else:
            self.emit(f"{acc} += {item}", loc)
        self.level -= ndim
        self._sums[id(e)] = (e, acc)

    def s_Update(self, s: ir.Update) -> None:
        if isinstance(s.value, ir.MatMul):
            self.matmul_update(s)
            return
        tt = self.env[s.target.name]
        view = self.is_view(s.target)
        if (isinstance(s.target, ir.Var) and tt.is_array) or view:
            ndim = self.t.expr_type(s.target).ndim
            if self.opt.check and view:
                for other in s.alias_checks:
                    self.alias_check(s.target, other, "alias", s.loc)
            idx = self.elementwise_loops(s.target, ndim, s.value, s.loc)
            target = self.x(s.target, idx)
            self.scalar_update(s, target, tt.dtype, idx)
            self.level -= ndim
            return
        target = self.x(s.target)
        if self.opt.check and isinstance(s.target, ir.Elem):
            for other in s.alias_checks:
                self.alias_check(s.target, other, "alias", s.loc, s.shown)
        self.scalar_update(s, target, tt.dtype, ())

    def matmul_update(self, s: ir.Update) -> None:
        """``C += op(A) @ op(B)`` (``-=``): one call of the BLAS routine
        (:func:`blas.matmul_update`); checked, it stops at the first element it would make
        infinite or nan, and :func:`blas.matmul_failed` finishes the update as a checked
        float ``+=`` of each element does (raising check ``k`` or ``k + 1``).  An adjoint
        update is never undone, so never checked, as a scalar one."""
        e = s.value
        if not (isinstance(s.target, ir.Var) and isinstance(e.a, ir.Var) and isinstance(e.b, ir.Var)
                and s.op in (ADD, SUB)):
            raise AssertionError(f"internal: a BLAS product in `{expr_text(s.target)} {s.op} "
                                 f"{expr_text(e)}`")
        checked = self.opt.check and not ir.is_adjoint(s.target.name)
        target, a, b = self.x(s.target), self.x(e.a), self.x(e.b)
        args = (f"{target}, {a}, {b}, {e.trans_a}, {e.trans_b}, {s.op == SUB}")
        self.user_functions[MATMUL_UPDATE.impl] = MATMUL_UPDATE
        r = self.tmp("r")
        self.emit(f"{r} = {MATMUL_UPDATE.impl}({args}, {checked})", s.loc)
        if checked:
            k = self.check("nonfinite", expr_text(e), s.loc, s.op)
            self.check("result", expr_text(s.target), s.loc,
                       f"{expr_text(s.target)} {s.op} {expr_text(e)}")  # k + 1
            self.user_functions[MATMUL_FAILED.impl] = MATMUL_FAILED
            self.emit(f"if {r} != -1:", s.loc)
            self.emit("    " + self.helper_call(MATMUL_FAILED.impl, f"{args}, {r}", k), s.loc)

    def scalar_update(self, s: ir.Update, target: str, dtype: str, ew: tuple[str, ...]) -> None:
        rule = UPDATES[s.op]
        value = self.x(s.value, ew)
        integer = dtype in ("int", "bool")
        op = rule.int_op if integer else rule.python_op
        if rule.nonzero_operand:
            const_nonzero = isinstance(s.value, ir.Const) and s.value.value != 0
            if not const_nonzero:
                v = self.tmp("v")
                self.emit(f"{v} = {value}", s.loc)
                value = v
            if self.opt.check and not const_nonzero:
                k = self.check("zero", expr_text(s.value), s.loc, s.op)
                self.emit(f"if {value} == 0:", s.loc)
                self.emit("    " + self.fail(k, "0", value), s.loc)
            if self.opt.check and integer and rule.exact_int_division:
                k = self.check("inexact", expr_text(s.value), s.loc, expr_text(s.target))
                self.emit(f"if {target} % {value} != 0:", s.loc)
                self.emit("    " + self.fail(k, target, value), s.loc)
        if self.opt.check and dtype == "int":
            self.int_update_checked(s, target, value)
            return
        if dtype == "int" and op == "//":  # (unchecked INT64_MIN // -1 wraps, as in binop)
            self.emit(f"{target} = {self.wrap_helper('neg', target)} if {value} == -1 else "
                      f"{target} // {value}", s.loc)
            return
        if dtype == "int" and op in WRAP_HELPERS:
            self.emit(f"{target} = {self.wrap_helper(op, target, value)}", s.loc)
            return
        undone = not ir.is_adjoint(s.target.name)  # adjoints are never undone
        if self.opt.check and undone and not integer:
            if rule.nonzero_operand:
                self.float_scale_checked(s, target, op, value)
                return
            if s.op in (ADD, SUB):
                self.float_shift_checked(s, target, op, value)
                return
        self.emit(f"{target} {op}= {value}", s.loc)

    def int_update_checked(self, s: ir.Update, target: str, value: str) -> None:
        """An integer update that raises where its exact result does not fit in int64
        (integers never wrap around, so every update stays exactly invertible)."""
        text = f"{expr_text(s.target)} {s.op} {expr_text(s.value)}"
        if s.op in (ADD, SUB, MUL):
            helper = INT_HELPERS[s.op[0]]
            self.user_functions[helper.impl] = helper
            k = self.check("overflow", expr_text(s.target), s.loc, f"{s.op[0]}\t{text}")
            self.emit(f"{target} = {self.helper_call(helper.impl, f'{target}, {value}', k)}", s.loc)
            return
        if s.op == DIV and not (isinstance(s.value, ir.Const) and s.value.value != -1):
            k = self.check("overflow", expr_text(s.target), s.loc, f"//\t{text}")
            self.emit(f"if {value} == -1 and {target} == {_INT64_MIN_CODE}:", s.loc)
            self.emit("    " + self.fail(k, target, value), s.loc)
        self.emit(f"{target} {UPDATES[s.op].int_op}= {value}", s.loc)

    def float_scale_checked(self, s: ir.Update, target: str, op: str, value: str) -> None:
        """A float or complex ``*=`` / ``/=`` that raises where it cannot be undone: an
        infinite or nan operand, or a finite target made 0, subnormal, inf or so large that
        the inverse would not give it back (checked only when the result, or the target, is
        that small or that large)."""
        const = isinstance(s.value, ir.Const)
        if self.dtype(s.value) in ("float", "complex") and not (const and _finite(s.value.value)):
            k = self.check("nonfinite", expr_text(s.value), s.loc, s.op)
            self.emit(f"if not abs({value}) < _rb_math.inf:", s.loc)
            self.emit("    " + self.fail(k, "0", value), s.loc)
        r = self.tmp("r")
        self.emit(f"{r} = {target} {op} {value}", s.loc)
        k = self.check("result", expr_text(s.target), s.loc,
                       f"{expr_text(s.target)} {s.op} {expr_text(s.value)}")
        inv = UPDATES[UPDATES[s.op].inverse].python_op
        self.emit(f"if not ({runtime.FLOAT_TINY!r} <= abs({r}) <= {runtime.FLOAT_HUGE!r} "
                  f"and abs({target}) <= {runtime.FLOAT_HUGE!r}) "
                  f"and abs({target}) < _rb_math.inf "
                  f"and not abs({r} {inv} {value} - {target}) <= {runtime.SCALE_RTOL!r} * abs({target}):",
                  s.loc)
        self.emit("    " + self.fail(k, target, r), s.loc)
        self.emit(f"{target} = {r}", s.loc)

    def float_shift_checked(self, s: ir.Update, target: str, op: str, value: str) -> None:
        """A float or complex ``+=`` / ``-=`` that raises where it cannot be undone: a
        shift by an infinite or nan operand (``inf - inf`` is nan), or a finite target
        made infinite (an overflow).  One call of :func:`runtime.float_shift`, which
        computes ``target op value`` exactly as the update would and tests the result:
        written inline, the copy, test and failure branch of every checked update were a
        third of the code Numba typed for a checked gradient."""
        k = self.check("nonfinite", expr_text(s.value), s.loc, s.op)
        self.check("result", expr_text(s.target), s.loc,
                   f"{expr_text(s.target)} {s.op} {expr_text(s.value)}")  # k + 1
        self.user_functions[FLOAT_SHIFT.impl] = FLOAT_SHIFT
        subtract = "True" if op == "-" else "False"
        if self.dtype(s.value) == "bool":  # (`y += not w`: the helper's checks read .real)
            value = self.cast(value, "bool", "float")
        call = self.helper_call(FLOAT_SHIFT.impl, f"{target}, {value}, {subtract}", k)
        self.emit(f"{target} = {call}", s.loc)

    @staticmethod
    def finite(x: str, dtype: str) -> str:
        """A condition that holds when ``x`` is finite (not inf, not nan)."""
        if dtype == "complex":
            return f"(abs({x}.real) < _rb_math.inf and abs({x}.imag) < _rb_math.inf)"
        if dtype in ("int", "bool"):
            return "True"
        return f"abs({x}) < _rb_math.inf"

    def elementwise_loops(self, lead, ndim: int, value, loc: ir.Loc) -> tuple[str, ...]:
        """Open loops over every element of ``lead`` (an array variable, its name, or a
        sub-array); with checks on, first check that every array ``value`` reads
        elementwise has its shape.  Returns the index names."""
        if isinstance(lead, str):
            lead = ir.Var(lead)
        if self.opt.check:
            others = {expr_text(n): n for n in self.array_nodes(value)}
            others.pop(expr_text(lead), None)
            for text in sorted(others):
                k = self.check("shape", expr_text(lead), loc, text)
                for ax in range(ndim):
                    mine, theirs = self.shape_code(lead, ax), self.shape_code(others[text], ax)
                    self.emit(f"if {theirs} != {mine}:", loc)
                    self.emit("    " + self.fail(k, theirs, mine, str(ax)), loc)
        idx = tuple(self.tmp("i") for _ in range(ndim))
        for ax, i in enumerate(idx):
            self.emit(f"for {i} in range({self.shape_code(lead, ax)}):", loc)
            self.level += 1
        return idx

    # -- sub-arrays (A[i], x[a:b]) ----------------------------------------------------
    def is_view(self, e) -> bool:
        return isinstance(e, ir.Elem) and ir.is_subarray(e, self.type_of(e.name).ndim)

    def array_nodes(self, e) -> list:
        """The whole arrays and sub-arrays an elementwise expression reads, in order
        (not those inside its sums, which are summed)."""
        return [n for n in ir.walk_elementwise(e)
                if (isinstance(n, ir.Var) and self.type_of(n.name).is_array) or self.is_view(n)]

    def _view_codes(self, e: ir.Elem) -> tuple[tuple, tuple]:
        """Per axis of the array, the code of its index (``None`` along the sub-array's
        axes); per axis of the sub-array, the codes of its bounds ``(lo, hi)``."""
        fixed, spans = [], []
        for ax in range(self.type_of(e.name).ndim):
            part = e.indices[ax] if ax < len(e.indices) else None
            if part is not None and not isinstance(part, ir.Slice):
                fixed.append(self.x(part))
                continue
            fixed.append(None)
            spans.append(tuple(self.x(b) for b in ir.slice_bounds(e.name, ax, part)))
        return tuple(fixed), tuple(spans)

    def view_steps(self, e: ir.Elem) -> tuple[int, ...]:
        """Per axis of the sub-array, its step (``x[::2]``: 2), a constant of the IR."""
        return tuple(ir.slice_step(part)
                     for _, part in ir.subarray_axes(e, self.type_of(e.name).ndim))

    def view_parts(self, e: ir.Elem) -> tuple[tuple, tuple]:
        hit = self._views.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        return self._view_codes(e)  # outside a statement (the debugger): inline codes

    def prepare_view(self, e: ir.Elem, loc: ir.Loc) -> None:
        """Work out a sub-array's indices and bounds once, before its statement's loops
        (negative bounds counted from the end); with checks on, refuse bounds outside
        the axis (NumPy would silently clip them, and the shape with them)."""
        fixed, spans = self._view_codes(e)
        new_fixed = []
        for code in fixed:
            if code is not None and not code.isidentifier() and not code.isdigit():
                t = self.tmp("k")
                self.emit(f"{t} = {code}", loc)
                code = t
            new_fixed.append(code)
        axes = [ax for ax, c in enumerate(fixed) if c is None]
        new_spans = []
        for ax, (lo, hi) in zip(axes, spans):
            n = f"{e.name}.shape[{ax}]"
            if (lo, hi) != ("0", n):
                tl, th = self.tmp("lo"), self.tmp("hi")
                self.emit(f"{tl} = {lo}", loc)
                self.emit(f"{th} = {hi}", loc)
                if self.opt.check:
                    k = self.check("slice", expr_text(e), loc)
                    self.emit(f"if not (0 <= {tl} <= {th} <= {n}):", loc)
                    self.emit("    " + self.fail(k, tl, th, str(ax), n), loc)
                lo, hi = tl, th
            new_spans.append((lo, hi))
        self._views[id(e)] = (e, (tuple(new_fixed), tuple(new_spans)))

    def view_code(self, e: ir.Elem) -> str:
        """The sub-array as a NumPy view: ``A[i, lo:hi]``."""
        fixed, spans = self.view_parts(e)
        parts, it, steps = [], iter(spans), iter(self.view_steps(e))
        for ax, code in enumerate(fixed):
            if code is None:
                lo, hi = next(it)
                step = next(steps)
                code = ":" if (lo, hi) == ("0", f"{e.name}.shape[{ax}]") else f"{lo}:{hi}"
                code = code if step == 1 else f"{code}:{step}" if code != ":" else f"::{step}"
            parts.append(code)
        return f"{e.name}[{', '.join(parts)}]"

    def view_elem(self, e: ir.Elem, ew: tuple[str, ...]) -> str:
        """Element ``ew`` of the sub-array, indexed in the array itself (no view object)."""
        fixed, spans = self.view_parts(e)
        if len(ew) != len(spans):  # a sum outside a statement: one tuple index
            return f"{self.view_code(e)}[{', '.join(ew)}]"
        parts, j, steps = [], 0, self.view_steps(e)
        for code in fixed:
            if code is None:
                lo = spans[j][0]
                k = ew[j] if steps[j] == 1 else f"{ew[j]} * {steps[j]}"
                code = k if lo == "0" else f"{lo} + {k}"
                j += 1
            parts.append(code)
        return f"{e.name}[{', '.join(parts)}]"

    def shape_code(self, node, ax: int) -> str:
        """The length of axis ``ax`` of an array variable or a sub-array."""
        if isinstance(node, ir.Var):
            return f"{node.name}.shape[{ax}]"
        lo, hi = self.view_parts(node)[1][ax]
        span = hi if lo == "0" else f"({hi} - {lo})"
        step = self.view_steps(node)[ax]
        return span if step == 1 else f"(({span} + {step - 1}) // {step})"

    def axis_range(self, e: ir.Elem, ax: int) -> tuple[str, str]:
        """The indices ``[lo, hi)`` that element or sub-array ``e`` covers along axis ``ax``
        of its array (negative indices wrapped)."""
        n = f"{e.name}.shape[{ax}]"
        part = e.indices[ax] if ax < len(e.indices) else None
        if part is None:
            return "0", n
        if isinstance(part, ir.Slice):
            if self.is_view(e):
                fixed, spans = self.view_parts(e)
                return spans[sum(1 for c in fixed[:ax] if c is None)]
            return tuple(self.x(b) for b in ir.slice_bounds(e.name, ax, part))
        i = self.x(part)
        w = f"({i} if {i} >= 0 else {i} + {n})"
        return w, f"{w} + 1"

    def alias_check(self, a: ir.Elem, b: ir.Elem, kind: str, loc: ir.Loc,
                    shown: ir.Target | None = None) -> None:
        """Fail if ``a`` (written) and ``b`` (read) meet at run time; ``shown``: how the
        message names ``a`` (a lowered statement's whole target, for one of its elements)."""
        if self.is_view(a) or self.is_view(b):
            # sub-arrays: they overlap where, along every axis both index, they share an
            # index (the axes are independent, so that is exact)
            k = self.check({"alias": "overlap", "call-alias": "call-overlap"}[kind],
                           expr_text(shown or a), loc, expr_text(b))
            conds, first, spanned = [], ("0", "0"), False
            for ax in range(min(len(a.indices), len(b.indices))):
                sa, sb = (_axis_step(e, ax) for e in (a, b))
                (la, ha), (lb, hb) = self.axis_range(a, ax), self.axis_range(b, ax)
                meet, low, high = _progressions_meet(la, ha, sa or 1, lb, hb, sb or 1)
                conds.append(meet)
                # the message names the shared indices along the first axis a slice spans
                if not spanned and (ax == 0 or sa is not None or sb is not None):
                    first = (low, high)
                    spanned = sa is not None or sb is not None
            self.emit(f"if {' and '.join(conds) or 'True'}:", loc)
            self.emit("    " + self.fail(k, *first), loc)
            return
        k = self.check(kind, expr_text(shown or a), loc, expr_text(b))
        conds, ia = [], []
        for ax, (i, j) in enumerate(zip(a.indices, b.indices)):
            # compare indices after wrapping negatives (x[-1] is x[n-1]); cheaper than %
            n = f"{a.name}.shape[{ax}]"
            wi, wj = (f"({self.x(e)} if {self.x(e)} >= 0 else {self.x(e)} + {n})" for e in (i, j))
            ia.append(wi)
            conds.append(f"{wi} == {wj}")
        # (the element's index as numbers: the first as the expected and actual value, the
        # others after them -- compiled code reports scalars, not tuples)
        self.emit(f"if {' and '.join(conds)}:", loc)
        self.emit("    " + self.fail(k, ia[0], ia[0], *ia[1:]), loc)

    def s_Swap(self, s: ir.Swap) -> None:
        ta = self.env[s.a.name]
        if isinstance(s.a, ir.Var) and ta.is_array:
            idx = self.elementwise_loops(s.a.name, ta.ndim, s.b, s.loc)
            ea, eb = f"{s.a.name}[{', '.join(idx)}]", f"{s.b.name}[{', '.join(idx)}]"
            self.emit(f"{ea}, {eb} = {eb}, {ea}", s.loc)
            self.level -= ta.ndim
            return
        a, b = self.x(s.a), self.x(s.b)
        self.emit(f"{a}, {b} = {b}, {a}", s.loc)

    def alloc_expr(self, name: str, init) -> str:
        if isinstance(init, ir.ArrayAlloc):
            t = self.env[name]
            dt = f"_rb_np.{NUMPY_NAMES[t.dtype]}"
            if init.kind == "zeros":
                shape = ", ".join(self.size(d) for d in init.shape)
                return f"_rb_np.zeros(({shape}{',' if len(init.shape) == 1 else ''}), dtype={dt})"
            if init.kind == "zeros_like":
                return f"_rb_np.zeros({init.source}.shape, dtype={dt})"
            return f"{init.source}.copy()"
        return self.x(init)

    def size(self, d: ir.Expr) -> str:
        """An array size as code: an int (a bool counts as 0 or 1, as in an index: NumPy's
        ``np.zeros(np.True_)`` refuses it, Numba's does not compile, native code took it)."""
        return self.cast(self.x(d), self.dtype(d), "int")

    def s_Alloc(self, s: ir.Alloc) -> None:
        init = s.init
        if s.name.startswith(hoist.LOCAL_PREFIX):
            self.loaded[s.name] = expr_text(init)
        elif s.name.startswith(cse.PREFIX):  # (a value: parenthesised where it is an operand)
            text = _LOADED.sub(lambda m: self.loaded.get(m[0], m[0]), expr_text(init))
            atomic = isinstance(init, (ir.Func, ir.Reduce, ir.Var, ir.Elem, ir.Const))
            self.loaded[s.name] = text if atomic else f"({text})"
        if self.opt.check and isinstance(init, ir.ArrayAlloc) and init.kind == "zeros":
            self.size_checks(s.name, init, s.loc)
        if self._loops and isinstance(init, ir.ArrayAlloc) and init.kind != "copy":
            self.buffered_alloc(s.name, init, s.loc)
            return
        self.emit(f"{s.name} = {self.alloc_expr(s.name, init)}", s.loc)

    def size_checks(self, name: str, init: ir.ArrayAlloc, loc: ir.Loc) -> None:
        """A negative size is the user's error, named with its line and variable (NumPy's
        and Numba's ``np.zeros`` raise a bare ``ValueError``)."""
        for ax, d in enumerate(init.shape):
            if isinstance(d, ir.Const) and d.value >= 0:
                continue
            k = self.check("alloc-size", name, loc, expr_text(d))
            size = self.x(d)
            self.emit(f"if {size} < 0:", loc)
            self.emit("    " + self.fail(k, "0", size, str(ax)), loc)

    def buffered_alloc(self, name: str, init: ir.ArrayAlloc, loc: ir.Loc) -> None:
        """``name = np.zeros(shape)`` inside a loop, without a heap allocation per
        iteration: the site keeps one buffer (allocated before the function's body, empty),
        reallocated only when the shape changes, and zeroed in place.

        Safe because an ancilla is freed in the block that allocates it: by the time the
        site runs again, the array it made last time is dead (arrays are passed to calls
        and swapped by their contents, never kept).  A negative size raises as
        ``np.zeros`` does (NumPy's and Numba's ``np.empty`` refuse it alike)."""
        t = self.env[name]
        dt = f"_rb_np.{NUMPY_NAMES[t.dtype]}"
        buf = self.tmp("buf")
        self.buffers.append((buf, t.ndim, dt))
        if init.kind == "zeros":
            shape = [self.size(d) for d in init.shape]
        else:
            shape = [f"{init.source}.shape[{ax}]" for ax in range(t.ndim)]
        if any(not code.isidentifier() and not code.isdigit() for code in shape):
            sizes = [self.tmp("n") for _ in shape]
            for n, code in zip(sizes, shape):
                self.emit(f"{n} = {code}", loc)
            shape = sizes
        differs = " or ".join(f"{buf}.shape[{ax}] != {n}" for ax, n in enumerate(shape))
        self.emit(f"if {differs}:", loc)
        self.emit(f"    {buf} = _rb_np.empty(({', '.join(shape)},), dtype={dt})", loc)
        self.emit(f"{name} = {buf}", loc)
        zero = "False" if t.dtype == "bool" else ZERO_CODE[t.dtype]
        if self.interpreted:
            self.emit(f"{name}.fill({zero})", loc)
            return
        # a loop: Numba's fill() is a slice assignment, twice as slow on small arrays
        idx = [self.tmp("z") for _ in range(t.ndim)]
        for ax, i in enumerate(idx):
            self.emit("    " * ax + f"for {i} in range({name}.shape[{ax}]):", loc)
        self.emit("    " * t.ndim + f"{name}[{', '.join(idx)}] = {zero}", loc)

    def s_Dealloc(self, s: ir.Dealloc) -> None:
        if s.discard:
            self.emit(f"# {s.name} is no longer needed", s.loc)
            return
        if not self.opt.check:
            self.emit(f"# del {s.name}", s.loc)
            return
        t = self.env[s.name]
        init = s.init
        if not t.is_array:
            e = self.tmp("e")
            self.emit(f"{e} = {self.x(init)}", s.loc)
            k = self.check("ancilla", s.name, s.loc)
            self.emit(f"if not ({self.close(s.name, e, t.dtype)}):", s.loc)
            self.emit("    " + self.fail(k, e, s.name), s.loc)
            return
        # arrays: the shape first, then every element
        if init.kind == "zeros":
            shapes = [self.x(d) for d in init.shape]
        else:
            shapes = [f"{init.source}.shape[{ax}]" for ax in range(t.ndim)]
        ks = self.check("ancilla-shape", s.name, s.loc, "")
        for ax, n in enumerate(shapes):
            self.emit(f"if {s.name}.shape[{ax}] != {n}:", s.loc)
            self.emit("    " + self.fail(ks, n, f"{s.name}.shape[{ax}]", str(ax)), s.loc)
        idx = tuple(self.tmp("i") for _ in range(t.ndim))
        for ax, i in enumerate(idx):
            self.emit(f"for {i} in range({s.name}.shape[{ax}]):", s.loc)
            self.level += 1
        el = f"{s.name}[{', '.join(idx)}]"
        expected = f"{init.source}[{', '.join(idx)}]" if init.kind == "copy" else \
            {"bool": "False", "int": "0", "float": "0.0", "complex": "0j"}[t.dtype]
        k = self.check("ancilla", s.name, s.loc)
        self.emit(f"if not ({self.close(el, expected, t.dtype)}):", s.loc)
        self.emit("    " + self.fail(k, expected, el, *idx), s.loc)
        self.level -= t.ndim

    def s_Call(self, s: ir.Call) -> None:
        # argument types follow from the variables' types (fixed per function), so
        # calls in inverted copies of a block need no bookkeeping of their own
        types = tuple(self.type_of(a.name) if isinstance(a, ir.Var) else self.t.expr_type(a)
                      for a in s.args)
        symbol = self.callee_symbol(s, types)
        if self.opt.check:
            for a, b in s.alias_checks:
                self.alias_check(a, b, "call-alias", s.loc)
        names, writeback = [], []
        for a, changed in self.call_arguments(s):
            if isinstance(a, ir.Var):
                names.append(a.name)
                continue
            if self.is_view(a):  # a NumPy view: the callee updates the array in place
                v = self.tmp("a")
                self.emit(f"{v} = {self.view_code(a)}", s.loc)
                names.append(v)
                continue
            idx = []
            for i in a.indices:
                k = self.tmp("k")
                self.emit(f"{k} = {self.x(i)}", s.loc)
                idx.append(k)
            el = f"{a.name}[{', '.join(idx)}]"
            v = self.tmp("a")
            self.emit(f"{v} = {el}", s.loc)
            names.append(v)
            if changed:  # the callee never writes it: no store back
                writeback.append(f"{el} = {v}")
        lhs = ", ".join(names) + ("," if len(names) == 1 else "")
        self.emit(f"{lhs} = {symbol}({', '.join((*names, *self.EXTRA_PARAMS))})", s.loc)
        self.after_call(s.loc)
        for w in writeback:
            self.emit(w, s.loc)

    @staticmethod
    def passed(s: ir.Call) -> tuple[ir.Target, ...]:
        """What a call passes, in order: its arguments, then a reverse sweep's adjoints and
        a tangent call's (second order) tangents."""
        return (*s.args, *(a for a in s.adj_args if a is not None and s.backward),
                *(a for a in s.tan_args if a is not None))

    def call_arguments(self, s: ir.Call) -> tuple[tuple[ir.Target, bool], ...]:
        """:meth:`passed`, each with whether the callee may change it."""
        args = self.passed(s)
        return tuple(zip(args, self.callee_writes(s) + (True,) * (len(args) - len(s.args))))

    def after_call(self, loc: ir.Loc) -> None:
        """Lines after a call of a callee (none here: its failures raise)."""

    def s_Block(self, s: ir.Block) -> None:
        self.emit(f"# {s.label or 'block'}", s.loc)
        for st in s.body:
            self.stmt(st)

    def s_Inverted(self, s: ir.Inverted) -> None:
        self.emit(f"# {'~' + s.label if not s.label.startswith('~') else s.label} (inverted)", s.loc)
        for st in invert_body(s.body):
            self.stmt(st)

    def needs_post(self, s: ir.If) -> bool:
        """Whether an ``if`` checks its postcondition after the branch: with checks on,
        unless it is the condition itself and no branch can change what that reads."""
        return self.opt.check and not (
            s.pre == s.post and not (ir.names_read(s.pre) & ir.names_written(s.then + s.orelse)))

    def if_post_check(self, s: ir.If, c: str) -> None:
        """After the branch: the postcondition must hold exactly when the condition ``c``
        held before it."""
        k = self.check("if-post", expr_text(s.post), s.loc, expr_text(s.pre))
        p = self.tmp("p")
        self.emit(f"{p} = bool({self.x(s.post)})", s.loc)
        self.emit(f"if {p} != {c}:", s.loc)
        self.emit("    " + self.fail(k, c, p), s.loc)

    def s_If(self, s: ir.If) -> None:
        needs_post = self.needs_post(s)
        if needs_post:
            c = self.tmp("c")
            self.emit(f"{c} = bool({self.x(s.pre)})", s.loc)
            self.emit(f"if {c}:", s.loc)
        else:
            self.emit(f"if {self.x(s.pre)}:", s.loc)
        self.level += 1
        self.body(s.then)
        self.level -= 1
        if s.orelse:
            self.emit("else:", s.loc)
            self.level += 1
            self.body(s.orelse)
            self.level -= 1
        if needs_post:
            self.if_post_check(s, c)

    def poll(self, loop: ir.For | ir.While) -> None:
        """Let a long-running loop notice Ctrl-C (:func:`revbench.backends.runtime.interrupted`,
        a few nanoseconds).  A loop around loops or calls asks at every iteration, which
        does real work; a ``while`` around plain statements every ``POLL_MASK + 1``
        iterations; an innermost ``for`` never, so it stays free of exits and vectorises."""
        if any(isinstance(st, (ir.For, ir.While, ir.Call)) for st in ir.walk_stmts(loop.body)):
            self.emit("if _rb_interrupted():", loop.loc)
        elif isinstance(loop, ir.While):
            self.polls = True
            self.emit("_rb_ticks += 1", loop.loc)
            self.emit(f"if (_rb_ticks & {POLL_MASK}) == 0 and _rb_interrupted():", loop.loc)
        else:
            return
        self.interruptible = True
        self.emit("    raise _RbInterrupted()", loop.loc)

    def while_entry_check(self, s: ir.While) -> None:
        """Before a ``while`` loop (checks on): its postcondition must be false."""
        if self.opt.check:
            k = self.check("while-entry", expr_text(s.post), s.loc)
            self.emit(f"if {self.x(s.post)}:", s.loc)
            self.emit("    " + self.fail(k, "False", "True"), s.loc)

    def while_iter_check(self, s: ir.While) -> None:
        """After each iteration (checks on): the postcondition must be true."""
        if self.opt.check:
            k = self.check("while-iter", expr_text(s.post), s.loc)
            self.emit(f"if not {self.x(s.post)}:", s.loc)
            self.emit("    " + self.fail(k, "True", "False"), s.loc)

    def s_While(self, s: ir.While) -> None:
        self.while_entry_check(s)
        self.emit(f"while {self.x(s.cond)}:", s.loc)
        self.level += 1
        self._loops += 1
        self.poll(s)
        self.body(s.body)
        self._loops -= 1
        self.while_iter_check(s)
        self.level -= 1

    def for_bounds(self, s: ir.For) -> tuple[str, str, str]:
        """A ``for`` loop's start, stop and step, computed once before it (with checks on,
        a step of 0 raises): their code."""
        # a bound the body cannot change is used as it is: less code for Numba to type
        # (the GMM gradient has some thirty loops), the same loop
        changing = ir.names_written(s.body)
        bounds = []
        for e, stem in ((s.start, "start"), (s.stop, "stop"), (s.step, "step")):
            if isinstance(e, ir.Const) or (isinstance(e, ir.Var) and e.name not in changing):
                bounds.append(self.x(e))
            else:
                bounds.append(self.tmp(stem))
                self.emit(f"{bounds[-1]} = {self.x(e)}", s.loc)
        a, b, st = bounds
        if self.opt.check and not isinstance(s.step, ir.Const):
            k = self.check("for-step", expr_text(s.step), s.loc)
            self.emit(f"if {st} == 0:", s.loc)
            self.emit("    " + self.fail(k, "1", st), s.loc)
        return a, b, st

    def for_bound_checks(self, s: ir.For, bounds: tuple[str, str, str]) -> None:
        """After a ``for`` loop (checks on): each bound the body could change must still
        be what it was (``bounds``: their code before the loop)."""
        if not self.opt.check:
            return
        written = ir.names_written(s.body)
        for e, v, what in zip((s.start, s.stop, s.step), bounds, ("start", "stop", "step")):
            if not (ir.names_read(e) & written):  # len/shape never change
                continue  # nothing the bound reads can change inside the loop
            k = self.check("for-bound", expr_text(e), s.loc, what)
            now = self.tmp("now")
            self.emit(f"{now} = {self.x(e)}", s.loc)
            self.emit(f"if {now} != {v}:", s.loc)
            self.emit("    " + self.fail(k, v, now), s.loc)

    def s_For(self, s: ir.For) -> None:
        a, b, st = self.for_bounds(s)
        const_step = ranges.const_int(s.step)
        # Compiled code counts a range's elements as ``stop - start``, which overflows
        # where the range spans more than int64 does (range(-2**63, 2**63 - 1, 2**62): 4
        # elements, and Numba ran 0).  Where the bounds' forms show that it cannot, the
        # loop is written plainly; elsewhere the loop counts with the exact length (RANGE_LEN), and its
        # variable is start + k * step, which fits since it is an element of the range.
        # (What the bounds can be: lang/ranges.py.)
        if self._sizes is None:
            self._sizes = size_names(self.f)
        from_zero = (a, const_step) == ("0", 1)  # range(b): counted as b, which fits
        plain = (from_zero and not s.reverse) or ranges.counts_plainly(s, self._ranges,
                                                                        self._sizes)
        count = None
        if not plain:
            count = self.tmp("n")
            if from_zero:
                self.emit(f"{count} = max({b}, 0)", s.loc)
            else:
                self.user_functions[RANGE_LEN.impl] = RANGE_LEN
                self.emit(f"{count} = {RANGE_LEN.impl}({a}, {b}, {st})", s.loc)
        promoted = []
        for elem in self.accumulators(s):
            acc = self.tmp("adj_acc" if ir.is_adjoint(elem.name) else "acc")
            if not promoted:
                nonempty = (f"{count} > 0" if count else f"{a} < {b}" if const_step == 1 else
                            f"{a} > {b}" if const_step == -1 else f"len(range({a}, {b}, {st})) > 0")
            self.emit(f"{acc} = {ZERO_CODE[self.env[elem.name].dtype]}", s.loc)
            self.emit(f"if {nonempty}:", s.loc)
            self.emit(f"    {acc} = {self.x(elem)}", s.loc)
            promoted.append((elem, acc))
        self._promoted.update(promoted)
        if count is not None:
            k = self.tmp("k")
            walk = f"{count} - 1, -1, -1" if s.reverse else count
            self.emit(f"for {k} in range({walk}):", s.loc)
            value = (k if from_zero else f"{a} + {k}" if const_step == 1 else
                     f"{a} - {k}" if const_step == -1
                     else self.wrap_helper("+", a, self.wrap_helper("*", k, st)))
            self.emit(f"    {s.var} = {value}", s.loc)
        elif not s.reverse:
            walk = b if (a, const_step) == ("0", 1) else f"{a}, {b}" if const_step == 1 else \
                f"{a}, {b}, {st}"
            self.emit(f"for {s.var} in range({walk}):", s.loc)
        elif const_step == 1:
            self.emit(f"for {s.var} in range({b} - 1, {a} - 1, -1):", s.loc)
        elif const_step == -1:
            self.emit(f"for {s.var} in range({b} + 1, {a} + 1, 1):", s.loc)
        else:
            n = self.tmp("n")
            self.emit(f"{n} = len(range({a}, {b}, {st}))", s.loc)
            self.emit(f"for {s.var} in range({a} + ({n} - 1) * {st}, {a} - {st}, -{st}):", s.loc)
        self.level += 1
        self._loops += 1
        outer = self._ranges.get(s.var)
        self._ranges[s.var] = ranges.loop_range(s)
        self.poll(s)
        self.body(s.body)
        if outer is None:
            del self._ranges[s.var]
        else:
            self._ranges[s.var] = outer
        self._loops -= 1
        self.level -= 1
        for elem, _ in promoted:
            del self._promoted[elem]
        for elem, acc in promoted:
            self.emit(f"if {nonempty}:", s.loc)
            self.emit(f"    {self.x(elem)} = {acc}", s.loc)
        self.for_bound_checks(s, (a, b, st))

    def accumulators(self, loop: ir.For) -> list[ir.Elem]:
        """The array elements the loop only accumulates into at one place, to keep in a
        local for the whole loop (loaded before it, stored after it).

        ``y[i] += A[i, j] * x[j]`` inside a loop over ``j`` -- or, in a reverse sweep,
        ``_rb_adj_xc[l] += h * icf[k, p]`` -- stores to memory every iteration, and LLVM
        cannot keep the element in a register: as far as it knows the other stores of the
        body may write the same memory.  Arrays under different names are distinct here,
        so where the element's indices do not change in the loop and the body touches its
        array at no other place (no other index, no call, no swap), a local holds it: the
        same additions in the same order, bit for bit, without the memory round trip
        (2.4x on the GMM gradient's triangular loop).  Checks see the same values (a check
        names the element as the user wrote it).  The load and the store are skipped when
        the loop runs no iteration, so an element the loop never reaches is never touched.
        """
        if self.interpreted:  # nothing to gain there
            return []
        changing = ir.names_written(loop.body) | {loop.var} | {
            st.var for st in ir.walk_stmts(loop.body) if isinstance(st, ir.For)}
        found: dict[ir.Elem, bool] = {}
        # an array allocated in the body is a new array each iteration (not there before it)
        refused: set[str] = {st.name for st in ir.walk_stmts(loop.body)
                             if isinstance(st, (ir.Alloc, ir.Dealloc))}
        for st in ir.walk_stmts(loop.body):
            if isinstance(st, ir.Call):
                refused.update(a.name for a in (*st.args, *st.adj_args, *st.tan_args)
                               if a is not None)
                continue
            if isinstance(st, ir.Swap):
                refused.update((st.a.name, st.b.name))
                continue
            if isinstance(st, ir.Update) and isinstance(st.target, ir.Elem):
                if st.op in (ADD, SUB):
                    found.setdefault(st.target, True)
                else:
                    refused.add(st.target.name)
            for e in ir.statement_expressions(st):
                for n in ir.walk_expr(e):
                    if isinstance(n, ir.Var):
                        refused.add(n.name)
                    elif isinstance(n, ir.Elem):
                        found.setdefault(n, False)
                    elif isinstance(n, ir.ArrayAlloc) and n.source:
                        refused.add(n.source)
        out = []
        for elem, updated in found.items():
            t = self.env.get(elem.name)
            if (not updated or elem.name in refused or elem in self._promoted
                    or t is None or not t.is_array
                    or len(elem.indices) != t.ndim
                    or any(isinstance(i, ir.Slice) for i in elem.indices)
                    or any(ir.names_read(i) & changing for i in elem.indices)
                    or any(o.name == elem.name and o != elem for o in found)):
                continue
            out.append(elem)
        return out

    def imports(self) -> list[str]:
        """The module's import lines: what the generated function uses."""
        lines = ["import math as _rb_math", "import numpy as _rb_np"]
        if self.interruptible:
            lines.append("from revbench.backends.runtime import Interrupted as _RbInterrupted, "
                         "interrupted as _rb_interrupted")
        if self.opt.check:
            lines.append("from revbench.backends.runtime import CheckFailed as _RbCheckFailed")
        if self.uses_libm:
            lines.append("from revbench.backends import libm as _rb_libm")
        if self.interpreted:
            # (Python's complex numbers raise OverflowError where compiled code and NumPy
            # give inf: abs() of a huge complex number, a complex power that overflows)
            lines.append("from revbench.backends.runtime import complex_pow as _rb_cpow, "
                         "safe_abs as abs")
        return lines

    def s_Print(self, s: ir.Print) -> None:
        args = ", ".join(repr(a) if isinstance(a, str) else self.x(a) for a in s.args)
        self.emit(f"print({args})", s.loc)

    def s_Assert(self, s: ir.Assert) -> None:
        msg = s.message or "assertion failed"
        msg = f"{msg}: `{expr_text(s.cond)}` (in {self.f.name}, line {s.loc.line})"
        self.emit(f"assert {self.x(s.cond)}, {msg!r}", s.loc)


def generate(typed: TypedFunction, direction: Direction, options: Options,
             callee_symbol: Callable[[ir.Call, tuple[VarType, ...]], str],
             callee_writes: Callable[[ir.Call], tuple[bool, ...]] | None = None,
             emitter: Emitter | None = None) -> Generated:
    """Generate the module source for one specialised function and direction (with
    ``emitter``, another target's emitter: :mod:`revbench.backends.cuda_codegen`)."""
    em = emitter or Emitter(typed, direction, options, callee_symbol, callee_writes)
    fname = f"{typed.func.name}__{direction.name.replace('-', '_')}"
    em.function(fname)
    sig = ", ".join(f"{p}: {t}" for p, t in zip(typed.func.params, typed.params))
    user_fps = sorted(f"{r.name}={r.fingerprint}" for r in em.user_functions.values())
    # (not the file the function is in: a notebook cell run again is a new file, the same
    # code -- and the same compiled module, found again)
    header = [
        f"# revbench {direction} code for {typed.func.name}",
        f"# signature: ({sig}); checks {'on' if options.check else 'off'}; codegen v{CODEGEN_VERSION} "
        f"(helpers {HELPERS_FINGERPRINT})",
    ]
    if user_fps:
        header.append(f"# user functions: {', '.join(user_fps)}")
    if options.fastmath:
        header.append(f"# fastmath: {', '.join(sorted(FASTMATH_FLAGS))}")
    header += em.imports()
    body_text = "\n".join(header + em.lines) + "\n"
    key = hashlib.sha256(body_text.encode()).hexdigest()[:32]
    module_key = int(key[:15], 16)
    lines = header + [f"_RB_MODULE = {module_key}", ""]
    shift = len(lines)
    source = "\n".join(lines + em.lines) + "\n"
    linemap = {g + shift: u for g, u in em.linemap.items()}
    needed = {r.impl: r for r in em.user_functions.values()}
    return Generated(source, key, fname, em.checks, linemap, needed, dict(em.env))


def assemble(comments: list[str], fname: str, params: tuple[str, ...], body: list[str],
             checks: list[CheckInfo], line: int, check: bool) -> Generated:
    """A generated module from lines written by hand rather than from IR (a custom
    adjoint's sweep, an external function's kernels): the usual header, ``_RB_MODULE``,
    the calling convention ``fname(*params, atol, rtol)``, and every line mapped to the
    user's ``line`` (the function's ``def``)."""
    # (the helpers' fingerprint: the kernels this code calls are linked in or called by
    # name, so new helpers are a new module -- never a cached one calling the old kernels)
    header = [*comments, f"# helpers {HELPERS_FINGERPRINT}", "import math as _rb_math",
              "import numpy as _rb_np"]
    if check:
        header.append("from revbench.backends.runtime import CheckFailed as _RbCheckFailed")
    lines = [f"def {fname}({', '.join((*params, '_rb_gatol', '_rb_grtol'))}):",
             *("    " + b for b in body)]
    key = hashlib.sha256("\n".join(header + lines).encode()).hexdigest()[:32]
    head = [*header, f"_RB_MODULE = {int(key[:15], 16)}", ""]
    source = "\n".join(head + lines) + "\n"
    linemap = {g: line for g in range(len(head) + 1, len(head) + len(lines) + 1)}
    return Generated(source, key, fname, checks, linemap)
