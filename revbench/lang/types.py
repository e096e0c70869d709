"""Stage 3, *types*: specialise a checked program to its arguments' types.

A reversible function is compiled once per *signature*: the kind (scalar or
array), dtype and number of dimensions of each argument.  This stage infers
the type of every ancilla and expression for one signature and refuses, with
a :class:`ReversibilityTypeError` on the user's line, code that cannot be
reversible for those types:

* ``^=`` on a float, ``+=`` on a bool;
* an update that would change a variable's type (an integer ancilla that
  would become a float silently loses the exactness of its inverse);
* element access with the wrong number of indices, whole-array statements
  mixing arrays of different dimensions, arrays used where a scalar is needed.

The dtypes are ordered ``bool < int < float < complex``, as NumPy promotes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from revbench.lang import derivatives, ir, products
from revbench.lang.errors import ReversibilityTypeError
from revbench.lang.text import expr_text
from revbench.rules import functions as fn_rules
from revbench.rules.instructions import DIV, UPDATES, XOR

DTYPES = ("bool", "int", "float", "complex")
_RANK = {d: i for i, d in enumerate(DTYPES)}
NUMPY_DTYPES = {"bool": np.bool_, "int": np.int64, "float": np.float64, "complex": np.complex128}
NUMPY_NAMES = {"bool": "bool_", "int": "int64", "float": "float64", "complex": "complex128"}


@dataclass(frozen=True)
class VarType:
    """The type of a variable: a dtype and a number of dimensions (0 = scalar)."""

    dtype: str
    ndim: int = 0

    @property
    def is_array(self) -> bool:
        return self.ndim > 0

    def scalar(self) -> VarType:
        return VarType(self.dtype, 0)

    def __str__(self) -> str:
        name = NUMPY_NAMES[self.dtype]
        return f"{name}[{', '.join([':'] * self.ndim)}]" if self.ndim else name


def promote(*dtypes: str) -> str:
    return max(dtypes, key=_RANK.__getitem__)


def type_of_value(value: Any) -> VarType | None:
    """The revbench type of a Python/NumPy value, or ``None`` if unsupported."""
    if isinstance(value, np.ndarray):
        kind = {"b": "bool", "i": "int", "f": "float", "c": "complex"}.get(value.dtype.kind)
        if kind is None or value.dtype != NUMPY_DTYPES[kind] or value.ndim == 0:
            return None
        return VarType(kind, value.ndim)
    if isinstance(value, (bool, np.bool_)):
        return VarType("bool")
    if isinstance(value, (int, np.integer)):
        return VarType("int")
    # (a long double does not fit a float64 without losing digits: refused, like its arrays)
    if isinstance(value, (float, np.floating)):
        return VarType("float") if np.dtype(type(value)).itemsize <= 8 else None
    if isinstance(value, (complex, np.complexfloating)):
        return VarType("complex") if np.dtype(type(value)).itemsize <= 16 else None
    return None


def python_scalar(v: Any) -> Any:
    """A NumPy scalar as the Python number it holds (what a revbench call returns); any
    other value as it is."""
    return v.item() if isinstance(v, np.generic) else v


@dataclass
class TypedFunction:
    """A function specialised to one signature."""

    func: ir.Function
    params: tuple[VarType, ...]
    env: dict[str, VarType]  # every variable: arguments, ancillas, loop variables

    def expr_type(self, e: ir.Expr) -> VarType:
        """The type of an expression in this function (whole arrays allowed)."""
        ti = TypeInference(self.func, self.params)
        ti.env = self.env
        return ti.expr(e, elementwise=True)


class TypeInference:
    def __init__(self, func: ir.Function, params: tuple[VarType, ...]):
        self.func = func
        self.env: dict[str, VarType] = dict(zip(func.params, params))
        self.params = params

    def error(self, loc: ir.Loc, message: str) -> ReversibilityTypeError:
        text = self.func.line_text(loc.line).strip()
        where = f"{ir.shown_file(self.func.filename)}, line {loc.line}"
        return ReversibilityTypeError(
            f"{message} (in reversible function {ir.shown_name(self.func.name)}, {where}: `{text}`)",
            function=self.func.name, filename=self.func.filename, lineno=loc.line, stage="types")

    def run(self) -> TypedFunction:
        self.block(self.func.body)
        return TypedFunction(self.func, self.params, self.env)

    # -- statements -----------------------------------------------------------
    def block(self, body) -> None:
        for s in body:
            self.stmt(s)

    def stmt(self, s: ir.Stmt) -> None:
        """Type one statement: its kind's ``s_<Kind>`` rule (every kind has one but
        ``Uncompute``, which the checker resolves: ``tests/test_rules_tables.py``)."""
        getattr(self, "s_" + type(s).__name__)(s)

    def s_Update(self, s: ir.Update) -> None:
        self.update(s)

    def s_Swap(self, s: ir.Swap) -> None:
        ta, tb = self.target(s.a), self.target(s.b)
        for t in (s.a, s.b):
            if isinstance(t, ir.Elem) and ir.is_subarray(t, self.env[t.name].ndim):
                raise self.error(s.loc, f"swapping a sub-array (`{_name(t)}`) is not "
                                        "supported; swap whole arrays or single elements")
        if ta != tb:
            raise self.error(s.loc, f"a swap needs two targets of one type, got "
                                    f"{_name(s.a)}: {ta} and {_name(s.b)}: {tb}")

    def bind(self, name: str, t: VarType, loc: ir.Loc, what: str) -> None:
        """Give ``name`` its one type for the whole function.  Every binding (an ancilla's
        allocation, a loop variable) goes through here, so a program and its inverse, which
        meet the bindings in opposite orders, both refuse a clash."""
        old = self.env.get(name)
        if old is not None and old != t:
            raise self.error(loc, f"{what} `{name}` is {t} here but {old} elsewhere; "
                                  "use another name")
        self.env[name] = t

    def s_Alloc(self, s: ir.Alloc) -> None:
        self.bind(s.name, self.alloc_type(s), s.loc, "ancilla")

    def s_Dealloc(self, s: ir.Dealloc) -> None:
        if s.name not in self.env:  # inverse programs deallocate before they allocate
            self.bind(s.name, self.alloc_type(ir.Alloc(s.name, s.init, s.loc)), s.loc, "ancilla")

    def s_Call(self, s: ir.Call) -> None:
        for a in s.args:
            self.target(a)

    def s_Block(self, s: ir.Block) -> None:
        self.block(s.body)

    def s_Inverted(self, s: ir.Inverted) -> None:
        self.block(s.body)

    def s_If(self, s: ir.If) -> None:
        self.condition(s.pre)
        self.condition(s.post)
        self.block(s.then)
        self.block(s.orelse)

    def s_While(self, s: ir.While) -> None:
        self.condition(s.cond)
        self.condition(s.post)
        self.block(s.body)

    def s_For(self, s: ir.For) -> None:
        for e, what in ((s.start, "start"), (s.stop, "stop"), (s.step, "step")):
            t = self.expr(e)
            if t.is_array or t.dtype not in ("int", "bool"):
                raise self.error(e.loc, f"range() {what} must be an integer, got {t}")
        self.bind(s.var, VarType("int"), s.loc, "loop variable")
        self.block(s.body)

    def s_Print(self, s: ir.Print) -> None:
        for a in s.args:
            if not isinstance(a, str):
                self.expr(a)

    def s_Assert(self, s: ir.Assert) -> None:
        self.condition(s.cond)

    def update(self, s: ir.Update) -> None:
        rule = UPDATES[s.op]
        tt = self.target(s.target)
        vt = self.expr(s.value, elementwise=tt.is_array)
        name = _name(s.target)
        if tt.dtype not in rule.dtypes:
            if s.op == XOR:
                raise self.error(s.loc, f"`^=` needs an integer or bool target, but `{name}` is "
                                        f"{tt}; use += / -= for numbers")
            raise self.error(s.loc, f"`{s.op}` is not defined for `{name}` of type {tt}"
                                    + ("; use `^=` for bools" if tt.dtype == "bool" else ""))
        if s.op == XOR and vt.dtype not in ("int", "bool"):
            raise self.error(s.loc, f"`^=` needs an integer or bool right-hand side, got {vt.scalar()}")
        if s.op == XOR and tt.dtype == "bool" and vt.dtype != "bool":
            raise self.error(s.loc, f"`{name}` is a bool: xor it with a bool, got {vt.scalar()}")
        if _RANK[vt.dtype] > _RANK[tt.dtype] or (s.op == DIV and tt.dtype == "int"
                                                 and vt.dtype not in ("int", "bool")):
            raise self.error(s.loc, f"`{name}` is {tt.dtype} but the right-hand side is "
                                    f"{vt.dtype}: the update would change its type and its inverse "
                                    f"would not be exact. Make `{name}` {vt.dtype} (e.g. allocate "
                                    f"it as {_ZERO_LITERAL[vt.dtype]})")
        if vt.is_array and tt.is_array and vt.ndim > tt.ndim:
            raise self.error(s.loc, f"a whole-array statement needs arrays of one shape: `{name}` is "
                                    f"{tt} but the right-hand side is {vt} (broadcasting goes from "
                                    "fewer axes to more: the right-hand side cannot have more)")
        if vt.is_array and not tt.is_array:
            raise self.error(s.loc, f"the right-hand side is an array ({vt}) but `{name}` is a "
                                    "scalar; index the array or update a whole array")

    def target(self, t: ir.Target) -> VarType:
        return self.expr(t, elementwise=True)  # a whole array is a valid target

    def alloc_type(self, s: ir.Alloc) -> VarType:
        init = s.init
        if isinstance(init, ir.ArrayAlloc):
            if init.kind == "zeros":
                for d in init.shape:
                    dt = self.expr(d)
                    if dt.is_array or dt.dtype not in ("int", "bool"):
                        raise self.error(d.loc, f"an array size must be an integer, got {dt}")
                return VarType(init.dtype or "float", len(init.shape))
            src = self.env.get(init.source)
            if src is None or not src.is_array:
                raise self.error(s.loc, f"`{init.source}` is not an array here ({src})")
            if init.kind == "copy":
                return src
            return VarType(init.dtype or src.dtype, src.ndim)
        src = self.env.get(init.name) if isinstance(init, (ir.Var, ir.Elem)) else None
        if (src is not None and src.is_array and not s.name.startswith(ir.PASSED_VALUE_PREFIX)
                and (isinstance(init, ir.Var) or ir.is_subarray(init, src.ndim))):
            # `t = A` (before typing `A` as a scalar is needed, which would say "index it")
            raise self.error(s.loc, f"`{s.name} = {ir_text(init)}` would make `{s.name}` share "
                                    f"the array; allocate a copy with `{s.name} = "
                                    f"{ir_text(init)}.copy()`")
        t = self.expr(init, elementwise=s.name.startswith(ir.PASSED_VALUE_PREFIX))
        if t.is_array and s.name.startswith(ir.PASSED_VALUE_PREFIX):
            raise self.error(s.loc, f"the array expression `{ir_text(init)}` cannot be passed to a "
                                    "call as a value: compute it into an ancilla array first "
                                    f"(`t = np.zeros(...)`, `t += {ir_text(init)}`), pass `t`, "
                                    "then uncompute it after the call")
        if t.is_array:
            raise self.error(s.loc, f"`{s.name} = {ir_text(init)}` would make `{s.name}` share "
                                    f"the array; allocate a copy with `{s.name} = "
                                    f"{ir_text(init)}.copy()`")
        return t

    def reduction(self, e: ir.Reduce, ew: bool = False) -> VarType:
        """``np.sum(a * b)``: a scalar of the elements' type (a sum of bools counts them)."""
        spelling = ir.REDUCE_SPELLINGS[e.kind]
        if e.kind == "dot" and isinstance(e.arg, ir.BinOp):
            a, b = self._expr(e.arg.left, True), self._expr(e.arg.right, True)
            if 2 in (a.ndim, b.ndim):  # NumPy's np.dot of a matrix is a matrix product
                left, right = ir_text(e.arg.left), ir_text(e.arg.right)
                raise self.error(e.loc, f"np.dot() of a {max(a.ndim, b.ndim)}-D array is a "
                                        f"matrix product in NumPy: write `{left} @ {right}` "
                                        f"(`y += {left} @ {right}`)")
        t = self._expr(e.arg, True)
        if not t.is_array:
            raise self.error(e.loc, f"{spelling}() needs an array expression (`{spelling}(x)`, "
                                    f"`np.sum(a * b)`), got a scalar ({t}): add scalars with +")
        if e.kind in ("sum1", "dot") and t.ndim != 1:
            numpy_gives = "a row" if e.kind == "sum1" else "a matrix product"
            raise self.error(e.loc, f"{spelling}() of {t.ndim}-D arrays would not be a sum of "
                                    f"every element in NumPy ({numpy_gives}); use np.sum(...) "
                                    "for the sum of every element")
        if e.axis is not None:
            if not -t.ndim <= e.axis < t.ndim:
                raise self.error(e.loc, f"{spelling}(..., axis={e.axis}) of a {t.ndim}-D array: "
                                        f"axis {e.axis} does not exist")
            if t.ndim > 1 and not ew:
                raise self.error(e.loc, f"{spelling}(..., axis={e.axis}) of a {t.ndim}-D array is "
                                        f"a {t.ndim - 1}-D array, but a scalar is needed here; "
                                        "update a whole array with it (`y += np.sum(A, axis=1)`)")
        if e.kind in ("max", "min"):
            if t.dtype == "complex":
                raise self.error(e.loc, f"{spelling}() of complex numbers is not defined "
                                        "(they have no order); take abs() or .real first")
            return VarType(t.dtype, _axis_ndim(e, t))
        return VarType("int" if t.dtype == "bool" else t.dtype, _axis_ndim(e, t))

    def matmul(self, e: ir.BinOp, ew: bool) -> VarType:
        """``a @ b`` of 1-D and 2-D arrays, as NumPy types it: a matrix (2-D @ 2-D), a vector
        (2-D @ 1-D, 1-D @ 2-D) or a scalar (1-D @ 1-D).  Lowered to sums once typed
        (:mod:`revbench.lang.products`)."""
        a, b = self._expr(e.left, True), self._expr(e.right, True)
        for t, side in ((a, e.left), (b, e.right)):
            if not t.is_array:
                raise self.error(e.loc, f"`@` multiplies arrays, but `{ir_text(side)}` is a scalar "
                                        f"({t}): use `*` for a scalar factor")
            if t.ndim > 2:
                raise self.error(e.loc, f"`@` takes 1-D and 2-D arrays, but `{ir_text(side)}` is "
                                        f"{t}: index it down to a matrix first")
            if t.dtype == "bool":
                raise self.error(e.loc, f"`@` of bools (`{ir_text(side)}`) is not supported: "
                                        "convert them to integers or floats")
        nd = (a.ndim - 1) + (b.ndim - 1)
        out = VarType(promote(a.dtype, b.dtype, "int"), nd)
        if out.is_array and not ew:
            raise self.error(e.loc, f"`{ir_text(e)}` is an array ({out}) but a scalar is "
                                    "needed here; update a whole array with it (`y += A @ x`)")
        return out

    def blas_product(self, e: ir.MatMul, ew: bool) -> VarType:
        """A product the compiler made (:class:`ir.MatMul`): of float64 arrays, as NumPy
        types it, or the outer product of two vectors."""
        a, b = self._expr(e.a, True), self._expr(e.b, True)
        dims = (a.ndim, b.ndim)
        if (a.dtype, b.dtype) != ("float", "float") or not ew or dims not in (
                ((1, 1),) if e.outer else ((2, 2), (2, 1), (1, 2))):
            raise self.error(e.loc, f"internal: a BLAS product of {a} and {b} "
                                    f"(`{ir_text(e)}`)")
        return VarType("float", 2 if e.outer else a.ndim + b.ndim - 2)

    def outer(self, e: ir.BinOp, ew: bool) -> VarType:
        """``np.outer(u, v)`` of two 1-D array expressions: the 2-D array ``u[i] * v[j]``."""
        a, b = self._expr(e.left, True), self._expr(e.right, True)
        for t, side in ((a, e.left), (b, e.right)):
            if t.ndim != 1:
                raise self.error(e.loc, f"np.outer() takes 1-D array expressions, but "
                                        f"`{ir_text(side)}` is {t}")
        out = VarType(promote(a.dtype, b.dtype, "int"), 2)
        if not ew:
            raise self.error(e.loc, f"`{ir_text(e)}` is an array ({out}) but a scalar is "
                                    "needed here; update a whole array with it "
                                    "(`C += np.outer(u, v)`)")
        return out

    def transpose(self, e: ir.UnaryOp, ew: bool) -> VarType:
        """``A.T`` of a 2-D array expression (of a 1-D one: the same array, as in NumPy)."""
        t = self._expr(e.operand, ew)
        if not t.is_array:
            raise self.error(e.loc, f"`{ir_text(e)}`: `{ir_text(e.operand)}` is a scalar ({t}), "
                                    "and only arrays have a transpose")
        if t.ndim > 2:
            raise self.error(e.loc, f"`{ir_text(e)}` of a {t.ndim}-D array is not supported: "
                                    "index it down to a matrix first")
        return t

    def scan(self, e: ir.Scan, ew: bool) -> VarType:
        """``np.cumsum(x)``: a 1-D array of the elements' type (bools counted as ints)."""
        t = self._expr(e.arg, True)
        if t.ndim != 1:
            raise self.error(e.loc, f"np.{e.kind}() takes a 1-D array expression, got {t}"
                                    + ("" if not t.is_array else ": along an axis of a 2-D "
                                       f"array, loop over the other one (`Y[i] += np.{e.kind}"
                                       "(A[i])`)"))
        out = VarType("int" if t.dtype == "bool" else t.dtype, 1)
        if not ew:
            raise self.error(e.loc, f"`{ir_text(e)}` is an array ({out}) but a scalar is needed "
                                    f"here; update a whole array with it (`y += np.{e.kind}(x)`) "
                                    "or sum it")
        return out

    def derivative(self, e: ir.Derivative, ew: bool) -> VarType:
        """``revbench.grad(f, loss=..., wrt=...)(args)``: the type of the argument it
        differentiates by, which must be real (a float or a float array), as the loss must
        be a float.  Lowered to a call of its own program once typed
        (:mod:`revbench.lang.derivatives`)."""
        types = [self._expr(a, True) for a in e.args]
        if e.kind == "jvp":
            return self.jvp(e, types, ew)
        spelt = f"revbench.grad({e.func}, loss={e.params[e.loss]!r}, wrt={e.params[e.wrt]!r})"
        loss, out = types[e.loss], types[e.wrt]
        if loss != VarType("float"):
            raise self.error(e.loc, f"`{spelt}`: the loss `{e.params[e.loss]}` is passed "
                                    f"`{ir_text(e.args[e.loss])}` ({loss}); a gradient inside "
                                    "reversible code is that of a float scalar loss")
        if out.dtype != "float":
            raise self.error(e.loc, f"`{spelt}`: `{e.params[e.wrt]}` is passed "
                                    f"`{ir_text(e.args[e.wrt])}` ({out}), which has no gradient "
                                    "here: differentiate by a float (or float array) argument"
                                    + (" (complex arguments are not supported inside reversible "
                                       "code)" if out.dtype == "complex" else ""))
        if out.is_array and not ew:
            raise self.error(e.loc, f"`{spelt}(...)` is an array ({out}) but a scalar is needed "
                                    "here; update a whole array with it (`g += revbench.grad(...)"
                                    "(...)`)")
        return out

    def jvp(self, e: ir.Derivative, types: list[VarType], ew: bool) -> VarType:
        """``revbench.jvp(f, ..., tangents={"x": v}, outputs="r")``: the type of ``r``, a
        float (or float array); each tangent has its argument's type."""
        spelt = f"revbench.jvp({e.func}, ..., outputs={e.params[e.loss]!r})"
        out = types[e.loss]
        if out.dtype != "float":
            raise self.error(e.loc, f"`{spelt}`: the output `{e.params[e.loss]}` is passed "
                                    f"`{ir_text(e.args[e.loss])}` ({out}), which has no tangent "
                                    "here: a Jacobian-vector product inside reversible code is "
                                    "that of a float (or float array) output")
        for k, v in zip(e.along, e.directions):
            t, want = self._expr(v, True), types[k]
            if want.dtype != "float" or t != want:
                raise self.error(e.loc, f"`{spelt}`: the tangent of `{e.params[k]}` is "
                                        f"`{ir_text(v)}` ({t}), but `{e.params[k]}` is passed "
                                        f"`{ir_text(e.args[k])}` ({want}): a tangent has its "
                                        "argument's type, which must be a float or float array")
        if out.is_array and not ew:
            raise self.error(e.loc, f"`{spelt}` is an array ({out}) but a scalar is needed "
                                    "here; update a whole array with it")
        return out

    def condition(self, e: ir.Expr, statement: bool = True) -> None:
        """A condition must be a real scalar.  That of a statement (``if``, ``while``) may
        not hold a reduction, which would be evaluated again where the branch or loop
        ends; that of a conditional expression (``a if c else b``, also made by the rules
        of functions without a derivative at a point) is evaluated once, so it may."""
        if statement and any(isinstance(n, ir.Reduce) for n in ir.walk_expr(e)):
            raise self.error(e.loc, "a sum or an extreme (sum, np.sum, np.dot, np.max, np.min) "
                                    "cannot be part of a condition "
                                    "(it is evaluated again where the branch or loop ends): "
                                    "compute it into an ancilla first (`s = 0.0`, "
                                    "`s += np.sum(x)`)")
        t = self.expr(e)
        if t.is_array:
            raise self.error(e.loc, f"a condition must be a scalar, got an array ({t})")
        if t.dtype == "complex":
            raise self.error(e.loc, "a condition cannot be complex")

    # -- expressions ----------------------------------------------------------
    def expr(self, e: ir.Expr, elementwise: bool = False) -> VarType:
        """The type of ``e``.  Whole arrays are allowed only ``elementwise``."""
        return self._expr(e, elementwise)

    def _var(self, name: str, loc: ir.Loc) -> VarType:
        t = self.env.get(name)
        if t is None:
            raise self.error(loc, f"`{name}` has no type here")
        return t

    def _expr(self, e: ir.Expr, ew: bool) -> VarType:
        if isinstance(e, ir.Const):
            v = e.value
            if isinstance(v, bool):
                return VarType("bool")
            if isinstance(v, int):
                if not -(2**63) <= v < 2**63:
                    raise self.error(e.loc, f"integer constant {v} does not fit in int64")
                return VarType("int")
            return VarType("float" if isinstance(v, float) else "complex")
        if isinstance(e, ir.Var):
            t = self._var(e.name, e.loc)
            if t.is_array and not ew:
                raise self.error(e.loc, f"`{e.name}` is an array ({t}) but a scalar is needed "
                                        "here; index it (`{0}[i]`)".format(e.name))
            return t
        if isinstance(e, ir.Elem):
            t = self._var(e.name, e.loc)
            if not t.is_array:
                raise self.error(e.loc, f"`{e.name}` is a scalar ({t}) and cannot be indexed")
            if len(e.indices) > t.ndim:
                raise self.error(e.loc, f"`{e.name}` has {t.ndim} dimension(s) but is indexed with "
                                        f"{len(e.indices)} index(es)")
            for i in e.indices:
                if isinstance(i, ir.Slice):
                    for b in (i.start, i.stop):
                        bt = None if b is None else self._expr(b, False)
                        if bt is not None and bt.dtype != "int":
                            raise self.error(b.loc, f"a slice bound must be an integer, got {bt}")
                    continue
                it = self._expr(i, False)
                if it.dtype == "bool" and not it.is_array:
                    # NumPy would read a bool index as a mask, not as the element 0 or 1
                    err = self.error(i.loc, f"the index `{ir_text(i)}` of `{e.name}[...]` is a "
                                            "bool, and an index must be an integer (pass an int, "
                                            "or compute an int index in an ancilla)")
                    err.variable = i.name if isinstance(i, ir.Var) else e.name
                    raise err
                if it.dtype != "int":
                    raise self.error(i.loc, f"an index must be an integer, got {it}")
            if ir.is_subarray(e, t.ndim):
                view = VarType(t.dtype, len(ir.subarray_axes(e, t.ndim)))
                if not ew:
                    raise self.error(e.loc, f"`{ir_text(e)}` is a sub-array ({view}) but a scalar "
                                            "is needed here; index it further, or sum it")
                return view
            return t.scalar()
        if isinstance(e, ir.BinOp) and e.op == "outer":
            return self.outer(e, ew)
        if isinstance(e, ir.BinOp) and e.op == "@":
            return self.matmul(e, ew)
        if isinstance(e, ir.MatMul):
            return self.blas_product(e, ew)
        if isinstance(e, ir.BinOp):
            a, b = self._expr(e.left, ew), self._expr(e.right, ew)
            nd = _common_ndim(a, b)
            if e.op == "/":
                d = promote(a.dtype, b.dtype, "float")
            elif e.op in ("//", "%"):
                if "complex" in (a.dtype, b.dtype):
                    raise self.error(e.loc, f"`{e.op}` is not defined for complex numbers")
                d = promote(a.dtype, b.dtype, "int")
            elif e.op == "**":
                d = promote(a.dtype, b.dtype, "int")
                if d == "int" and not (isinstance(e.right, ir.Const) and e.right.value >= 0):
                    d = "float"  # an integer power with a variable exponent may be fractional
            else:
                d = promote(a.dtype, b.dtype, "int")
            return VarType(d, nd)
        if isinstance(e, ir.UnaryOp) and e.op == "T":
            return self.transpose(e, ew)
        if isinstance(e, ir.UnaryOp):
            t = self._expr(e.operand, ew)
            if e.op == "not":
                return VarType("bool", t.ndim)
            return VarType(promote(t.dtype, "int"), t.ndim)
        if isinstance(e, ir.Func):
            rule = fn_rules.lookup(e.name)
            if rule is None:
                raise self.error(e.loc, f"`{e.name}` is no longer a registered function")
            ts = [self._expr(a, ew) for a in e.args]
            nd = 0
            for t in ts:
                nd = _common_ndim(VarType("int", nd), t)
            dts = [t.dtype for t in ts]
            if "complex" in dts and not rule.complex_ok:
                raise self.error(e.loc, f"{e.name}() is not defined for complex numbers")
            if rule.result == "keep":
                d = dts[0]
            elif rule.result == "same":
                d = "float" if dts[0] == "complex" else promote(dts[0], "int")
            elif rule.result == "promote":
                d = promote(*dts, "int")
            elif rule.result == "real":
                d = "float"
            else:
                d = promote(*dts, "float")
            return VarType(d, nd)
        if isinstance(e, ir.Reduce):
            return self.reduction(e, ew)
        if isinstance(e, ir.Scan):
            return self.scan(e, ew)
        if isinstance(e, ir.Derivative):
            return self.derivative(e, ew)
        if isinstance(e, (ir.Len, ir.Shape)):
            t = self._var(e.name, e.loc)
            axis = e.axis if isinstance(e, ir.Shape) else 0
            if not t.is_array:
                raise self.error(e.loc, f"`{e.name}` is a scalar ({t}); len() and .shape need an array")
            if isinstance(e, ir.Shape) and e.unpacked and e.unpacked != t.ndim:
                raise self.error(e.loc, f"`{e.name}` has {t.ndim} dimension(s), so its shape "
                                        f"unpacks into {t.ndim} name(s), not {e.unpacked}")
            if axis >= t.ndim or axis < -t.ndim:
                raise self.error(e.loc, f"`{e.name}` has {t.ndim} dimension(s); axis {axis} "
                                        "does not exist")
            return VarType("int")
        if isinstance(e, ir.IfExp):
            self.condition(e.cond, statement=False)
            a, b = self._expr(e.then, ew), self._expr(e.orelse, ew)
            nd = _common_ndim(a, b)
            return VarType(promote(a.dtype, b.dtype), nd)
        if isinstance(e, ir.Compare):
            ts = [self._expr(o, ew) for o in e.operands]
            if any(t.dtype == "complex" for t in ts) and any(o not in ("==", "!=") for o in e.ops):
                raise self.error(e.loc, "complex numbers cannot be ordered")
            if any(t.is_array for t in ts):
                raise self.error(e.loc, "comparisons take scalars; index the array")
            return VarType("bool")
        if isinstance(e, ir.BoolOp):
            for v in e.values:
                self.condition(v)
            return VarType("bool")
        if isinstance(e, ir.ArrayAlloc):
            raise self.error(e.loc, "array allocations can only initialise an ancilla: `t = np.zeros(n)`")
        raise self.error(getattr(e, "loc", ir.NO_LOC), f"cannot type {type(e).__name__}")


_ZERO_LITERAL = {"bool": "False", "int": "0", "float": "0.0", "complex": "0j"}


def _axis_ndim(e: ir.Reduce, t: VarType) -> int:
    """A reduction's number of axes: 0 (a scalar), or one less than its argument's along
    one axis."""
    return 0 if e.axis is None else t.ndim - 1


def _common_ndim(a: VarType, b: VarType) -> int:
    """The number of axes of an elementwise combination of ``a`` and ``b``: NumPy's
    broadcasting, the axes of the one with fewer aligned with the last axes of the other
    (``Z + b`` of a 2-D ``Z`` and a 1-D ``b`` adds ``b`` to every row).  Lowered to loops by
    :mod:`revbench.lang.products`, which asserts that the aligned lengths agree."""
    return max(a.ndim, b.ndim)


def _name(t: ir.Target) -> str:
    return ir_text(t)


def ir_text(e) -> str:
    return expr_text(e)


def infer(func: ir.Function, params: tuple[VarType, ...]) -> TypedFunction:
    """Specialise ``func`` to argument types ``params`` (stage ``types``).  Matrix products
    and reductions along an axis, whose meaning depends on the arrays' dimensions, are
    lowered to loops of sums here, once those are known (:mod:`revbench.lang.products`):
    every pass after this one sees only the core language."""
    typed = TypeInference(func, params).run()
    if derivatives.present(typed.func):
        env = dict(typed.env)  # (the lowering adds its ancillas to it)
        lowered = derivatives.lower(typed.func, env,
                                    TypedFunction(typed.func, params, env).expr_type)
        typed = TypeInference(lowered, params).run()
    if not products.present(typed.func, TypedFunction(typed.func, params, typed.env).expr_type):
        return typed
    env = dict(typed.env)  # (the lowering adds its ancillas to it)
    lowered = products.lower(typed.func, env, TypedFunction(typed.func, params, env).expr_type)
    return TypeInference(lowered, params).run()


def guess_signature(func: ir.Function) -> tuple[VarType, ...]:
    """A plausible signature from how the body uses each argument.

    Used only to show generated source before a function was ever called:
    indexed arguments are float arrays of that many dimensions, arguments used
    as sizes, indices or loop bounds are ints, ``^=`` targets are ints, the
    rest float scalars.
    """
    ndim: dict[str, int] = {}
    ints: set[str] = set()

    def see(e) -> None:
        for n in ir.walk_expr(e):
            if isinstance(n, ir.Elem):
                ndim[n.name] = max(ndim.get(n.name, 0), len(n.indices))
                for i in n.indices:
                    ints.update(x.name for x in ir.walk_expr(i) if isinstance(x, ir.Var))
            elif isinstance(n, ir.Shape):
                ndim[n.name] = max(ndim.get(n.name, 0), n.axis + 1)
            elif isinstance(n, ir.Len):
                ndim[n.name] = max(ndim.get(n.name, 0), 1)
            elif isinstance(n, ir.ArrayAlloc):
                if n.source:
                    ndim.setdefault(n.source, 1)
                for d in n.shape:
                    ints.update(x.name for x in ir.walk_expr(d) if isinstance(x, ir.Var))

    for s in ir.walk_stmts(func.body):
        for e in ir.statement_expressions(s):
            see(e)
        if isinstance(s, ir.Update) and s.op == XOR and isinstance(s.target, ir.Var):
            ints.add(s.target.name)
        elif isinstance(s, ir.For):  # range bounds are ints
            for e in (s.start, s.stop, s.step):
                ints.update(x.name for x in ir.walk_expr(e) if isinstance(x, ir.Var))
    return tuple(VarType("float", ndim[p]) if p in ndim else
                 VarType("int" if p in ints else "float") for p in func.params)
