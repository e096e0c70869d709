"""Matrix products, reductions along an axis and running sums, lowered to the core language.

``y += A @ x`` and ``y += np.sum(A, axis=1)`` are what a user writes; what they mean depends
on the arrays' dimensions (``A @ x`` is a vector, ``x @ y`` a number, ``A @ B`` a matrix),
which only the call's signature fixes.  So they are lowered here, right after type
inference (:func:`revbench.lang.types.infer` calls :func:`lower`), into the core language
the rest of the pipeline already knows -- a loop over the target's elements whose value is a
sum over one row and one column::

    y += A @ x + b        ->   assert A.shape[0] == y.shape[0] ...
                               for _rb_at0 in range(y.shape[0]):
                                   y[_rb_at0] += np.dot(A[_rb_at0, :], x) + b[_rb_at0]

    y += np.sum(A, axis=1) ->  for _rb_at0 in range(y.shape[0]):
                                   y[_rb_at0] += np.sum(A[_rb_at0, :])

Why lower rather than add a node to every pass: the inverse (``-=``), the reverse sweep
(the adjoint of ``np.dot`` of sub-arrays), the tangents, both backends, the debugger and
the GPU then need nothing new -- the adjoint of ``A @ x`` *is* the adjoint of its sums, one
rule.  A whole-array statement checks its arrays' shapes when it runs; the loops it becomes
check them first with ``assert`` statements, kept with ``check=False`` too, since a size
mismatch would otherwise read outside an array.

``np.cumsum(e)`` and ``np.cumprod(e)`` become an ancilla array of running values, computed
before their statement and uncomputed exactly after it (:meth:`_Lowering.with_scans`).

A product of 1-D arrays (``x @ y``) and a reduction of a 1-D array along axis 0 are numbers,
lowered where they stand, in any statement.  The array-valued ones must be (part of) the
right-hand side of an update of a whole array: anywhere else they are refused here, at
their line, with what to write instead.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, MutableMapping
from dataclasses import replace
from typing import Any

from revbench.lang import ir
from revbench.lang.elementwise import array_nodes, element_at, extent, strided
from revbench.lang.errors import ReversibilityTypeError
from revbench.lang.lowering import Lowering
from revbench.lang.text import expr_text

#: the loop variables of lowered statements (names starting ``_rb_`` are revbench's own)
_INDEX = "_rb_at"
#: binary operators that never reach the transforms (so they need no partials in
#: :data:`revbench.rules.operators.BINARY_OPERATORS`): lowered here to sums of products
LOWERED_OPERATORS = frozenset({"@"})


def _is_lowered(e: ir.Expr) -> bool:
    """A node this module lowers whose element is one whole sum: ``a @ b``, or a reduction
    along one axis."""
    return (isinstance(e, ir.BinOp) and e.op in LOWERED_OPERATORS) or (
        isinstance(e, ir.Reduce) and e.axis is not None)


def _combines(e: ir.Expr) -> tuple[ir.Expr, ...]:
    """The operands an elementwise node combines element by element (a condition is not
    one of them)."""
    if isinstance(e, ir.IfExp):
        return (e.then, e.orelse)
    if isinstance(e, (ir.BinOp, ir.UnaryOp, ir.Func)) and not _is_lowered(e) and not ir.is_reshape(e):
        return ir.sub_expressions(e)
    return ()


def present(func: ir.Function, type_of: Callable[[ir.Expr], Any]) -> bool:
    """Does ``func`` hold anything to lower?  (Most functions do not: one walk.)"""
    for s in ir.walk_stmts(func.body):
        if isinstance(s, ir.Update) and _broadcast_update(s, type_of):
            return True
        for e in ir.statement_expressions(s):
            if any(_is_lowered(n) or ir.is_reshape(n) or isinstance(n, ir.Scan)
                   or _broadcast(n, type_of) for n in ir.walk_expr(e)):
                return True
    return False


def _broadcast(e: ir.Expr, type_of: Callable[[ir.Expr], Any]) -> bool:
    """Does ``e`` combine arrays of different numbers of axes (``Z + b``)?"""
    return len({type_of(c).ndim for c in _combines(e) if type_of(c).is_array}) > 1


def _broadcast_update(s: ir.Update, type_of: Callable[[ir.Expr], Any]) -> bool:
    """``Z += b``: a right-hand side with fewer axes than its (array) target."""
    value = type_of(s.value)
    return value.is_array and value.ndim < type_of(s.target).ndim


def lower(func: ir.Function, env: MutableMapping[str, Any],
          type_of: Callable[[ir.Expr], Any]) -> ir.Function:
    """``func`` with every matrix product and reduction along an axis written as loops of
    sums, and every running sum or product computed into an ancilla array (to be typed
    again).  ``env`` holds the type of every variable and ``type_of`` gives an expression's
    (``.ndim``, ``.dtype``, ``.is_array``): both from the type inference that called this,
    ``type_of`` reading ``env``, to which the ancillas made here are added."""
    return replace(func, body=_Lowering(func, env, type_of).block(func.body))


class _Lowering(Lowering):

    def __init__(self, func: ir.Function, env: MutableMapping[str, Any],
                 type_of: Callable[[ir.Expr], Any]):
        super().__init__(func, env, type_of)
        #: ancilla name -> the expression it holds (messages show the expression)
        self.held: dict[str, ir.Expr] = {}

    def ndim(self, e: ir.Expr) -> int:
        return self.type_of(e).ndim

    def text(self, e: ir.Expr) -> str:
        """``e`` as the user wrote it, for messages: an ancilla this lowering made for an
        inner product is shown as that product."""
        return expr_text(_renamed(e, self.held) if self.held else e)

    # -- errors and types ---------------------------------------------------------------
    def error(self, loc: ir.Loc, message: str) -> ReversibilityTypeError:
        f, text = self.func, self.line(loc)
        return ReversibilityTypeError(
            f"{message} ({ir.where(f.name, f.filename, loc.line, f'`{text}`')})",
            function=f.name, filename=f.filename, lineno=loc.line, stage="types")

    # -- statements ---------------------------------------------------------------------
    def block(self, body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        out: list[ir.Stmt] = []
        for s in body:
            out.extend(self.stmt(s))
        return tuple(out)

    def stmt(self, s: ir.Stmt) -> list[ir.Stmt]:
        if isinstance(s, ir.If):
            return [replace(s, pre=self.scalar(s.pre, s.loc), post=self.scalar(s.post, s.loc),
                            then=self.block(s.then), orelse=self.block(s.orelse))]
        if isinstance(s, (ir.While,)):
            return [replace(s, cond=self.scalar(s.cond, s.loc), post=self.scalar(s.post, s.loc),
                            body=self.block(s.body))]
        if isinstance(s, ir.For):
            return [replace(s, start=self.scalar(s.start, s.loc), stop=self.scalar(s.stop, s.loc),
                            step=self.scalar(s.step, s.loc), body=self.block(s.body))]
        if isinstance(s, (ir.Block, ir.Inverted)):
            return [replace(s, body=self.block(s.body))]
        if isinstance(s, ir.Update):
            return self.update(s)
        if isinstance(s, ir.Alloc):
            return [replace(s, init=self.scalar(s.init, s.loc))]
        if isinstance(s, ir.Dealloc) and s.init is not None:
            return [replace(s, init=self.scalar(s.init, s.loc))]
        if isinstance(s, ir.Print):
            return [replace(s, args=tuple(a if isinstance(a, str) else self.scalar(a, s.loc)
                                          for a in s.args))]
        if isinstance(s, ir.Assert):
            return [replace(s, cond=self.scalar(s.cond, s.loc))]
        for e in ir.statement_expressions(s):  # swaps and calls take variables, not values
            for n in ir.walk_expr(e):
                if self.special(n):
                    raise self.error(s.loc, f"`{self.text(n)}` cannot be used here: compute it "
                                            "into an ancilla first")
        return [s]

    def special(self, e: ir.Expr) -> bool:
        """A node that only this module lowers: a product, a reduction along an axis, a
        running sum, a transpose, an outer product, or arrays broadcast together."""
        return (_is_lowered(e) or ir.is_reshape(e) or isinstance(e, ir.Scan)
                or _broadcast(e, self.type_of))

    def sums_special(self, e: ir.Expr) -> bool:
        """A reduction (along an axis or not) of an array expression that holds a product,
        a transpose, an outer product or a broadcast."""
        if not isinstance(e, ir.Reduce):
            return False
        if e.axis is not None:  # (its element is a sum along one axis: transposes and
            # broadcasts are read in place there, products are not)
            return any(_is_lowered(m) or isinstance(m, ir.Scan) for m in ir.walk_expr(e.arg))
        return any(self.special(m) for m in ir.walk_expr(e.arg))

    def update(self, s: ir.Update) -> list[ir.Stmt]:
        scans = [n for n in ir.walk_expr(s.value) if isinstance(n, ir.Scan)]
        if scans:
            return self.with_scans(s, scans)
        held = self.blas_inside(s)
        if held:
            return self.with_blas_ancillas(s, held)
        if self.blas_terms(s):
            return self.on_blas_statements(s)
        sums = _outermost(s.value, self.sums_special)
        if sums and self.sums_in_place(s):
            return self.summed_in_place(s)
        if sums:
            return self.with_summed_arrays(s, sums)
        inner = self.inner_products(s.value)
        if inner:
            return self.with_inner_arrays(s, inner)
        if not (any(self.special(n) for n in ir.walk_expr(s.value))
                or _broadcast_update(s, self.type_of)):
            return [s]
        if not self.ndim(s.target):
            return [replace(s, value=self.scalar(s.value, s.loc))]
        return self.whole_array(s)

    # -- products on BLAS: ``C += A @ B`` one call of rb_matmul --------------------------
    def blas_operand(self, e: ir.Expr, ndims: tuple[int, ...]) -> bool:
        """A whole float64 array (``A``), or the transpose of a matrix (``A.T``), with a
        number of axes in ``ndims``."""
        if isinstance(e, ir.UnaryOp) and e.op == "T":
            return 2 in ndims and self.blas_operand(e.operand, (2,))
        if not isinstance(e, ir.Var):
            return False
        t = self.env.get(e.name)
        return t is not None and t.is_array and t.dtype == "float" and t.ndim in ndims

    def on_blas(self, e: ir.Expr) -> bool:
        """A product BLAS computes: ``a @ b`` of whole float64 arrays (or transposed
        matrices) that is an array, or ``np.outer(u, v)`` of two float64 vectors."""
        if isinstance(e, ir.BinOp) and e.op == "@":
            return (self.blas_operand(e.left, (1, 2)) and self.blas_operand(e.right, (1, 2))
                    and self.ndim(e) > 0)
        if isinstance(e, ir.BinOp) and e.op == "outer":
            return self.blas_operand(e.left, (1,)) and self.blas_operand(e.right, (1,))
        return False

    def blas_target(self, s: ir.Update) -> bool:
        """Can ``s`` take a product's value as one call: ``+=`` / ``-=`` of a whole float64
        array?"""
        t = self.env.get(s.target.name)
        return (s.op in ("+=", "-=") and isinstance(s.target, ir.Var) and t is not None
                and t.is_array and t.dtype == "float")

    def blas_terms(self, s: ir.Update) -> list[tuple[bool, ir.Expr]]:
        """``[(minus, P)]`` where ``s``'s right-hand side is one product on BLAS ``P`` (or
        ``-P``) that can be added into its target by one call; else none.  A product
        among other terms (``Z += X @ W.T + b``) is computed into an ancilla first
        (:meth:`blas_inside`), so the statement keeps NumPy's order of operations and the
        bits of its element formula (``Z[i, j] += np.dot(X[i, :], W[j, :]) + b[j]`` below
        the BLAS size), and its inverse the exact reverse."""
        if not self.blas_target(s):
            return []
        terms = _terms(s.value)
        if len(terms) == 1 and self.on_blas(terms[0][1]) and (
                self.ndim(terms[0][1]) == self.ndim(s.target)):
            return terms
        return []

    def blas_inside(self, s: ir.Update) -> list[ir.Expr]:
        """The products on BLAS in ``s``'s right-hand side that are not its terms
        (``X @ W1.T`` in ``H += np.tanh(X @ W1.T + b1)``): each is computed into an
        ancilla array first, by one call."""
        terms = {id(e) for _, e in self.blas_terms(s)}
        return [n for n in ir.walk_expr(s.value) if self.on_blas(n) and id(n) not in terms]

    def with_blas_ancillas(self, s: ir.Update, found: list[ir.Expr]) -> list[ir.Stmt]:
        """``H += np.tanh(X @ W1.T + b1)``: the product computed into an ancilla array
        ``t`` by BLAS (``t += X @ W1.T``), the statement on ``t``, and ``t`` uncomputed
        after by the same call (``t -= X @ W1.T``: the same bits subtracted from the bits
        they made, so exactly zero again).  The product is computed twice, on BLAS; one
        array of its shape is held meanwhile."""
        # (the statement's sizes checked first, as its loops would, naming the products)
        before: list[ir.Stmt] = (self.shape_checks(s, s.target) if self.ndim(s.target)
                                 else [])
        after: list[ir.Stmt] = []
        held: dict[int, ir.Expr] = {}
        for node in found:
            name = f"_rb_product{next(self._names)}"
            self.env[name] = self.type_of(node)
            alloc = ir.ArrayAlloc("zeros", self.extents(node), None, "float", s.loc)
            array = ir.Var(name, s.loc)
            before += [ir.Alloc(name, alloc, s.loc), *self.on_blas_update(array, "+=", node, s.loc)]
            after = [*self.on_blas_update(array, "-=", node, s.loc),
                     ir.Dealloc(name, alloc, s.loc), *after]
            held[id(node)] = array
            self.held[name] = node
        return [*before, *self.update(replace(s, value=_substitute(s.value, held))), *after]

    def on_blas_statements(self, s: ir.Update) -> list[ir.Stmt]:
        """``C += A @ B`` (``-=``, ``C += -(A @ B)``): one call."""
        [(minus, e)] = self.blas_terms(s)
        op = s.op if not minus else ("-=" if s.op == "+=" else "+=")
        return self.on_blas_update(s.target, op, e, s.loc)

    def on_blas_update(self, target: ir.Var, op: str, e: ir.BinOp, loc: ir.Loc) -> list[ir.Stmt]:
        """``target op= e`` for a product on BLAS: its shapes checked (located, as the loops'
        are), then one :class:`ir.MatMul` update."""
        checks = self.shape_checks(ir.Update(target, op, e, loc), target)
        if e.op == "outer":
            product = ir.MatMul(e.left, e.right, outer=True, loc=e.loc)
        else:
            (a, ta), (b, tb) = (_untransposed(x) for x in (e.left, e.right))
            product = ir.MatMul(a, b, ta, tb, loc=e.loc)
        return [*checks, ir.Update(target, op, product, loc)]

    # -- a product inside a product: an ancilla array for the inner one --------------------
    def inner_products(self, e: ir.Expr) -> list[ir.Expr]:
        """The array-valued products and reductions along an axis that stand inside another
        one (``A @ B`` in ``(A @ B) @ x``), innermost first: each is computed into an
        ancilla array before its statement (:meth:`with_inner_arrays`)."""
        found: list[ir.Expr] = []
        for outer in (n for n in ir.walk_expr(e) if _is_lowered(n)):
            for part in ((outer.left, outer.right) if isinstance(outer, ir.BinOp) else (outer.arg,)):
                found += [n for n in _outermost(part, _is_lowered) if self.ndim(n)]
        return found

    def with_inner_arrays(self, s: ir.Update, inner: list[ir.Expr]) -> list[ir.Stmt]:
        """``y += (A @ B) @ x``: the inner product computed into an ancilla array first
        (``t += A @ B``, a whole-array statement), the statement on ``t``, and ``t``
        uncomputed after (``t -= A @ B``: the same values subtracted from the values they
        made, so exactly zero again).  The inner product is computed twice; one array of
        its shape is held meanwhile."""
        before: list[ir.Stmt] = []
        after: list[ir.Stmt] = []
        held: dict[int, ir.Expr] = {}
        for node in inner:
            name = f"_rb_inner{next(self._names)}"
            t = self.type_of(node)
            alloc = ir.ArrayAlloc("zeros", self.extents(node), None, t.dtype, s.loc)
            self.env[name] = t
            array = ir.Var(name, s.loc)
            before += [ir.Alloc(name, alloc, s.loc),
                       *self.update(ir.Update(array, "+=", node, s.loc))]
            after = [*self.update(ir.Update(array, "-=", node, s.loc)),
                     ir.Dealloc(name, alloc, s.loc), *after]
            held[id(node)] = array
            self.held[name] = node
        return [*before, *self.update(replace(s, value=_substitute(s.value, held))), *after]

    # -- a sum of an array with products in it -------------------------------------------
    def sums_in_place(self, s: ir.Update) -> bool:
        """``s += np.sum(e)`` (or ``-=``) with nothing else on the right: the sum can be
        accumulated into ``s`` element by element, with no ancilla."""
        v = s.value
        return (s.op in ("+=", "-=") and not self.ndim(s.target) and isinstance(v, ir.Reduce)
                and v.kind == "sum" and v.axis is None and self.type_of(v.arg).dtype != "bool"
                and not any(self.sums_special(n) for n in ir.walk_expr(v.arg))
                and not self.inner_products(v.arg))

    def summed_in_place(self, s: ir.Update) -> list[ir.Stmt]:
        """``loss += np.sum((W2 @ h + b2 - y) ** 2)``: one loop over the summed array's
        elements, each added into ``loss`` (``loss += (np.dot(W2[i, :], h) + b2[i] -
        y[i]) ** 2``).  The same terms as the sum, added one at a time: the expression is
        evaluated once and no array is held."""
        arg = s.value.arg
        arrays = self.operands(arg)
        checks = self.same_shapes(arrays, s.loc) + [c for a in arrays
                                                    for c in self.agreement(a, s.loc)]
        ext = self.extents(arg)
        k = next(self._names)
        idx = tuple(f"{_INDEX}{k}_{ax}" for ax in range(len(ext)))
        at = tuple(ir.Var(i, s.loc) for i in idx)
        body: ir.Stmt = ir.Update(s.target, s.op, self.at(arg, at, s.loc), s.loc, s.alias_checks)
        for ax in reversed(range(len(ext))):
            body = ir.For(idx[ax], ir.Const(0, s.loc), ext[ax], ir.Const(1, s.loc), (body,),
                          loc=s.loc)
        return [*checks, body]

    def with_summed_arrays(self, s: ir.Update, sums: list[ir.Reduce]) -> list[ir.Stmt]:
        """``s += np.sum(np.tanh(W @ h))``: the array summed, with its products, computed
        into an ancilla array first (``a += np.tanh(W @ h)``, a whole-array statement),
        the sum taken of it, and the ancilla uncomputed after (``a -= ...``: the same
        values subtracted from the values they made, so exactly zero again).  The summed
        expression is computed twice; one array of its shape is held meanwhile."""
        before: list[ir.Stmt] = []
        after: list[ir.Stmt] = []
        summed: dict[int, ir.Expr] = {}
        for r in sums:
            name = f"_rb_summed{next(self._names)}"
            t = self.type_of(r.arg)
            if t.dtype == "bool":  # (a sum of bools counts them)
                t = type(t)("int", t.ndim)
            alloc = ir.ArrayAlloc("zeros", self.extents(r.arg), None, t.dtype, s.loc)
            self.env[name] = t
            array = ir.Var(name, s.loc)
            before += [ir.Alloc(name, alloc, s.loc),
                       *self.update(ir.Update(array, "+=", r.arg, s.loc))]
            after = [*self.update(ir.Update(array, "-=", r.arg, s.loc)),
                     ir.Dealloc(name, alloc, s.loc), *after]
            summed[id(r)] = replace(r, arg=array)
            self.held[name] = r.arg
        return [*before, *self.update(replace(s, value=_substitute(s.value, summed))), *after]

    # -- running sums and products: an ancilla array around the statement --------------
    def with_scans(self, s: ir.Update, scans: list[ir.Scan]) -> list[ir.Stmt]:
        """``y += np.cumsum(x)``: the running sums computed into an ancilla array ``c``
        first (``c[0] += x[0]``, then ``c[i] += c[i - 1] + x[i]``), the statement on ``c``,
        then ``c`` uncomputed by the same updates backwards.  Each element of ``c`` starts at
        zero and gets one value, so subtracting that same value gives exactly zero again:
        no round-off is left in the ancilla, in either direction or in the reverse sweep.
        O(n) time, and one array of n elements while the statement runs."""
        before: list[ir.Stmt] = []
        after: list[ir.Stmt] = []
        ancillas: dict[int, ir.Expr] = {}
        if self.ndim(s.target):  # (named as the user wrote it, not as the ancilla it becomes)
            outer = [n for n in self.operands(s.value) if isinstance(n, ir.Scan)]
            name = self.text(s.target)
            before += [_assert(self.extents(n)[0], extent(s.target, 0, self.env),
                               f"`{self.text(n)}` must have the shape of `{name}` (axis 0)", s.loc)
                       for n in outer]
        for scan in scans:
            inner = next((n for n in ir.walk_expr(scan.arg) if isinstance(n, ir.Scan)), None)
            if inner is not None:
                raise self.error(s.loc, f"`{self.text(inner)}` inside `{self.text(scan)}`: "
                                        "compute it into an ancilla array first")
            name = f"_rb_scan{next(self._names)}"
            compute, uncompute = self.running(name, scan, s.loc)
            self.env[name] = self.type_of(scan)
            before += compute
            after = uncompute + after
            ancillas[id(scan)] = ir.Var(name, s.loc)
        value = _substitute(s.value, ancillas)
        return [*before, *self.update(replace(s, value=value)), *after]

    def running(self, name: str, scan: ir.Scan, loc: ir.Loc) -> tuple[list, list]:
        """The statements that compute the running sums (products) of ``scan`` into the
        ancilla array ``name``, and those that give it back."""
        op = "+" if scan.kind == "cumsum" else "*"
        t = self.type_of(scan)
        arrays = self.operands(scan.arg)
        n = self.extents(scan.arg)[0]
        checks = self.same_shapes(arrays, loc) + [c for a in arrays for c in self.agreement(a, loc)]
        alloc = ir.ArrayAlloc("zeros", (n,), None, t.dtype, loc)
        i = f"{name}_i"

        def at(k: ir.Expr) -> ir.Expr:
            return self.at(scan.arg, (k,), loc)

        def c(k: ir.Expr) -> ir.Elem:
            return ir.Elem(name, (k,), loc)

        zero, one = ir.Const(0, loc), ir.Const(1, loc)
        nonempty = ir.Compare((">",), (n, zero), loc)
        prev = ir.BinOp("-", ir.Var(i, loc), one, loc)
        step = ir.BinOp(op, c(prev), at(ir.Var(i, loc)), loc)

        def first(sign: str) -> ir.If:
            return ir.If(nonempty, nonempty, (ir.Update(c(zero), sign, at(zero), loc),), (), loc)

        compute = [*checks, ir.Alloc(name, alloc, loc), first("+="),
                   ir.For(i, one, n, one, (ir.Update(c(ir.Var(i, loc)), "+=", step, loc),),
                          loc=loc)]
        uncompute = [ir.For(i, one, n, one, (ir.Update(c(ir.Var(i, loc)), "-=", step, loc),),
                            reverse=True, loc=loc),
                     first("-="), ir.Dealloc(name, alloc, loc)]
        return compute, uncompute

    def same_shapes(self, arrays: list[ir.Expr], loc: ir.Loc) -> list[ir.Stmt]:
        """The arrays an elementwise expression combines have one shape, or (broadcast) the
        shape of the last axes of the one with the most axes (asserted)."""
        out: list[ir.Stmt] = []
        if not arrays:
            return out
        lead = max(arrays, key=self.ndim)
        want = self.extents(lead)
        for other in arrays:
            if other is lead:
                continue
            got = self.extents(other)
            skip = len(want) - len(got)
            for ax, (g, need) in enumerate(zip(got, want[skip:])):
                out.append(_assert(g, need, f"`{self.text(other)}` and `{self.text(lead)}` must "
                                            f"have one shape (axis {ax}"
                                            + (f" of `{self.text(other)}`, axis {ax + skip} of "
                                               f"`{self.text(lead)}`: broadcasting aligns the "
                                               "last axes)" if skip else ")"), loc))
        return out

    # -- a number: x @ y, np.sum(x, axis=0) of a 1-D x ------------------------------------
    def scalar(self, e: ir.Expr, loc: ir.Loc) -> ir.Expr:
        """``e`` with its number-valued products and reductions lowered where they stand."""
        if self.sums_special(e):
            raise self.error(loc, f"`{self.text(e)}` cannot be used here: compute it into an "
                                  "ancilla first (`s = 0.0`, `s += ...`)")
        if _is_lowered(e):
            if self.ndim(e) != 0:
                raise self.error(loc, f"`{self.text(e)}` is an array, so it can only be the "
                                      "right-hand side of an update of a whole array "
                                      "(`y += A @ x`)")
            return self.element(e, ())
        return ir.map_children(e, lambda c: self.scalar(c, loc))

    # -- an array: a loop over the target's elements ------------------------------------
    def whole_array(self, s: ir.Update) -> list[ir.Stmt]:
        target, nd = s.target, self.ndim(s.target)
        k = next(self._names)
        idx = tuple(f"{_INDEX}{k}_{ax}" if nd > 1 else f"{_INDEX}{k}" for ax in range(nd))
        at = tuple(ir.Var(i, s.loc) for i in idx)
        checks = self.shape_checks(s, target)
        # (each element's update checks the statement's possible overlaps: a product reads
        # its operands whole, so its target must meet none of them)
        body: ir.Stmt = ir.Update(element_at(target, at, self.env), s.op,
                                  self.at(s.value, at, s.loc), s.loc, s.alias_checks, target)
        for ax in reversed(range(nd)):
            body = ir.For(idx[ax], ir.Const(0, s.loc), extent(target, ax, self.env),
                          ir.Const(1, s.loc), (body,), loc=s.loc)
        return [*checks, body]

    def at(self, e: ir.Expr, at: tuple[ir.Expr, ...], loc: ir.Loc) -> ir.Expr:
        """The value of the elementwise expression ``e`` at the target's element ``at`` (an
        operand with fewer axes at the last ones: NumPy's broadcasting)."""
        if isinstance(e, ir.Reduce) and e.axis is None:
            return self.scalar(e, loc)  # a whole sum: the same at every element
        if isinstance(e, ir.Compare) or not self.type_of(e).is_array:
            return e if not any(self.special(n) for n in ir.walk_expr(e)) else self.scalar(e, loc)
        at = at[len(at) - self.ndim(e):]
        if _is_lowered(e):
            return self.element(e, at)
        if isinstance(e, ir.UnaryOp) and e.op == "T":
            return self.at(e.operand, at[::-1], loc)
        if isinstance(e, ir.BinOp) and e.op == "outer":
            return ir.BinOp("*", self.at(e.left, at[:1], loc), self.at(e.right, at[1:], loc), e.loc)
        if isinstance(e, (ir.Var, ir.Elem)):
            return element_at(e, at, self.env)
        return ir.map_children(e, lambda c: self.at(c, at, loc))

    def element(self, e: ir.Expr, at: tuple[ir.Expr, ...]) -> ir.Expr:
        """Element ``at`` of a product or of a reduction along an axis: one whole sum."""
        for part in ((e.left, e.right) if isinstance(e, ir.BinOp) else (e.arg,)):
            inner = next((n for n in ir.walk_expr(part) if _is_lowered(n)), None)
            if inner is not None:
                raise self.error(e.loc, f"`{self.text(inner)}` inside `{self.text(e)}`: compute "
                                        "it into an ancilla array first, then use that")
        if isinstance(e, ir.Reduce):
            nd = self.ndim(e.arg)
            axis = e.axis % nd
            fixed = (*at[:axis], None, *at[axis:])
            return ir.Reduce(e.kind, self.fix(e.arg, fixed), e.loc)
        a, b = self.ndim(e.left), self.ndim(e.right)
        rows = at[:a - 1]  # the row of a 2-D left operand, the column of a 2-D right one
        cols = at[a - 1:]
        left = self.fix(e.left, (*rows, None))
        right = self.fix(e.right, (None, *cols) if b == 2 else (None,))
        return ir.Reduce("dot", ir.BinOp("*", left, right, e.loc), e.loc)

    def fix(self, e: ir.Expr, parts: tuple[ir.Expr | None, ...]) -> ir.Expr:
        """The elementwise array expression ``e`` with some axes fixed: ``parts`` holds an
        index per axis, ``None`` for an axis kept whole (``A`` at ``(i, None)`` is
        ``A[i, :]``; an operand with fewer axes takes the last parts: broadcasting)."""
        if self.type_of(e).is_array and self.ndim(e) < len(parts):
            parts = parts[len(parts) - self.ndim(e):]
        if isinstance(e, ir.UnaryOp) and e.op == "T":
            if self.ndim(e.operand) == 1 or any(p is not None for p in parts):
                # (one axis left at most: a row of A.T is a column of A, in its order)
                return self.fix(e.operand, parts[::-1])
            return e
        if isinstance(e, ir.BinOp) and e.op == "outer" and any(p is not None for p in parts):
            return ir.BinOp("*", self.fix(e.left, parts[:1]), self.fix(e.right, parts[1:]), e.loc)
        if all(p is None for p in parts):
            return e
        if isinstance(e, ir.Var) and self.env[e.name].is_array:
            return ir.Elem(e.name, tuple(ir.Slice(None, None) if p is None else p for p in parts),
                           e.loc)
        if isinstance(e, ir.Elem) and ir.is_subarray(e, self.env[e.name].ndim):
            free = [ax for ax, _ in ir.subarray_axes(e, self.env[e.name].ndim)]
            indices = list(e.indices) + [None] * (self.env[e.name].ndim - len(e.indices))
            for ax, p in zip(free, parts):
                if p is not None:
                    lo, _ = ir.slice_bounds(e.name, ax, indices[ax])
                    indices[ax] = strided(lo, p, ir.slice_step(indices[ax]))
                elif indices[ax] is None:
                    indices[ax] = ir.Slice(None, None)
            return ir.Elem(e.name, tuple(indices), e.loc)
        if isinstance(e, (ir.Var, ir.Elem, ir.Reduce)):
            return e  # a number: the same in every row
        return ir.map_children(e, lambda c: self.fix(c, parts))

    # -- shapes ---------------------------------------------------------------------------
    def extents(self, e: ir.Expr) -> tuple[ir.Expr, ...]:
        """The length of each axis of an elementwise array expression (of its first array:
        :meth:`agreement` checks that the others match)."""
        if isinstance(e, ir.BinOp) and e.op == "@":
            a, b = self.extents(e.left), self.extents(e.right)
            return (*a[:-1], *b[1:])
        if isinstance(e, ir.UnaryOp) and e.op == "T":
            return self.extents(e.operand)[::-1]
        if isinstance(e, ir.BinOp) and e.op == "outer":
            return (*self.extents(e.left), *self.extents(e.right))
        if isinstance(e, ir.Scan):
            return self.extents(e.arg)
        if isinstance(e, ir.Reduce) and e.axis is not None:
            inner = self.extents(e.arg)
            axis = e.axis % len(inner)
            return (*inner[:axis], *inner[axis + 1:])
        nodes = self.operands(e)
        lead = max(nodes, key=self.ndim) if nodes else None  # (broadcast: the most axes)
        return self.extents(lead) if lead is not None and lead is not e else tuple(
            extent(e, ax, self.env) for ax in range(self.ndim(e)))

    def operands(self, e: ir.Expr) -> list[ir.Expr]:
        """The arrays, sub-arrays, products and reductions along an axis that an elementwise
        expression combines element by element (not what is inside them)."""
        if _is_lowered(e) or ir.is_reshape(e) or isinstance(e, ir.Scan):
            return [e]
        if isinstance(e, ir.Reduce):
            return []
        if isinstance(e, ir.Var) or isinstance(e, ir.Elem):
            return array_nodes(e, self.env)
        out: list[ir.Expr] = []
        for c in ir.sub_expressions(e):
            out.extend(self.operands(c))
        return out

    def shape_checks(self, s: ir.Update, target: ir.Expr) -> list[ir.Stmt]:
        """``assert`` statements for what the whole-array statement checked as it ran: every
        operand has the target's shape, and each product's inner lengths agree."""
        out: list[ir.Stmt] = []
        want = tuple(extent(target, ax, self.env) for ax in range(self.ndim(target)))
        name = self.text(target)
        for node in self.operands(s.value):
            out += self.agreement(node, s.loc)
            got = self.extents(node)
            skip = len(want) - len(got)  # (broadcast: it runs along the last axes)
            for ax, (g, need) in enumerate(zip(got, want[skip:])):
                out.append(_assert(g, need, f"`{self.text(node)}` must have the shape of "
                                            f"`{name}` (axis {ax}" + (
                                                f"; axis {ax + skip} of `{name}`: broadcasting "
                                                "aligns the last axes)" if skip else ")"), s.loc))
        return out

    def agreement(self, node: ir.Expr, loc: ir.Loc) -> list[ir.Stmt]:
        """The checks inside one product or reduction: a product's inner lengths agree, the
        arrays of each operand have one shape."""
        if not (_is_lowered(node) or ir.is_reshape(node)):
            return []
        parts = ((node.left, node.right) if isinstance(node, ir.BinOp) else
                 (node.operand,) if isinstance(node, ir.UnaryOp) else (node.arg,))
        out: list[ir.Stmt] = []
        for part in parts:
            inside = self.operands(part)
            out += self.same_shapes(inside, loc) + [c for n in inside
                                                    for c in self.agreement(n, loc)]
        if ir.is_reshape(node):
            return out
        if isinstance(node, ir.BinOp):
            a, b = self.extents(node.left), self.extents(node.right)
            left, right = f"`{self.text(node.left)}`", f"`{self.text(node.right)}`"
            has = "columns" if len(a) == 2 else "elements"
            needs = "rows" if len(b) == 2 else "elements"
            message = (f"`{self.text(node)}`: {left} and {right} must have as many elements"
                       if len(a) == len(b) == 1 else
                       f"`{self.text(node)}`: {right} must have as many {needs} as {left} has "
                       f"{has}")
            out.append(_assert(a[-1], b[0], message, loc))
        return out


def matmul_as_loops(s: ir.Update, env: MutableMapping[str, Any]
                    ) -> tuple[ir.Expr, list[ir.Stmt]]:
    """``C op= op(A) @ op(B)`` (an :class:`ir.MatMul` update) as the loop over ``C``'s
    elements of one sum each, in the routine's own order (``s = 0.0``, then ``s + A[i, p] *
    B[p, j]`` for ``p`` in order, then ``C[i, j] op= s``): the same bits as
    :mod:`revbench.backends.blas` below its BLAS size.  For a target without BLAS (the
    GPU), which must refuse a product of more multiply-adds than that (it would give other
    bits than the CPU): returns their number (an expression) and the loops."""
    e, loc, C = s.value, s.loc, s.target
    k = next(_LOOP_NAMES)
    i, j = ir.Var(f"{_INDEX}m{k}_i", loc), ir.Var(f"{_INDEX}m{k}_j", loc)
    env[i.name] = env[j.name] = type(env[C.name])("int")
    full = ir.Slice(None, None)
    a, b = e.a.name, e.b.name
    if e.outer:
        m, n, inner = ir.Shape(a, 0, loc), ir.Shape(b, 0, loc), ir.Const(1, loc)
        value: ir.Expr = ir.BinOp("+", ir.Const(0.0, loc), ir.BinOp(
            "*", ir.Elem(a, (i,), loc), ir.Elem(b, (j,), loc), loc), loc)
        at: tuple[ir.Expr, ...] = (i, j)
    else:
        nd_a, nd_b = env[a].ndim, env[b].ndim
        if nd_a == 2:
            m, inner = (ir.Shape(a, 1, loc), ir.Shape(a, 0, loc)) if e.trans_a else (
                ir.Shape(a, 0, loc), ir.Shape(a, 1, loc))
            row = ir.Elem(a, (full, i) if e.trans_a else (i, full), loc)
        else:
            m, inner, row = ir.Const(1, loc), ir.Shape(a, 0, loc), ir.Var(a, loc)
        if nd_b == 2:
            n = ir.Shape(b, 0 if e.trans_b else 1, loc)
            col = ir.Elem(b, (j, full) if e.trans_b else (full, j), loc)
        else:
            n, col = ir.Const(1, loc), ir.Var(b, loc)
        value = ir.Reduce("dot", ir.BinOp("*", row, col, loc), loc)
        at = (i, j) if (nd_a, nd_b) == (2, 2) else (i,) if nd_a == 2 else (j,)
    body: ir.Stmt = ir.Update(ir.Elem(C.name, at, loc), s.op, value, loc)
    if (not e.outer) and at == (i,):
        body = ir.For(i.name, ir.Const(0, loc), m, ir.Const(1, loc), (body,), loc=loc)
    elif at == (j,):
        body = ir.For(j.name, ir.Const(0, loc), n, ir.Const(1, loc), (body,), loc=loc)
    else:
        body = ir.For(i.name, ir.Const(0, loc), m, ir.Const(1, loc), (
            ir.For(j.name, ir.Const(0, loc), n, ir.Const(1, loc), (body,), loc=loc),), loc=loc)
    return ir.BinOp("*", ir.BinOp("*", m, n, loc), inner, loc), [body]


#: loop names of :func:`matmul_as_loops` (its callers have no lowering's counter)
_LOOP_NAMES = itertools.count()


def _outermost(e: ir.Expr, pred: Callable[[ir.Expr], bool]) -> list[ir.Expr]:
    """The nodes of ``e`` that satisfy ``pred`` and lie inside no other such node."""
    if pred(e):
        return [e]
    return [n for c in ir.sub_expressions(e) for n in _outermost(c, pred)]


def _terms(e: ir.Expr, minus: bool = False) -> list[tuple[bool, ir.Expr]]:
    """The terms of a sum, each with whether it is subtracted: ``a - (b - c)`` is
    ``[(False, a), (True, b), (False, c)]``."""
    if isinstance(e, ir.BinOp) and e.op in ("+", "-"):
        return [*_terms(e.left, minus), *_terms(e.right, minus != (e.op == "-"))]
    if isinstance(e, ir.UnaryOp) and e.op == "-":
        return _terms(e.operand, not minus)
    return [(minus, e)]


def _untransposed(e: ir.Expr) -> tuple[ir.Var, bool]:
    """``(A, True)`` for ``A.T``, ``(A, False)`` for ``A``."""
    if isinstance(e, ir.UnaryOp) and e.op == "T":
        return e.operand, True
    return e, False


def _renamed(e: ir.Expr, held: dict[str, ir.Expr]) -> ir.Expr:
    """``e`` with each variable named in ``held`` replaced by its expression."""
    if isinstance(e, ir.Var) and e.name in held:
        return held[e.name]
    return ir.map_children(e, lambda c: _renamed(c, held))


def _substitute(e: ir.Expr, new: dict[int, ir.Expr]) -> ir.Expr:
    """``e`` with each of its nodes whose ``id`` is a key of ``new`` (that node itself, not
    an equal one) replaced, in one walk (a walk rebuilds the nodes above a replacement)."""
    if id(e) in new:
        return new[id(e)]
    return ir.map_children(e, lambda c: _substitute(c, new))


def _assert(got: ir.Expr, need: ir.Expr, message: str, loc: ir.Loc) -> ir.Assert:
    return ir.Assert(ir.Compare(("==",), (got, need), loc), message, loc)
