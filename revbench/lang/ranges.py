"""What a ``for`` loop's range proves about the integer expressions built from its variable.

Two runtime checks are needed only where the program could go wrong, and a loop's
``range`` often shows that it cannot:

* **aliasing**: ``u[t + 1, i] += c * u[t, i - 1]`` reads another element of the array it
  updates.  The update is reversible unless both are the same element, so checked code
  compares the indices at run time -- at every element of a stencil.  With ``t`` and ``i``
  loop variables of ranges that start at ``0`` and ``1``, ``t + 1`` and ``t`` are
  different non-negative numbers, so the elements differ and nothing needs comparing.
* **integer overflow**: ``i + 1`` with ``i < stop`` (a range with a positive step) is at
  most ``stop``, an int64, and ``i - 1`` with ``i >= 1`` is at least ``0``: the checked
  add (a call, and a branch) is a plain one.

Only what is certain counts: constant bounds and steps, ``var + constant`` forms; an index
that could be negative (wrapped, ``x[-1]``) proves nothing.  The checker and the code
generator ask the same questions of the same table (:func:`loop_range`), so the checks
they agree to leave out are the same on both backends.
"""

from __future__ import annotations

from dataclasses import dataclass

from revbench.lang import ir

INT64_MIN = -(2 ** 63)
INT64_MAX = 2 ** 63 - 1


@dataclass(frozen=True)
class LoopRange:
    """What every value of a loop variable satisfies: ``>= lower`` (a constant; None when
    unknown) and, with ``below_stop``, ``< stop`` (a positive step), so ``var + 1`` fits."""

    lower: int | None
    below_stop: bool


UNKNOWN = LoopRange(None, False)


def const_int(e: ir.Expr) -> int | None:
    """The value of an integer literal (``-1`` included); None for anything else."""
    if isinstance(e, ir.Const) and type(e.value) is int:
        return e.value
    if isinstance(e, ir.UnaryOp) and e.op in ("-", "+"):
        v = const_int(e.operand)
        return None if v is None else (-v if e.op == "-" else v)
    return None


def loop_range(s: ir.For) -> LoopRange:
    """What ``range(start, stop, step)`` proves about ``s.var`` (the same set of values
    whichever way the loop walks it)."""
    step = const_int(s.step)
    if not step:
        return UNKNOWN
    if step > 0:
        return LoopRange(const_int(s.start), True)
    stop = const_int(s.stop)
    return LoopRange(None if stop is None else stop + 1, False)


def offset_form(e: ir.Expr, ranges: dict[str, LoopRange]) -> tuple[str | None, int] | None:
    """``e`` as ``var + offset`` (``var`` a loop variable in ``ranges``, or None for a
    constant), or None when it is not of that form."""
    c = const_int(e)
    if c is not None:
        return None, c
    if isinstance(e, ir.Var):
        return (e.name, 0) if e.name in ranges else None
    if isinstance(e, ir.BinOp) and e.op in ("+", "-"):
        left, right = offset_form(e.left, ranges), const_int(e.right)
        if left is not None and right is not None:
            return left[0], left[1] + (right if e.op == "+" else -right)
        if e.op == "+":
            left, right = const_int(e.left), offset_form(e.right, ranges)
            if left is not None and right is not None:
                return right[0], right[1] + left
    return None


def lower_bound(form: tuple[str | None, int], ranges: dict[str, LoopRange]) -> int | None:
    var, offset = form
    if var is None:
        return offset
    low = ranges[var].lower
    return None if low is None else low + offset


def provably_distinct(a: ir.Expr, b: ir.Expr, ranges: dict[str, LoopRange]) -> bool:
    """Whether two elements of one array can never be the same: along some axis both
    indices are ``v + c1`` and ``v + c2`` (or constants) with ``c1 != c2``, both
    non-negative (so neither wraps around to the other)."""
    if not (isinstance(a, ir.Elem) and isinstance(b, ir.Elem)):
        return False
    for i, j in zip(a.indices, b.indices):
        fi, fj = offset_form(i, ranges), offset_form(j, ranges)
        if fi is None or fj is None or fi[0] != fj[0] or fi[1] == fj[1]:
            continue
        li, lj = lower_bound(fi, ranges), lower_bound(fj, ranges)
        if li is not None and lj is not None and li >= 0 and lj >= 0:
            return True
    return False


def cannot_overflow(e: ir.BinOp, ranges: dict[str, LoopRange]) -> bool:
    """Whether an int64 ``+`` or ``-`` is certain to fit: ``v + 1`` with ``v < stop``, or
    ``v - c`` / ``v + (-c)`` with ``v`` bounded below well away from the smallest int64."""
    if e.op not in ("+", "-"):
        return False
    form, c = offset_form(e.left, ranges), const_int(e.right)
    if form is None or c is None:
        if e.op == "+" and const_int(e.left) is not None:
            form, c = offset_form(e.right, ranges), const_int(e.left)
        if form is None or c is None:
            return False
    var, offset = form
    if var is None:
        return False  # constants: folded elsewhere, and rare
    delta = offset + (c if e.op == "+" else -c)
    if delta == 0:
        return True
    if delta > 0:  # the result is v + delta: only v + 1 is certain, as v < stop <= INT64_MAX
        return delta == 1 and ranges[var].below_stop
    low = lower_bound((var, 0), ranges)  # v + delta < v: only the low end can overflow
    return low is not None and low + delta >= INT64_MIN



def interval(e: ir.Expr, ranges: dict[str, LoopRange],
             sizes: frozenset[str] = frozenset()) -> tuple[int, int]:
    """The least and the greatest value an integer expression can take, as far as its form
    tells: a constant, a length or a shape (or a name that holds one, ``sizes``), a loop
    variable of ``ranges``, sums and differences of those; anything else is any int64."""
    c = const_int(e)
    if c is not None:
        return c, c
    if isinstance(e, (ir.Len, ir.Shape)) or (isinstance(e, ir.Var) and e.name in sizes):
        return 0, INT64_MAX
    if isinstance(e, ir.Var) and e.name in ranges:
        r = ranges[e.name]
        return (INT64_MIN if r.lower is None else r.lower), \
            (INT64_MAX - 1 if r.below_stop else INT64_MAX)
    if isinstance(e, ir.BinOp) and e.op in ("+", "-"):
        (a, b), (c, d) = interval(e.left, ranges, sizes), interval(e.right, ranges, sizes)
        lo, hi = (a + c, b + d) if e.op == "+" else (a - d, b - c)
        if INT64_MIN <= lo and hi <= INT64_MAX:
            return lo, hi
    return INT64_MIN, INT64_MAX


def counts_plainly(s: ir.For, ranges: dict[str, LoopRange], sizes: frozenset[str]) -> bool:
    """Whether compiled code may walk ``s``'s range as ``range(start, stop, step)`` (and
    backwards as ``range(stop - 1, start - 1, -1)`` and the like): its length is counted
    from ``stop - start``, which must not overflow, and the reversed bounds are the bounds
    moved by one step, which must fit.  Where the bounds may be any int64 (two arguments),
    the loop counts with the exact length instead (``runtime.range_len``)."""
    step = const_int(s.step)
    if step is None:
        return False

    def fits(lo: int, hi: int) -> bool:
        return INT64_MIN <= lo and hi <= INT64_MAX

    (a0, a1), (b0, b1) = interval(s.start, ranges, sizes), interval(s.stop, ranges, sizes)
    if not (fits(b0 - a1, b1 - a0) and fits(a0 - b1, a1 - b0)):
        return False
    # (backwards, the bounds move one step back: range(stop - 1, start - 1, -1) for a step
    # of 1, range(start + (n - 1) * step, start - step, -step) for others)
    return all(fits(lo - step, hi - step) for lo, hi in ((a0, a1), (b0, b1)))
