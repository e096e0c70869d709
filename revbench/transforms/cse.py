"""The ``cse`` transform: each value once per step of a reverse sweep.

The adjoint rule of ``y += e`` (:mod:`revbench.rules.instructions`) undoes the update and
then adds ``y_bar * de/dx`` into the adjoint of every ``x`` that ``e`` reads; each partial
is an expression over ``e``'s operands, so the sweep of ``loss += log1p(exp(z)) - y * z``
evaluates ``exp(z)`` three times, and that of ``h[i] += tanh(np.dot(W[i], x))`` the sum
and the ``tanh`` once per partial -- where the forward run evaluated each once.  Between
those statements nothing changes the operands: the language refuses an update that reads
its own target, and the adjoint updates write only adjoints.  So every subexpression the
statements of one straight-line run evaluate from the same operands is computed once,
into a local ``_rb_cseN`` allocated before the first of them and released after the last.

What is shared, and where:

* float and complex expressions worth a local: a sum (``np.dot``, ``np.sum``), a pure
  function, a division or power, or three operators or more (a lone ``a * b`` stays as
  it is: the compiler keeps it in a register anyway).  Integer index arithmetic stays
  written out, where the loop ranges can still prove indices distinct and sums free of
  overflow (:mod:`revbench.lang.ranges`);
* only values a statement evaluates unconditionally, before it changes anything: not the
  branches of ``a if c else b`` (``sin(x) / x if x != 0 else 1.0`` must not divide by
  zero), nor the operands after the first of ``and``/``or``, nor the inside of a sum (its
  per-element terms);
* only from one statement to the next while no statement between writes a name the
  expression reads, in the same body (a loop body, a branch, a block) of straight-line
  statements and compound ones between.  An update's own target does not count for a
  value of its own operand: the operand never reads the element the update writes (the
  language refuses ``y += y``, and checks ``x[i] += x[j]`` at run time), so the sweep of
  ``H[t + 1] += np.tanh(Wh @ H[t])`` sums ``Wh @ H[t]`` once for the undo and the partials.

The value is the same value: the expression computed once instead of several times, in
the same floating-point operations, so results are bit for bit those of the code before
the pass, on every backend.  It runs on every program (a forward run rarely repeats
itself, a reverse sweep always does), after ``prune`` has dropped what nothing reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import fields, replace
from itertools import count

from revbench.lang import ir
from revbench.lang.types import TypedFunction, VarType

#: the locals shared values are held in are this and a number
PREFIX = "_rb_cse"
#: what a local must save to be worth it (:func:`_cost`)
WORTH = 3
#: what an expression costs to evaluate, roughly: a sum or a function call far more than
#: an add (their loops and calls); a division or power more than a multiply
_OP_COST = {"/": 4, "**": 4, "//": 4, "%": 4}
_CALL_COST = 8


def share_values(typed: TypedFunction) -> ir.Function:
    """``typed``'s function with the values its straight-line runs repeat shared."""
    sharer = _Sharer(typed)
    return replace(typed.func, body=sharer.body(typed.func.body))


class _Sharer:
    def __init__(self, typed: TypedFunction):
        self.typed = typed
        self.names = count(1)
        self._types: dict[int, tuple[ir.Expr, VarType | None]] = {}

    # -- types -------------------------------------------------------------------------
    def type_of(self, e: ir.Expr) -> VarType | None:
        hit = self._types.get(id(e))
        if hit is None or hit[0] is not e:
            try:
                t = self.typed.expr_type(e)
            except Exception:  # (an expression the checker types only in its statement)
                t = None
            hit = self._types[id(e)] = (e, t)
        return hit[1]

    def shareable(self, e: ir.Expr) -> bool:
        t = self.type_of(e)
        return t is not None and not t.is_array and t.dtype in ("float", "complex") \
            and _cost(e) >= WORTH

    # -- bodies ------------------------------------------------------------------------
    def body(self, stmts: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        out = [self.nested(s) for s in stmts]
        while True:
            found = self.best(out)
            if found is None:
                return tuple(out)
            out = self.share(out, *found)

    def nested(self, s: ir.Stmt) -> ir.Stmt:
        """``s`` with the bodies nested in it shared (their own runs of statements)."""
        if isinstance(s, ir.If):
            return replace(s, then=self.body(s.then), orelse=self.body(s.orelse))
        if isinstance(s, (ir.For, ir.While, ir.Block)):
            return replace(s, body=self.body(s.body))
        return s  # (an Inverted block runs its body backwards: generated from it as it is)

    def best(self, stmts: list[ir.Stmt]) -> tuple[ir.Expr, list[tuple[int, int]]] | None:
        """The costliest expression repeated within a window of ``stmts`` that no write
        interrupts, and its windows (first and last statement, two uses or more)."""
        uses: dict[tuple, list[int]] = {}
        exprs: dict[tuple, ir.Expr] = {}
        for k, s in enumerate(stmts):
            for e in _evaluated(s):
                for c in _unconditional(e):
                    if self.shareable(c):
                        key = _key(c)
                        uses.setdefault(key, []).append(k)
                        exprs.setdefault(key, c)
        writes = [_writes(s) for s in stmts]
        # an update's operand never reads the element the update writes (the language
        # refuses it, statically or at run time): a value the operand holds is the same
        # after the update as before it
        after_use = [w - {s.target.name} if isinstance(s, ir.Update) else w
                     for s, w in zip(stmts, writes)]
        best, best_cost = None, 0
        for key, ks in uses.items():
            if len(ks) < 2:
                continue
            e = exprs[key]
            windows = _windows(ks, ir.names_used(e), writes, after_use)
            if windows and _cost(e) > best_cost:
                best, best_cost = (e, windows), _cost(e)
        return best

    def share(self, stmts: list[ir.Stmt], e: ir.Expr,
              windows: list[tuple[int, int]]) -> list[ir.Stmt]:
        key = _key(e)
        t = self.type_of(e)
        out = list(stmts)
        for first, last in reversed(windows):  # (from the end: the indices stay valid)
            name = f"{PREFIX}{next(self.names)}"
            self.typed.env[name] = VarType(t.dtype)
            var = ir.Var(name, getattr(e, "loc", ir.NO_LOC))
            for k in range(first, last + 1):
                out[k] = _substitute(out[k], key, var)
            loc = out[first].loc
            out.insert(last + 1, ir.Dealloc(name, None, out[last].loc, discard=True))
            out.insert(first, ir.Alloc(name, e, loc))
        return out


def _windows(ks: list[int], reads: set[str], writes: list[set[str]],
             after_use: list[set[str]]) -> list[tuple[int, int]]:
    """The runs of the statements ``ks`` (in order, repeated for several uses in one) in
    which nothing between two uses writes what the value reads: ``(first, last)`` of each
    run with two uses or more.  ``writes``: what each statement writes; ``after_use``: what
    it writes that a value of its own operand may read."""
    out: list[tuple[int, int]] = []
    first, last, n = ks[0], ks[0], 1
    for k in ks[1:]:
        if k > last and (reads & after_use[last]
                         or any(reads & writes[j] for j in range(last + 1, k))):
            if n >= 2:
                out.append((first, last))
            first, n = k, 0
        last, n = k, n + 1
    if n >= 2:
        out.append((first, last))
    return out


def _writes(s: ir.Stmt) -> set[str]:
    """What ``s`` may change (nested statements, a loop's variable included)."""
    out = ir.names_written((s,))
    for st in ir.walk_stmts((s,)):
        if isinstance(st, ir.For):
            out.add(st.var)
    return out


def _evaluated(s: ir.Stmt) -> tuple[ir.Expr, ...]:
    """The expressions ``s`` evaluates before it changes anything (the ones a shared value
    may replace): an update's operand, an allocation's value, a loop's bounds."""
    if isinstance(s, ir.Update):
        return (s.value,)
    if isinstance(s, ir.Alloc) and not isinstance(s.init, ir.ArrayAlloc):
        return (s.init,)
    if isinstance(s, ir.For):
        return (s.start, s.stop, s.step)
    return ()


def _unconditional(e: ir.Expr) -> Iterator[ir.Expr]:
    """``e`` and the subexpressions evaluated whenever ``e`` is (children first): not a
    conditional's branches, not the operands after the first of ``and``/``or`` or of a
    chained comparison, not a sum's per-element terms, not an index."""
    if isinstance(e, (ir.IfExp,)):
        yield from _unconditional(e.cond)
    elif isinstance(e, ir.BoolOp):
        yield from _unconditional(e.values[0])
    elif isinstance(e, ir.Compare):
        for o in (e.operands if len(e.ops) == 1 else e.operands[:1]):
            yield from _unconditional(o)
    elif isinstance(e, (ir.BinOp, ir.UnaryOp, ir.Func)):
        for c in ir.sub_expressions(e):
            yield from _unconditional(c)
    elif not isinstance(e, ir.Reduce):
        return  # leaves, elements (indices stay written out), allocations, scans
    yield e


def _cost(e: ir.Expr) -> int:
    if isinstance(e, (ir.Reduce, ir.Func)):
        return _CALL_COST + sum(_cost(c) for c in ir.sub_expressions(e))
    if isinstance(e, ir.BinOp):
        return _OP_COST.get(e.op, 1) + _cost(e.left) + _cost(e.right)
    if isinstance(e, (ir.UnaryOp, ir.IfExp, ir.Compare, ir.BoolOp)):
        return 1 + sum(_cost(c) for c in ir.sub_expressions(e))
    return 0


def _key(e) -> tuple:
    """A structural key of an expression: equal for the same computation (a constant's
    type and sign of zero count: ``x * 2`` is not ``x * 2.0``, ``0.0`` not ``-0.0``)."""
    if isinstance(e, ir.Const):
        return ("Const", type(e.value).__name__, repr(e.value))
    if isinstance(e, tuple):
        return tuple(_key(x) for x in e)
    if hasattr(e, "__dataclass_fields__"):
        return (type(e).__name__, *(_key(getattr(e, f.name)) for f in fields(e)
                                    if f.name != "loc"))
    return e


def _substitute_expr(e: ir.Expr, key: tuple, var: ir.Var) -> ir.Expr:
    """``e`` with its unconditional occurrences of the value ``key`` replaced by ``var``."""
    if _key(e) == key:
        return var
    if isinstance(e, ir.IfExp):
        return replace(e, cond=_substitute_expr(e.cond, key, var))
    if isinstance(e, ir.BoolOp):
        return replace(e, values=(_substitute_expr(e.values[0], key, var), *e.values[1:]))
    if isinstance(e, ir.Compare):
        n = len(e.operands) if len(e.ops) == 1 else 1
        return replace(e, operands=(*(_substitute_expr(o, key, var) for o in e.operands[:n]),
                                    *e.operands[n:]))
    if isinstance(e, (ir.BinOp, ir.UnaryOp, ir.Func)):
        return ir.map_children(e, lambda c: _substitute_expr(c, key, var))
    return e


def _substitute(s: ir.Stmt, key: tuple, var: ir.Var) -> ir.Stmt:
    if isinstance(s, ir.Update):
        return replace(s, value=_substitute_expr(s.value, key, var))
    if isinstance(s, ir.Alloc) and not isinstance(s.init, ir.ArrayAlloc):
        return replace(s, init=_substitute_expr(s.init, key, var))
    if isinstance(s, ir.For):
        return replace(s, start=_substitute_expr(s.start, key, var),
                       stop=_substitute_expr(s.stop, key, var),
                       step=_substitute_expr(s.step, key, var))
    return s
