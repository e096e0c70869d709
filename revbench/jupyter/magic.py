"""The ``%%reversible`` cell magic: ``%load_ext revbench``, then::

    %%reversible [--no-jit] [--unchecked] [--show forward|inverse|adjoint|lines]
                 [--debug [--export PATH] [--max-steps N]] [--loss NAME] [--inverse] [--expect-error]

A cell of ``def``s defines reversible functions in the notebook; a cell of plain
statements is a *cell program* run on the notebook's own variables (see
:mod:`revbench.jupyter.cell` for what that means, and ``docs/notebook.md`` for
the user's guide).  This module adds what needs IPython: the flags, the displays,
and errors told in the cell's own lines -- a user's mistake shows the cell line
and a one-line message, never the compiler's traceback, and still marks the cell
failed so that "Run all" stops there.
"""

from __future__ import annotations

import ast
import difflib
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
    Place,
    call_places,
    cell_filename,
    compile_program,
    define_cell,
    file_of,
    parse_loss,
    places_of,
    program_key,
    read_cell,
    user_line_note,
)
from revbench.jupyter.messages import ASSERT_WHERE, NOTE, cell_headline
from revbench.lang.errors import ReversibilityError, ReversibilitySyntaxError

#: ``lines``: each source line beside its inverse and adjoint (:mod:`revbench.debugging.explain`)
SHOW_KINDS = ("forward", "inverse", "adjoint", "lines")
#: compiled cell programs kept per magic (re-running a cell reuses its compiled code)
PROGRAM_CACHE_SIZE = 64
#: exceptions that a user's cell program raises while it runs (shown without traceback)
_PROGRAM_ERRORS = (ReversibilityError, AssertionError, IndexError, ArithmeticError)


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
              help="display the generated code: forward, inverse or adjoint; or lines: each "
                   "source line beside its inverse and adjoint (may be repeated)")
    @argument("--debug", action="store_true",
              help="open the stepping debugger on the cell program instead of running it")
    @argument("--max-steps", metavar="N", type=int, default=None,
              help="with --debug: record at most N steps (default 100000)")
    @argument("--export", metavar="PATH",
              help="with --debug: also write the debugger as a standalone HTML page to PATH "
                   "(it steps without a kernel)")
    @argument("--loss", metavar="NAME",
              help="also compute the gradient of the variable NAME (or one element, NAME[i]) "
                   "with respect to the float variables the cell uses")
    @argument("--inverse", action="store_true",
              help="run the cell program's inverse: undo the cell exactly")
    @argument("--expect-error", action="store_true",
              help="the cell is meant to fail (a lesson showing an error): print the error "
                   "as the cell's output instead of raising it; a cell that runs is an error")
    @cell_magic
    def reversible(self, line: str, cell: str) -> Any:
        """Define reversible functions, or run reversible statements on the notebook's variables.

        A cell of ``def``s (``@reversible`` is optional) defines reversible
        functions in the notebook.  A cell of plain statements is a cell program:
        it reads and updates the notebook variables it names, while its ancillas
        and loop variables stay inside it.  A failing cell leaves every notebook
        variable as it was.  ``--loss`` returns the gradients as the cell's result.
        """
        if _asks_for_help(line):
            print(usage())
            return None
        args = _parse_flags(self.reversible, line)
        header = f"%%reversible {line}".rstrip()
        filename = cell_filename(f"{header}\n{cell}")
        self._label_cell(filename)
        if args.expect_error:
            return self._expect_error(args, header, cell, filename)
        try:
            return self._run(args, header, cell)
        except ReversibilitySyntaxError as exc:
            # shown as IPython shows any syntax error: cell line, caret, message
            raise exc.with_traceback(None) from None
        except KeyboardInterrupt as exc:  # Ctrl-C: said in one line, not through our frames
            exc._render_traceback_ = lambda: [  # type: ignore[attr-defined]
                "KeyboardInterrupt: the cell was interrupted; every notebook variable is as it "
                "was before it"]
            raise
        except Exception as exc:
            if not _is_users(exc):
                raise  # not the user's program: keep the traceback, it is a bug to report
            # shown in one line at the cell line; the traceback stays for %tb, %debug and %pdb
            exc._render_traceback_ = _Renderer(self.shell, exc, filename)  # type: ignore[attr-defined]
            raise

    def _expect_error(self, args, header: str, body: str, filename: str) -> None:
        """``--expect-error``: a lesson shows the error a mistake gives, as plain output.

        The error is printed as the cell would show it (the cell's line, a caret, the
        message) but to standard output, so a notebook run top to bottom has no error
        output; the notebook's variables are left as they were, as for any failing cell.
        A cell that does not fail raises, so a lesson cannot silently stop showing its
        error; an internal error (not the user's program) is raised as usual.
        """
        kept = _Kept(self.shell.user_ns, body)
        try:
            self._run(args, header, body)
        except ReversibilitySyntaxError as exc:
            exc = exc.with_traceback(None)
            text = self.shell.SyntaxTB.stb2text(
                self.shell.SyntaxTB.structured_traceback(type(exc), exc, []))
        except Exception as exc:
            if not _is_users(exc):
                raise
            text = "".join(_Renderer(self.shell, exc, filename)())
        else:
            kept.restore()  # a failing cell changes nothing: neither may this one
            raise UsageError("--expect-error: this cell was expected to fail, but it ran "
                             "without an error (what it changed is undone)")
        print("This cell fails, as it should:\n" + re.sub(r"\x1b\[[0-9;]*m", "", text).rstrip())
        return None

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
        loss = None if args.loss is None else self._loss(args.loss, program, ns)
        for kind in args.show or ():  # the cell's own forward, inverse or adjoint, as written
            values = program.arguments(program.values(ns))
            if kind == "lines":  # its lines beside their inverse and adjoint
                # (its adjoint column is the forward cell's: --inverse differentiates another)
                display(program.function.explain(*values, loss=None if args.inverse else args.loss))
                continue
            display(Code(program.function.source(kind, *values), language="python"))
        if args.export is not None and not args.debug:
            raise UsageError("--export writes the debugger's page: use it with --debug "
                             "(%%reversible --debug --export PATH)")
        if args.max_steps is not None and (not args.debug or args.max_steps < 1):
            raise UsageError("--max-steps N (N >= 1) limits the steps the debugger records: "
                             "use it with --debug (%%reversible --debug --max-steps 1000000)")
        if args.debug:
            return self._debug(fn, program, loss, args.export, args.max_steps)
        if loss is not None:
            return Gradients(args.loss, program.gradients(ns, loss, inverse=args.inverse))
        program.run(ns, inverse=args.inverse)
        return None

    def _define(self, cell: Cell, args, options: dict) -> None:
        for flag, advice in (("inverse", "run a function backwards with (~f)(...) or "
                                         "f.inverse(...)"),
                             ("debug", "debug a function with revbench.debug(f, *args)"),
                             ("export", "export a function's debugger with "
                                        "revbench.debug(f, *args, export=PATH)"),
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
                display(f.explain() if kind == "lines" else Code(f.source(kind), language="python"))

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
    def _loss(spec: str, program: CellProgram, ns) -> str | tuple:
        try:
            return parse_loss(spec, program.names, ns, program.local_names())
        except ValueError as exc:
            raise UsageError(str(exc)) from None

    def _debug(self, fn, program: CellProgram, loss, export: str | None = None,
               max_steps: int | None = None) -> None:
        from revbench.jupyter import debugger  # (ipywidgets: only when asked for)

        # the debugger steps through copies: the notebook variables are left as they are
        values = tuple(v.copy() if isinstance(v, np.ndarray) else v
                       for v in program.arguments(program.values(self.shell.user_ns)))
        extra: dict[str, Any] = {} if export is None else {"export": export}  # (also a file)
        if max_steps is not None:
            extra["max_steps"] = max_steps
        display(debugger.debug(fn, *values, loss=loss, **extra))

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
    """``exc._render_traceback_``: the error told at the user's lines, without the traceback.

    IPython calls it (instead of formatting a traceback) for any exception that
    has it, and still marks the cell failed.  Each line is shown as IPython shows
    a syntax error -- file and line, the line, a caret -- so static and runtime
    errors look alike: first the cell's line, then, for an error inside a
    reversible function the cell calls, the lines of the calls down to the
    failing one, then the one-line message.
    """

    def __init__(self, shell: InteractiveShell, exc: BaseException, cell_file: str):
        self.shell = shell
        self.exc = exc
        self.cell_file = cell_file

    def __call__(self) -> list[str]:
        exc = self.exc
        places = _places(exc, self.cell_file)
        headline = cell_headline(exc, places[-1] if places else None)
        name = type(exc).__name__
        if not places:
            return [f"{name}: {headline}"]
        parts = []
        for i, place in enumerate(places):
            last = i == len(places) - 1
            text = _source_line(place)
            col = place.col if place.col is not None else _caret_column(
                text, exc if last else None, None if last else places[i + 1])
            parts.append(self._located(name, headline if last else "", place, col, last))
        return ["".join(parts)]

    def _located(self, name: str, message: str, place: Place, col: int, last: bool) -> str:
        try:
            fake = type(name, (SyntaxError,), {})(message, (place.filename, place.line, col + 1, None))
            tb = self.shell.SyntaxTB
            text = tb.stb2text(tb.structured_traceback(type(fake), fake, []))
        except Exception:  # pragma: no cover - an IPython without SyntaxTB: plain text
            text = f"  File {place.filename}, line {place.line}\n{name}: {message}"
        if not last:  # a calling line: its place, line and caret; the message comes last
            text = text.rstrip("\n").rsplit("\n", 1)[0]
        return text.rstrip("\n") + "\n"


def _is_users(exc: BaseException) -> bool:
    """Is this an error of the user's program (shown compactly), not of revbench?"""
    return isinstance(exc, _PROGRAM_ERRORS) or places_of(exc) is not None or \
        user_line_note(exc) is not None


def _places(exc: BaseException, cell_file: str) -> tuple[Place, ...]:
    """The user's lines to show, outermost first (the last one failed)."""
    places = places_of(exc)
    if places:
        return places
    note = user_line_note(exc)
    if note is not None:
        return (Place(file_of(note["file"]), int(note["line"]), None, note["function"],
                      note["dir"]),)
    if isinstance(exc, AssertionError):
        m = ASSERT_WHERE.search(str(exc).strip().splitlines()[0] if str(exc).strip() else "")
        if m is not None and m["function"] == CELL_FUNCTION:
            return (Place(cell_file, int(m["line"]), None, CELL_FUNCTION),)
    if isinstance(exc, ReversibilityError) and exc.filename and exc.lineno:
        m = NOTE.search(str(exc))
        direction = m["dir"] if m else None
        return (*call_places(exc), Place(exc.filename, exc.lineno, None, exc.function, direction))
    return ()


def _source_line(place: Place) -> str:
    import linecache

    return linecache.getline(place.filename, place.line).rstrip("\n")


def _caret_column(text: str, exc: BaseException | None, callee: Place | None) -> int:
    """Where the caret goes on a runtime error's line (0-based).

    Under the call of the next function down, for a calling line; under the
    variable, condition or operand the error names, if the line shows it;
    else under the statement's first character.
    """
    start = len(text) - len(text.lstrip())
    words = []
    if callee is not None and callee.function:
        words.append(callee.function.lstrip("~"))
    variable = getattr(exc, "variable", None)
    if isinstance(variable, str) and variable:
        words += [variable, variable.split("[")[0]]
    for word in words:
        pattern = re.escape(word)
        if word[:1].isidentifier():
            pattern = r"(?<![\w.])" + pattern
        if word[-1:].isalnum() or word[-1:] == "_":
            pattern += r"(?!\w)"
        m = re.compile(pattern).search(text, start)
        if m is not None:
            return m.start()
    return start


# -- flags ---------------------------------------------------------------------------------


def _asks_for_help(line: str) -> bool:
    return any(word in ("--help", "-h") for word in line.split())


def usage() -> str:
    """What ``%%reversible --help`` prints: the usage line and the flags."""
    text = ReversibleMagics.reversible.parser.format_help()
    text = re.sub(r"^::\n\n\s*", "usage: ", text)
    return re.sub(r"\n\s+(\[)", r" \1", text, count=3).rstrip()


def _parse_flags(magic, line: str):
    """The parsed flags: no abbreviations (``--los`` is not ``--loss``); near misses are named."""
    line = re.sub(r"\[([^\]]*)\]", lambda m: "[" + m.group(1).replace(" ", "") + "]", line)
    for flag in ("--loss", "--export", "--max-steps"):  # one value each: the last must not win
        if sum(w.split("=")[0] == flag for w in line.split()) > 1:
            raise UsageError(f"{flag} is given twice: give it once (one value)")
    try:
        return parse_argstring(magic, line)
    except UsageError as exc:
        flags = [o for a in magic.parser._actions for o in a.option_strings]
        words = str(exc).split(":", 1)[1].split() if str(exc).startswith("unrecognized") else []
        near = []
        for word in (w.split("=")[0] for w in words if w.startswith("-")):
            close = [f for f in flags if f.startswith(word)] or difflib.get_close_matches(word, flags, 1, 0.8)
            near += [f"{word}: did you mean {close[0]}?"] if close else []
        if near:
            raise UsageError(f"{exc} ({'; '.join(near)}; %%reversible --help lists the flags)") from None
        raise


# -- `~f(...)` in a Python cell -------------------------------------------------------------


class _InvertCall(ast.NodeTransformer):
    """``~f(args)`` in a notebook's Python cell -> ``~_invert_call(f, "~f(args)")(args)``.

    In Python ``~f(x)`` is ``~(f(x))``: it would run ``f`` forward, changing the
    arrays passed to it, and then fail on ``~`` of the tuple ``f`` returns.  For a
    reversible ``f`` the rewritten call refuses before anything runs, and says to
    write ``(~f)(x)``; for any other ``f`` it is exactly ``~f(x)``.
    """

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if not (isinstance(node.op, ast.Invert) and isinstance(node.operand, ast.Call)):
            return node
        call = node.operand
        helper = ast.Attribute(
            value=ast.Call(func=ast.Name("__import__", ast.Load()),
                           args=[ast.Constant(__name__)],
                           keywords=[ast.keyword("fromlist", ast.List([ast.Constant("_")], ast.Load()))]),
            attr="_invert_call", ctx=ast.Load())
        checked = ast.Call(func=helper, args=[call.func, ast.Constant(ast.unparse(node))], keywords=[])
        new = ast.Call(func=checked, args=call.args, keywords=call.keywords)
        for n in ast.walk(new):
            ast.copy_location(n, call)
        return ast.copy_location(ast.UnaryOp(op=ast.Invert(), operand=new), node)


def _invert_call(f: Any, text: str) -> Any:
    """``f`` itself, unless it is a reversible function: then a call that explains ``(~f)(...)``."""
    from revbench.function import ReversibleFunction

    if not isinstance(f, ReversibleFunction):
        return f
    m = re.fullmatch(r"~\s*(.+?)\((.*)\)\s*", text, re.S)
    name, args = (m.group(1), m.group(2)) if m else (f.__name__, "...")

    def refuse(*args_: Any, **kwargs: Any):
        exc = TypeError(
            f"`{text}` means `~({name}({args}))` in Python: it would run `{name}` forward and "
            f"then apply `~` to the tuple it returns. To run `{name}` backwards, write "
            f"`(~{name})({args})` (or `{name}.inverse({args})`). Nothing was run")
        exc._render_traceback_ = _WithoutFrame(exc, refuse.__code__)  # type: ignore[attr-defined]
        raise exc

    return refuse


class _WithoutFrame:
    """IPython's usual traceback of ``exc``, without the frame of ``code`` (a helper's)."""

    def __init__(self, exc: BaseException, code):
        self.exc = exc
        self.code = code

    def __call__(self) -> list[str]:
        from IPython import get_ipython

        tb, entries = self.exc.__traceback__, []
        while tb is not None:
            entries.append(tb)
            tb = tb.tb_next
        if len(entries) > 1 and entries[-1].tb_frame.f_code is self.code:
            entries[-2].tb_next = None
        shell = get_ipython()
        return shell.InteractiveTB.structured_traceback(type(self.exc), self.exc,
                                                        entries[0] if entries else None)


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# --------------------------------------------------------------------------- #
# The extension
# --------------------------------------------------------------------------- #


def _show_error(shell: InteractiveShell, etype, value, tb, tb_offset=None) -> None:
    """Show revbench's errors at the user's lines, without revbench's frames.

    A ReversibilitySyntaxError is shown as IPython shows a cell's syntax error
    (raised from a running cell, IPython would list the frames the error went
    through: the magic's, the compiler's; they say nothing to the user).  A
    ReversibilityError raised in a Python cell (``f(x)`` on arguments ``f``
    cannot run on, a failed check) is shown as a ``%%reversible`` cell's error
    is: the cell's calling line, the calls down to the failing line of the
    reversible function, then the message.
    """
    if isinstance(value, ReversibilitySyntaxError) or hasattr(value, "_render_traceback_"):
        shell.showtraceback((etype, value, tb))
        return
    if not isinstance(value, ReversibilityError):  # a TypeError or ValueError
        if _raised_by_revbench(tb):
            _cut_at_revbench(tb)  # the user's frames, then the message: no internals
        shell.showtraceback((etype, value, tb))
        return
    if not hasattr(value, "_render_traceback_"):
        inner = _places(value, "")
        names = getattr(shell.compile, "_filename_map", None) or {}
        cells, frame = [], tb
        while frame is not None:
            code = frame.tb_frame.f_code
            if code.co_filename in names:
                cells.append(Place(code.co_filename, frame.tb_lineno, None, None))
            frame = frame.tb_next
        if inner and cells:
            value.revbench_places = (*cells, *inner)  # type: ignore[attr-defined]
            value._render_traceback_ = _Renderer(shell, value, "")  # type: ignore[attr-defined]
    if not hasattr(value, "_render_traceback_") and _raised_by_revbench(tb):
        _cut_at_revbench(tb)
    shell.showtraceback((etype, value, tb))


def _is_revbench_frame(tb) -> bool:
    return str(tb.tb_frame.f_globals.get("__name__", "")).startswith("revbench.")


def _raised_by_revbench(tb) -> bool:
    """Was the error raised by revbench's own code (its checks of the user's arguments)?"""
    last = tb
    while last is not None and last.tb_next is not None:
        last = last.tb_next
    return last is not None and _is_revbench_frame(last)


def _cut_at_revbench(tb) -> None:
    """End the traceback at the user's last frame before revbench's (it is mutable)."""
    while tb is not None and tb.tb_next is not None:
        if _is_revbench_frame(tb.tb_next):
            tb.tb_next = None
            return
        tb = tb.tb_next


#: the errors :func:`_show_error` shows (TypeError and ValueError: only those raised by
#: revbench about a user's arguments lose revbench's frames; the rest are shown as usual)
_SHOWN = (ReversibilitySyntaxError, ReversibilityError, TypeError, ValueError)


def _is_invert_call(t: Any) -> bool:
    """Is this AST transformer ours (this module's, or a %reload_ext-ed one's)?"""
    return type(t).__name__ == "_InvertCall" and type(t).__module__ == __name__


def load_ipython_extension(ip: InteractiveShell) -> None:
    """``%load_ext revbench``: register ``%%reversible`` (again, cleanly, on ``%reload_ext``).

    Also rewrites ``~f(...)`` in Python cells so that, for a reversible ``f``, it
    explains ``(~f)(...)`` instead of running ``f`` forward (see :class:`_InvertCall`).
    """
    ip.register_magics(ReversibleMagics)
    ip.ast_transformers[:] = [t for t in ip.ast_transformers if not _is_invert_call(t)]
    ip.ast_transformers.append(_InvertCall())
    cleanup = ip.input_transformers_cleanup
    cleanup[:] = [t for t in cleanup if getattr(t, "__name__", "") != _help_alone.__name__]
    cleanup.append(_help_alone)
    if not ip.custom_exceptions or ip.custom_exceptions == _SHOWN:
        # the one handler slot is free: show revbench's errors at the user's lines
        ip.set_custom_exc(_SHOWN, _show_error)


def _help_alone(lines: list[str]) -> list[str]:
    """``%%reversible --help`` alone in a cell prints the flags.  IPython refuses a cell
    magic whose body is empty before calling it, so such a cell is given an empty body
    (a blank line, which nothing runs) here, on its way in."""
    text = "".join(lines).strip()
    if text.startswith("%%reversible") and "\n" not in text \
            and _asks_for_help(text[len("%%reversible"):]):
        return [text + "\n", "\n"]
    return lines


def unload_ipython_extension(ip: InteractiveShell) -> None:
    """Remove ``%%reversible``, the ``~f(...)`` rewriting and the syntax error display."""
    ip.magics_manager.magics["cell"].pop("reversible", None)
    ip.input_transformers_cleanup[:] = [t for t in ip.input_transformers_cleanup
                                        if getattr(t, "__name__", "") != _help_alone.__name__]
    ip.ast_transformers[:] = [t for t in ip.ast_transformers if not _is_invert_call(t)]
    if ip.custom_exceptions == _SHOWN:
        ip.set_custom_exc((), None)


# no abbreviations: `--los y` must not be taken for `--loss y`
ReversibleMagics.reversible.parser.allow_abbrev = False

__all__ = ["Gradients", "ReversibleMagics", "load_ipython_extension", "unload_ipython_extension"]


class _Kept:
    """The notebook variables a cell names, as they were (arrays' contents copied), so an
    ``--expect-error`` cell that runs after all can be undone exactly: it changes nothing,
    as the failing cell it was meant to be would not."""

    def __init__(self, namespace: dict, body: str):
        try:
            names = {n.id for n in ast.walk(ast.parse(body)) if isinstance(n, ast.Name)}
            names |= {n.name for n in ast.walk(ast.parse(body))
                      if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        except SyntaxError:  # (it will fail: nothing to keep)
            names = set()
        self.namespace = namespace
        self.names = names
        self.objects = {n: namespace[n] for n in names if n in namespace}
        self.contents = {n: v.copy() for n, v in self.objects.items() if isinstance(v, np.ndarray)}

    def restore(self) -> None:
        for n in self.names:
            if n in self.objects:
                self.namespace[n] = self.objects[n]
                if n in self.contents and self.objects[n].flags.writeable:
                    self.objects[n][...] = self.contents[n]
            else:
                self.namespace.pop(n, None)
