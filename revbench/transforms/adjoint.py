"""The ``adjoint`` transform: a typed program -> its reverse sweep with adjoints.

This is automatic differentiation by reverse computing (NiLang's method).
The reverse sweep walks the program backwards like :mod:`invert` does, and
beside every inverted statement it updates *adjoint variables* ``_rb_adj_x``
(one per differentiable variable: float and complex scalars and arrays):

* an update ``y op= e`` runs its inverse, which restores the old ``y`` -- no
  tape -- and then adds ``y_bar * de/dx`` into the adjoint of every variable
  ``x`` that ``e`` reads (the rule is in the instruction table,
  :mod:`revbench.rules.instructions`; the partial derivatives of each operator
  are in :mod:`revbench.rules.operators`, of each pure function in
  :mod:`revbench.rules.functions`);
* ``t = e`` (an ancilla from an expression) passes ``t_bar`` back to what
  ``e`` read, then frees ``t`` and its adjoint;
* control flow is inverted as usual, calls run the callee's own reverse sweep.

The result is ordinary IR, with the adjoints as extra parameters, so the same
type inference and code generation compile it to a Numba function.  Memory
beyond the program's own is the adjoint variables only: nothing grows with
the number of steps executed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import count

from revbench.lang import ir
from revbench.lang.elementwise import array_nodes, element_at, extent
from revbench.lang.errors import ReversibilityTypeError
from revbench.lang.types import TypedFunction, VarType
from revbench.rules import functions as fn_rules
from revbench.rules import operators as op_rules
from revbench.rules.instructions import ADD, UPDATES
from revbench.transforms.fresh import fresh_updates
from revbench.transforms.invert import invert_body

DIFFERENTIABLE = ("float", "complex")


def adj_name(name: str) -> str:
    return ir.adjoint_name(name)


is_adjoint = ir.is_adjoint


@dataclass
class AdjointContext:
    """What the rule tables need to state an adjoint: adjoint variables, partials.

    ``inactive`` names arguments that carry no gradient although they are floats:
    read-only data the caller does not differentiate with respect to (``wrt=``).
    Nothing is accumulated into them, so their adjoint code disappears.
    """

    typed: TypedFunction
    inactive: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        self._loops = count()
        self.at: ir.Loc = ir.NO_LOC  # the statement being swept (for messages)
        #: the updates whose target holds their value after them (transforms/fresh.py),
        #: by ``id`` -- the dict holds each statement, so no ``id`` is ever reused
        self.fresh: dict[int, ir.Stmt] = fresh_updates(self.typed.func.body)

    def is_fresh(self, s: ir.Stmt) -> bool:
        """Whether ``s`` is itself (not merely equal to) a fresh update or allocation."""
        return self.fresh.get(id(s)) is s

    def held_result(self, s: ir.Update) -> ir.Target | None:
        """The target of ``s`` where, at its adjoint, it holds ``s.value``: a fresh ``+=``
        (its target was zero before it, :mod:`revbench.transforms.fresh`), whose partials
        then read the value from there instead of computing it again."""
        return s.target if self.is_fresh(s) else None

    def no_partial(self, name: str, k: int) -> ReversibilityTypeError:
        """A registered function without the partial derivative a gradient needs: the
        user's mistake, named at the line that calls it."""
        f = self.typed.func
        line = self.at.line
        return ReversibilityTypeError(
            f"{name}() has no partial derivative for argument {k + 1}, so {f.name} cannot be "
            f"differentiated through it: register it with partials=(...), one function "
            f"per argument (docs/language.md, section 7)\n  in reversible function "
            f"{ir.shown_name(f.name)}, {ir.shown_file(f.filename)}, line {line}: "
            f"{f.line_text(line).strip()}", function=f.name, filename=f.filename, lineno=line,
            stage="ad")

    # -- variables -------------------------------------------------------------
    def differentiable(self, name: str) -> bool:
        if name in self.inactive:
            return False
        t = self.typed.env.get(name)
        return t is not None and t.dtype in DIFFERENTIABLE

    def adj(self, t: ir.Target) -> ir.Target | None:
        """The adjoint of a variable or element (None if it carries no gradient)."""
        if not self.differentiable(t.name):
            return None
        if isinstance(t, ir.Var):
            return ir.Var(adj_name(t.name), t.loc)
        return ir.Elem(adj_name(t.name), t.indices, t.loc)

    def is_complex(self, e: ir.Expr) -> bool:
        return self.typed.expr_type(e).dtype == "complex"

    def seed_is_complex(self, seed: ir.Expr) -> bool:
        """Whether a seed (an expression over program and adjoint variables) is complex.
        An adjoint variable has its variable's type; a generated seed ancilla
        ``_rb_g`` is typed when it is made."""
        return self.is_complex(_rename(seed, lambda n: n[len(_ADJ):] if n.startswith(_ADJ) else n))

    # -- expression algebra (with the simplifications that keep code readable) ------
    def conj(self, e: ir.Expr) -> ir.Expr:
        return ir.Func("conj", (e,)) if self.is_complex(e) else e

    mul = staticmethod(op_rules.mul)

    # -- reverse-mode differentiation of one expression -----------------------------
    def contributions(self, e: ir.Expr, seed: ir.Expr) -> list[tuple[ir.Target, ir.Expr]]:
        """``[(x, conj(de/dx) * seed)]`` for every differentiable variable read by ``e``."""
        out: list[tuple[ir.Target, ir.Expr]] = []
        self._walk(e, seed, out)
        return out

    def _walk(self, e: ir.Expr, seed: ir.Expr, out: list) -> None:
        if isinstance(e, (ir.Var, ir.Elem, ir.BinOp, ir.UnaryOp, ir.Func, ir.IfExp, ir.Reduce)) \
                and not self.is_complex(e) and self.seed_is_complex(seed):
            # A real quantity inside a complex expression: its adjoint is the real
            # part of the complex seed times its (real) partial -- dL/dr =
            # Re(conj(de/dr) * e_bar) -- taken here, where the value becomes real.
            seed = ir.Func("real", (seed,))
        if isinstance(e, (ir.Var, ir.Elem)):
            if self.differentiable(e.name):
                out.append((e, seed))
            return
        if isinstance(e, (ir.BinOp, ir.UnaryOp)):
            args = op_rules.operands(e)
            for arg, partial in zip(args, op_rules.operator_rule(e).partials):
                if partial is not None and not isinstance(arg, ir.Const):
                    self._walk(arg, partial.chain(seed, args, self.conj), out)
            return
        if isinstance(e, ir.Func):
            rule = fn_rules.lookup(e.name)
            for k, arg in enumerate(e.args):
                if rule.complex_vjp and self.is_complex(arg):
                    self._walk(arg, rule.complex_vjp[k](seed, *e.args), out)
                    continue
                if k >= len(rule.partials):
                    raise self.no_partial(e.name, k)
                self._walk(arg, self.mul(seed, self.conj(rule.partials[k](*e.args))), out)
            return
        if isinstance(e, ir.IfExp):
            # Guard each whole contribution, not just the seed: the branch not taken
            # may not even be defined here (sin(x)/x at x == 0).
            zero = ir.Const(0j if self.is_complex(e) else 0.0)
            for branch, taken in ((e.then, True), (e.orelse, False)):
                found: list = []
                self._walk(branch, seed, found)
                for c in found:
                    if isinstance(c, _SumSeed):  # a reduction's loop: its seed is guarded
                        guarded = ir.IfExp(e.cond, c.seed, zero) if taken else ir.IfExp(e.cond, zero, c.seed)
                        out.append(_SumSeed(c.reduce, guarded))
                    else:
                        x, v = c
                        out.append((x, ir.IfExp(e.cond, v, zero) if taken else ir.IfExp(e.cond, zero, v)))
            return
        if isinstance(e, ir.Reduce):
            # d sum(arg) / d x[i] = d arg[i] / d x[i]; d max(arg) / d arg[i] = 1 where arg[i]
            # is the largest: loops, built by accumulate()
            out.append(_SumSeed(e, seed))
            return
        # constants, len, shape, comparisons, bool ops: no gradient

    def accumulate(self, e: ir.Expr, seed: ir.Expr, op: str,
                   result: ir.Target | None = None) -> list[ir.Stmt]:
        """Statements ``x_bar op seed * conj(de/dx)`` for every x read by ``e``.
        ``result``: where ``e``'s value is held (:meth:`held_result`): a partial that is
        written with ``e`` itself (``1 - tanh(z)**2``, ``exp(z)``, ``-(a / b) / b``, the
        maximum a ``np.max`` found) reads it there."""
        if isinstance(e, ir.MatMul):  # (its partials never read its value)
            return self.matmul_adjoints(e, seed, op)
        if result is not None:
            return [_substituted(st, e, result)
                    for st in self.accumulate(e, seed, op)]
        loc = getattr(e, "loc", ir.NO_LOC)
        out: list[ir.Stmt] = []
        for c in self.contributions(e, seed):
            if isinstance(c, _SumSeed) and c.reduce.kind in ("max", "min"):
                out += self._extreme_adjoint(c.reduce, c.seed, op, loc)
            elif isinstance(c, _SumSeed):
                out += self._sum_adjoint(c.reduce, c.seed, op, loc)
            else:
                out.append(ir.Update(self.adj(c[0]), op, c[1], loc))
        return out

    def matmul_adjoints(self, e: ir.MatMul, seed: ir.Expr, op: str) -> list[ir.Stmt]:
        """The adjoints of ``C op= op(A) @ op(B)`` (seed: C's adjoint, a whole array),
        products again, on BLAS, for the operands that carry a gradient:
        ``A_bar op= C_bar @ op(B).T`` and ``B_bar op= op(A).T @ C_bar`` (transposed where A or B
        was); of a matrix-vector product the matrix gets an outer product, and of an outer
        product ``u (x) v`` the vectors get ``C_bar @ v`` and ``C_bar.T @ u``."""
        if not isinstance(seed, ir.Var):
            raise AssertionError(f"internal: the adjoint of {e} from {seed}")
        a, b, ta, tb, loc = e.a, e.b, e.trans_a, e.trans_b, e.loc
        ndim = (self.typed.env[a.name].ndim, self.typed.env[b.name].ndim)

        def mm(x, y, tx=False, ty=False, outer=False) -> ir.MatMul:
            return ir.MatMul(x, y, tx, ty, outer, loc)

        if e.outer:  # C += u (x) v
            grads = [(a, mm(seed, b)), (b, mm(seed, a, True))]
        elif ndim == (2, 2):  # C += op(A) @ op(B)
            grads = [(a, mm(b, seed, tb, True) if ta else mm(seed, b, False, not tb)),
                     (b, mm(seed, a, True, ta) if tb else mm(a, seed, not ta, False))]
        elif ndim == (2, 1):  # y += op(A) @ x
            grads = [(a, mm(b, seed, outer=True) if ta else mm(seed, b, outer=True)),
                     (b, mm(a, seed, not ta))]
        else:  # y += x @ op(B)
            grads = [(a, mm(b, seed, tb)),
                     (b, mm(seed, a, outer=True) if tb else mm(a, seed, outer=True))]
        out: list[ir.Stmt] = []
        for var, product in grads:
            bar = self.adj(var)
            if bar is not None:
                out.append(ir.Update(bar, op, product, loc))
        return out

    def _seed_ancilla(self, value: ir.Expr, pre: list, post: list, loc: ir.Loc) -> ir.Var:
        """``value`` computed once, into a new ancilla freed after the loop that reads it.

        The value is made of adjoints, so the ancilla is named as one (``_rb_adj__rb_gN``):
        with several lanes it is repeated per lane like every adjoint."""
        primal = f"_rb_g{next(self._loops)}"  # what seed_is_complex looks up
        g = adj_name(primal)
        self.typed.env[g] = self.typed.env[primal] = VarType(
            "complex" if self.seed_is_complex(value) else "float")
        pre.append(ir.Alloc(g, value, loc))
        post.insert(0, ir.Dealloc(g, None, loc, discard=True))
        return ir.Var(g, loc)

    def _extreme_adjoint(self, r: ir.Reduce, seed: ir.Expr, op: str,
                         loc: ir.Loc) -> list[ir.Stmt]:
        """The adjoint of ``np.max(arg)`` (``np.min``): the seed goes to the element where
        ``arg`` is largest, split evenly between ties (as JAX does; central differences
        agree at a tie of two); a nan extreme passes nothing back.  The extreme and the
        number of elements that reach it are found again, by loops, before the loop that
        hands the seed out."""
        env = self.typed.env
        n = next(self._loops)
        m, c = ir.Var(f"_rb_m{n}", loc), ir.Var(f"_rb_c{n}", loc)
        env[m.name], env[c.name] = VarType(self.typed.expr_type(r).dtype), VarType("float")

        def at_extreme(item: ir.Expr) -> ir.Expr:
            return ir.Compare(("==",), (item, m), loc)

        pre: list[ir.Stmt] = [ir.Alloc(m.name, r, loc), ir.Alloc(c.name, ir.Const(0.0), loc)]
        pre += self._element_loops(r.arg, lambda item: [ir.Update(
            c, ADD, ir.IfExp(at_extreme(item), ir.Const(1.0), ir.Const(0.0)), loc)], loc)
        post: list[ir.Stmt] = [ir.Dealloc(c.name, None, loc, discard=True),
                               ir.Dealloc(m.name, None, loc, discard=True)]
        share = self._seed_ancilla(ir.IfExp(ir.Compare((">",), (c, ir.Const(0.0))),
                                            ir.BinOp("/", seed, c), ir.Const(0.0)),
                                   pre, post, loc)
        zero = ir.Const(0j) if self.seed_is_complex(seed) else ir.Const(0.0)
        body = self._element_loops(r.arg, lambda item: self.accumulate(
            item, ir.IfExp(at_extreme(item), share, zero), op), loc)
        return [*pre, *body, *post]

    def _sum_adjoint(self, r: ir.Reduce, seed: ir.Expr, op: str, loc: ir.Loc) -> list[ir.Stmt]:
        """The adjoint of ``sum(arg)`` seeded with ``seed``: a loop over the elements
        adding ``seed * d arg[i] / dx`` into the adjoint of everything ``arg[i]`` reads.
        A seed that is not a plain variable or constant (it may hold a sum itself) is
        computed once, into an ancilla, before the loop."""
        pre: list[ir.Stmt] = []
        post: list[ir.Stmt] = []
        if not isinstance(seed, (ir.Var, ir.Const)):
            seed = self._seed_ancilla(seed, pre, post, loc)
        body = self._element_loops(r.arg, lambda item: self.accumulate(item, seed, op), loc)
        return [*pre, *body, *post]

    def _element_loops(self, arg: ir.Expr, body_of, loc: ir.Loc) -> list[ir.Stmt]:
        """Loops over the elements of the whole-array expression ``arg``, whose body is
        ``body_of(item)`` for the element ``item`` of ``arg`` at the loop indices."""
        env = self.typed.env
        lead = array_nodes(arg, env)[0]
        ndim = self.typed.expr_type(lead).ndim
        idx = tuple(self.fresh_loop_var() for _ in range(ndim))
        for i in idx:
            env[i] = VarType("int")
        item = element_at(arg, tuple(ir.Var(i, loc) for i in idx), env)
        body: tuple[ir.Stmt, ...] = tuple(body_of(item))
        for ax in reversed(range(ndim)):
            body = (ir.For(idx[ax], ir.Const(0), extent(lead, ax, env), ir.Const(1), body,
                           loc=loc),)
        return list(body)

    def fresh_loop_var(self) -> str:
        return f"_rb_w{next(self._loops)}"


def _replaced(e: ir.Expr, old: ir.Expr, new: ir.Expr) -> ir.Expr:
    if e == old:
        return new
    return ir.map_children(e, lambda c: _replaced(c, old, new))


def _substituted(s: ir.Stmt, old: ir.Expr, new: ir.Expr) -> ir.Stmt:
    """An adjoint statement (an update, an ancilla's allocation, a loop of them) with every
    occurrence of the value ``old`` read from ``new`` instead."""
    if isinstance(s, ir.Update):
        return replace(s, value=_replaced(s.value, old, new))
    if isinstance(s, ir.Alloc) and not isinstance(s.init, ir.ArrayAlloc):
        return replace(s, init=_replaced(s.init, old, new))
    if isinstance(s, ir.For):
        return replace(s, body=tuple(_substituted(b, old, new) for b in s.body))
    return s


@dataclass(frozen=True)
class _SumSeed:
    """A contribution that is a whole sum: ``seed * d reduce / dx`` for the x it reads."""

    reduce: ir.Reduce
    seed: ir.Expr


class Adjoint:
    """Builds the reverse sweep of one typed function."""

    def __init__(self, typed: TypedFunction, inactive: frozenset[str] = frozenset()):
        self.ctx = AdjointContext(typed, inactive)
        self.env = typed.env

    def body(self, stmts) -> tuple[ir.Stmt, ...]:
        out: list[ir.Stmt] = []
        for s in reversed(stmts):
            out.extend(self.stmt(s))
        return tuple(out)

    def stmt(self, s: ir.Stmt) -> list[ir.Stmt]:
        """The reverse sweep of one statement: its kind's ``s_<Kind>`` rule (every kind of
        checked IR has one: ``tests/test_rules_tables.py``)."""
        rule = getattr(self, "s_" + type(s).__name__, None)
        if rule is None:
            raise TypeError(f"no adjoint for {type(s).__name__}")
        self.ctx.at = s.loc
        return rule(s)

    def s_Update(self, s: ir.Update) -> list[ir.Stmt]:
        t = self.env[s.target.name]
        if isinstance(s.value, ir.MatMul):  # (one product, whose adjoints are products)
            return UPDATES[s.op].adjoint(self.ctx, s)
        if (isinstance(s.target, ir.Var) and t.is_array) or ir.is_subarray(s.target, t.ndim):
            return self.elementwise(s, self.ctx.typed.expr_type(s.target).ndim)
        return UPDATES[s.op].adjoint(self.ctx, s)

    def s_Swap(self, s: ir.Swap) -> list[ir.Stmt]:
        out: list[ir.Stmt] = [s]
        a, b = self.ctx.adj(s.a), self.ctx.adj(s.b)
        if a is not None and b is not None:
            out.append(ir.Swap(a, b, s.loc))
        return out

    def s_Alloc(self, s: ir.Alloc) -> list[ir.Stmt]:
        # reverse of allocating t = e: pass t_bar back to what e read, free both
        ctx = self.ctx
        out: list[ir.Stmt] = []
        tbar = ctx.adj(ir.Var(s.name))
        if tbar is not None:
            init = s.init
            if isinstance(init, ir.ArrayAlloc):
                if init.kind == "copy" and ctx.differentiable(init.source):
                    out.append(ir.Update(ir.Var(adj_name(init.source)), ADD, tbar, s.loc))
            else:  # (an ancilla nothing changed holds its value: its partials read it)
                held = ir.Var(s.name, s.loc) if ctx.is_fresh(s) else None
                out += ctx.accumulate(init, tbar, ADD, result=held)
        out.append(ir.Dealloc(s.name, s.init, s.loc))
        if tbar is not None:
            out.append(ir.Dealloc(tbar.name, None, s.loc, discard=True))
        return out

    def s_Dealloc(self, s: ir.Dealloc) -> list[ir.Stmt]:
        # reverse of `del t`: t comes back from its allocation expression, with a
        # zero adjoint (its value after `del` influenced nothing)
        out: list[ir.Stmt] = [ir.Alloc(s.name, s.init, s.loc)]
        if self.ctx.differentiable(s.name):
            out.append(ir.Alloc(adj_name(s.name), self.zero_like(s.name), s.loc))
        return out

    def s_Call(self, s: ir.Call) -> list[ir.Stmt]:
        adj_args = tuple(self.ctx.adj(a) for a in s.args)
        return [replace(s, backward=True, adj_args=adj_args,
                        inactive=tuple(a is None for a in adj_args))]

    def s_Block(self, s: ir.Block) -> list[ir.Stmt]:
        return [ir.Block(self.body(s.body), s.label, s.loc)]

    def s_Inverted(self, s: ir.Inverted) -> list[ir.Stmt]:
        # a routine's uncompute, read backwards, runs the routine again: a replay, whose
        # adjoints are zero (the routine's own adjoint comes later in the sweep)
        return [ir.Block(self.body(invert_body(s.body)), s.label, s.loc,
                         replay=s.label.startswith("~routine"))]

    def s_If(self, s: ir.If) -> list[ir.Stmt]:
        return [ir.If(s.post, s.pre, self.body(s.then), self.body(s.orelse), s.loc)]

    def s_While(self, s: ir.While) -> list[ir.Stmt]:
        return [ir.While(s.post, s.cond, self.body(s.body), s.loc)]

    def s_For(self, s: ir.For) -> list[ir.Stmt]:
        return [replace(s, body=self.body(s.body), reverse=not s.reverse)]

    def s_Print(self, s: ir.Print) -> list[ir.Stmt]:
        return [s]

    def s_Assert(self, s: ir.Assert) -> list[ir.Stmt]:
        return [s]

    def zero_like(self, name: str) -> ir.Expr:
        t = self.env[name]
        if t.is_array:
            return ir.ArrayAlloc("zeros_like", (), name, t.dtype)
        return ir.Const(0j if t.dtype == "complex" else 0.0)

    def elementwise(self, s: ir.Update, ndim: int) -> list[ir.Stmt]:
        """A whole-array update (of an array or a sub-array), as explicit loops over its
        elements (so scalar operands can gather their adjoint over all elements)."""
        idx = tuple(self.ctx.fresh_loop_var() for _ in range(ndim))
        at = tuple(ir.Var(i) for i in idx)
        scalar = ir.Update(element_at(s.target, at, self.env), s.op, element_at(s.value, at, self.env), s.loc)
        if self.ctx.is_fresh(s):  # (each element of a fresh whole-array update is fresh)
            self.ctx.fresh[id(scalar)] = scalar
        for i in idx:
            self.env[i] = VarType("int")
        inner: tuple[ir.Stmt, ...] = tuple(UPDATES[s.op].adjoint(self.ctx, scalar))
        for ax in reversed(range(ndim)):
            inner = (ir.For(idx[ax], ir.Const(0), extent(s.target, ax, self.env), ir.Const(1),
                            inner, False, s.loc),)
        return list(inner)


def adjoint_params(typed: TypedFunction, lanes: int = 1,
                   inactive: frozenset[str] = frozenset()) -> tuple[tuple[str, VarType], ...]:
    """The adjoint parameters of a function: one per differentiable argument and lane."""
    one = tuple((adj_name(p), t) for p, t in zip(typed.func.params, typed.params)
                if t.dtype in DIFFERENTIABLE and p not in inactive)
    if lanes == 1:
        return one
    return tuple((lane_name(n, k), t) for k in range(lanes) for n, t in one)


def adjoint(typed: TypedFunction, lanes: int = 1,
            inactive: frozenset[str] = frozenset()) -> tuple[ir.Function, tuple[VarType, ...]]:
    """The reverse sweep of ``typed``: parameters ``(*params, *adjoints)``.

    Run on the state *after* the function, it restores the state before it and
    turns the adjoints of the outputs into the adjoints of the inputs.  With
    ``lanes > 1`` it carries that many independent adjoints (seeds) at once --
    lane k's adjoint of x is ``_rb_adj{k}_x`` -- sharing one uncomputation: a
    Jacobian's rows for the price of one reverse sweep plus the adjoint updates.
    ``inactive`` read-only arguments get no adjoint (see :class:`AdjointContext`); the
    caller guarantees they are read-only (:meth:`Program.written_params`).
    Returns the IR function and its full signature.
    """
    body = Adjoint(typed, frozenset(inactive)).body(typed.func.body)
    if lanes > 1:
        body = replicate_lanes(body, lanes)
    extra = adjoint_params(typed, lanes, frozenset(inactive))
    func = replace(typed.func, params=typed.func.params + tuple(n for n, _ in extra), body=body)
    return func, typed.params + tuple(t for _, t in extra)


# --------------------------------------------------------------------------- #
# Several adjoint lanes: every statement on adjoints is repeated once per lane
# --------------------------------------------------------------------------- #
_ADJ = ir.ADJOINT_PREFIX


def lane_name(name: str, k: int) -> str:
    """``_rb_adj_x`` -> ``_rb_adj{k}_x``."""
    return ir.adjoint_name(name[len(_ADJ):], k) if name.startswith(_ADJ) else name


def _rename(e: ir.Expr, f) -> ir.Expr:
    """``e`` with every variable and array name ``n`` replaced by ``f(n)``."""
    if isinstance(e, (ir.Var, ir.Elem)):
        e = replace(e, name=f(e.name))
    return ir.map_children(e, lambda c: _rename(c, f))


def _lane(e, k: int):
    """``e`` with every adjoint variable renamed to lane ``k``."""
    return None if e is None else _rename(e, lambda n: lane_name(n, k))


def replicate_lanes(body: tuple[ir.Stmt, ...], lanes: int) -> tuple[ir.Stmt, ...]:
    """Repeat each adjoint statement once per lane; primal statements stay single."""
    out: list[ir.Stmt] = []
    for s in body:
        if isinstance(s, ir.Update) and ir.is_adjoint(s.target.name):
            out += [replace(s, target=_lane(s.target, k), value=_lane(s.value, k)) for k in range(lanes)]
        elif isinstance(s, ir.Swap) and ir.is_adjoint(s.a.name):
            out += [ir.Swap(_lane(s.a, k), _lane(s.b, k), s.loc) for k in range(lanes)]
        elif isinstance(s, (ir.Alloc, ir.Dealloc)) and ir.is_adjoint(s.name):
            # an adjoint ancilla may be computed from adjoints (a seed held for a loop)
            out += [replace(s, name=lane_name(s.name, k), init=_lane(s.init, k))
                    for k in range(lanes)]
        elif isinstance(s, ir.Call) and s.backward:
            adj = tuple(_lane(a, k) for k in range(lanes) for a in s.adj_args)
            out.append(replace(s, adj_args=adj, lanes=lanes))
        elif isinstance(s, ir.If):
            out.append(replace(s, then=replicate_lanes(s.then, lanes),
                               orelse=replicate_lanes(s.orelse, lanes)))
        elif isinstance(s, (ir.While, ir.For, ir.Block, ir.Inverted)):
            out.append(replace(s, body=replicate_lanes(s.body, lanes)))
        else:
            out.append(s)
    return tuple(out)
