"""What a ``%%reversible`` cell means, without IPython: definitions or a cell program.

A cell is either a list of ``def``s (reversible functions for the notebook) or a
*cell program*: plain reversible statements on the notebook's own variables.  A cell
program is compiled as an ordinary reversible function, ``cell(v1, v2, ...)``, whose
parameters are the notebook variables it uses; running it passes their values and
writes the results back.  Its ancillas and loop variables are the function's locals,
so they never reach the notebook.

Line numbers are the cell's as IPython counts them: the ``%%reversible`` line is
line 1, so the cell body starts at line 2.  Every error points there.

This module imports no IPython, so the semantics can be tested (and reused) on
their own; :mod:`revbench.jupyter.magic` adds flags, display and error rendering.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import linecache
import numbers
import re
import sys
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, Literal

import numpy as np

from revbench.ad import value_and_grad
from revbench.backends.python_backend import Deadline, with_deadline
from revbench.backends.runtime import TABLES, CheckFailed, to_user_error
from revbench.compiler import Program, lookup_name
from revbench.config import get_tolerance
from revbench.function import ReversibleFunction, define
from revbench.lang import ir
from revbench.lang.check import check_calls, check_function
from revbench.lang.errors import ReversibilityError, ReversibilitySyntaxError, ReversibilityTypeError
from revbench.lang.parse import INVERTED, ROUTINE, SourceInfo, parse_definition
from revbench.rules import functions as fn_rules
from revbench.rules.instructions import ADD, DIV, MUL, SUB, XOR

#: the name of the reversible function a cell program compiles to (it shows in messages)
CELL_FUNCTION = "cell"
#: the line of the cell body's first line: the ``%%reversible`` line is line 1
FIRST_BODY_LINE = 2

Kind = Literal["defs", "program", "empty"]


@dataclass(frozen=True)
class Cell:
    """One cell's text, parsed: where its lines are, and what kind of cell it is."""

    filename: str  # stable for a given text, so re-running a cell reuses compiled code
    source: str  # the whole cell, ``%%reversible`` line included (what linecache holds)
    body: str  # the statements or definitions, from line 2 on
    tree: ast.Module
    kind: Kind

    @property
    def body_lines(self) -> list[str]:
        return self.body.splitlines(keepends=True)

    def error(self, node: ast.AST, message: str) -> ReversibilitySyntaxError:
        """A static error at an AST node of the body, told in cell lines."""
        line = node.lineno + FIRST_BODY_LINE - 1
        end = getattr(node, "end_lineno", None)
        return ReversibilitySyntaxError(
            message, self.filename, line, node.col_offset, _line(self.source, line),
            None if end is None else end + FIRST_BODY_LINE - 1, getattr(node, "end_col_offset", None),
            stage="parse")


def read_cell(header: str, body: str) -> Cell:
    """Parse a cell (``header`` is the ``%%reversible ...`` line) and classify it.

    Registers the whole cell with :mod:`linecache` under a name derived from its
    text, so error displays and tracebacks can show its lines.  A Python syntax
    error, or a cell mixing definitions and statements, raises
    :class:`ReversibilitySyntaxError` at the cell's line.
    """
    source = f"{header}\n{body}"
    filename = cell_filename(source)
    register_source(filename, source)
    nul = body.find("\x00")
    if nul >= 0:  # Python reports it without a line: find it
        line = body.count("\n", 0, nul) + FIRST_BODY_LINE
        col = nul - (body.rfind("\n", 0, nul) + 1)
        raise ReversibilitySyntaxError(
            "the cell contains a NUL character (\\x00), which Python source cannot hold: delete "
            "it (most editors do not show it; it often comes with pasted text)",
            filename, line, col, _line(source, line), stage="parse")
    try:
        tree = ast.parse(body, filename)
    except SyntaxError as exc:
        raise _cell_syntax_error(exc, filename, source) from None
    cell = Cell(filename, source, body, tree, "empty")
    defs = [s for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]
    others = [s for s in tree.body if s not in defs and not _is_docstring(s)]
    if defs and others:
        first_def, first_other = defs[0], others[0]
        if first_def.lineno < first_other.lineno:
            raise cell.error(first_other, "this cell defines reversible functions, so it can hold "
                                          "only `def`s: move this statement to a cell of its own "
                                          "(a cell of plain statements is a cell program)")
        raise cell.error(first_def, "a cell program cannot define functions: put the `def` in a "
                                    "%%reversible cell of its own")
    kind: Kind = "defs" if defs else "program" if others else "empty"
    return Cell(filename, source, body, tree, kind)


#: what to call a cell's file where people read it (messages, the debugger's source
#: panel): ``"Cell In[5]"``, as IPython names cells; filled in by the magic (the language's
#: own table, so messages made below this layer use it too)
CELL_LABELS: dict[str, str] = ir.FILE_LABELS


def cell_label(filename: str) -> str | None:
    """What IPython calls the cell a file name stands for, ``"Cell In[5]"`` (None: no cell).

    ``%%reversible`` cells are labelled by the magic (:data:`CELL_LABELS`); the
    ``@reversible`` functions of a plain Python cell live in IPython's own cell
    files, which its compiler numbers.  IPython is consulted only when it is
    already imported: this module never imports it.
    """
    label = CELL_LABELS.get(filename)
    if label is not None or "IPython" not in sys.modules:
        return label
    shell = sys.modules["IPython"].get_ipython()
    numbers_ = getattr(getattr(shell, "compile", None), "_filename_map", None)
    number = numbers_.get(filename) if isinstance(numbers_, dict) else None
    return f"Cell In[{number}]" if isinstance(number, int) else None


def file_of(shown: str) -> str:
    """The file a message names by its label (``"Cell In[5]"``: :func:`revbench.lang.ir.
    shown_file`), or ``shown`` itself: what reads the file's lines needs its real name."""
    for filename, label in reversed(CELL_LABELS.items()):
        if label == shown:
            return filename
    return shown


def cell_filename(source: str) -> str:
    """The file name of a cell's text: the same text always gets the same name.

    Generated code records its file, so a stable name lets a re-run cell reuse
    compiled code (in memory and in the on-disk cache, across kernel restarts).
    """
    return "<revbench-cell-" + hashlib.sha256(source.encode()).hexdigest()[:12] + ">"


def register_source(filename: str, source: str) -> None:
    """Make ``filename``'s lines available to linecache (tracebacks, IPython's error display)."""
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)


def define_cell(cell: Cell, namespace: MutableMapping[str, Any], *, check: bool,
                backend: str) -> dict[str, ReversibleFunction]:
    """Define a cell's functions in ``namespace``, all or none.

    ``revbench.define`` binds each function as it goes; if a later ``def`` is
    refused, the names bound before it are put back as they were, so a failing
    cell changes nothing in the notebook.
    """
    names = [s.name for s in cell.tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]
    missing = object()
    before = {n: namespace.get(n, missing) for n in names}
    try:
        return define(cell.body, namespace, filename=cell.filename, first_line=FIRST_BODY_LINE,
                      check=check, backend=backend)
    except BaseException:
        for n, v in before.items():
            if v is missing:
                namespace.pop(n, None)
            else:
                namespace[n] = v
        raise
    finally:
        register_source(cell.filename, cell.source)  # define() registered the body alone


# --------------------------------------------------------------------------- #
# Cell programs
# --------------------------------------------------------------------------- #


def is_data(value: Any) -> bool:
    """Is this notebook value a variable a cell program reads and updates (not a function)?"""
    return isinstance(value, (numbers.Number, np.ndarray, np.generic))


#: the integers of a reversible program are int64 (on both backends)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: the longest a failing run is replayed on the Python backend to find its line (seconds)
REPLAY_SECONDS = 2.0
#: the exceptions a user's cell program raises while it runs (told at the user's line)
RUN_ERRORS = (ReversibilityError, AssertionError, IndexError, ArithmeticError, ValueError,
              MemoryError)


@dataclass(frozen=True)
class Place:
    """A line of the user's code where an error happened (or the call that led there)."""

    filename: str
    line: int
    col: int | None = None  # 0-based; None: point at the statement
    function: str | None = None  # the reversible function running there
    direction: str | None = None  # "forward", "inverse", ...


def places_of(exc: BaseException) -> tuple[Place, ...] | None:
    """Where a cell program's error happened, outermost call first (None: not known)."""
    return getattr(exc, "revbench_places", None)


def call_places(exc: BaseException) -> tuple[Place, ...]:
    """The calls that led to a type error found in a callee, outermost first."""
    return tuple(Place(file, line, None, function)
                 for function, file, line in reversed(getattr(exc, "call_sites", ())))


@dataclass
class CellProgram:
    """A cell program compiled as ``cell(*names)``, bound to the notebook variables ``names``."""

    function: ReversibleFunction
    names: tuple[str, ...]
    cell: Cell | None = None
    _twin: CellProgram | None = field(default=None, repr=False)

    def values(self, namespace: Mapping[str, Any]) -> tuple:
        return tuple(namespace[n] for n in self.names)

    def local_names(self) -> frozenset[str]:
        """The cell's own variables: its ancillas and loop variables (gone after it runs)."""
        out: set[str] = set()
        for st in ir.walk_stmts(self.function._program.ir.body):
            if isinstance(st, ir.Alloc):
                out.add(st.name)
            elif isinstance(st, ir.For):
                out.add(st.var)
        return frozenset(out)

    def written(self) -> frozenset[str]:
        """The notebook variables the cell may change (what a failure must restore)."""
        return self.function._program.written_params()

    def view(self, inverse: bool = False) -> ReversibleFunction:
        return self.function.inverse if inverse else self.function

    def arguments(self, values: tuple) -> tuple:
        """The values the cell is called with, checked here so errors name the cell's line.

        An integer outside int64, a read-only array the cell updates, and arrays
        sharing memory with one the cell updates are refused at the variable's
        first use in the cell.  A read-only array the cell only reads (or one
        sharing memory with another the cell only reads) is passed as a copy.
        """
        written = self.written()
        out = list(values)
        for i, (name, v) in enumerate(zip(self.names, values)):
            if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) \
                    and not INT64_MIN <= int(v) <= INT64_MAX:
                raise self.located(ReversibilityTypeError(
                    f"notebook variable `{name}` is the integer {int(v)}, which does not fit in "
                    f"int64 (-2**63 to 2**63 - 1): revbench integers are 64-bit and never wrap "
                    f"around; make it a float for larger numbers (`{name} = float({name})`)",
                    variable=name, function=CELL_FUNCTION, stage="call"))
            if isinstance(v, np.ndarray) and not v.flags.writeable:
                if name in written:
                    raise self.located(ReversibilityTypeError(
                        f"notebook variable `{name}` is a read-only array, and the cell updates "
                        f"it in place: make a writeable copy first (`{name} = {name}.copy()`)",
                        variable=name, function=CELL_FUNCTION, stage="call"))
                out[i] = v.copy()
        arrays = [(i, n, v) for i, (n, v) in enumerate(zip(self.names, out)) if isinstance(v, np.ndarray)]
        for (_, n1, a1), (j, n2, a2) in combinations(arrays, 2):
            if out[j] is a2 and np.may_share_memory(a1, a2):
                if n1 in written or n2 in written:
                    n = n2 if n2 in written else n1
                    raise self.located(ReversibilityError(
                        f"notebook variables `{n1}` and `{n2}` share memory (one array, or views of "
                        f"one): updating one would change the other, which is not reversible. Give "
                        f"`{n}` its own copy first (`{n} = {n}.copy()`)",
                        variable=n2, function=CELL_FUNCTION, stage="call"))
                out[j] = a2.copy()
        return tuple(out)

    def run(self, namespace: MutableMapping[str, Any], inverse: bool = False) -> None:
        """Run the cell forward (or its inverse) on the notebook's variables.

        Arrays are updated in place and scalars are written back, only when the
        whole cell succeeded: on any failure every variable is as it was before.
        An error of the user's program is told where it happened (see
        :meth:`explain`).
        """
        values = self.values(namespace)
        args = self.arguments(values)
        fn = self.view(inverse)
        try:
            with restored_on_failure(args, self.names, self.written()):
                out = fn(*args)
        except Exception as exc:
            self.explain(exc, args, inverse)  # the arguments are as they were again
            raise
        self._write_scalars(namespace, values, out)

    def gradients(self, namespace: MutableMapping[str, Any], loss: str | tuple,
                  inverse: bool = False) -> dict[str, Any]:
        """Run the cell, updating the notebook, and return d loss / d each float variable.

        The gradients are with respect to the variables' values at the start of
        the cell; integer and bool variables have none and are left out.
        """
        values = self.values(namespace)
        args = self.arguments(values)
        fn = self.view(inverse)
        try:
            outs, grads = value_and_grad(fn, loss)(*args)  # works on copies: nothing changed yet
        except Exception as exc:
            self.explain(exc, args, inverse)
            raise
        for orig, new in zip(values, outs):
            if isinstance(orig, np.ndarray) and orig.flags.writeable and new is not orig:
                orig[...] = new
        self._write_scalars(namespace, values, outs)
        return {n: g for n, g in zip(self.names, grads) if g is not None}

    def _write_scalars(self, namespace: MutableMapping[str, Any], values: tuple, out: tuple) -> None:
        written = self.written()
        for name, orig, new in zip(self.names, values, out):
            if name in written and not isinstance(orig, np.ndarray):
                namespace[name] = orig.dtype.type(new) if isinstance(orig, np.generic) else new

    # -- where an error happened -----------------------------------------------------------
    def located(self, exc: ReversibilityError) -> ReversibilityError:
        """An error about a notebook variable, placed at its first use in the cell."""
        node = _first_uses(self.cell.tree).get(exc.variable) if self.cell else None
        if node is not None:
            exc.filename = self.cell.filename
            exc.lineno = node.lineno + FIRST_BODY_LINE - 1
            exc.revbench_places = (Place(exc.filename, exc.lineno, node.col_offset, CELL_FUNCTION),)
        return exc

    def explain(self, exc: BaseException, args: tuple, inverse: bool) -> None:
        """Record on ``exc`` where the cell program failed: ``exc.revbench_places``.

        The places are the user's lines, outermost first: the cell's line, then
        (for an error inside a reversible function the cell calls) the lines of
        the calls down to the failing line.  What the error does not say itself
        (compiled code knows no lines; a failed check knows only its own line)
        is found by running the cell again on the Python backend, on copies of
        ``args``, for at most :data:`REPLAY_SECONDS`: the notebook's data is not
        touched again.  Only the user's errors are explained (:data:`RUN_ERRORS`
        and anything raised at a user's line); nothing here raises.
        """
        if places_of(exc) is not None or self.cell is None:
            return
        try:
            inner = _innermost(exc)
            if inner is None and not isinstance(exc, RUN_ERRORS):
                return
            if isinstance(exc, ReversibilityError) and exc.lineno is None and \
                    exc.variable in self.names and exc.function == CELL_FUNCTION:
                self.located(exc)
                return
            chain = _frames(exc.__traceback__)
            mine = self.cell.filename
            ran = getattr(exc, "stage", "run") == "run"  # not a compile error: worth a replay
            if ran and (inner is None or (not any(p.filename == mine for p in chain) and (
                    inner.filename != mine or inner.function != CELL_FUNCTION))):
                replayed = self._replay(args, inverse)
                if replayed is not None and _same_failure(exc, replayed[0], inner):
                    chain = replayed[1]
                    if inner is None and str(replayed[0]):  # Python says more than Numba
                        exc.revbench_message = str(replayed[0]).splitlines()[0]  # type: ignore[attr-defined]
            if inner is None:
                places = tuple(chain)
            elif chain and (chain[-1].filename, chain[-1].line) == (inner.filename, inner.line):
                places = (*chain[:-1], inner)
            else:
                places = (*call_places(exc), inner)
            exc.revbench_places = places  # type: ignore[attr-defined]
        except Exception:  # pragma: no cover - explaining must never hide the user's error
            pass

    def _replay(self, args: tuple, inverse: bool) -> tuple[BaseException, list[Place]] | None:
        """Run the cell again on the Python backend, on copies: (its error, where it happened)."""
        twin = self._python_twin()
        if twin is None:
            return None
        fn = twin.view(inverse)
        copies = tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)
        try:
            compiled = fn.compiled(fn.signature_of(copies))
        except Exception:
            return None
        call_args = [a.item() if isinstance(a, np.generic) else a for a in copies]
        atol, rtol = get_tolerance()
        try:
            with_deadline(lambda: compiled.run(*call_args, atol, rtol), REPLAY_SECONDS)
        except Deadline:
            return None
        except CheckFailed as exc:
            return to_user_error(exc), _frames(exc.__traceback__)
        except Exception as exc:
            return exc, _frames(exc.__traceback__)
        return None

    def _python_twin(self) -> CellProgram | None:
        """The same cell program on the Python backend (itself when it is on it)."""
        if self.function.backend == "python":
            return self
        if self._twin is None and self.cell is not None:
            p = self.function._program
            self._twin = compile_program(self.cell, p.namespace, check=p.check, backend="python")
        return self._twin


def _frames(tb) -> list[Place]:
    """The user's lines a traceback went through (generated code mapped back), outermost first."""
    out: list[Place] = []
    while tb is not None:
        fname = tb.tb_frame.f_code.co_filename
        if "rbgen_" in fname:
            try:
                table = TABLES.get(int(fname.rsplit("rbgen_", 1)[1][:15], 16))
            except ValueError:
                table = None
            if table is not None and tb.tb_lineno in table.linemap:
                place = Place(table.filename, table.linemap[tb.tb_lineno], None, table.function,
                              table.direction)
                if not out or out[-1] != place:
                    out.append(place)
        tb = tb.tb_next
    return out


_NOTE = re.compile(r"in reversible function (?P<function>\w+)(?: \(running its (?P<dir>[\w-]+)\))?, "
                   r"(?P<file>.+), line (?P<line>\d+): ")
_ASSERT = re.compile(r" \(in (?P<function>\w+), line (?P<line>\d+)\)$")


def user_line_note(exc: BaseException):
    """The ``in reversible function f, FILE, line N: ...`` note the Python backend adds, if any."""
    for note in getattr(exc, "__notes__", ()) or ():
        m = _NOTE.search(note)
        if m is not None:
            return m
    return None


def _innermost(exc: BaseException) -> Place | None:
    """Where an error says it happened (without help), if it says."""
    note = user_line_note(exc)
    if note is not None:
        return Place(file_of(note["file"]), int(note["line"]), None, note["function"],
                     note["dir"])
    if isinstance(exc, ReversibilityError) and exc.filename and exc.lineno:
        m = _NOTE.search(str(exc))
        return Place(exc.filename, exc.lineno, None, exc.function, m["dir"] if m else None)
    return None


def _same_failure(original: BaseException, replayed: BaseException, inner: Place | None) -> bool:
    """Did the replay fail as the original run did (so its places are the original's)?"""
    if isinstance(original, ReversibilityError) or isinstance(replayed, ReversibilityError):
        mine = _innermost(replayed)
        return (type(original) is type(replayed) and inner is not None and mine is not None
                and (mine.filename, mine.line) == (inner.filename, inner.line))
    return type(original) is type(replayed) or (
        isinstance(original, ArithmeticError) and isinstance(replayed, ArithmeticError))


@contextmanager
def restored_on_failure(values: tuple, names: tuple[str, ...], written: frozenset[str]) -> Iterator[None]:
    """Put back the arrays a failed run may have half-updated (checks on or off, any exception).

    Scalars need nothing: they are only written back after a successful run.
    """
    saved = [(a, a.copy()) for n, a in zip(names, values)
             if isinstance(a, np.ndarray) and n in written and a.flags.writeable]
    try:
        yield
    except BaseException:
        for a, copy in saved:
            a[...] = copy
        raise


def program_key(cell: Cell, namespace: Mapping[str, Any], check: bool, backend: str) -> tuple:
    """What a compiled cell program depends on besides its argument types.

    The text (through the file name), the options, which names are notebook
    variables, and which objects the other names (reversible callees, modules)
    are: redefining a callee in another cell must not reuse code that calls the
    old one.
    """
    names, others = _classify_names(cell, namespace, strict=False)
    return (cell.filename, check, backend, names,
            tuple((n, id(namespace[n])) for n in others))


def compile_program(cell: Cell, namespace: MutableMapping[str, Any], *, check: bool,
                    backend: str) -> CellProgram:
    """Turn a cell program into a reversible function of the notebook variables it uses."""
    names, _ = _classify_names(cell, namespace, strict=True)
    first_use = _first_uses(cell.tree)
    args = []
    for n in names:
        use = first_use[n]
        args.append(ast.arg(arg=n, lineno=use.lineno, col_offset=use.col_offset,
                            end_lineno=use.end_lineno, end_col_offset=use.end_col_offset))
    body = [s for s in cell.tree.body if not _is_docstring(s)] or [ast.Pass(lineno=1, col_offset=0)]
    node = ast.FunctionDef(
        name=CELL_FUNCTION,
        args=ast.arguments(posonlyargs=[], args=args, vararg=None, kwonlyargs=[], kw_defaults=[],
                           kwarg=None, defaults=[]),
        body=body, decorator_list=[], returns=None,
        lineno=1, col_offset=0, end_lineno=body[-1].end_lineno, end_col_offset=0,
        **({"type_params": []} if "type_params" in ast.FunctionDef._fields else {}))
    info = SourceInfo(cell.filename, cell.body_lines, FIRST_BODY_LINE - 1, 0)
    try:
        parsed = parse_definition(node, info, namespace)
        # (calls first: one argument too many is that, not a repeated argument's aliasing)
        check_calls(parsed, lambda name: lookup_name(name, namespace, {}))
        checked = check_function(parsed)
    except ReversibilitySyntaxError as exc:
        raise cell_wording_syntax(exc) from None
    program = Program(checked, check=check, backend=backend, namespace=namespace,
                      replay_errors=False)  # (CellProgram replays, with the calling lines)
    return CellProgram(ReversibleFunction(program), names, cell)


def parse_loss(spec: str, names: tuple[str, ...],
               namespace: Mapping[str, Any] | None = None,
               local_names: frozenset[str] = frozenset()) -> str | tuple[str, tuple[int, ...]]:
    """``--loss y`` or ``--loss r[3]`` / ``--loss A[1, 2]`` -> the ``loss=`` of :func:`value_and_grad`.

    With the notebook's ``namespace``, the variable's value is checked too: a
    float scalar, or one element (in range) of a float array.  Errors are
    :class:`ValueError` told in the magic's own spelling (``--loss NAME``).
    """
    m = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*(?:\[([-+\d\s,]*)\])?\s*", spec)
    if m is None:
        raise ValueError(f"--loss {spec}: write a variable name, or one element of an array "
                         "variable such as `r[3]` or `A[1, 2]`")
    name, index = m.group(1), m.group(2)
    if name not in names and name in local_names:
        raise ValueError(f"--loss {name}: `{name}` is the cell's own variable (an ancilla or a "
                         "loop variable, gone once the cell has run); the loss must be a notebook "
                         f"variable the cell updates. Add into one instead (`loss += {name}` with "
                         "`loss = 0.0` set in the notebook before), and give --loss loss")
    if name not in names:
        uses = ", ".join(names) if names else "none"
        raise ValueError(f"--loss {name}: the cell program does not use a variable `{name}` "
                         f"(the notebook variables it uses: {uses})")
    parts = None
    if index is not None:
        try:
            parts = tuple(int(p) for p in index.split(",") if p.strip())
            if not parts:
                raise ValueError
        except ValueError:
            raise ValueError(f"--loss {spec.strip()}: the index must be integers, such as "
                             "`r[3]`") from None
    if namespace is not None and name in namespace:
        parts = _check_loss_value(spec.strip(), name, parts, namespace[name])
    return name if parts is None else (name, parts)


def _check_loss_value(spec: str, name: str, index: tuple[int, ...] | None, value: Any):
    """The loss must be a float (or one element of a float array): say so in --loss terms."""
    need = ("--loss NAME differentiates a float variable, or one element of a float array "
            "(`--loss r[3]`)")
    if isinstance(value, np.ndarray):
        example = f"{name}[{', '.join('0' * value.ndim)}]" if value.ndim else name
        if value.dtype.kind != "f":
            raise ValueError(f"--loss {spec}: `{name}` is an array of {value.dtype}, and a "
                             f"gradient needs a float loss: {need}")
        if index is None:
            raise ValueError(f"--loss {spec}: `{name}` is an array (shape {value.shape}); the "
                             f"loss is one number: name one element, such as `--loss {example}`")
        if len(index) != value.ndim:
            raise ValueError(f"--loss {spec}: `{name}` has {value.ndim} dimension(s), so the "
                             f"element needs {value.ndim} index(es), such as `--loss {example}`")
        fixed = []
        for i, n in zip(index, value.shape):
            if not -n <= i < n:
                raise ValueError(f"--loss {spec}: index {i} is out of range for `{name}` of "
                                 f"shape {value.shape}")
            fixed.append(i + n if i < 0 else i)
        return tuple(fixed)
    if index is not None:
        raise ValueError(f"--loss {spec}: `{name}` is a scalar, not an array: write "
                         f"`--loss {name}`")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (float, np.floating)):
        kind = "a bool" if isinstance(value, (bool, np.bool_)) else (
            "an int" if isinstance(value, (int, np.integer)) else f"a {type(value).__name__}")
        raise ValueError(f"--loss {spec}: `{name}` is {kind} ({value!r}), and a gradient needs "
                         f"a float loss: {need}")
    return None


def cell_wording(message: str) -> str:
    """Say "notebook variable" where the compiler, seeing a function, says "argument".

    The cell program's function is ``cell`` (``~cell`` running backwards); the
    user wrote no function, so neither name should reach them.
    """
    c = r"~?" + CELL_FUNCTION
    message = re.sub(r" \(in reversible function " + c + r"\)$", "", message)
    message = re.sub(r"arguments `(\w+)` and `(\w+)` of " + c + r"\b",
                     r"notebook variables `\1` and `\2`", message)
    message = re.sub(r"argument `(\w+)` of " + c + r"\b", r"notebook variable `\1`", message)
    message = re.sub(r"`(\w+)` of " + c + r"\b", r"`\1` of the cell program", message)
    message = re.sub(r"\b(compile|in|of|to) " + c + r"\b", r"\1 the cell program", message)
    message = message.replace("(pass a copy)", "(make a copy first: `x = x.copy()`)")
    # (the debugger's step limit: the magic's flag, not revbench.debug's keyword)
    message = re.sub(r"pass a larger max_steps \(e\.g\. max_steps=(\d+)\)",
                     r"pass a larger --max-steps (e.g. %%reversible --debug --max-steps \1)",
                     message)
    message = message.replace("allocating over an argument", "allocating over it")
    return message.replace("is an argument", "is a notebook variable")


def cell_wording_syntax(exc: ReversibilitySyntaxError) -> ReversibilitySyntaxError:
    """The same static error, with the cell program's wording (see :func:`cell_wording`)."""
    return ReversibilitySyntaxError(
        cell_wording(exc.msg), exc.filename, exc.lineno,
        None if exc.offset is None else exc.offset - 1, exc.text, exc.end_lineno,
        None if exc.end_offset is None else exc.end_offset - 1, stage=getattr(exc, "stage", "check"))


# -- which names are notebook variables ------------------------------------------------


def _classify_names(cell: Cell, namespace: Mapping[str, Any],
                    strict: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(notebook variables the cell uses, in order of first use; other namespace names it uses).

    A name allocated in the cell, a loop variable or a routine's name is the
    cell's own (an ancilla or a loop variable shadows a notebook variable of the
    same name) -- except a notebook variable assigned and never deallocated, which
    is kept a notebook variable so the checker reports the assignment.  With
    ``strict``, a name that is neither the cell's, nor in the notebook, nor a
    built-in or a revbench function is an error naming it.
    """
    local = _cell_locals(cell.tree, namespace)
    called = _called_names(cell.tree)
    variables: list[str] = []
    others: list[str] = []
    for name, node in _first_uses(cell.tree).items():
        if name in local or name in (ROUTINE, INVERTED):
            continue
        if name in namespace:
            (variables if is_data(namespace[name]) else others).append(name)
        elif strict and not hasattr(builtins, name) and fn_rules.canonical(name) is None:
            from revbench.lang import suggest  # "did you mean": a typo is the likeliest cause

            if name in called:
                pure = suggest.close_function(name)
                rev = suggest.close_reversible(name, namespace)
                if pure is not None or rev is not None:
                    near = " or ".join(f"`{n}`" for n in (pure, rev) if n is not None)
                    raise cell.error(node, f"`{name}` is not defined. Did you mean {near}?")
                raise cell.error(node, f"`{name}` is not defined: define the reversible function "
                                       f"`{name}` (a %%reversible cell of `def`s) before calling it")
            known = [*local, *(k for k, v in namespace.items()
                               if isinstance(k, str) and not k.startswith("_") and is_data(v))]
            hint = suggest.did_you_mean(name, known)
            hint = f".{hint} A" if hint else ": a"
            raise cell.error(node, f"`{name}` is not defined{hint} cell program reads and updates the "
                                   f"notebook's variables, so define `{name}` in an earlier cell, "
                                   f"or allocate it here as an ancilla (`{name} = 0.0` ... "
                                   f"`del {name}`)")
    return tuple(variables), tuple(others)


def _first_uses(tree: ast.Module) -> dict[str, ast.Name]:
    """Every name the cell mentions, with its first occurrence, in reading order."""
    nodes = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Name)),
                   key=lambda n: (n.lineno, n.col_offset))
    out: dict[str, ast.Name] = {}
    for n in nodes:
        out.setdefault(n.id, n)
    return out


def _called_names(tree: ast.Module) -> set[str]:
    """Names called as functions: ``f(x)``, ``~f(x)``, ``(~f)(x)``, ``f.inverse(x)``."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.UnaryOp):
                func = func.operand
            if isinstance(func, ast.Attribute) and func.attr == "inverse":
                func = func.value
            if isinstance(func, ast.Name):
                out.add(func.id)
    return out


def _cell_locals(tree: ast.Module, namespace: Mapping[str, Any]) -> set[str]:
    """The names that belong to the cell program itself: ancillas, loop variables, routine names."""
    allocated: set[str] = set()
    in_routine: set[str] = set()
    deleted: set[str] = set()
    fixed: set[str] = set()  # loop variables and routine names

    def visit(stmts, routine: bool) -> None:
        for s in stmts:
            if isinstance(s, ast.Assign):
                for t in s.targets:
                    if isinstance(t, ast.Name):
                        (in_routine if routine else allocated).add(t.id)
            elif isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name):
                (in_routine if routine else allocated).add(s.target.id)
            elif isinstance(s, ast.Delete):
                deleted.update(t.id for t in s.targets if isinstance(t, ast.Name))
            elif isinstance(s, ast.For) and isinstance(s.target, ast.Name):
                fixed.add(s.target.id)
            if isinstance(s, ast.With):
                for item in s.items:
                    if isinstance(item.optional_vars, ast.Name):
                        fixed.add(item.optional_vars.id)
                is_routine = any(isinstance(i.context_expr, ast.Name) and i.context_expr.id == ROUTINE
                                 for i in s.items)
                visit(s.body, routine or is_routine)
            else:
                for field in ("body", "orelse"):
                    visit(getattr(s, field, None) or [], routine)

    visit(tree.body, False)
    kept = {n for n in allocated if n in deleted or not (n in namespace and is_data(namespace[n]))}
    return kept | in_routine | fixed


def _is_docstring(s: ast.stmt) -> bool:
    return isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str)


def _line(source: str, line: int | None) -> str | None:
    lines = source.splitlines()
    return lines[line - 1] if line is not None and 1 <= line <= len(lines) else None


def _cell_syntax_error(exc: SyntaxError, filename: str, source: str) -> ReversibilitySyntaxError:
    """Python's syntax error in the cell body, told in cell lines.

    The line numbers Python's message mentions ("... on line 1") are the body's:
    they are shifted to the cell's.  An indentation error points at the line's
    first character (Python's column may lie inside the indentation).
    """
    shift = FIRST_BODY_LINE - 1
    line = None if exc.lineno is None else exc.lineno + shift
    text = _line(source, line) if line else exc.text
    msg = re.sub(r"\bline (\d+)\b", lambda m: f"line {int(m.group(1)) + shift}", exc.msg or "")
    col = None if exc.offset is None else max(exc.offset - 1, 0)
    end_line = getattr(exc, "end_lineno", None)
    end_col = getattr(exc, "end_offset", None)
    end_col = None if end_col is None or end_col < 1 else end_col - 1
    if isinstance(exc, IndentationError) or (text is not None and col is not None
                                             and col >= len(text.rstrip("\n")) + 1):
        col = None if text is None else len(text) - len(text.lstrip())
        end_line = end_col = None
    if end_line is not None:
        end_line += shift
    if end_col is not None and (col is None or (end_line == line and end_col < col)):
        end_line = end_col = None
    return ReversibilitySyntaxError(msg, filename, line, col, text, end_line, end_col, stage="parse")


# -- how to fix a failed check -----------------------------------------------------------

_INVERSE_OPS = {ast.Add: SUB, ast.Sub: ADD, ast.Mult: DIV, ast.Div: MUL, ast.BitXor: XOR}


def fix_hint(exc: BaseException, place: Place | None) -> str | None:
    """Advice on the usual fix of a failed check at ``place``, read from the user's source.

    A dirty ancilla: the updates to undo before its ``del`` (the inverse
    statements, when they can be read off the block).  A branch that changes
    its own condition: give the ``if`` a postcondition.  None for other errors.
    """
    if not isinstance(exc, ReversibilityError) or place is None:
        return None
    message = str(exc)
    try:
        if message.startswith("ancilla `") and " changes at line " in message:
            return None  # the message names the statement that broke the uncompute
        if message.startswith("ancilla `"):
            return _ancilla_hint(message.split("`")[1].split("[")[0], place)
        if message.startswith("postcondition `") and "of the if statement" in message:
            quoted = message.split("`")
            return _if_hint(quoted[1], quoted[3], place)
    except Exception:  # pragma: no cover - advice is optional; the error is what matters
        return None
    return None


def _user_tree(filename: str) -> ast.Module | None:
    """The user's source of ``filename`` (a cell or a file) as an AST in its own line numbers."""
    lines = linecache.getlines(filename)
    if lines and lines[0].startswith("%%"):
        lines = ["\n", *lines[1:]]  # the magic's line: keep the numbering
    try:
        return ast.parse("".join(lines))
    except (SyntaxError, ValueError):
        return None


def _blocks(tree: ast.AST) -> Iterator[list[ast.stmt]]:
    for node in ast.walk(tree):
        for name in ("body", "orelse"):
            block = getattr(node, name, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield block


def _ancilla_hint(var: str, place: Place) -> str:
    generic = (f"to fix it, bring `{var}` back to its allocated value before `del {var}`: after "
               f"its last use, undo its updates in reverse order (`{var} -= ...` for each "
               f"`{var} += ...`), or compute it in a `with routine:` block and undo that with "
               f"`~routine`")
    tree = _user_tree(place.filename)
    if tree is None:
        return generic
    for block in _blocks(tree):
        dels = [i for i, s in enumerate(block) if isinstance(s, ast.Delete) and any(
            isinstance(t, ast.Name) and t.id == var for t in s.targets)]
        allocs = [i for i, s in enumerate(block) if isinstance(s, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == var for t in s.targets)]
        hit = [i for i in dels + allocs if block[i].lineno == place.line]
        if not hit or not dels or not allocs:
            continue
        start = max(i for i in allocs if i < dels[0]) if any(i < dels[0] for i in allocs) else None
        if start is None:
            continue
        undo = []
        for s in block[start + 1:dels[0]]:
            if not isinstance(s, ast.AugAssign) or not isinstance(s.target, ast.Name) \
                    or s.target.id != var:
                continue
            op = _INVERSE_OPS.get(type(s.op))
            if op is None:
                return generic
            undo.append(f"{var} {op} {ast.unparse(s.value)}")
        if not undo:
            return generic
        steps = "; ".join(f"`{u}`" for u in reversed(undo))
        return (f"to fix it, undo the updates of `{var}` after its last use and before "
                f"`del {var}`: {steps} (or compute it in a `with routine:` block and undo "
                f"that with `~routine`)")
    return generic


def _if_hint(post: str, cond: str, place: Place) -> str:
    changed: list[str] = []
    tree = _user_tree(place.filename)
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.If) and node.lineno == place.line:
            test = node.test.elts[0] if isinstance(node.test, ast.Tuple) and node.test.elts \
                else node.test
            read = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
            for s in ast.walk(ast.Module(body=node.body + node.orelse, type_ignores=[])):
                targets = []
                if isinstance(s, ast.AugAssign):
                    targets = [s.target]
                elif isinstance(s, ast.Assign):
                    targets = [e for t in s.targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
                elif isinstance(s, ast.Call):
                    targets = list(s.args)
                for t in targets:
                    base = t.value if isinstance(t, ast.Subscript) else t
                    if isinstance(base, ast.Name) and base.id in read and base.id not in changed:
                        changed.append(base.id)
            break
    if post != cond:
        return (f"to fix it, correct the postcondition: it must be true after the branch exactly "
                f"when `{cond}` was true before it")
    what = (f"the branch changes {', '.join(f'`{n}`' for n in changed)}, which its condition "
            f"reads: " if changed else "")
    return (f"{what}to fix it, write `if ({cond}, POST):` with a POST that is true after the "
            f"branch exactly when `{cond}` was true before it")
