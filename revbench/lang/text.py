"""Readable text of IR, for error messages and the comments of generated code.

It lives with the IR (not in a backend) because every stage names the user's
expressions in its messages: the type checker, the transforms, the backends.
"""

from __future__ import annotations

from revbench.lang import ir


def expr_text(e) -> str:
    """The user-facing text of an IR expression (``x[i] * sin(t)``)."""
    if isinstance(e, str):
        return repr(e)
    if isinstance(e, ir.Const):
        return repr(e.value)
    if isinstance(e, ir.Var):
        return e.name
    if isinstance(e, ir.Elem):
        return f"{e.name}[{', '.join(expr_text(i) for i in e.indices)}]"
    if isinstance(e, ir.Slice):
        return ":".join("" if b is None else expr_text(b) for b in (e.start, e.stop))
    if isinstance(e, ir.BinOp):
        return f"{_wrap(e.left)} {e.op} {_wrap(e.right)}"
    if isinstance(e, ir.UnaryOp):
        return f"not {_wrap(e.operand)}" if e.op == "not" else f"{e.op}{_wrap(e.operand)}"
    if isinstance(e, ir.Func):
        return f"{e.name}({', '.join(expr_text(a) for a in e.args)})"
    if isinstance(e, ir.Len):
        return f"len({e.name})"
    if isinstance(e, ir.Shape):
        return f"{e.name}.shape[{e.axis}]"
    if isinstance(e, (ir.IfExp, ir.Compare, ir.BoolOp)):
        return conditional_syntax(e, _wrap)
    if isinstance(e, ir.Reduce):
        name = {"sum": "np.sum", "sum1": "sum", "dot": "np.sum", "max": "np.max",
                "min": "np.min"}[e.kind]
        return f"{name}({expr_text(e.arg)})"
    if isinstance(e, ir.ArrayAlloc):
        if e.kind == "zeros":
            shape = expr_text(e.shape[0]) if len(e.shape) == 1 else \
                "(" + ", ".join(expr_text(s) for s in e.shape) + ")"
            return f"np.zeros({shape})"
        return f"np.zeros_like({e.source})" if e.kind == "zeros_like" else f"{e.source}.copy()"
    return f"<{type(e).__name__}>"


def _wrap(e) -> str:
    t = expr_text(e)
    simple = isinstance(e, (ir.Const, ir.Var, ir.Elem, ir.Func, ir.Len, ir.Shape))
    if isinstance(e, ir.Const) and isinstance(e.value, (int, float)) and e.value < 0:
        simple = False
    return t if simple else f"({t})"


def conditional_syntax(e, part) -> str:
    """The Python syntax of a conditional expression, comparison or ``and``/``or``, with
    ``part(child)`` the text of each child: shared by messages (this module) and generated
    code (``backends/codegen.py``), which differ only in how they write the children."""
    if isinstance(e, ir.IfExp):
        return f"{part(e.then)} if {part(e.cond)} else {part(e.orelse)}"
    if isinstance(e, ir.Compare):
        parts = [part(e.operands[0])]
        for op, o in zip(e.ops, e.operands[1:]):
            parts += [op, part(o)]
        return " ".join(parts)
    return f" {e.op} ".join(part(v) for v in e.values)
