"""The operator rule table: the partial derivatives of ``+ - * / ** % //`` and unary minus.

An arithmetic operator in an expression is a pure function of its operands, so it is
differentiated like one: its entry (an :class:`OperatorRule` in ``BINARY_OPERATORS`` or
``UNARY_OPERATORS``) states, once, the partial derivative with respect to each operand,
as IR built from the operands -- the same kind of entry as a pure function's
:attr:`revbench.rules.functions.FunctionRule.partials`.  Both AD transforms read it,
through :meth:`OperatorPartial.chain`:

* the adjoint transform passes a seed ``g`` back to operand ``k`` as
  ``g * conj(partial)``, conjugated because the gradient of a complex number is
  ``dL/dRe + i dL/dIm`` (these operators are complex-differentiable, so conjugating the
  partial is all that complex numbers need);
* the tangent transform pushes the operand's tangent ``g`` forward as ``g * partial``.

A partial of ``None`` is zero (``//`` is piecewise constant; ``not`` is a bool): that
operand is not visited.  Special cases live in the partial itself: ``**`` with a
constant whole exponent needs no guard at a zero base (:func:`power_base_partial`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from revbench.lang.ir import BinOp, Compare, Const, Expr, Func, IfExp, UnaryOp


# -- IR algebra with the simplifications that keep generated code readable ---------------
def is_const(e: Expr, v) -> bool:
    """Whether ``e`` is the numeric constant ``v`` (``True`` is not 1 here)."""
    return isinstance(e, Const) and not isinstance(e.value, bool) and e.value == v


def neg(e: Expr) -> Expr:
    """``-e``, with ``--x`` -> ``x`` and the sign folded into a constant."""
    if isinstance(e, UnaryOp) and e.op == "-":
        return e.operand
    if isinstance(e, Const) and not isinstance(e.value, bool):
        return Const(-e.value, e.loc)
    return UnaryOp("-", e)


def mul(a: Expr, b: Expr) -> Expr:
    """``a * b``, with factors 1 and -1 left out."""
    if is_const(a, 1):
        return b
    if is_const(b, 1):
        return a
    if is_const(a, -1):
        return neg(b)
    if is_const(b, -1):
        return neg(a)
    return BinOp("*", a, b)


def fold(e: Expr) -> Expr:
    """``e`` with arithmetic on numeric constants done (``2 - 1`` -> ``1``): a reverse
    sweep writes ``a ** (2 - 1)`` for the partial of ``a ** 2``, and its tangent (a
    Hessian-vector product) differentiates that power again."""
    if isinstance(e, BinOp) and e.op in ("+", "-", "*"):
        a, b = fold(e.left), fold(e.right)
        if all(isinstance(c, Const) and isinstance(c.value, (int, float))
               and not isinstance(c.value, bool) for c in (a, b)):
            x, y = a.value, b.value
            return Const(x + y if e.op == "+" else x - y if e.op == "-" else x * y, e.loc)
    return e


_ONE = Const(1)


def _same(e: Expr) -> Expr:
    return e


@dataclass(frozen=True)
class OperatorPartial:
    """The partial derivative of ``a op b`` with respect to one operand:
    ``sign * value(a, b)``, or ``sign / value(a, b)`` where ``reciprocal`` is set.

    Keeping the sign and the reciprocal apart from ``value`` lets :meth:`chain`
    write the product with a derivative as the code should compute it: ``-(g * x)``,
    and ``g / b`` (one rounding) rather than ``g * (1 / b)``."""

    value: Callable[..., Expr]
    sign: int = 1
    reciprocal: bool = False

    def expr(self, *operands: Expr) -> Expr:
        """The partial derivative as one IR expression."""
        v = self.value(*operands)
        if self.reciprocal:
            v = BinOp("/", _ONE, v)
        return neg(v) if self.sign < 0 else v

    def chain(self, g: Expr, operands: tuple[Expr, ...],
              conj: Callable[[Expr], Expr] = _same) -> Expr:
        """``g * conj(partial)``: a derivative ``g`` carried through this partial -- a
        seed passed back by the adjoint transform (which conjugates: the gradient of a
        complex number is dL/dRe + i dL/dIm), or a tangent pushed forward by the tangent
        transform (which does not).  Factors 1 and -1 are left out."""
        v = conj(self.value(*operands))
        if self.reciprocal:
            out = g if is_const(v, 1) else BinOp("/", g, v)
        else:
            out = mul(g, v)
        return neg(out) if self.sign < 0 else out


# -- the partials ----------------------------------------------------------------------
def _is_whole_at_least_1(e: Expr) -> bool:
    return isinstance(e, Const) and isinstance(e.value, (int, float)) \
        and not isinstance(e.value, bool) and e.value >= 1 and float(e.value).is_integer()


def power_base_partial(a: Expr, b: Expr) -> Expr:
    """d a**b / da = b a**(b-1).  A constant whole exponent k >= 1 (after folding
    ``2 - 1``) needs no guard: the formula is right at a == 0, and for k == 1 it is 1.
    Otherwise, at a == 0 a power with 0 < b < 1 has no derivative (the one-sided limit
    is infinite): there it is 0, the same answer as ``sqrt`` gives (docs/language.md §7),
    and 1 for b == 1."""
    k = b if isinstance(b, Const) else fold(b)
    if _is_whole_at_least_1(k):
        if k.value == 1:
            return Const(1.0)
        if k.value == 2:
            return BinOp("*", k, a)  # (2 a, not 2 a**1)
        return BinOp("*", k, BinOp("**", a, Const(k.value - 1)))  # (the exponent folded)
    d = BinOp("*", b, BinOp("**", a, BinOp("-", b, _ONE)))
    if isinstance(b, Const):
        at_zero: Expr = Const(1.0) if is_const(b, 1) else Const(0.0)
    else:
        at_zero = IfExp(Compare(("==",), (b, _ONE)), Const(1.0), Const(0.0))
    return IfExp(Compare(("!=",), (a, Const(0))), d, at_zero)


def power_exponent_partial(a: Expr, b: Expr) -> Expr:
    """d a**b / db = log(a) a**b; at a == 0 the power is 0 on both sides: 0."""
    return IfExp(Compare(("!=",), (a, Const(0))),
                 BinOp("*", Func("log", (a,)), BinOp("**", a, b)), Const(0.0))


@dataclass(frozen=True)
class OperatorRule:
    """One operator of expressions: ``partials[k]`` is its partial derivative with
    respect to operand ``k``, or ``None`` where that is zero (the operand is not visited)."""

    op: str
    partials: tuple[OperatorPartial | None, ...]
    description: str = ""


def _one(*operands: Expr) -> Expr:
    return _ONE


BINARY_OPERATORS: dict[str, OperatorRule] = {r.op: r for r in (
    OperatorRule("+", (OperatorPartial(_one), OperatorPartial(_one)), "add"),
    OperatorRule("-", (OperatorPartial(_one), OperatorPartial(_one, sign=-1)), "subtract"),
    OperatorRule("*", (OperatorPartial(lambda a, b: b), OperatorPartial(lambda a, b: a)),
                 "multiply"),
    # d(a/b)/da = 1/b, d(a/b)/db = -a/b^2, computed as (a/b)/b: b*b underflows to 0 for
    # |b| < 1e-154 (a ZeroDivisionError where the quotient and its derivative are finite)
    OperatorRule("/", (OperatorPartial(lambda a, b: b, reciprocal=True),
                       OperatorPartial(lambda a, b: BinOp("/", BinOp("/", a, b), b), sign=-1)),
                 "divide"),
    OperatorRule("**", (OperatorPartial(power_base_partial),
                        OperatorPartial(power_exponent_partial)), "power"),
    # a % b = a - (a // b) b, and a // b is piecewise constant
    OperatorRule("%", (OperatorPartial(_one), OperatorPartial(lambda a, b: BinOp("//", a, b),
                                                              sign=-1)), "remainder"),
    OperatorRule("//", (None, None), "floor division: piecewise constant, no gradient"),
)}

UNARY_OPERATORS: dict[str, OperatorRule] = {r.op: r for r in (
    OperatorRule("-", (OperatorPartial(_one, sign=-1),), "negate"),
    OperatorRule("+", (OperatorPartial(_one),), "plus"),
    OperatorRule("not", (None,), "logical not: a bool, no gradient"),
)}


def operator_rule(e: BinOp | UnaryOp) -> OperatorRule:
    """The rule of the operator of ``e``."""
    table = BINARY_OPERATORS if isinstance(e, BinOp) else UNARY_OPERATORS
    return table[e.op]


def operands(e: BinOp | UnaryOp) -> tuple[Expr, ...]:
    return (e.left, e.right) if isinstance(e, BinOp) else (e.operand,)
