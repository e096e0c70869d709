"""What the passes that lower a construct after type inference share.

Some constructs mean something only once the arguments' types are known -- a matrix
product (:mod:`revbench.lang.products`), a derivative taken inside reversible code
(:mod:`revbench.lang.derivatives`) -- so :func:`revbench.lang.types.infer` lowers them
into the core language right after typing.  Each such pass walks a function with the
types found (``env``, to which the ancillas it makes are added, and ``type_of``, an
expression's type) and numbers the names it makes.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from itertools import count
from typing import Any

from revbench.lang import ir


class Lowering:
    """The state of one lowering pass over one typed function."""

    def __init__(self, func: ir.Function, env: MutableMapping[str, Any],
                 type_of: Callable[[ir.Expr], Any]):
        self.func = func
        self.env = env
        self.type_of = type_of
        self._names = count()

    def line(self, loc: ir.Loc) -> str:
        """The user's text of the line at ``loc``, for messages."""
        return self.func.line_text(loc.line).strip()
