"""IR as readable source text: the pretty-printer behind ``f.explain()``.

:mod:`revbench.lang.text` names an expression in an error message (every
operand that is not an atom in parentheses, which is unambiguous in a one-line
message).  This printer writes IR the way a person writes the language: with
Python's operator precedence, so ``y -= 3.0 * t + x`` prints as written and
parsing the printed text gives back the same IR.  It also writes the names the
transforms invent readably (:func:`readable_name`): the adjoint ``_rb_adj_x``
is ``x̄``, a generated loop index ``_rb_w0`` is ``k₀``.

It knows nothing of the pipeline: :mod:`revbench.explain` decides which
statements to print and where; this module only turns one node into text.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

from revbench.lang import ir

#: the prefix the adjoint transform gives adjoint variables (``_rb_adj_x``)
ADJOINT_PREFIX = "_rb_adj_"
_GENERATED = re.compile(r"_rb_([a-z]+)(\d+)")
#: generated names, by their letter: the transforms' loop indices read as ``k₀``
_GENERATED_LETTERS = {"w": "k"}
_SUBSCRIPTS = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")

Namer = Callable[[str], str]

# Python's precedences (higher binds tighter)
_PREC_IFEXP, _PREC_OR, _PREC_AND, _PREC_NOT, _PREC_CMP = 0, 1, 2, 3, 4
_PREC_ADD, _PREC_MUL, _PREC_UNARY, _PREC_POW, _PREC_ATOM = 5, 6, 7, 8, 9
_BIN_PREC = {"+": _PREC_ADD, "-": _PREC_ADD, "*": _PREC_MUL, "/": _PREC_MUL, "//": _PREC_MUL,
             "%": _PREC_MUL, "**": _PREC_POW}
_REDUCE_NAMES = {"sum": "np.sum", "sum1": "sum", "max": "np.max", "min": "np.min"}


def bar(text: str) -> str:
    """``text`` with a bar over it, as adjoints are written: ``x̄``, ``a̅c̅c̅``.

    A one-letter name gets the combining macron (the usual ``x̄``); a longer one an
    overline on every character, which most fonts join into one bar."""
    if len(text) == 1:
        return text + "\u0304"
    return "".join(c + "\u0305" for c in text)


def readable_name(name: str) -> str:
    """A variable's name as a reader should see it.

    The user's names are kept; the adjoint of ``x`` (``_rb_adj_x``) is ``x̄``; the
    names the transforms invent (``_rb_w0``, ``_rb_g1``, ``_rb_v2``) lose their
    prefix and take a subscript (``k₀``, ``g₁``, ``v₂``), which no Python name can
    hold, so they never look like one of the user's variables."""
    if name.startswith(ADJOINT_PREFIX):
        return bar(readable_name(name[len(ADJOINT_PREFIX):]))
    m = _GENERATED.fullmatch(name)
    if m is not None:
        return _GENERATED_LETTERS.get(m.group(1), m.group(1)) + m.group(2).translate(_SUBSCRIPTS)
    return name


def display_width(text: str) -> int:
    """The number of columns ``text`` takes (combining marks such as bars take none)."""
    return sum(1 for c in text if not unicodedata.combining(c))


class Printer:
    """Turns IR into text.

    ``name`` maps each variable name to its text (:func:`readable_name` by default);
    ``times`` is the multiplication sign (``"*"`` for code, ``"·"`` for formulas).
    """

    def __init__(self, name: Namer = readable_name, times: str = "*"):
        self.name = name
        self.times = times

    # -- expressions ---------------------------------------------------------------
    def expr(self, e: ir.Expr) -> str:
        """The text of an expression, parenthesised only where Python needs it."""
        return self._expr(e)[0]

    def _expr(self, e: ir.Expr) -> tuple[str, int]:
        """(text, precedence of its outermost operator)."""
        if isinstance(e, ir.Const):
            return self._const(e.value)
        if isinstance(e, ir.Var):
            return self.name(e.name), _PREC_ATOM
        if isinstance(e, ir.Elem):
            return f"{self.name(e.name)}[{', '.join(self.expr(i) for i in e.indices)}]", _PREC_ATOM
        if isinstance(e, ir.Slice):
            return ":".join("" if b is None else self.expr(b) for b in (e.start, e.stop)), _PREC_ATOM
        if isinstance(e, ir.BinOp):
            return self._binop(e)
        if isinstance(e, ir.UnaryOp):
            if e.op == "not":
                return f"not {self._operand(e.operand, _PREC_NOT)}", _PREC_NOT
            inner, p = self._expr(e.operand)
            if p < _PREC_UNARY or (p == _PREC_UNARY and inner.startswith(("-", "+"))):
                inner = f"({inner})"
            return f"{e.op}{inner}", _PREC_UNARY
        if isinstance(e, ir.Func):
            return f"{e.name}({', '.join(self.expr(a) for a in e.args)})", _PREC_ATOM
        if isinstance(e, ir.Len):
            return f"len({self.name(e.name)})", _PREC_ATOM
        if isinstance(e, ir.Shape):
            return f"{self.name(e.name)}.shape[{e.axis}]", _PREC_ATOM
        if isinstance(e, ir.IfExp):
            return (f"{self._operand(e.then, _PREC_IFEXP)} if {self._operand(e.cond, _PREC_IFEXP)} "
                    f"else {self._operand(e.orelse, _PREC_IFEXP)}"), _PREC_IFEXP
        if isinstance(e, ir.Compare):
            parts = [self._operand(e.operands[0], _PREC_CMP)]
            for op, o in zip(e.ops, e.operands[1:]):
                parts += [op, self._operand(o, _PREC_CMP)]
            return " ".join(parts), _PREC_CMP
        if isinstance(e, ir.BoolOp):
            p = _PREC_OR if e.op == "or" else _PREC_AND
            return f" {e.op} ".join(self._operand(v, p) for v in e.values), p
        if isinstance(e, ir.Reduce):
            if e.kind == "dot" and isinstance(e.arg, ir.BinOp) and e.arg.op == "*":
                return f"np.dot({self.expr(e.arg.left)}, {self.expr(e.arg.right)})", _PREC_ATOM
            return f"{_REDUCE_NAMES.get(e.kind, 'np.sum')}({self.expr(e.arg)})", _PREC_ATOM
        if isinstance(e, ir.ArrayAlloc):
            return self._array_alloc(e), _PREC_ATOM
        return f"<{type(e).__name__}>", _PREC_ATOM

    def _operand(self, e: ir.Expr, prec: int) -> str:
        """``e`` as an operand of an operator of precedence ``prec`` that does not chain
        with its own kind (a comparison, a conditional): parenthesised unless tighter."""
        text, p = self._expr(e)
        return text if p > prec else f"({text})"

    def _binop(self, e: ir.BinOp) -> tuple[str, int]:
        prec = _BIN_PREC[e.op]
        left, lp = self._expr(e.left)
        right, rp = self._expr(e.right)
        if e.op == "**":  # right-associative; -x ** 2 is -(x ** 2)
            if lp <= prec:
                left = f"({left})"
            if rp < _PREC_UNARY:
                right = f"({right})"
        else:  # left-associative: a - (b - c) keeps its parentheses, (a - b) - c needs none
            if lp < prec:
                left = f"({left})"
            if rp <= prec:
                right = f"({right})"
        op = self.times if e.op == "*" else e.op
        sep = "" if op == "·" else " "
        return f"{left}{sep}{op}{sep}{right}", prec

    @staticmethod
    def _const(v) -> tuple[str, int]:
        if isinstance(v, complex):
            if v.real == 0:
                text = repr(v.imag) + "j"
                return (text, _PREC_UNARY) if text.startswith("-") else (text, _PREC_ATOM)
            return repr(v), _PREC_ATOM  # "(1+2j)": parenthesised by repr itself
        text = repr(v)
        return (text, _PREC_UNARY) if text.startswith("-") else (text, _PREC_ATOM)

    def _array_alloc(self, e: ir.ArrayAlloc) -> str:
        dtype = f", dtype={e.dtype}" if e.dtype else ""
        if e.kind == "zeros":
            dims = [self.expr(d) for d in e.shape]
            shape = dims[0] if len(dims) == 1 else f"({', '.join(dims)})"
            return f"np.zeros({shape}{dtype})"
        src = self.name(e.source or "?")
        return f"np.zeros_like({src}{dtype})" if e.kind == "zeros_like" else f"{src}.copy()"

    # -- statements -------------------------------------------------------------------
    def target(self, t: ir.Target) -> str:
        return self.expr(t)

    def simple(self, s: ir.Stmt) -> str:
        """The text of a statement that holds no other statement (an update, a swap,
        an allocation, a ``del``, a call, ``print``, ``assert``)."""
        if isinstance(s, ir.Update):
            return f"{self.target(s.target)} {s.op} {self.expr(s.value)}"
        if isinstance(s, ir.Swap):
            a, b = self.target(s.a), self.target(s.b)
            return f"{a}, {b} = {b}, {a}"
        if isinstance(s, ir.Alloc):
            return f"{self.name(s.name)} = {self.expr(s.init)}"
        if isinstance(s, ir.Dealloc):
            return f"del {self.name(s.name)}"
        if isinstance(s, ir.Call):
            return f"{'~' if s.inverted else ''}{s.func}({', '.join(self.target(a) for a in s.args)})"
        if isinstance(s, ir.Print):
            return "print(" + ", ".join(repr(a) if isinstance(a, str) else self.expr(a)
                                        for a in s.args) + ")"
        if isinstance(s, ir.Assert):
            return f"assert {self.expr(s.cond)}" + (
                f", {s.message!r}" if s.message is not None else "")
        raise TypeError(f"{type(s).__name__} holds statements: print its header instead")

    def condition(self, first: ir.Expr, second: ir.Expr) -> str:
        """``(cond, post)`` of an ``if`` or a ``while``: one condition when both are one."""
        if first == second:
            return self.expr(first)
        return f"({self.expr(first)}, {self.expr(second)})"

    def range(self, s: ir.For) -> str:
        """``range(...)`` of a ``for`` loop, in its shortest spelling, ``reversed(...)``
        around it when the loop walks it backwards (as an inverse does)."""
        start_zero = isinstance(s.start, ir.Const) and s.start.value == 0
        step_one = isinstance(s.step, ir.Const) and s.step.value == 1
        if start_zero and step_one:
            args = [s.stop]
        elif step_one:
            args = [s.start, s.stop]
        else:
            args = [s.start, s.stop, s.step]
        text = f"range({', '.join(self.expr(a) for a in args)})"
        return f"reversed({text})" if s.reverse else text


def routine_name(label: str) -> str:
    """The routine a block label names: ``routine`` or the ``r`` of ``with routine as r``."""
    label = label.lstrip("~")
    return label.split(":", 1)[1] if ":" in label else "routine"


__all__ = ["ADJOINT_PREFIX", "Printer", "bar", "display_width", "readable_name", "routine_name"]
