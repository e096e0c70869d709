"""The inverse of a statement: the language's structural inversion rules.

Statements are inverted one by one and their order reversed.  Each
instruction's inverse comes from the instruction table
(:mod:`revbench.rules.instructions`); the structural rules are here:

* allocation and deallocation swap roles (``t = e`` <-> ``del t``);
* ``if (pre, post)`` becomes ``if (post, pre)`` with both branches inverted;
* ``while (cond, post)`` becomes ``while (post, cond)`` with the body inverted;
* ``for`` walks its range backwards with the body inverted;
* a call of ``f`` becomes a call of ``~f``;
* a computed block (``with routine:``) and an inverted block swap roles, so
  the ``~routine`` uncompute of the forward program becomes the compute of
  the inverse one.

They live with the rule tables, below the checker and the transforms, because
both need them: the checker follows what an uncompute (``~routine``) allocates
and frees, and :mod:`revbench.transforms.invert` builds whole inverse programs.
"""

from __future__ import annotations

from dataclasses import replace

from revbench.lang import ir
from revbench.rules.instructions import inverse_op


def invert_body(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    """The inverse of a statement list: each statement inverted, in reverse order."""
    return tuple(invert_stmt(s) for s in reversed(body))


def _dealloc_inverse(s: ir.Dealloc) -> ir.Alloc:
    if s.init is None:
        raise ValueError("invert needs checked IR (a del without its allocation)")
    return ir.Alloc(s.name, s.init, s.loc)


def _same(s: ir.Stmt) -> ir.Stmt:
    return s


#: statement class -> its inverse (every kind but ``Uncompute``, which the checker
#: resolves first; ``tests/test_rules_tables.py`` checks that no other kind is missing)
INVERSES: dict[type, object] = {
    ir.Update: lambda s: replace(s, op=inverse_op(s.op)),
    ir.Swap: _same,  # its own inverse
    ir.Print: _same,  # (prints on the way back too)
    ir.Assert: _same,
    ir.Alloc: lambda s: ir.Dealloc(s.name, s.init, s.loc),
    ir.Dealloc: _dealloc_inverse,
    ir.Call: lambda s: replace(s, inverted=not s.inverted),
    ir.Block: lambda s: ir.Inverted(s.body, s.label, s.loc),
    ir.Inverted: lambda s: ir.Block(s.body, s.label, s.loc),
    ir.If: lambda s: ir.If(s.post, s.pre, invert_body(s.then), invert_body(s.orelse), s.loc),
    ir.While: lambda s: ir.While(s.post, s.cond, invert_body(s.body), s.loc),
    ir.For: lambda s: replace(s, body=invert_body(s.body), reverse=not s.reverse),
}


def invert_stmt(s: ir.Stmt) -> ir.Stmt:
    """The inverse of one statement (its entry in :data:`INVERSES`)."""
    rule = INVERSES.get(type(s))
    if rule is None:
        raise TypeError(f"cannot invert {type(s).__name__}")
    return rule(s)
