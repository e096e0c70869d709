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
  the instruction read.

Swap, allocation and calls have fixed, simple inverses that live in
:mod:`revbench.rules.inverse`; everything with choices lives here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from revbench.lang.ir import BinOp, Expr, Stmt, Target, Update


class AdjointContext(Protocol):
    """What an adjoint rule may ask of the adjoint transform that applies it
    (:class:`revbench.transforms.adjoint.AdjointContext` implements it; the
    table names only this interface, so the rules need nothing from above them)."""

    def adj(self, t: Target) -> Target | None: ...

    def accumulate(self, e: Expr, seed: Expr, op: str) -> list[Stmt]: ...

    def conj(self, e: Expr) -> Expr: ...

    def mul(self, a: Expr, b: Expr) -> Expr: ...


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


# -- adjoints: ``ctx.adj(v)`` is the adjoint variable of v (None if v is not
# differentiable); ``ctx.accumulate(e, seed, op)`` adds (op) seed * d e / d x into
# the adjoint of every variable x that e reads; ``ctx.conj`` conjugates complex
# expressions (gradients of complex numbers are dL/dRe + i dL/dIm).
def _adjoint_add_sub(ctx: AdjointContext, s: Update) -> list[Stmt]:
    out: list[Stmt] = [replace(s, op=UPDATES[s.op].inverse, alias_checks=())]
    ybar = ctx.adj(s.target)
    if ybar is not None:
        out += ctx.accumulate(s.value, ybar, s.op)  # x_bar +=/-= y_bar * de/dx
    return out


def _adjoint_mul(ctx: AdjointContext, s: Update) -> list[Stmt]:
    out: list[Stmt] = [replace(s, op="/=", alias_checks=())]  # y is back at its old value
    ybar = ctx.adj(s.target)
    if ybar is not None:
        out += ctx.accumulate(s.value, ctx.mul(ctx.conj(s.target), ybar), "+=")
        out.append(Update(ybar, "*=", ctx.conj(s.value), s.loc))
    return out


def _adjoint_div(ctx: AdjointContext, s: Update) -> list[Stmt]:
    out: list[Stmt] = [replace(s, op="*=", alias_checks=())]  # y is back at its old value
    ybar = ctx.adj(s.target)
    if ybar is not None:
        factor = ctx.conj(BinOp("/", s.target, BinOp("*", s.value, s.value)))
        out += ctx.accumulate(s.value, ctx.mul(factor, ybar), "-=")
        out.append(Update(ybar, "/=", ctx.conj(s.value), s.loc))
    return out


def _adjoint_xor(ctx: AdjointContext, s: Update) -> list[Stmt]:
    return [replace(s, alias_checks=())]  # integers and bools carry no gradient


UPDATES: dict[str, UpdateRule] = {
    "+=": UpdateRule("+=", "-=", "+", "+", frozenset({"int", "float", "complex"}),
                     description="add", adjoint=_adjoint_add_sub),
    "-=": UpdateRule("-=", "+=", "-", "-", frozenset({"int", "float", "complex"}),
                     description="subtract", adjoint=_adjoint_add_sub),
    "*=": UpdateRule("*=", "/=", "*", "*", frozenset({"int", "float", "complex"}),
                     nonzero_operand=True, description="multiply", adjoint=_adjoint_mul),
    "/=": UpdateRule("/=", "*=", "/", "//", frozenset({"int", "float", "complex"}),
                     nonzero_operand=True, exact_int_division=True, description="divide",
                     adjoint=_adjoint_div),
    "^=": UpdateRule("^=", "^=", "^", "^", frozenset({"int", "bool"}),
                     description="exclusive or", adjoint=_adjoint_xor),
}

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
