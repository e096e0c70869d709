"""The ``invert`` transform: a reversible program -> the program that undoes it.

The statement rules (each statement inverted, the order reversed; allocation
and deallocation swap roles; ...) are the language's own and live in
:mod:`revbench.rules.inverse`; this pass applies them to a whole function.

Because the output is ordinary IR, inverting twice gives back the original
program, and the inverse can be type-checked, compiled, traced and
differentiated like any other.
"""

from __future__ import annotations

from dataclasses import replace

from revbench.lang import ir
from revbench.rules.inverse import invert_body, invert_stmt

__all__ = ["invert", "invert_body", "invert_stmt"]


def invert(func: ir.Function) -> ir.Function:
    """The inverse program of a (checked) function."""
    return replace(func, body=invert_body(func.body))
