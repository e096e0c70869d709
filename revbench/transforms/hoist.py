"""The ``hoist`` transform: load a repeated array element once per loop iteration.

Reverse sweeps read the same elements several times in one iteration: the
adjoint of ``t += data[k] * x[indices[k]]`` reads ``x[indices[k]]`` and
``data[k]`` again beside the uncomputation.  LLVM cannot merge those loads,
because the stores in between (into adjoint arrays) might, as far as it
knows, write the same memory.  Arrays passed under different names are
distinct in this language, so where a loop body never writes an array (and
never changes the index variables), an element of it read twice or more in
the body's straight-line statements is loaded once, into a new local
``_rb_hN``, right before its first use.

Only the body's own top-level updates and swaps are rewritten, and the load
is placed before the first of them that reads it, so an element read only
under a condition is never loaded when the condition is false (a checked
index out of range stays exactly as reachable as before).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from itertools import count

from revbench.lang import ir
from revbench.transforms.prune import uses

_STRAIGHT = (ir.Update, ir.Swap)
#: the name of the local an element is loaded into is this and a number
LOCAL_PREFIX = "_rb_h"


def _elems(s: ir.Stmt):
    """Element reads of a straight-line statement (a target's own element is a write)."""
    if isinstance(s, ir.Update):
        exprs = [s.value, *_target_indices(s.target)]
    else:
        exprs = [*_target_indices(s.a), *_target_indices(s.b)]
    for e in exprs:
        for n in ir.walk_expr(e):
            if isinstance(n, ir.Elem):
                yield n


def _target_indices(t: ir.Target) -> tuple[ir.Expr, ...]:
    return t.indices if isinstance(t, ir.Elem) else ()


def _subst(e: ir.Expr, old: ir.Elem, new: ir.Var) -> ir.Expr:
    if e == old:
        return new
    return ir.map_children(e, lambda c: _subst(c, old, new))


def _subst_target(t: ir.Target, old: ir.Elem, new: ir.Var) -> ir.Target:
    if isinstance(t, ir.Elem):
        return replace(t, indices=tuple(_subst(i, old, new) for i in t.indices))
    return t


def _subst_stmt(s: ir.Stmt, old: ir.Elem, new: ir.Var) -> ir.Stmt:
    if isinstance(s, ir.Update):
        return replace(s, target=_subst_target(s.target, old, new), value=_subst(s.value, old, new))
    return replace(s, a=_subst_target(s.a, old, new), b=_subst_target(s.b, old, new))


def _depth(e: ir.Expr) -> int:
    return 1 + max((_depth(c) for c in ir.sub_expressions(e)), default=0)


def hoist_body(body: tuple[ir.Stmt, ...], names: count, ndims: dict[str, int]) -> tuple[ir.Stmt, ...]:
    """A loop body with its repeated invariant element loads hoisted (its own statements).
    ``ndims`` gives the arrays' dimensions: a sub-array (``A[i]``) is not an element."""
    written = ir.names_written(body)
    stmts = list(body)
    hoisted: list[str] = []
    while True:
        seen = Counter(e for s in stmts if isinstance(s, _STRAIGHT) for e in _elems(s))
        ready = [e for e, n in seen.items()
                 if n >= 2 and e.name not in written
                 and not ir.is_subarray(e, ndims.get(e.name, len(e.indices)))
                 and not any(uses(i) & written for i in e.indices)]
        if not ready:
            break
        elem = min(ready, key=_depth)  # the innermost first: x[indices[k]] after indices[k]
        var = ir.Var(f"{LOCAL_PREFIX}{next(names)}", elem.loc)
        first = next(k for k, s in enumerate(stmts)
                     if isinstance(s, _STRAIGHT) and elem in set(_elems(s)))
        stmts = [_subst_stmt(s, elem, var) if isinstance(s, _STRAIGHT) else s for s in stmts]
        stmts.insert(first, ir.Alloc(var.name, elem, stmts[first].loc))
        hoisted.append(var.name)
    stmts += [ir.Dealloc(name, None, stmts[-1].loc, discard=True) for name in reversed(hoisted)]
    return tuple(stmts)


def hoist(func: ir.Function, ndims: dict[str, int] | None = None) -> ir.Function:
    """``func`` with repeated loop-invariant element loads read once per iteration
    (``ndims``: the number of dimensions of each array, from the function's types)."""
    return replace(func, body=_hoist_nested(func.body, count(1), ndims or {}))


def _hoist_nested(body: tuple[ir.Stmt, ...], names: count,
                  ndims: dict[str, int]) -> tuple[ir.Stmt, ...]:
    """``body`` with every ``for`` body in it (at any depth) hoisted, innermost first."""
    out = []
    for s in body:
        if isinstance(s, ir.For):
            s = replace(s, body=hoist_body(_hoist_nested(s.body, names, ndims), names, ndims))
        elif isinstance(s, ir.If):
            s = replace(s, then=_hoist_nested(s.then, names, ndims),
                        orelse=_hoist_nested(s.orelse, names, ndims))
        elif isinstance(s, (ir.While, ir.Block)):
            s = replace(s, body=_hoist_nested(s.body, names, ndims))
        out.append(s)
    return tuple(out)
