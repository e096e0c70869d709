"""An error's one-line message in a notebook cell's terms: what the ``%%reversible`` magic
(:mod:`revbench.jupyter.magic`) prints under the cell's line, and what the stepping debugger
(:mod:`revbench.jupyter.debugger`) shows on a failing step.  Plain text: no IPython here.
"""

from __future__ import annotations

import re

from revbench.jupyter.cell import CELL_FUNCTION, Place, cell_wording, fix_hint
from revbench.lang.errors import ReversibilityError

#: the note that places an error: "in reversible function f (running its inverse), FILE, line N: "
NOTE = re.compile(r"in reversible function (?P<function>~?\w+)(?: \(running its (?P<dir>[\w-]+)\))?, "
                  r"(?P<file>.+), line (?P<line>\d+): ")
#: where a failed ``assert`` says it is, at the end of its message
ASSERT_WHERE = re.compile(r" \(in (?P<function>\w+), line (?P<line>\d+)\)$")
_TRAILING_WHERE = re.compile(r" \(in reversible function ~?\w+(?:,| \().*\)$")
_NO_LINES = "compiled code does not know its lines"


def cell_headline(exc: BaseException, place: Place | None) -> str:
    """The one-line message of an error, in the cell's terms, with the fix when one is known."""
    text = getattr(exc, "revbench_message", None) or str(exc).strip() or type(exc).__name__
    first, *rest = text.splitlines()
    first = _TRAILING_WHERE.sub("", first)
    if isinstance(exc, AssertionError):  # "... (in f, line N)": the place shows it
        first = ASSERT_WHERE.sub("", first)
    function, direction = (place.function, place.direction) if place else (None, None)
    if place is None:
        details = NOTE.search(rest[0]) if rest else None
        if details is not None:
            function, direction = details["function"], details["dir"]
    if isinstance(exc, ReversibilityError) and not exc.lineno:
        first += "".join(f" {r.strip()}" for r in rest)  # no line to show: keep the whole story
    about = [_plain_note(n) for n in getattr(exc, "__notes__", None) or ()
             if not NOTE.search(n) and not (place is not None and _NO_LINES in n)]
    function = (function or "").lstrip("~")
    if function and function != CELL_FUNCTION:
        about.append(f"in reversible function {function}")
    if direction and direction != "forward":
        about.append(f"running its {direction}" if function != CELL_FUNCTION
                     else f"running the cell's {direction}")
    first = cell_wording(first)
    hint = fix_hint(exc, place)
    if hint:
        first += f"; {hint}"
    if about:
        first += f" ({', '.join(about)})"
    return first


def _plain_note(note: str) -> str:
    """A note of the compiler, said for a cell (``--no-jit`` is how a cell picks the backend)."""
    note = re.sub(r"^in reversible function ~?" + CELL_FUNCTION + r" \((.*)\)$", r"\1", note.strip())
    return note.replace("backend='python'", "--no-jit")
