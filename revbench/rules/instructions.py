"""The instruction rule table: what each in-place update means and undoes.

An *update* ``y op= e`` changes ``y`` by a function of ``e`` that can be
undone.  The table states, once per instruction:

* ``inverse`` -- the instruction that undoes it;
* ``dtypes``  -- the target types it is defined for (``^=`` on a float is
  refused, ``+=`` on a bool is refused);
* the runtime guards it needs (``*=`` by zero is not invertible, integer
  ``/=`` must divide exactly);
* ``adjoint`` -- what the reverse sweep of automatic differentiation runs in
  its place: the inverse instruction (which restores the old value of the
  target, so no tape is needed) plus the adjoint updates of every variable
  the instruction read;
* ``tangent`` -- what forward-mode AD runs before it: the update of the
  target's tangent, from the tangent of the operand.

The operators are named once, here (``ADD``, ``SUB``, ``MUL``, ``DIV``, ``XOR``);
the partial derivatives of the operators *inside* expressions are in
:mod:`revbench.rules.operators`.

Swap, allocation and calls have fixed, simple inverses that live in
:mod:`revbench.rules.inverse`; everything with choices lives here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from revbench.lang.ir import BinOp, Expr, Stmt, Target, Update
from revbench.rules.operators import mul

#: the reversible update operators
ADD, SUB, MUL, DIV, XOR = "+=", "-=", "*=", "/=", "^="


class AdjointContext(Protocol):
    """What an adjoint rule may ask of the adjoint transform that applies it
    (:class:`revbench.transforms.adjoint.AdjointContext` implements it; the
    table names only this interface, so the rules need nothing from above them)."""

    def adj(self, t: Target) -> Target | None: ...

    def accumulate(self, e: Expr, seed: Expr, op: str,
                   result: Target | None = None) -> list[Stmt]: ...

    def conj(self, e: Expr) -> Expr: ...

    def mul(self, a: Expr, b: Expr) -> Expr: ...

    def held_result(self, s: Update) -> Target | None: ...


@dataclass(frozen=True)
class UpdateRule:
    op: str
    inverse: str
    python_op: str  # the Python operator used for float/complex targets
    int_op: str  # the Python operator used for int/bool targets
    dtypes: frozenset[str]
    nonzero_operand: bool = False  # the operand must not be 0 (else not invertible)
    exact_int_division: bool = False  # integer targets: the operand must divide exactly
    description: str = ""
    adjoint: Callable[[AdjointContext, Update], list[Stmt]] | None = None
    #: ``tangent(s, ty, de)``: the statements that update the target's tangent ``ty``, given
    #: the tangent ``de`` of the operand (None where it is zero); they run before ``s``,
    #: so they read the target's old value
    tangent: Callable[[Update, Target, Expr | None], list[Stmt]] | None = None


# -- adjoints: ``ctx.adj(v)`` is the adjoint variable of v (None if v is not
# differentiable); ``ctx.accumulate(e, seed, op)`` adds (op) seed * d e / d x into
# the adjoint of every variable x that e reads; ``ctx.conj`` conjugates complex
# expressions (gradients of complex numbers are dL/dRe + i dL/dIm).
def _undo(s: Update) -> Update:
    """The inverse instruction, which puts the target back at its old value (its alias
    checks were made on the forward run)."""
    return replace(s, op=inverse_op(s.op), alias_checks=())


def _adjoint_add_sub(ctx: AdjointContext, s: Update) -> list[Stmt]:
    ybar = ctx.adj(s.target)
    held = ctx.held_result(s) if ybar is not None else None
    if held is not None:
        # the target holds e's value (it was zero before: a fresh ancilla), which the
        # partials read there -- before the undo, which then brings it back to an exact zero
        return [*ctx.accumulate(s.value, ybar, s.op, result=held),
                replace(_undo(s), restores_zero=True)]
    out: list[Stmt] = [_undo(s)]
    if ybar is not None:
        out += ctx.accumulate(s.value, ybar, s.op)  # x_bar +=/-= y_bar * de/dx
    return out


def _adjoint_mul(ctx: AdjointContext, s: Update) -> list[Stmt]:
    out: list[Stmt] = [_undo(s)]  # y is back at its old value
    ybar = ctx.adj(s.target)
    if ybar is not None:
        out += ctx.accumulate(s.value, ctx.mul(ctx.conj(s.target), ybar), ADD)
        out.append(Update(ybar, MUL, ctx.conj(s.value), s.loc))
    return out


def _adjoint_div(ctx: AdjointContext, s: Update) -> list[Stmt]:
    out: list[Stmt] = [_undo(s)]  # y is back at its old value
    ybar = ctx.adj(s.target)
    if ybar is not None:
        factor = ctx.conj(BinOp("/", s.target, BinOp("*", s.value, s.value)))
        out += ctx.accumulate(s.value, ctx.mul(factor, ybar), SUB)
        out.append(Update(ybar, DIV, ctx.conj(s.value), s.loc))
    return out


def _adjoint_xor(ctx: AdjointContext, s: Update) -> list[Stmt]:
    return [_undo(s)]  # integers and bools carry no gradient


# -- tangents: ``ty`` is the target's tangent, ``de`` the operand's (None: zero); the
# statements run before the update, so ``s.target`` is still the old value y.
def _tangent_add_sub(s: Update, ty: Target, de: Expr | None) -> list[Stmt]:
    return [] if de is None else [Update(ty, s.op, de, s.loc)]  # (y +- e)' = y' +- e'


def _tangent_mul(s: Update, ty: Target, de: Expr | None) -> list[Stmt]:
    out: list[Stmt] = [Update(ty, MUL, s.value, s.loc)]  # (y e)' = y' e + y e'
    if de is not None:
        out.append(Update(ty, ADD, mul(s.target, de), s.loc))
    return out


def _tangent_div(s: Update, ty: Target, de: Expr | None) -> list[Stmt]:
    out: list[Stmt] = []  # (y / e)' = (y' - y e' / e) / e
    if de is not None:
        out.append(Update(ty, SUB, BinOp("/", mul(s.target, de), s.value), s.loc))
    return [*out, Update(ty, DIV, s.value, s.loc)]


def _tangent_xor(s: Update, ty: Target, de: Expr | None) -> list[Stmt]:
    return []  # integers and bools carry no tangent


_NUMBERS = frozenset({"int", "float", "complex"})
UPDATES: dict[str, UpdateRule] = {r.op: r for r in (
    UpdateRule(ADD, SUB, "+", "+", _NUMBERS, description="add",
               adjoint=_adjoint_add_sub, tangent=_tangent_add_sub),
    UpdateRule(SUB, ADD, "-", "-", _NUMBERS, description="subtract",
               adjoint=_adjoint_add_sub, tangent=_tangent_add_sub),
    UpdateRule(MUL, DIV, "*", "*", _NUMBERS, nonzero_operand=True, description="multiply",
               adjoint=_adjoint_mul, tangent=_tangent_mul),
    UpdateRule(DIV, MUL, "/", "//", _NUMBERS, nonzero_operand=True, exact_int_division=True,
               description="divide", adjoint=_adjoint_div, tangent=_tangent_div),
    UpdateRule(XOR, XOR, "^", "^", frozenset({"int", "bool"}), description="exclusive or",
               adjoint=_adjoint_xor, tangent=_tangent_xor),
)}

#: Python's augmented-assignment operators that are *not* reversible, with advice.
REFUSED_UPDATES: dict[str, str] = {
    "//=": "floor division loses the remainder, so it cannot be undone",
    "%=": "a remainder cannot be undone",
    "**=": "a power is not undone by a reversible update; compute into a new ancilla",
    "@=": "matrix products are not instructions; call a reversible function such as "
          "revbench.lib's matvec",
    "<<=": "shifts lose bits; use *= or /= by a power of two",
    ">>=": "shifts lose bits; use *= or /= by a power of two",
    "|=": "or loses information; use ^=",
    "&=": "and loses information; use ^= with an ancilla",
}


def inverse_op(op: str) -> str:
    """The instruction that undoes ``op``."""
    return UPDATES[op].inverse
