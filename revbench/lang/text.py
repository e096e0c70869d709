"""Readable text of IR, for error messages and the comments of generated code.

It lives with the IR (not in a backend) because every stage names the user's
expressions in its messages: the type checker, the transforms, the backends.  The
text is the one printer's (:class:`revbench.lang.pretty.Printer`) in its message
style: names as they are, every operand that is not an atom in parentheses
(``y -= (3.0 * t) + x``), unambiguous in a one-line message, and nothing that does
not name the statement (no ``dtype=``, no assertion message).
"""

from __future__ import annotations

from revbench.lang import ir
from revbench.lang.pretty import Printer, conditional_syntax

#: the printer of messages (``MESSAGES.stmt(s)``: one line for a statement)
MESSAGES = Printer(name=str, brief=True)


def expr_text(e: ir.Expr | str) -> str:
    """The user-facing text of an IR expression (``x[i] * sin(t)``)."""
    return MESSAGES.expr(e)


__all__ = ["MESSAGES", "conditional_syntax", "expr_text"]
