"""Elementwise expressions over whole arrays and sub-arrays, one element at a time.

The adjoint and tangent transforms (and the lowering of matrix products,
:mod:`revbench.lang.products`) turn a whole-array statement (``y += a * x``,
``A[i] += v``) into a loop over its elements: these helpers say which arrays such an
expression reads, how long each axis is, and what the expression is at one element.
"""

from __future__ import annotations

from revbench.lang import ir
from revbench.rules.operators import is_const


def array_nodes(e: ir.Expr, env) -> list:
    """The arrays and sub-arrays an elementwise expression reads (not inside its sums)."""
    return [n for n in ir.walk_elementwise(e)
            if (isinstance(n, ir.Var) and env[n.name].is_array)
            or ir.is_subarray(n, env[n.name].ndim if isinstance(n, ir.Elem) else 0)]


def extent(node, ax: int, env) -> ir.Expr:
    """The length of axis ``ax`` of an array variable or a sub-array."""
    if isinstance(node, ir.Var):
        return ir.Shape(node.name, ax)
    array_ax, part = ir.subarray_axes(node, env[node.name].ndim)[ax]
    lo, hi = ir.slice_bounds(node.name, array_ax, part)
    span = hi if is_const(lo, 0) else ir.BinOp("-", hi, lo)
    step = ir.slice_step(part)
    # (bounds are checked 0 <= lo <= hi first, so the span is never negative)
    return span if step == 1 else ir.BinOp("//", ir.BinOp("+", span, ir.Const(step - 1)),
                                           ir.Const(step))


def strided(lo: ir.Expr, k: ir.Expr, step: int) -> ir.Expr:
    """The array index of element ``k`` of a slice from ``lo`` by ``step``: ``lo + k*step``."""
    offset = k if step == 1 else ir.BinOp("*", k, ir.Const(step))
    return offset if is_const(lo, 0) else ir.BinOp("+", lo, offset)


def element_at(e: ir.Expr, at: tuple[ir.Expr, ...], env) -> ir.Expr:
    """An elementwise expression at loop indices ``at``: each array becomes its element
    ``x[at]``, each sub-array the element of its array (``A[i, lo + at0]``); sums stay."""
    if isinstance(e, ir.Var):
        return ir.Elem(e.name, at, e.loc) if env[e.name].is_array else e
    if isinstance(e, ir.Elem):
        nd = env[e.name].ndim
        if not ir.is_subarray(e, nd):
            return e
        parts, j = [], 0
        for ax in range(nd):
            part = e.indices[ax] if ax < len(e.indices) else None
            if part is not None and not isinstance(part, ir.Slice):
                parts.append(part)
                continue
            lo, _ = ir.slice_bounds(e.name, ax, part)
            parts.append(strided(lo, at[j], ir.slice_step(part)))
            j += 1
        return ir.Elem(e.name, tuple(parts), e.loc)
    if isinstance(e, ir.Reduce):
        return e  # summed whole, not per element
    return ir.map_children(e, lambda c: element_at(c, at, env))
