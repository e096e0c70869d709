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
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from revbench.ad import value_and_grad
from revbench.compiler import Program
from revbench.function import ReversibleFunction, define
from revbench.lang.check import check_function
from revbench.lang.errors import ReversibilitySyntaxError
from revbench.lang.parse import INVERTED, ROUTINE, SourceInfo, parse_definition
from revbench.rules import functions as fn_rules

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
    try:
        tree = ast.parse(body, filename)
    except SyntaxError as exc:
        line = None if exc.lineno is None else exc.lineno + FIRST_BODY_LINE - 1
        end = getattr(exc, "end_lineno", None)
        raise ReversibilitySyntaxError(
            exc.msg, filename, line, None if exc.offset is None else exc.offset - 1,
            _line(source, line) if line else exc.text,
            None if end is None else end + FIRST_BODY_LINE - 1,
            None if getattr(exc, "end_offset", None) is None else exc.end_offset - 1,
            stage="parse") from None
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


#: what to call a cell's file where people read it (the debugger's source panel):
#: ``"Cell In[5]"``, as IPython names cells; filled in by the magic
CELL_LABELS: dict[str, str] = {}


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


@dataclass
class CellProgram:
    """A cell program compiled as ``cell(*names)``, bound to the notebook variables ``names``."""

    function: ReversibleFunction
    names: tuple[str, ...]

    def values(self, namespace: MutableMapping[str, Any]) -> tuple:
        return tuple(namespace[n] for n in self.names)

    def written(self) -> frozenset[str]:
        """The notebook variables the cell may change (what a failure must restore)."""
        return self.function._program.written_params()

    def run(self, namespace: MutableMapping[str, Any], inverse: bool = False) -> None:
        """Run the cell forward (or its inverse) on the notebook's variables.

        Arrays are updated in place and scalars are written back, only when the
        whole cell succeeded: on any failure every variable is as it was before.
        """
        values = self.values(namespace)
        fn = self.function.inverse if inverse else self.function
        with restored_on_failure(values, self.names, self.written()):
            out = fn(*values)
        self._write_scalars(namespace, values, out)

    def gradients(self, namespace: MutableMapping[str, Any], loss: str | tuple,
                  inverse: bool = False) -> dict[str, Any]:
        """Run the cell, updating the notebook, and return d loss / d each float variable.

        The gradients are with respect to the variables' values at the start of
        the cell; integer and bool variables have none and are left out.
        """
        values = self.values(namespace)
        fn = self.function.inverse if inverse else self.function
        outs, grads = value_and_grad(fn, loss)(*values)  # works on copies: nothing changed yet
        for orig, new in zip(values, outs):
            if isinstance(orig, np.ndarray) and new is not orig:
                orig[...] = new
        self._write_scalars(namespace, values, outs)
        return {n: g for n, g in zip(self.names, grads) if g is not None}

    def _write_scalars(self, namespace: MutableMapping[str, Any], values: tuple, out: tuple) -> None:
        written = self.written()
        for name, orig, new in zip(self.names, values, out):
            if name in written and not isinstance(orig, np.ndarray):
                namespace[name] = orig.dtype.type(new) if isinstance(orig, np.generic) else new


@contextmanager
def restored_on_failure(values: tuple, names: tuple[str, ...], written: frozenset[str]) -> Iterator[None]:
    """Put back the arrays a failed run may have half-updated (checks on or off, any exception).

    Scalars need nothing: they are only written back after a successful run.
    """
    saved = [(a, a.copy()) for n, a in zip(names, values) if isinstance(a, np.ndarray) and n in written]
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
        checked = check_function(parse_definition(node, info, namespace))
    except ReversibilitySyntaxError as exc:
        raise cell_wording_syntax(exc) from None
    program = Program(checked, check=check, backend=backend, namespace=namespace)
    return CellProgram(ReversibleFunction(program, "forward"), names)


def parse_loss(spec: str, names: tuple[str, ...]) -> str | tuple[str, tuple[int, ...]]:
    """``--loss y`` or ``--loss r[3]`` / ``--loss A[1, 2]`` -> the ``loss=`` of :func:`value_and_grad`."""
    m = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*(?:\[([-\d\s,]+)\])?\s*", spec)
    if m is None:
        raise ValueError(f"--loss {spec}: write a variable name, or one element of an array "
                         "variable such as `r[3]` or `A[1, 2]`")
    name, index = m.group(1), m.group(2)
    if name not in names:
        uses = ", ".join(names) if names else "none"
        raise ValueError(f"--loss {name}: the cell program does not use a variable `{name}` "
                         f"(the notebook variables it uses: {uses})")
    if index is None:
        return name
    try:
        parts = tuple(int(p) for p in index.split(",") if p.strip())
    except ValueError:
        raise ValueError(f"--loss {spec}: the index must be integers, such as `r[3]`") from None
    return (name, parts)


def cell_wording(message: str) -> str:
    """Say "notebook variable" where the compiler, seeing a function, says "argument"."""
    message = re.sub(r" \(in reversible function " + CELL_FUNCTION + r"\)$", "", message)
    message = re.sub(r"arguments `(\w+)` and `(\w+)` of " + CELL_FUNCTION,
                     r"notebook variables `\1` and `\2`", message)
    message = re.sub(r"argument `(\w+)` of " + CELL_FUNCTION, r"notebook variable `\1`", message)
    message = re.sub(r"`(\w+)` of " + CELL_FUNCTION + r"\b", r"`\1` of the cell program", message)
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
            if name in called:
                raise cell.error(node, f"`{name}` is not defined: define the reversible function "
                                       f"`{name}` (a %%reversible cell of `def`s) before calling it")
            raise cell.error(node, f"`{name}` is not defined: a cell program reads and updates the "
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
