"""IR -> CUDA device functions: the CPU code generator, retargeted.

The same :class:`~revbench.backends.codegen.Emitter` walks the same IR; this subclass
changes only what a GPU thread cannot do the CPU's way:

* **allocations** become ``cuda.local.array`` of a size fixed when the kernel is
  specialised (the arrays' shapes are part of the specialisation); a size that depends
  on data is refused at its line, with why;
* **checks** cannot raise: a failing check writes ``(module, check + 1)`` into the item's
  status slots (the first failure wins) and the thread goes on with harmless values,
  leaving its loops at their next iteration; where going on could read past an array
  it returns.  The host reads the status after the kernel and raises the CPU's error
  (:mod:`revbench.ad.gpu`);
* **indices** are checked explicitly (the CPU's Numba checks bounds itself; a GPU reads
  whatever lies there): an index out of range reports and reads element 0;
* **division** by zero reports (the CPU raises ``ZeroDivisionError``; CUDA gives inf);
* **scalar math** calls ``math`` (CUDA's libdevice), not NumPy's array functions.

Complex numbers, registered user functions, custom adjoints and external functions
are not supported on the GPU: refused with a message before anything compiles.
"""

from __future__ import annotations

from collections.abc import Callable

from revbench.backends import blas, codegen
from revbench.backends.codegen import ZERO_CODE, Emitter, Generated, Options
from revbench.lang import ir, products
from revbench.lang.errors import ReversibilityTypeError
from revbench.lang.text import expr_text
from revbench.lang.types import NUMPY_NAMES, TypedFunction, VarType
from revbench.rules import checks
from revbench.rules import functions as fn_rules
from revbench.transforms.pipeline import Direction

#: an array's shape, known when the kernel is specialised (None: not known)
Shape = tuple[int, ...] | None

#: what the device helpers (:mod:`revbench.backends.cuda_backend`) are called in the
#: generated text: every one takes the module key, the check's number and the status
INDEX_HELPER = "_rb_ix"
#: revbench's own functions written in Python that the GPU runs too
#: (:data:`revbench.backends.cuda_helpers.SPECIAL`; the CPU's rule table names them)
SPECIAL_FUNCTIONS = ("digamma", "trigamma", "minimum", "maximum", "fmin", "fmax", "sign")
#: (operator, the result's dtype) -> the helper that reports a zero divisor
DIV_HELPERS = {("/", "float"): "_rb_fdiv", ("//", "int"): "_rb_ifloordiv0",
               ("%", "int"): "_rb_imod0", ("//", "float"): "_rb_ffloordiv0",
               ("%", "float"): "_rb_fmod0"}


#: failed checks after which the code must not go on: it would index past an array's end
#: (shapes that disagree, a slice out of range), loop forever (a zero step) or divide by 0
STOPPING_CHECKS = checks.STOPPING  # (CheckKind.stops_thread in the check table)


class CudaEmitter(Emitter):
    """The :class:`Emitter` for device functions (see the module docstring)."""

    EXTRA_PARAMS = ("_rb_gatol", "_rb_grtol", "_rb_st")

    def __init__(self, typed: TypedFunction, direction: Direction, options: Options,
                 callee_symbol: Callable[[ir.Call, tuple[VarType, ...], tuple[Shape, ...]], str],
                 callee_writes: Callable[[ir.Call], tuple[bool, ...]] | None,
                 shapes: dict[str, Shape]):
        super().__init__(typed, direction, options,
                         lambda call, types: callee_symbol(call, types, self.arg_shapes(call)),
                         callee_writes)
        self.shapes: dict[str, Shape] = dict(shapes)
        self.ints: dict[str, int] = {}  # int locals whose value is known at specialisation
        self.ranges: dict[str, tuple[int, int]] = {}  # loop variable -> its least, greatest
        # variables changed after they are set (not merely allocated)
        self.changed = ir.names_written(typed.func.body) - {
            st.name for st in ir.walk_stmts(typed.func.body)
            if isinstance(st, (ir.Alloc, ir.Dealloc))} | {
            n for st in ir.walk_stmts(typed.func.body) if isinstance(st, (ir.Update, ir.Swap, ir.Call))
            for n in ir.names_written((st,))}
        params = typed.func.params
        self.ret = "(" + ", ".join(params) + ("," if len(params) == 1 else "") + ")"
        self.helpers: set[str] = set()  # device helpers the code calls
        for name, t in typed.env.items():
            if t.dtype == "complex":
                self.refuse(f"`{name}` is complex: complex numbers are not supported on the "
                            "GPU (yet); run it on the CPU", self._line_of(name), name)

    def _line_of(self, name: str) -> int:
        """Where ``name`` gets its value: the first statement that sets it, or (an argument)
        the ``def`` line."""
        f = self.f
        for st in ir.walk_stmts(f.body):
            if name in ir.names_written((st,)) and st.loc.line:
                return st.loc.line
        line = f.firstlineno
        while line < f.firstlineno + 50 and not f.line_text(line).lstrip().startswith("def "):
            line += 1  # (past the decorators)
        return line if f.line_text(line).lstrip().startswith("def ") else f.firstlineno

    # -- refusals and sizes ---------------------------------------------------
    def refuse(self, why: str, line: int, variable: str = "") -> None:
        f = self.f
        text = f.line_text(line).strip() if line else ""
        where = (f"\n  in reversible function {ir.shown_name(f.name)}, {ir.shown_file(f.filename)}, line "
                 f"{line}: {text}" if line else "")
        raise ReversibilityTypeError(f"on the GPU (device='cuda'): {why}{where}",
                                     variable=variable, function=f.name, filename=f.filename,
                                     lineno=line or None, stage="types")

    def fold(self, e) -> int | None:
        """The value of an integer size expression when the kernel is specialised, or None
        when it depends on data."""
        if isinstance(e, ir.Const) and type(e.value) is int:
            return e.value
        if isinstance(e, (ir.Shape, ir.Len)):
            shape = self.shapes.get(e.name)
            axis = e.axis if isinstance(e, ir.Shape) else 0
            return shape[axis] if shape is not None and axis < len(shape) else None
        if isinstance(e, ir.Var):
            return self.ints.get(e.name)
        if isinstance(e, ir.BinOp) and e.op in ("+", "-", "*", "//"):
            a, b = self.fold(e.left), self.fold(e.right)
            if a is None or b is None or (e.op == "//" and b == 0):
                return None
            return {"+": a + b, "-": a - b, "*": a * b, "//": a // b if b else 0}[e.op]
        return None

    def interval(self, e) -> tuple[int, int] | None:
        """The least and the greatest value integer expression ``e`` can take, where the
        specialisation tells (constants, sizes, loop variables over known ranges): an
        index inside its axis needs no check, a sum of small numbers none for overflow."""
        v = self.fold(e)
        if v is not None:
            return v, v
        if isinstance(e, ir.Var):
            return self.ranges.get(e.name)
        if isinstance(e, ir.BinOp) and e.op in ("+", "-", "*"):
            a, b = self.interval(e.left), self.interval(e.right)
            if a is None or b is None:
                return None
            if e.op == "+":
                return a[0] + b[0], a[1] + b[1]
            if e.op == "-":
                return a[0] - b[1], a[1] - b[0]
            ends = [x * y for x in a for y in b]
            return min(ends), max(ends)
        return None

    def index_safe(self, name: str, ax: int, index) -> bool:
        shape = self.shapes.get(name)
        r = self.interval(index)
        return shape is not None and r is not None and 0 <= r[0] and r[1] < shape[ax]

    def s_For(self, s: ir.For) -> None:
        step = s.step.value if isinstance(s.step, ir.Const) else None
        start, stop = self.interval(s.start), self.interval(s.stop)
        known = None
        if start is not None and stop is not None and step:
            known = (start[0], stop[1] - 1) if step > 0 else (stop[0] + 1, start[1])
        if known is not None and s.var not in self.changed:
            self.ranges[s.var] = known
        try:
            super().s_For(s)
        finally:
            self.ranges.pop(s.var, None)

    def int_helper(self, op: str, e, *args: str) -> str:
        r = self.interval(e) if op in ("+", "-", "*") else None
        if r is not None and -2**62 < r[0] and r[1] < 2**62:
            return f"({args[0]} {op} {args[1]})"  # cannot overflow: no check
        return super().int_helper(op, e, *args)

    def static_shape(self, name: str, init: ir.ArrayAlloc, loc: ir.Loc) -> tuple[int, ...]:
        if init.kind == "zeros":
            dims = [self.fold(d) for d in init.shape]
            if any(d is None for d in dims):
                bad = next(expr_text(d) for d, v in zip(init.shape, dims) if v is None)
                self.refuse(f"the size `{bad}` of `{name}` depends on data. A GPU thread "
                            "allocates its arrays when the kernel is compiled, so their sizes "
                            "must follow from the shapes of the arguments (`x.shape[0]`, "
                            "`len(x)`, `np.zeros_like(x)`) or be constants", loc.line, name)
            for d, v in zip(init.shape, dims):
                if v < 0:
                    self.refuse(f"the size `{expr_text(d)}` of `{name}` is {v}: an array "
                                "cannot have a negative size", loc.line, name)
            return tuple(dims)
        shape = self.shapes.get(init.source)
        if shape is None:
            self.refuse(f"the shape of `{init.source}` (copied into `{name}`) is not known "
                        "when the kernel is compiled: pass whole arrays, or allocate with "
                        "constant sizes", loc.line, name)
        return shape

    def arg_shapes(self, call: ir.Call) -> tuple[Shape, ...]:
        """The shapes of a call's arguments, as far as they are known here."""
        out: list[Shape] = []
        for a in self.passed(call):
            if isinstance(a, ir.Var):
                out.append(self.shapes.get(a.name))
            elif self.is_view(a):
                out.append(self.view_shape(a))
            else:
                out.append(())
        return tuple(out)

    def view_shape(self, e: ir.Elem) -> Shape:
        shape = self.shapes.get(e.name)
        if shape is None:
            return None
        dims = []
        for ax in range(len(shape)):
            part = e.indices[ax] if ax < len(e.indices) else None
            if part is not None and not isinstance(part, ir.Slice):
                continue
            lo, hi = (self.fold(b) for b in ir.slice_bounds(e.name, ax, part))
            if lo is None or hi is None:
                return None
            step = ir.slice_step(part)
            dims.append(max(0, (hi - lo + step - 1) // step))
        return tuple(dims)

    # -- checks report instead of raising ---------------------------------------
    def fail(self, k: int, expected: str, actual: str, *index: str) -> str:
        # Most failed checks only record themselves, and the thread goes on with harmless
        # values (indices and divisors are made safe by the helpers): an early return per
        # check would give Numba's SSA pass hundreds of exits to reconcile (minutes of
        # compiling).  Where going on would read outside an array or never end, return.
        self.helpers.add("_rb_fail")
        record = f"_rb_fail(_rb_st, _RB_MODULE, {k})"
        if self.checks[k].kind in STOPPING_CHECKS:
            return f"{record}; return {self.ret}"
        return record

    def helper_call(self, impl: str, args: str, k: int) -> str:
        return f"{impl}({args}, _RB_MODULE, {k}, _rb_st)"

    def poll(self, loop: ir.For | ir.While) -> None:
        # no Ctrl-C on a GPU thread; instead, a failed item leaves its loops
        if self.opt.check and (isinstance(loop, ir.While) or any(
                isinstance(st, (ir.For, ir.While, ir.Call)) for st in ir.walk_stmts(loop.body))):
            self.emit("if _rb_st[1] != 0:", loop.loc)
            self.emit("    break", loop.loc)

    # -- expressions ------------------------------------------------------------
    def x(self, e, ew: tuple[str, ...] = ()) -> str:
        complex_part = next((a for a in (e, *getattr(e, "args", ()))
                             if not isinstance(a, str) and self.dtype(a) == "complex"), None)
        if complex_part is not None:  # (a complex constant, `x * 1j`: no variable is complex)
            self.refuse(f"`{expr_text(complex_part)}` is complex: complex numbers are not "
                        "supported on the GPU (yet); run it on the CPU",
                        e.loc.line or self._loc.line)
        if isinstance(e, ir.Func):
            rule = fn_rules.lookup(e.name)
            if rule.user_function is not None and rule.name not in SPECIAL_FUNCTIONS:
                self.refuse(f"`{e.name}` is a registered Python function; the GPU runs only "
                            "revbench's own functions (yet)", e.loc.line or self._loc.line)
            if rule.name in ("real", "conj"):  # of a real number (complex is refused)
                return self.cast(self.x(e.args[0], ew), self.dtype(e.args[0]), "float")
            if rule.name == "imag":
                return "0.0"
            if rule.impl.startswith("_rb_np."):
                dts = [self.dtype(a) for a in e.args]
                args = [self.cast(self.x(a, ew), t, "float") for a, t in zip(e.args, dts)]
                return f"_rb_math.{rule.name}({', '.join(args)})"
        if (isinstance(e, ir.Elem) and self.opt.check and e not in self._promoted
                and not self.is_view(e)):
            idx = []
            for ax, i in enumerate(e.indices):
                if self.index_safe(e.name, ax, i):
                    idx.append(self.x(i))
                    continue
                k = self.check("index", e.name, e.loc if e.loc.line else self._loc, expr_text(e))
                self.helpers.add(INDEX_HELPER)
                idx.append(f"{INDEX_HELPER}({self.x(i)}, {e.name}.shape[{ax}], _RB_MODULE, "
                           f"{k}, _rb_st)")
            return f"{e.name}[{', '.join(idx)}]"
        return super().x(e, ew)

    @staticmethod
    def cast(code: str, dtype: str, to: str) -> str:
        if dtype == "bool" and to in ("float", "complex"):
            return f"(1.0 if {code} else 0.0)"
        return Emitter.cast(code, dtype, to)

    def binop(self, e: ir.BinOp, ew: tuple[str, ...]) -> str:
        if e.op == "**" and self.dtype(e) == "float" and self.dtype(e.right) == "float":
            left = self.cast(self.x(e.left, ew), self.dtype(e.left), "float")
            return f"({left} ** {self.x(e.right, ew)})"
        helper = DIV_HELPERS.get((e.op, self.dtype(e)))
        if self.opt.check and helper and not (
                isinstance(e.right, ir.Const) and e.right.value not in (0, -1)):
            to = self.dtype(e)
            left = self.cast(self.x(e.left, ew), self.dtype(e.left), to)
            right = self.cast(self.x(e.right, ew), self.dtype(e.right), to)
            k = self.check("division", expr_text(e.right), e.loc if e.loc.line else self._loc,
                           expr_text(e))
            self.helpers.add(helper)
            return self.helper_call(helper, f"{left}, {right}", k)
        return super().binop(e, ew)

    def _view_codes(self, e: ir.Elem) -> tuple[tuple, tuple]:
        fixed, spans = super()._view_codes(e)
        if not self.opt.check:
            return fixed, spans
        checked = []
        for ax, code in enumerate(fixed):
            if code is not None and not self.index_safe(e.name, ax, e.indices[ax]):
                k = self.check("index", e.name, self._loc, expr_text(e))
                self.helpers.add(INDEX_HELPER)
                code = f"{INDEX_HELPER}({code}, {e.name}.shape[{ax}], _RB_MODULE, {k}, _rb_st)"
            checked.append(code)
        return tuple(checked), spans

    # -- allocations: local arrays of sizes fixed at specialisation ---------------
    def local_array(self, name: str, shape: tuple[int, ...], dtype: str, loc: ir.Loc,
                    source: str | None = None) -> None:
        """``name`` as a new local array, zeroed (or a copy of ``source``): a local array
        starts with whatever the thread's stack held."""
        dt = f"_rb_np.{NUMPY_NAMES[dtype]}"
        dims = ", ".join(str(max(d, 1)) for d in shape)  # CUDA refuses a local array of size 0
        self.emit(f"{name} = _rb_cuda.local.array(({dims},), {dt})", loc)
        if 0 in shape:
            self.emit(f"{name} = {name}[{', '.join(':0' for _ in shape)}]", loc)
            return
        idx = [self.tmp("z") for _ in shape]
        for ax, (i, n) in enumerate(zip(idx, shape)):
            self.emit("    " * ax + f"for {i} in range({n}):", loc)
        zero = "False" if dtype == "bool" else ZERO_CODE[dtype]
        value = f"{source}[{', '.join(idx)}]" if source else zero
        self.emit("    " * len(shape) + f"{name}[{', '.join(idx)}] = {value}", loc)

    def s_Alloc(self, s: ir.Alloc) -> None:
        init, t = s.init, self.env[s.name]
        if isinstance(init, ir.ArrayAlloc):
            shape = self.static_shape(s.name, init, s.loc)
            self.shapes[s.name] = shape
            self.local_array(s.name, shape, t.dtype, s.loc,
                             init.source if init.kind == "copy" else None)
            return
        v = self.fold(init) if t.dtype == "int" and s.name not in self.changed else None
        if v is not None:
            self.ints[s.name] = v
        else:
            self.ints.pop(s.name, None)
        super().s_Alloc(s)

    def buffered_alloc(self, name: str, init: ir.ArrayAlloc, loc: ir.Loc) -> None:
        raise AssertionError("unreachable: s_Alloc allocates every array")  # pragma: no cover

    def s_Update(self, s: ir.Update) -> None:
        if isinstance(s.value, ir.MatMul):
            # no BLAS on the GPU yet: the routine's own loop, whose bits are the CPU's below
            # the BLAS size; a larger product is refused where it runs
            size, loops = products.matmul_as_loops(s, self.env)
            k = self.check("gpu-product", expr_text(s.value), s.loc, str(blas.MATMUL_THRESHOLD))
            self.emit(f"if {self.x(size)} >= {blas.MATMUL_THRESHOLD}:", s.loc)
            self.emit("    " + self.fail(k, str(blas.MATMUL_THRESHOLD), self.x(size)), s.loc)
            for st in loops:
                self.stmt(st)
            return
        super().s_Update(s)

    def s_Assert(self, s: ir.Assert) -> None:
        k = self.check("assert", expr_text(s.cond), s.loc, s.message or "")
        self.emit(f"if not ({self.x(s.cond)}):", s.loc)
        self.emit("    " + self.fail(k, "True", "False"), s.loc)

    def s_Print(self, s: ir.Print) -> None:
        self.refuse("`print` is not supported on the GPU (thousands of threads would print)",
                    s.loc.line)

    def imports(self) -> list[str]:
        lines = ["import math as _rb_math", "import numpy as _rb_np",
                 "from numba import cuda as _rb_cuda"]
        if self.helpers:
            names = ", ".join(sorted(self.helpers))
            lines.append(f"from revbench.backends.cuda_helpers import {names}")
        return lines


def generate(typed: TypedFunction, direction: Direction, options: Options,
             callee_symbol: Callable[[ir.Call, tuple[VarType, ...], tuple[Shape, ...]], str],
             callee_writes: Callable[[ir.Call], tuple[bool, ...]] | None,
             shapes: dict[str, Shape]) -> Generated:
    """The device function of one specialisation (types and the arrays' shapes)."""
    em = CudaEmitter(typed, direction, options, callee_symbol, callee_writes, shapes)
    return codegen.generate(typed, direction, options, em.callee_symbol, callee_writes,
                            emitter=em)
