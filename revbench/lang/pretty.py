"""IR as readable source text: the one printer of IR (:class:`Printer`).

It writes IR the way a person writes the language: with Python's operator
precedence, so ``y -= 3.0 * t + x`` prints as written and parsing the printed
text gives back the same IR; ``f.explain()`` shows it so, and writes the names
the transforms invent readably (:func:`readable_name`): the adjoint ``_rb_adj_x``
is ``x̄``, a generated loop index ``_rb_w0`` is ``k₀``.  Error messages, the
comments of generated code and the debugger's steps use the same printer in
its message style (:mod:`revbench.lang.text`): every operand that is not an atom
in parentheses, which is unambiguous in a one-line message.

It knows nothing of the pipeline: :mod:`revbench.debugging.explain` decides which
statements to print and where; this module only turns one node into text.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

from revbench.lang import ir

#: the prefix the adjoint transform gives adjoint variables (``_rb_adj_x``)
ADJOINT_PREFIX = ir.ADJOINT_PREFIX
_GENERATED = re.compile(r"_rb_([a-z]+)(\d+)")
#: generated names, by their letter: the transforms' loop indices read as ``k₀``
_GENERATED_LETTERS = {"w": "k"}
_SUBSCRIPTS = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")

Namer = Callable[[str], str]

# Python's precedences (higher binds tighter)
_PREC_IFEXP, _PREC_OR, _PREC_AND, _PREC_NOT, _PREC_CMP = 0, 1, 2, 3, 4
_PREC_ADD, _PREC_MUL, _PREC_UNARY, _PREC_POW, _PREC_ATOM = 5, 6, 7, 8, 9
_BIN_PREC = {"+": _PREC_ADD, "-": _PREC_ADD, "*": _PREC_MUL, "/": _PREC_MUL, "//": _PREC_MUL,
             "%": _PREC_MUL, "@": _PREC_MUL, "**": _PREC_POW}


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
    """Turns IR into text: expressions, and statements one line each.

    ``name`` maps each variable name to its text (:func:`readable_name` by default);
    ``times`` is the multiplication sign (``"*"`` for code, ``"·"`` for formulas);
    ``brief`` is the message style (:mod:`revbench.lang.text`): every operand that is
    not an atom (a number, a name, an element, a call) in parentheses, whatever the
    precedence (``(3.0 * t) + x``), and no more than names the statement (no ``dtype=``,
    no assertion message).
    """

    def __init__(self, name: Namer = readable_name, times: str = "*", brief: bool = False):
        self.name = name
        self.times = times
        self.brief = brief

    # -- expressions ---------------------------------------------------------------
    def expr(self, e: ir.Expr) -> str:
        """The text of an expression, parenthesised only where Python needs it."""
        return self._expr(e)[0]

    def _expr(self, e: ir.Expr) -> tuple[str, int]:
        """(text, precedence of its outermost operator)."""
        if isinstance(e, str):  # an argument of print()
            return repr(e), _PREC_ATOM
        if isinstance(e, ir.Const):
            return self._const(e.value)
        if isinstance(e, ir.Var):
            return self.name(e.name), _PREC_ATOM
        if isinstance(e, ir.Elem):
            return f"{self.name(e.name)}[{', '.join(self.expr(i) for i in e.indices)}]", _PREC_ATOM
        if isinstance(e, ir.Slice):
            text = ":".join("" if b is None else self.expr(b) for b in (e.start, e.stop))
            return (text if e.step == 1 else f"{text}:{e.step}"), _PREC_ATOM
        if isinstance(e, ir.BinOp):
            return self._binop(e)
        if isinstance(e, ir.UnaryOp):
            if e.op == "not":
                return f"not {self._sub(e.operand, _above(_PREC_NOT))}", _PREC_NOT
            if e.op == "T":
                return f"{self._sub(e.operand, _above(_PREC_ATOM - 1))}.T", _PREC_ATOM
            inner = self._sub(e.operand, lambda text, p: p > _PREC_UNARY or (
                p == _PREC_UNARY and not text.startswith(("-", "+"))))
            return f"{e.op}{inner}", _PREC_UNARY
        if isinstance(e, ir.Func):
            return f"{e.name}({', '.join(self.expr(a) for a in e.args)})", _PREC_ATOM
        if isinstance(e, ir.Len):
            return f"len({self.name(e.name)})", _PREC_ATOM
        if isinstance(e, ir.Shape):
            return f"{self.name(e.name)}.shape[{e.axis}]", _PREC_ATOM
        if isinstance(e, (ir.IfExp, ir.Compare, ir.BoolOp)):
            p = (_PREC_IFEXP if isinstance(e, ir.IfExp) else _PREC_CMP if isinstance(e, ir.Compare)
                 else _PREC_OR if e.op == "or" else _PREC_AND)
            return conditional_syntax(e, lambda c: self._sub(c, _above(p))), p
        if isinstance(e, ir.Reduce):
            if e.kind == "dot" and isinstance(e.arg, ir.BinOp) and e.arg.op == "*":
                return f"np.dot({self.expr(e.arg.left)}, {self.expr(e.arg.right)})", _PREC_ATOM
            # (a dot of anything but a product is written as the sum it is)
            name = "np.sum" if e.kind == "dot" else ir.REDUCE_SPELLINGS[e.kind]
            axis = "" if e.axis is None else f", axis={e.axis}"
            return f"{name}({self.expr(e.arg)}{axis})", _PREC_ATOM
        if isinstance(e, ir.Scan):
            return f"np.{e.kind}({self.expr(e.arg)})", _PREC_ATOM
        if isinstance(e, ir.Derivative):
            args = ", ".join(self.expr(a) for a in e.args)
            return (f"revbench.grad({e.func}, loss={e.params[e.loss]!r}, "
                    f"wrt={e.params[e.wrt]!r})({args})", _PREC_ATOM)
        if isinstance(e, ir.MatMul):
            a, b = (self.name(v.name) + (".T" if t else "")
                    for v, t in ((e.a, e.trans_a), (e.b, e.trans_b)))
            if e.outer:
                return f"np.outer({a}, {b})", _PREC_ATOM
            return f"{a} @ {b}", _BIN_PREC["@"]
        if isinstance(e, ir.ArrayAlloc):
            return self._array_alloc(e), _PREC_ATOM
        return f"<{type(e).__name__}>", _PREC_ATOM

    def _sub(self, e: ir.Expr, bare: Callable[[str, int], bool]) -> str:
        """``e`` as an operand: bare where ``bare(its text, its precedence)`` says Python
        reads it so, else in parentheses (``brief``: bare only if an atom)."""
        text, p = self._expr(e)
        keep = _is_atom(e) if self.brief else bare(text, p)
        return text if keep else f"({text})"

    def _binop(self, e: ir.BinOp) -> tuple[str, int]:
        if e.op == "outer":
            return f"np.outer({self.expr(e.left)}, {self.expr(e.right)})", _PREC_ATOM
        prec = _BIN_PREC[e.op]
        if e.op == "**":  # right-associative; -x ** 2 is -(x ** 2)
            left = self._sub(e.left, _above(prec))
            right = self._sub(e.right, lambda _, p: p >= _PREC_UNARY)
        else:  # left-associative: a - (b - c) keeps its parentheses, (a - b) - c needs none
            left = self._sub(e.left, lambda _, p: p >= prec)
            right = self._sub(e.right, _above(prec))
        op = self.times if e.op == "*" else e.op
        sep = "" if op == "·" else " "
        return f"{left}{sep}{op}{sep}{right}", prec

    @staticmethod
    def _const(v) -> tuple[str, int]:
        if isinstance(v, complex) and v.real == 0:  # 2j, -1j (not "(-0-1j)")
            v = complex(0.0, v.imag)
        text = repr(v)  # a complex number with a real part: "(1+2j)", in parentheses already
        return (text, _PREC_UNARY) if text.startswith("-") else (text, _PREC_ATOM)

    def _array_alloc(self, e: ir.ArrayAlloc) -> str:
        dtype = f", dtype={e.dtype}" if e.dtype and not self.brief else ""
        if e.kind == "zeros":
            dims = [self.expr(d) for d in e.shape]
            shape = dims[0] if len(dims) == 1 else f"({', '.join(dims)})"
            return f"np.zeros({shape}{dtype})"
        src = self.name(e.source or "?")
        return f"np.zeros_like({src}{dtype})" if e.kind == "zeros_like" else f"{src}.copy()"

    # -- statements -------------------------------------------------------------------
    def target(self, t: ir.Target) -> str:
        return self.expr(t)

    def stmt(self, s: ir.Stmt) -> str:
        """One line for a statement: a simple one whole, an ``if``, ``while`` or ``for``
        by its header (the kind's name for a block)."""
        if isinstance(s, (ir.If, ir.While, ir.For)):
            return self.header(s)
        if isinstance(s, (ir.Block, ir.Inverted, ir.Uncompute)):
            return type(s).__name__
        return self.simple(s)

    def header(self, s: ir.If | ir.While | ir.For) -> str:
        """The header of an ``if``, ``while`` or ``for``, without its colon."""
        if isinstance(s, ir.If):
            return f"if {self.condition(s.pre, s.post)}"
        if isinstance(s, ir.While):
            return f"while {self.condition(s.cond, s.post)}"
        return f"for {self.name(s.var)} in {self.range(s)}"

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
            return f"print({', '.join(self.expr(a) for a in s.args)})"
        if isinstance(s, ir.Assert):
            return f"assert {self.expr(s.cond)}" + (
                f", {s.message!r}" if s.message is not None and not self.brief else "")
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


def _above(prec: int) -> Callable[[str, int], bool]:
    """An operand may go bare where its operator binds tighter than ``prec``."""
    return lambda _, p: p > prec


def _is_atom(e: ir.Expr) -> bool:
    """A number, a name, an element, a call, ``len`` or ``.shape``: never parenthesised
    in the message style (a negative number is)."""
    if isinstance(e, ir.Const):
        return not (isinstance(e.value, (int, float)) and e.value < 0)
    return ir.is_reshape(e) or isinstance(e, (ir.Var, ir.Elem, ir.Func, ir.Len, ir.Shape))


def conditional_syntax(e: ir.IfExp | ir.Compare | ir.BoolOp, part: Callable[[ir.Expr], str]) -> str:
    """The Python syntax of a conditional expression, comparison or ``and``/``or``, with
    ``part(child)`` the text of each child: shared by the printer and generated code
    (``backends/codegen.py``), which differ only in how they write the children."""
    if isinstance(e, ir.IfExp):
        return f"{part(e.then)} if {part(e.cond)} else {part(e.orelse)}"
    if isinstance(e, ir.Compare):
        parts = [part(e.operands[0])]
        for op, o in zip(e.ops, e.operands[1:]):
            parts += [op, part(o)]
        return " ".join(parts)
    return f" {e.op} ".join(part(v) for v in e.values)


def routine_name(label: str) -> str:
    """The routine a block label names: ``routine`` or the ``r`` of ``with routine as r``."""
    label = label.lstrip("~")
    return label.split(":", 1)[1] if ":" in label else "routine"


__all__ = ["ADJOINT_PREFIX", "Printer", "bar", "conditional_syntax", "display_width", "readable_name",
           "routine_name"]
