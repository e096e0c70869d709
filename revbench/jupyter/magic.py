"""The ``%%reversible`` cell magic: ``%load_ext revbench``, then::

    %%reversible [--no-jit] [--unchecked] [--show forward|inverse|adjoint] [--debug] [--loss NAME] [--inverse]

A cell of ``def``s defines reversible functions in the notebook; a cell of plain
statements is a *cell program* run on the notebook's own variables (see
:mod:`revbench.jupyter.cell` for what that means, and ``docs/notebook.md`` for
the user's guide).  This module adds what needs IPython: the flags, the displays,
and errors told in the cell's own lines -- a user's mistake shows the cell line
and a one-line message, never the compiler's traceback, and still marks the cell
failed so that "Run all" stops there.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any

import numpy as np
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import Code, display

from revbench.jupyter.cell import (
    CELL_FUNCTION,
    CELL_LABELS,
    Cell,
    CellProgram,
    cell_filename,
    cell_wording,
    compile_program,
    define_cell,
    parse_loss,
    program_key,
    read_cell,
)
from revbench.lang.errors import ReversibilityError, ReversibilitySyntaxError

SHOW_KINDS = ("forward", "inverse", "adjoint")
#: compiled cell programs kept per magic (re-running a cell reuses its compiled code)
PROGRAM_CACHE_SIZE = 64
#: exceptions that a user's cell program raises while it runs (shown without traceback)
_PROGRAM_ERRORS = (ReversibilityError, AssertionError, IndexError, ArithmeticError)
_NOTE = re.compile(r"in reversible function (?P<function>\w+)(?: \(running its (?P<dir>[\w-]+)\))?, "
                   r"(?P<file>.+), line (?P<line>\d+): ")
_ASSERT_WHERE = re.compile(r" \(in " + CELL_FUNCTION + r", line (?P<line>\d+)\)$")
_TRAILING_WHERE = re.compile(r" \(in reversible function \w+(?:,| \().*\)$")


class Gradients(dict):
    """The gradients a ``--loss`` cell computes: variable name -> d loss / d its value at entry.

    A plain ``dict`` (the cell's result, so ``_`` and ``Out[n]`` hold it), shown as
    a small table in a notebook.
    """

    def __init__(self, loss: str, grads: dict[str, Any]):
        super().__init__(grads)
        self.loss = loss

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><td><code>{name}</code></td><td><code>{_html(repr(g))}</code></td></tr>"
                       for name, g in self.items())
        return (f"<table><caption>gradient of <code>{_html(self.loss)}</code> (with respect to "
                f"each variable's value before the cell)</caption>"
                f"<tr><th>variable</th><th>gradient</th></tr>{rows}</table>")


@magics_class
class ReversibleMagics(Magics):
    """``%%reversible``: reversible definitions and cell programs in a notebook."""

    def __init__(self, shell: InteractiveShell):
        super().__init__(shell)
        self._programs: OrderedDict[tuple, tuple[CellProgram, list]] = OrderedDict()

    @magic_arguments(name="%reversible")  # the usage line then reads %%reversible
    @argument("--no-jit", action="store_true",
              help="run the generated code as plain Python (backend='python'): nothing is compiled")
    @argument("--unchecked", action="store_true",
              help="generate code without runtime reversibility checks (check=False)")
    @argument("--show", action="append", choices=SHOW_KINDS, metavar="KIND",
              help="display the generated code: forward, inverse or adjoint (may be repeated)")
    @argument("--debug", action="store_true",
              help="open the stepping debugger on the cell program instead of running it")
    @argument("--loss", metavar="NAME",
              help="also compute the gradient of the variable NAME (or one element, NAME[i]) "
                   "with respect to the float variables the cell uses")
    @argument("--inverse", action="store_true",
              help="run the cell program's inverse: undo the cell exactly")
    @cell_magic
    def reversible(self, line: str, cell: str) -> Any:
        """Define reversible functions, or run reversible statements on the notebook's variables.

        A cell of ``def``s (``@reversible`` is optional) defines reversible
        functions in the notebook.  A cell of plain statements is a cell program:
        it reads and updates the notebook variables it names, while its ancillas
        and loop variables stay inside it.  A failing cell leaves every notebook
        variable as it was.  ``--loss`` returns the gradients as the cell's result.
        """
        args = parse_argstring(self.reversible, line)
        header = f"%%reversible {line}".rstrip()
        filename = cell_filename(f"{header}\n{cell}")
        self._label_cell(filename)
        try:
            return self._run(args, header, cell)
        except ReversibilitySyntaxError as exc:
            # shown as IPython shows any syntax error: cell line, caret, message
            raise exc.with_traceback(None) from None
        except Exception as exc:
            if not isinstance(exc, _PROGRAM_ERRORS) and _user_line_note(exc) is None:
                raise  # not the user's program: keep the traceback, it is a bug to report
            # shown in one line at the cell line; the traceback stays for %tb, %debug and %pdb
            exc._render_traceback_ = _Renderer(self.shell, exc, filename)  # type: ignore[attr-defined]
            raise

    # -- the two kinds of cell ------------------------------------------------------
    def _run(self, args, header: str, body: str) -> Any:
        options = {"check": not args.unchecked, "backend": "python" if args.no_jit else "numba"}
        cell = read_cell(header, body)
        ns = self.shell.user_ns
        if cell.kind == "defs":
            return self._define(cell, args, options)
        if cell.kind == "empty":
            return None
        program = self._program(cell, options)
        fn = program.function.inverse if args.inverse else program.function
        loss = None if args.loss is None else self._loss(args.loss, program)
        for kind in args.show or ():  # the cell's own forward, inverse or adjoint, as written
            display(Code(program.function.source(kind, *program.values(ns)), language="python"))
        if args.debug:
            return self._debug(fn, program, loss)
        if loss is not None:
            return Gradients(args.loss, program.gradients(ns, loss, inverse=args.inverse))
        program.run(ns, inverse=args.inverse)
        return None

    def _define(self, cell: Cell, args, options: dict) -> None:
        for flag, advice in (("inverse", "run a function backwards with ~f(...)"),
                             ("debug", "debug a function with revbench.debug(f, *args)"),
                             ("loss", "differentiate a function with revbench.grad(f, loss=...)")):
            if getattr(args, flag) not in (None, False):
                raise UsageError(f"--{flag} applies to a cell program (plain statements); this "
                                 f"cell defines functions: {advice}")
        fns = define_cell(cell, self.shell.user_ns, **options)
        extra = [w for w, on in (("python backend", options["backend"] == "python"),
                                 ("unchecked", not options["check"])) if on]
        print("defined reversible functions: "
              + ", ".join(f"{name}({', '.join(f.params)})" for name, f in fns.items())
              + (f" [{', '.join(extra)}]" if extra else ""))
        for f in fns.values():
            for kind in args.show or ():
                display(Code(f.source(kind), language="python"))

    def _program(self, cell: Cell, options: dict) -> CellProgram:
        """The compiled cell program, reused while the cell and what it calls are the same."""
        ns = self.shell.user_ns
        key = program_key(cell, ns, **options)
        hit = self._programs.get(key)
        if hit is not None:
            self._programs.move_to_end(key)
            return hit[0]
        program = compile_program(cell, ns, **options)
        # keep the objects of the key's ids alive, so an id is never reused while cached
        self._programs[key] = (program, [ns[name] for name, _ in key[-1]])
        if len(self._programs) > PROGRAM_CACHE_SIZE:
            self._programs.popitem(last=False)
        return program

    @staticmethod
    def _loss(spec: str, program: CellProgram) -> str | tuple:
        try:
            return parse_loss(spec, program.names)
        except ValueError as exc:
            raise UsageError(str(exc)) from None

    def _debug(self, fn, program: CellProgram, loss) -> None:
        import revbench

        debug = getattr(revbench, "debug", None)
        if debug is None:
            raise UsageError("--debug needs revbench.debug, the stepping debugger, which this "
                             "installation of revbench lacks")
        # the debugger steps through copies: the notebook variables are left as they are
        values = tuple(v.copy() if isinstance(v, np.ndarray) else v
                       for v in program.values(self.shell.user_ns))
        display(debug(fn, *values, loss=loss))

    # -- where errors point ---------------------------------------------------------------
    def _label_cell(self, filename: str) -> None:
        """Let IPython name the cell's file as it names cells: ``Cell In[5], line 3``."""
        result = getattr(self.shell.displayhook, "exec_result", None)
        number = getattr(result, "execution_count", None) or self.shell.execution_count
        names = getattr(self.shell.compile, "_filename_map", None)
        if isinstance(names, dict):
            names[filename] = number
        if number is not None:
            CELL_LABELS[filename] = f"Cell In[{number}]"


class _Renderer:
    """``exc._render_traceback_``: the error told at the cell line, without the traceback.

    IPython calls it (instead of formatting a traceback) for any exception that
    has it, and still marks the cell failed.  The layout is IPython's own syntax
    error display, so static and runtime errors look alike.
    """

    def __init__(self, shell: InteractiveShell, exc: BaseException, cell_file: str):
        self.shell = shell
        self.exc = exc
        self.cell_file = cell_file

    def __call__(self) -> list[str]:
        exc = self.exc
        headline, where = _headline_and_place(exc, self.cell_file)
        name = type(exc).__name__
        if where is None:
            return [f"{name}: {headline}"]
        filename, line = where
        try:
            fake = type(name, (SyntaxError,), {})(headline, (filename, line, None, None))
            tb = self.shell.SyntaxTB
            return [tb.stb2text(tb.structured_traceback(type(fake), fake, []))]
        except Exception:  # pragma: no cover - an IPython without SyntaxTB: plain text
            return [f"  File {filename}, line {line}", f"{name}: {headline}"]


def _headline_and_place(exc: BaseException, cell_file: str) -> tuple[str, tuple[str, int] | None]:
    """The one-line message of an error, and the (file, line) it points at."""
    text = str(exc).strip() or type(exc).__name__
    first, *rest = text.splitlines()
    first = _TRAILING_WHERE.sub("", first)
    where = None
    in_cell = _ASSERT_WHERE.search(first) if isinstance(exc, AssertionError) else None
    if in_cell is not None:  # a failed `assert` of the cell program: "(in cell, line N)"
        first = first[:in_cell.start()]
        where = (cell_file, int(in_cell["line"]))
    details = _NOTE.search(rest[0]) if rest else None
    if details is None:
        details = _user_line_note(exc)
    function = direction = None
    if details is not None:
        where = (details["file"], int(details["line"]))
        function, direction = details["function"], details["dir"]
    elif isinstance(exc, ReversibilityError) and exc.filename and exc.lineno:
        where, function = (exc.filename, exc.lineno), exc.function
    if isinstance(exc, ReversibilityError) and not exc.lineno:
        first += "".join(f" {r.strip()}" for r in rest)  # no line to show: keep the whole story
    about = [_plain_note(n) for n in getattr(exc, "__notes__", None) or () if not _NOTE.search(n)]
    if function and function != CELL_FUNCTION:
        about.append(f"in reversible function {function}")
    if direction:
        about.append(f"running its {direction}")
    first = cell_wording(first)
    if about:
        first += f" ({', '.join(about)})"
    return first, where


def _plain_note(note: str) -> str:
    """A note of the compiler, said for a cell (``--no-jit`` is how a cell picks the backend)."""
    note = re.sub(r"^in reversible function " + CELL_FUNCTION + r" \((.*)\)$", r"\1", note.strip())
    return note.replace("backend='python'", "--no-jit")


def _user_line_note(exc: BaseException):
    """The ``in reversible function f, FILE, line N: ...`` note the Python backend adds, if any."""
    for note in getattr(exc, "__notes__", ()) or ():
        m = _NOTE.search(note)
        if m is not None:
            return m
    return None


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# --------------------------------------------------------------------------- #
# The extension
# --------------------------------------------------------------------------- #


def _show_syntax_error(shell: InteractiveShell, etype, value, tb, tb_offset=None) -> None:
    """Show a ReversibilitySyntaxError as IPython shows a cell's syntax error: no stack.

    Raised from a running cell, IPython would list the frames the error went
    through (the magic's, the compiler's); they say nothing to the user.
    """
    shell.showtraceback((etype, value, tb))


def load_ipython_extension(ip: InteractiveShell) -> None:
    """``%load_ext revbench``: register ``%%reversible`` (again, cleanly, on ``%reload_ext``)."""
    ip.register_magics(ReversibleMagics)
    if not ip.custom_exceptions:  # the one handler slot is free: show static errors compactly
        ip.set_custom_exc((ReversibilitySyntaxError,), _show_syntax_error)


def unload_ipython_extension(ip: InteractiveShell) -> None:
    """Remove ``%%reversible`` and the syntax error display (``%unload_ext revbench``)."""
    ip.magics_manager.magics["cell"].pop("reversible", None)
    if ip.custom_exceptions == (ReversibilitySyntaxError,):
        ip.set_custom_exc((), None)


__all__ = ["Gradients", "ReversibleMagics", "load_ipython_extension", "unload_ipython_extension"]
