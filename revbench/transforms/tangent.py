"""The ``tangent`` transform: a typed program -> the same program carrying tangents.

Forward-mode AD as an IR-to-IR transform.  Every float variable ``x`` gets a
*tangent* ``_rb_tan_x`` (its derivative along one direction of the inputs),
updated beside it, statement by statement:

* an update ``y op= e`` runs its ``UpdateRule.tangent`` (the instruction table,
  :mod:`revbench.rules.instructions`) before it: ``y += e`` adds ``de`` into ``y``'s
  tangent, ``y *= e`` and ``y /= e`` apply the product and quotient rules, reading
  ``y`` before it changes.  ``de``, the tangent of ``e``, is built from the same
  partial derivatives the adjoint uses: the operator table
  (:mod:`revbench.rules.operators`) and the function table
  (:mod:`revbench.rules.functions`);
* swaps swap the tangents too, ancillas get tangent ancillas, control flow keeps
  its shape (conditions read only values, which tangents never change), and a
  call runs the callee's own tangent program (``tangent-<direction>``).

Nothing here needs the program to be the forward run: it applies as well to a
*reverse sweep*, the IR the adjoint transform builds, whose adjoint variables are
floats like any other.  That is how :mod:`revbench.ad.second_order` gets
Hessian-vector products: the tangent of (forward run + reverse sweep), seeded
with ``v`` on the inputs, carries ``H v`` in the tangents of the adjoints, in one
pass (forward-over-reverse).  The result is ordinary IR with the tangents as
extra parameters, compiled by the same type inference and code generation.

Complex variables are refused (a real loss of real inputs is what second
derivatives are for here), and so is a function whose partial derivatives have
no partials of their own (a registered function: ``register`` takes first
partials only).  Both errors name the statement's line.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import count

from revbench.lang import ir
from revbench.lang.elementwise import array_nodes, element_at, extent
from revbench.lang.errors import ReversibilityTypeError
from revbench.lang.types import TypedFunction, VarType
from revbench.rules import functions as fn_rules
from revbench.rules import operators as op_rules
from revbench.rules.instructions import ADD, UPDATES
from revbench.rules.operators import mul
from revbench.transforms.invert import invert_body

#: the prefix of a variable's tangent (messages write ``_rb_tan_x`` as ``tangent(x)``)
TANGENT_PREFIX = "_rb_tan_"
_TAN = TANGENT_PREFIX


def tan_name(name: str) -> str:
    return f"{_TAN}{name}"


class SecondOrderUnsupported(Exception):
    """Raised inside the transform; turned into a ReversibilityTypeError at its line."""


def _add(a: ir.Expr | None, b: ir.Expr | None) -> ir.Expr | None:
    if a is None:
        return b
    if b is None:
        return a
    return ir.BinOp("+", a, b)


class Tangent:
    """Builds the tangent program of one typed function."""

    def __init__(self, typed: TypedFunction, constant: frozenset[str] = frozenset()):
        self.typed = typed
        self.env = typed.env
        #: read-only float parameters whose tangent is zero (a ``jvp`` moving other
        #: arguments): their tangent parameters stay, but no term reads them
        self.constant = constant
        self._names = count()
        for name, t in list(self.env.items()):
            if t.dtype == "complex":
                raise SecondOrderUnsupported(
                    f"`{name}` is complex; they are implemented for real (float) programs "
                    "only", name)

    # -- variables -------------------------------------------------------------
    def has_tangent(self, name: str) -> bool:
        t = self.env.get(name)
        return t is not None and t.dtype == "float" and name not in self.constant

    def tan(self, t: ir.Target) -> ir.Target | None:
        if not self.has_tangent(t.name):
            return None
        return replace(t, name=tan_name(t.name))

    def fresh(self, stem: str, t: VarType) -> str:
        name = f"_rb_t{stem}{next(self._names)}"
        self.env[name] = t
        return name

    # -- tangents of expressions ------------------------------------------------
    def d(self, e: ir.Expr, pre: list, post: list) -> ir.Expr | None:
        """The tangent of ``e`` (None where it is zero).  A sum or an extreme inside
        ``e`` is computed by loops into a new ancilla: their statements go to ``pre``
        (before the statement) and the ancillas' release to ``post``."""
        if isinstance(e, (ir.Var, ir.Elem)):
            return self.tan(e)
        if isinstance(e, (ir.BinOp, ir.UnaryOp)):
            args = op_rules.operands(e)
            out = None
            for arg, partial in zip(args, op_rules.operator_rule(e).partials):
                da = None if partial is None else self.d(arg, pre, post)
                if da is not None:
                    out = _add(out, partial.chain(da, args))
            return out
        if isinstance(e, ir.Func):
            rule = fn_rules.lookup(e.name)
            out = None
            for k, arg in enumerate(e.args):
                da = self.d(arg, pre, post)
                if da is None:
                    continue
                if rule is None or k >= len(rule.partials):
                    raise SecondOrderUnsupported(_no_partial_message(e.name, k))
                out = _add(out, mul(rule.partials[k](*e.args), da))
            return out
        if isinstance(e, ir.IfExp):
            dt, do = self.d(e.then, pre, post), self.d(e.orelse, pre, post)
            if dt is None and do is None:
                return None
            return ir.IfExp(e.cond, dt if dt is not None else ir.Const(0.0),
                            do if do is not None else ir.Const(0.0))
        if isinstance(e, ir.Reduce):
            return self.reduce(e, pre, post)
        # constants, len, shape, comparisons, bool ops, allocations: no tangent
        return None

    def reduce(self, r: ir.Reduce, pre: list, post: list) -> ir.Expr | None:
        """The tangent of ``sum(arg)`` (the sum of the elements' tangents) or of
        ``max(arg)``/``min(arg)`` (the tangent where ``arg`` is extreme, averaged over
        ties, as the adjoint splits the seed evenly), by loops into an ancilla."""
        loc = r.loc
        if not any(self.has_tangent(n) for n in ir.names_read(r.arg)):
            return None  # nothing differentiable in it
        acc = self.fresh("s", VarType("float"))
        if r.kind in ("max", "min"):
            m = self.fresh("m", VarType("float"))
            c = self.fresh("c", VarType("float"))
            pre.append(ir.Alloc(m, r, loc))
            pre.append(ir.Alloc(c, ir.Const(0.0), loc))
            pre.append(ir.Alloc(acc, ir.Const(0.0), loc))

            def body(item: ir.Expr) -> list[ir.Stmt]:
                at = ir.Compare(("==",), (item, ir.Var(m, loc)), loc)
                inner_pre: list = []
                inner_post: list = []
                di = self.d(item, inner_pre, inner_post) or ir.Const(0.0)
                return [*inner_pre,
                        ir.Update(ir.Var(c, loc), ADD, ir.IfExp(at, ir.Const(1.0), ir.Const(0.0)), loc),
                        ir.Update(ir.Var(acc, loc), ADD, ir.IfExp(at, di, ir.Const(0.0)), loc),
                        *inner_post]

            pre += self._element_loops(r.arg, body, loc)
            mean = self.fresh("e", VarType("float"))
            pre.append(ir.Alloc(mean, ir.IfExp(
                ir.Compare((">",), (ir.Var(c, loc), ir.Const(0.0))),
                ir.BinOp("/", ir.Var(acc, loc), ir.Var(c, loc)), ir.Const(0.0)), loc))
            post[:0] = [ir.Dealloc(n, ir.Const(0.0), loc, discard=True) for n in (mean, acc, c, m)]
            return ir.Var(mean, loc)
        pre.append(ir.Alloc(acc, ir.Const(0.0), loc))

        def body_sum(item: ir.Expr) -> list[ir.Stmt]:
            inner_pre: list = []
            inner_post: list = []
            di = self.d(item, inner_pre, inner_post)
            if di is None:
                return []
            return [*inner_pre, ir.Update(ir.Var(acc, loc), ADD, di, loc), *inner_post]

        pre += self._element_loops(r.arg, body_sum, loc)
        post.insert(0, ir.Dealloc(acc, ir.Const(0.0), loc, discard=True))
        return ir.Var(acc, loc)

    def _element_loops(self, arg: ir.Expr, body_of, loc: ir.Loc) -> list[ir.Stmt]:
        """Loops over the elements of the whole-array expression ``arg``."""
        lead = array_nodes(arg, self.env)[0]
        ndim = self.typed.expr_type(lead).ndim
        idx = tuple(self.fresh("w", VarType("int")) for _ in range(ndim))
        item = element_at(arg, tuple(ir.Var(i, loc) for i in idx), self.env)
        body: tuple[ir.Stmt, ...] = tuple(body_of(item))
        for ax in reversed(range(ndim)):
            body = (ir.For(idx[ax], ir.Const(0), extent(lead, ax, self.env), ir.Const(1), body,
                           loc=loc),)
        return list(body)

    # -- statements ------------------------------------------------------------
    def body(self, stmts) -> tuple[ir.Stmt, ...]:
        out: list[ir.Stmt] = []
        for s in stmts:
            out.extend(self.stmt(s))
        return tuple(out)

    def stmt(self, s: ir.Stmt) -> list[ir.Stmt]:
        try:
            return self._stmt(s)
        except SecondOrderUnsupported as exc:
            f = self.typed.func
            line = s.loc.line
            text = f.line_text(line).strip() if line else ""
            where = ("\n  " + ir.where(f.name, f.filename, line, text) if line
                     else f"\n  in reversible function {ir.shown_name(f.name)}")
            raise ReversibilityTypeError(
                f"forward mode and second derivatives (jvp, hvp, hessian): {exc}{where}",
                function=f.name, filename=f.filename, lineno=line or None, stage="ad") from None

    def _stmt(self, s: ir.Stmt) -> list[ir.Stmt]:
        """The tangent program of one statement: its kind's ``s_<Kind>`` rule."""
        rule = getattr(self, "s_" + type(s).__name__, None)
        if rule is None:
            raise SecondOrderUnsupported(f"no tangent rule for a {type(s).__name__} statement")
        return rule(s)

    def s_Update(self, s: ir.Update) -> list[ir.Stmt]:
        return self.update(s)

    def s_Swap(self, s: ir.Swap) -> list[ir.Stmt]:
        a, b = self.tan(s.a), self.tan(s.b)
        return [ir.Swap(a, b, s.loc), s] if a is not None and b is not None else [s]

    def s_Alloc(self, s: ir.Alloc) -> list[ir.Stmt]:
        return self.alloc(s)

    def s_Dealloc(self, s: ir.Dealloc) -> list[ir.Stmt]:
        if not self.has_tangent(s.name):
            return [s]
        t = self.env[s.name]
        init = ir.ArrayAlloc("zeros_like", (), s.name, "float") if t.is_array else ir.Const(0.0)
        # the tangent is discarded unchecked: its round-off is not the program's
        return [ir.Dealloc(tan_name(s.name), init, s.loc, discard=True), s]

    def s_Call(self, s: ir.Call) -> list[ir.Stmt]:
        return self.call(s)

    def s_Block(self, s: ir.Block) -> list[ir.Stmt]:
        return [ir.Block(self.body(s.body), s.label, s.loc)]

    def s_Inverted(self, s: ir.Inverted) -> list[ir.Stmt]:
        return [ir.Block(self.body(invert_body(s.body)), s.label, s.loc)]

    def s_If(self, s: ir.If) -> list[ir.Stmt]:
        return [replace(s, then=self.body(s.then), orelse=self.body(s.orelse))]

    def s_While(self, s: ir.While) -> list[ir.Stmt]:
        return [replace(s, body=self.body(s.body))]

    def s_For(self, s: ir.For) -> list[ir.Stmt]:
        return [replace(s, body=self.body(s.body))]

    def s_Print(self, s: ir.Print) -> list[ir.Stmt]:
        return [s]

    def s_Assert(self, s: ir.Assert) -> list[ir.Stmt]:
        return [s]

    def update(self, s: ir.Update) -> list[ir.Stmt]:
        t = self.env[s.target.name]
        if not self.has_tangent(s.target.name):
            return [s]  # ints and bools carry no tangent
        if isinstance(s.value, ir.MatMul):
            return [*self.matmul(s), s]
        if (isinstance(s.target, ir.Var) and t.is_array) or ir.is_subarray(s.target, t.ndim):
            return self.elementwise(s)
        ty = self.tan(s.target)
        if ty is None:  # ints and bools carry no tangent
            return [s]
        pre: list[ir.Stmt] = []
        post: list[ir.Stmt] = []
        de = self.d(s.value, pre, post)
        rule = UPDATES[s.op].tangent
        if rule is None:
            raise SecondOrderUnsupported(f"no tangent rule for `{s.op}` on a float")
        return [*pre, *rule(s, ty, de), *post, s]

    def matmul(self, s: ir.Update) -> list[ir.Stmt]:
        """``C op= op(A) @ op(B)``: ``C' op= op(A') @ op(B)`` and ``C' op= op(A) @ op(B')``,
        products on BLAS as the statement is, for the operands with a tangent."""
        e, ty = s.value, self.tan(s.target)
        out: list[ir.Stmt] = []
        for da, db in ((self.tan(e.a), e.b), (e.a, self.tan(e.b))):
            if ty is not None and da is not None and db is not None:
                out.append(ir.Update(ty, s.op, replace(e, a=da, b=db), s.loc))
        return out

    def elementwise(self, s: ir.Update) -> list[ir.Stmt]:
        """A whole-array update as explicit loops over its elements (then the scalar
        rules apply to each element)."""
        ndim = self.typed.expr_type(s.target).ndim
        idx = tuple(self.fresh("w", VarType("int")) for _ in range(ndim))
        at = tuple(ir.Var(i) for i in idx)
        scalar = ir.Update(element_at(s.target, at, self.env), s.op, element_at(s.value, at, self.env), s.loc)
        inner: tuple[ir.Stmt, ...] = tuple(self.update(scalar))
        for ax in reversed(range(ndim)):
            inner = (ir.For(idx[ax], ir.Const(0), extent(s.target, ax, self.env), ir.Const(1),
                            inner, False, s.loc),)
        return list(inner)

    def alloc(self, s: ir.Alloc) -> list[ir.Stmt]:
        if not self.has_tangent(s.name):
            return [s]
        tn = tan_name(s.name)
        init = s.init
        if isinstance(init, ir.ArrayAlloc):
            if init.kind == "copy" and init.source and self.has_tangent(init.source):
                return [s, ir.Alloc(tn, ir.ArrayAlloc("copy", (), tan_name(init.source), "float",
                                                      init.loc), s.loc)]
            return [s, ir.Alloc(tn, ir.ArrayAlloc("zeros_like", (), s.name, "float", init.loc),
                                s.loc)]
        if self.env[s.name].is_array:
            raise SecondOrderUnsupported(f"no tangent rule for the array ancilla `{s.name}`")
        pre: list[ir.Stmt] = []
        post: list[ir.Stmt] = []
        de = self.d(init, pre, post)
        return [s, *pre, ir.Alloc(tn, de if de is not None else ir.Const(0.0), s.loc), *post]

    def call(self, s: ir.Call) -> list[ir.Stmt]:
        if s.lanes != 1:
            raise SecondOrderUnsupported("a reverse sweep with several lanes has no tangent")
        if not s.backward and any(a.name in self.constant for a in s.args):
            # a constant's own (zero) tangent parameter fills the callee's slot, and the
            # callee is compiled knowing it is constant (``inactive``: no term reads it)
            tans = tuple(replace(a, name=tan_name(a.name)) if a.name in self.constant
                         and self.env[a.name].dtype == "float" else self.tan(a) for a in s.args)
            if all(a.name in self.constant or t is None for a, t in zip(s.args, tans)):
                return [s]  # nothing of it moves
            return [replace(s, tangent=True, tan_args=tans,
                            inactive=tuple(a.name in self.constant for a in s.args))]
        tans = tuple(self.tan(a) for a in s.args)
        if s.backward:
            tans += tuple(self.tan(a) for a in s.adj_args if a is not None)
        if all(t is None for t in tans):
            return [s]  # nothing of it is differentiable
        return [replace(s, tangent=True, tan_args=tans)]


def _no_partial_message(name: str, k: int) -> str:
    rule = fn_rules.lookup(name)
    if rule is not None and rule.hidden:
        base = name.rsplit("__d", 1)[0]
        return (f"`{base}` is a registered function whose partial derivative `{name}` has no "
                "derivative of its own (revbench.register takes first partial derivatives "
                "only), so its second derivative is unknown; write it as reversible code or "
                "with built-in functions instead")
    return f"{name}() has no partial derivative for argument {k + 1}"


def _first_line_of(f: ir.Function, name: str) -> int:
    """The line of the first statement that writes ``name``, else of the first that reads
    it (a parameter no statement writes), else the function's first line."""
    def reads(st: ir.Stmt) -> bool:
        return any(name in ir.names_used(e) for e in ir.statement_expressions(st))

    for uses in (lambda st: name in ir.names_written((st,)), reads):
        for st in ir.walk_stmts(f.body):
            if not ir.child_blocks(st) and uses(st) and st.loc.line:
                return st.loc.line
    return f.firstlineno


def tangent(typed: TypedFunction, constant: frozenset[str] = frozenset()
            ) -> tuple[ir.Function, tuple[VarType, ...]]:
    """The tangent program of ``typed``: parameters ``(*params, *tangents)``, one tangent
    per float parameter, in order.  Run on values and their tangents, it returns the
    values the program gives and their tangents (derivatives along the seed).
    ``constant``: read-only parameters whose tangents are zero (their slots are kept, and
    not read)."""
    try:
        tr = Tangent(typed, constant)
    except SecondOrderUnsupported as exc:
        f = typed.func
        line = _first_line_of(f, exc.args[1]) if len(exc.args) > 1 else 0
        where = f", line {line}: {f.line_text(line).strip()}" if line else ""
        raise ReversibilityTypeError(f"forward mode and second derivatives (jvp, hvp, "
                                     f"hessian): {exc.args[0]}\n  in reversible function "
                                     f"{ir.shown_name(f.name)}, {f.filename}{where}",
                                     variable=exc.args[1] if len(exc.args) > 1 else None,
                                     function=f.name, filename=f.filename, lineno=line or None,
                                     stage="ad") from None
    body = tr.body(typed.func.body)
    extra = tuple((tan_name(p), t) for p, t in zip(typed.func.params, typed.params)
                  if t.dtype == "float")
    func = replace(typed.func, params=typed.func.params + tuple(n for n, _ in extra), body=body)
    return func, typed.params + tuple(t for _, t in extra)
