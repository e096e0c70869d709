"""The errors revbench raises for a user's mistakes.

Two families, as the language contract says:

* :class:`ReversibilitySyntaxError` -- the code is not valid reversible code.
  Raised when a function is decorated (or a cell is run), before anything
  executes.  It is a real :class:`SyntaxError`, so Python and IPython print the
  offending line of the user's file with a caret under it.
* :class:`ReversibilityError` -- a runtime check failed.  Its message names the
  variable, the expected and actual value, the function and the source line.

Every error also records the compiler *stage* that found it (``parse``,
``check``, ``types``, ``run``), as Numba names its passes, which makes the
compiler easy to test stage by stage.
"""

from __future__ import annotations

import re
from typing import Any


class ReversibilitySyntaxError(SyntaxError):
    """The source is not valid reversible code (raised at decoration time)."""

    def __init__(
        self,
        message: str,
        filename: str | None = None,
        lineno: int | None = None,
        col: int | None = None,
        text: str | None = None,
        end_lineno: int | None = None,
        end_col: int | None = None,
        stage: str = "check",
    ) -> None:
        # SyntaxError's offsets are 1-based; ours (like ast's) are 0-based.
        offset = None if col is None else col + 1
        end_offset = None if end_col is None else end_col + 1
        if text is not None and not text.endswith("\n"):
            text = text + "\n"
        if end_lineno is not None and end_lineno != lineno:
            # The caret can only underline one line; underline to its end.
            end_lineno, end_offset = lineno, (len(text.rstrip("\n")) + 1 if text else None)
        super().__init__(message, (filename, lineno, offset, text, end_lineno, end_offset))
        self.stage = stage


class ReversibilityError(RuntimeError):
    """A runtime reversibility check failed (or code could not run as written).

    Attributes name what failed, so tools (the notebook magic, the debugger)
    can show it without parsing the message.
    """

    def __init__(
        self,
        message: str,
        *,
        variable: str | None = None,
        expected: Any = None,
        actual: Any = None,
        function: str | None = None,
        filename: str | None = None,
        lineno: int | None = None,
        stage: str = "run",
    ) -> None:
        super().__init__(message)
        self.variable = variable
        self.expected = expected
        self.actual = actual
        self.function = function
        self.filename = filename
        self.lineno = lineno
        self.stage = stage


class ReversibilityTypeError(ReversibilityError, TypeError):
    """The code is well formed but cannot run on these argument types.

    Found when a function is specialised for its first call's argument types
    (for example ``y ^= e`` on a float, or an integer ancilla that would
    become a float).  It is also a :class:`TypeError`.
    """


class ShapeMismatchError(ReversibilityError, AssertionError):
    """The arrays of a whole-array statement with a product, a transpose or a broadcast do
    not fit together (``Z += X @ W.T + b`` with ``b`` as long as ``Z`` has rows).  Its sizes
    are checked by ``assert`` statements before its loops (``check=False`` keeps them), so
    it is an :class:`AssertionError` too."""


#: the messages of those ``assert`` statements (:mod:`revbench.lang.products`)
SHAPE_MESSAGE = re.compile(r"^`[^\n]*` must have (the shape of|one shape|as many)|^`[^\n]*`: `"
                           r"[^\n]*` (and `[^\n]*` )?must have as many")

__all__ = ["ReversibilityError", "ReversibilitySyntaxError", "ReversibilityTypeError",
           "ShapeMismatchError"]
