"""Which updates of a program start from a fresh zero: their target then holds their value.

``h = np.zeros(n)`` followed by ``h += np.tanh(W @ x + b)`` (after the matrix product is
lowered: ``for j in range(n): h[j] += np.tanh(np.dot(W[j], x) + b[j])``) writes each
element of ``h`` once, from zero: right after its update, ``h[j]`` *is* ``tanh(...)``,
bit for bit (``0.0 + v`` is ``v``; only ``-0.0`` comes out as ``+0.0``).  A reverse sweep
meets every state of the forward run again at the point it had, so at the adjoint of that
update ``h[j]`` holds the value the partial of ``tanh`` needs (``1 - tanh(z)**2``): the
sweep reads it there instead of summing ``np.dot(W[j], x)`` and taking ``tanh`` once more
(:meth:`revbench.transforms.adjoint.AdjointContext.accumulate`: every occurrence of the
value in a partial -- ``exp(z)``, ``-(a / b) / b``, the largest element ``np.max`` found --
reads the target).  And the undo brings the element back to exactly zero, which without
checks is ``h[j] -= h[j]``: no sum either (:mod:`revbench.transforms.prune`).

An update ``t op= e`` counts as *fresh* where all of these hold:

* ``op`` is ``+=``, and ``t`` (a scalar, an array, an element or a sub-array of one) is an
  ancilla allocated at zero (``0.0``, ``np.zeros(...)``, ``np.zeros_like(x)``) in the same
  body as the statements that lead to the update;
* the update is the only statement of that body that writes ``t`` -- apart from the
  ``del`` and the blocks that run backwards (``~routine``: in a sweep, their replay computes
  ``t`` again exactly as the routine did) -- so nothing changed ``t`` before it, and nothing
  the sweep would have to undo inexactly changes it after;
* inside ``for`` loops (between the allocation and the update), each iteration writes other
  elements: the target's indices are distinct loop variables of those loops, every loop
  variable of them among them, and each range is known to be of non-negative numbers (a
  negative index would wrap around onto another iteration's element).

The analysis is conservative: anything else (a ``while`` loop, a call, an index that is not
a loop variable, a second write) is simply not fresh, and the sweep recomputes as before.
"""

from __future__ import annotations

from revbench.lang import ir, ranges
from revbench.rules.instructions import ADD


def fresh_updates(body: tuple[ir.Stmt, ...]) -> dict[int, ir.Stmt]:
    """Every fresh update (see the module docstring) in ``body``, nested bodies included
    -- and every allocation ``t = e`` whose ancilla nothing writes before its ``del`` (but
    blocks that run backwards): ``t`` holds ``e`` bit for bit wherever the sweep meets it,
    ``m = np.max(z)``'s maximum included.

    Keyed by ``id`` (IR nodes compare by value: two equal updates at different places are
    not both fresh), and holding the statements themselves: an ``id`` is only unique while
    its object lives, and a statement built during the sweep and dropped must never lend
    its ``id`` to a later one (that made gradients depend on the allocator's history)."""
    found: dict[int, ir.Stmt] = {}
    _scan(body, found)
    return found


def _is_zero(init: ir.Expr) -> bool:
    if isinstance(init, ir.ArrayAlloc):
        return init.kind in ("zeros", "zeros_like")
    return isinstance(init, ir.Const) and not isinstance(init.value, bool) and init.value == 0


def _scan(body: tuple[ir.Stmt, ...], found: dict[int, ir.Stmt]) -> None:
    for k, s in enumerate(body):
        if isinstance(s, ir.Alloc) and _is_zero(s.init):
            update = _the_one_write(s.name, body[k + 1:])
            if update is not None:
                found[id(update)] = update
        elif isinstance(s, ir.Alloc) and not isinstance(s.init, ir.ArrayAlloc) \
                and _never_written(s.name, body[k + 1:]):
            found[id(s)] = s
        for block in ir.child_blocks(s):
            _scan(block, found)


def _never_written(name: str, rest: tuple[ir.Stmt, ...]) -> bool:
    for s in rest:
        if isinstance(s, ir.Dealloc) and s.name == name:
            return True
        if not isinstance(s, ir.Inverted) and _writes(s, name):
            return False
    return True


def _writes(s: ir.Stmt, name: str) -> bool:
    return name in ir.names_written((s,))


def _the_one_write(name: str, rest: tuple[ir.Stmt, ...]) -> ir.Update | None:
    """The fresh update of the ancilla ``name`` among the statements after its allocation,
    or None."""
    candidate = None
    for s in rest:
        if isinstance(s, ir.Dealloc) and s.name == name:
            break  # (the ancilla's life ends here)
        if isinstance(s, ir.Inverted) or not _writes(s, name):
            continue  # (an uncompute: in a sweep, replayed as the routine computed it)
        if candidate is not None:
            return None  # a second write
        candidate = _single_update(s, name, ())
        if candidate is None:
            return None
    return candidate


def _single_update(s: ir.Stmt, name: str, loop_vars: tuple[str, ...]) -> ir.Update | None:
    """``s`` itself, or the one statement in its ``for`` nest, if it is a fresh ``+=`` of
    ``name`` under the loop variables ``loop_vars``; None otherwise."""
    if isinstance(s, ir.Update):
        if s.op != ADD or s.target.name != name:
            return None
        indices = s.target.indices if isinstance(s.target, ir.Elem) else ()
        named = [i.name for i in indices if isinstance(i, ir.Var)]
        others = [i for i in indices if not isinstance(i, (ir.Var, ir.Slice))]
        if others or len(set(named)) != len(named) or set(named) != set(loop_vars):
            return None  # (each iteration must write elements of its own)
        moving = [b for i in indices if isinstance(i, ir.Slice) for b in (i.start, i.stop)
                  if b is not None and not _plain(b, loop_vars)]
        if moving:
            return None  # (a slice the loops move could meet another iteration's)
        return s
    if isinstance(s, ir.For):
        writes = [st for st in s.body if _writes(st, name)]
        low = ranges.loop_range(s).lower
        if len(writes) != 1 or low is None or low < 0:
            return None  # (a negative index would wrap around onto another iteration's)
        return _single_update(writes[0], name, (*loop_vars, s.var))
    return None


def _plain(bound: ir.Expr, loop_vars: tuple[str, ...]) -> bool:
    """A slice bound that the loops do not move (each iteration's slice is the same
    columns of another row)."""
    return not (ir.names_read(bound) & set(loop_vars))
