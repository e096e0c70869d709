"""The tracer backend: runs the IR statement by statement and records every step.

The other backends compile a whole function; this one *interprets* it, on
the same Python/NumPy values the Python backend uses, so that a debugger can
show every step.  It runs exactly the IR the compiled code is generated from:
the forward program, then the program :mod:`revbench.transforms.invert`
derives (really executing the inverse), or, with a loss, the reverse sweep of
:mod:`revbench.transforms.adjoint` (so the adjoints are the real ones).
Expressions are turned into Python by the code generator's own expression
printer (``codegen.Emitter.x``) and compiled once per node, so they mean
exactly what they mean in generated code.  The runtime checks are those of
the generated code too, with the same messages (they go through
:func:`revbench.backends.runtime.to_user_error`).

What is recorded is small: per step, the *deltas* -- what the statement
wrote (a scalar, one element, a whole array), old and new value -- plus one
snapshot of the arguments at the start.  Nothing copies every array at every
step: :mod:`revbench.tracing` reconstructs the state at any step by applying
deltas forwards or backwards from where it last was.

A step is a tuple ``(direction, kind, frame, line, action, deltas, error, code)``;
the delta tuples are described at :data:`VAR` and below.  ``code`` is the text of
the IR statements the step executed (``t -= x * x`` on the line that reads
``t += x * x`` when the inverse runs, with the adjoint updates beside it in the
reverse sweep), printed from the very statements the tracer ran, so a debugger
can show what ran beside the line the user wrote.  A failed check
records its step with the error and stops the run (:class:`Recording` keeps
what was recorded), as the compiled code raises at that point.
"""

from __future__ import annotations

import builtins
import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import count
from typing import Any

import numpy as np

from revbench.backends import codegen, libm
from revbench.backends.runtime import (
    FLOAT_HUGE,
    FLOAT_TINY,
    INT64_MAX,
    INT64_MIN,
    SCALE_RTOL,
    TABLES,
    CheckFailed,
    CheckInfo,
    CheckTable,
    int_wrap,
    loop_extreme,
    loop_sum,
    to_user_error,
)
from revbench.lang import ir
from revbench.lang.errors import ReversibilityError, ReversibilityTypeError
from revbench.lang.text import expr_text
from revbench.lang.types import NUMPY_DTYPES, VarType
from revbench.rules.instructions import UPDATES
from revbench.transforms.invert import invert_body


class _Absent:
    """A variable that does not exist (before its allocation, after its ``del``)."""

    def __repr__(self) -> str:
        return "<absent>"


ABSENT = _Absent()

# Delta kinds.  Each delta is a tuple whose first item is its kind:
#: ``(VAR, frame, name, old, new)``: a variable bound, changed or unbound (ABSENT);
#: an array variable's value is an :class:`ArrayRef`
VAR = 0
#: ``(ELEM, slot, index, old, new, frame, name)``: one element of an array written
ELEM = 1
#: ``(WHOLE, slot, old_array, new_array, frame, name)``: a whole-array statement
WHOLE = 2
#: ``(NEWARR, slot, init)``: an array comes into being; ``init`` is a copy of its first
#: contents, or ``(shape, dtype)`` for zeros
NEWARR = 3
#: ``(ANC, frame, name, old_status, new_status)``: an ancilla's status; a status is
#: ``("live", is_clean)`` (``is_clean(variables) -> bool``), ``("freed",)`` or
#: ``("dirty", value)`` (deallocated, or failed to be, while not back at its value)
ANC = 4
#: ``(SWAPARR, slot_a, slot_b, frame, name_a, name_b)``: two arrays' contents exchanged
SWAPARR = 5

#: a generated name (loop indices of the reverse sweep, adjoints, temporaries)
GENERATED = "_rb"
ADJOINT = "_rb_adj_"

DEFAULT_MAX_STEPS = 100_000
#: keys of the tracer's check tables in ``runtime.TABLES`` (registered while a trace runs)
_TABLE_KEYS = count(1)


class ArrayRef:
    """An array variable's value in a delta: which array (slot) it is bound to."""

    __slots__ = ("slot",)

    def __init__(self, slot: int):
        self.slot = slot

    def __repr__(self) -> str:
        return f"ArrayRef({self.slot})"


class StepLimitError(RuntimeError):
    """A trace stopped because it reached its step cap (``max_steps``)."""


class Frame:
    """One activation of a reversible function in a trace: what a call-stack entry shows.

    ``id`` names the variable store: the top-level function keeps one store
    through both phases (the backward phase continues on the forward phase's
    final state), each call gets a fresh one.
    """

    __slots__ = ("call_line", "direction", "function", "id", "parent")

    def __init__(self, id: int, function: ir.Function, direction: str,
                 parent: Frame | None = None, call_line: int | None = None):
        self.id = id
        self.function = function  # the forward IR: name, file and source lines
        self.direction = direction  # forward, inverse, backward or backward-inverse
        self.parent = parent
        self.call_line = call_line

    @property
    def name(self) -> str:
        """``f``, ``~f`` (running its inverse), ``f (reverse sweep)`` for AD."""
        base = self.function.name
        if self.direction in ("inverse", "backward-inverse"):
            base = "~" + base
        return base + (" (reverse sweep)" if self.direction.startswith("backward") else "")

    @property
    def filename(self) -> str:
        return self.function.filename

    @property
    def params(self) -> tuple[str, ...]:
        return self.function.params

    def line_text(self, line: int) -> str:
        return self.function.line_text(line)

    def stack(self, line: int) -> tuple[tuple[str, int], ...]:
        """``(function, line)`` from the outermost caller to this frame at ``line``."""
        out = [(self.name, line)]
        f = self
        while f.parent is not None:
            out.append((f.parent.name, f.call_line or 0))
            f = f.parent
        return tuple(reversed(out))

    def __repr__(self) -> str:
        return f"<Frame {self.id} {self.name}>"


def function_span(func: ir.Function) -> tuple[int, int]:
    """The first (``def``) and last line of a function in its file."""
    stmts = list(ir.walk_stmts(func.body))
    first = min((s.loc.line for s in stmts if s.loc.line), default=func.firstlineno)
    last = max((max(s.loc.line, s.loc.end_line or 0) for s in stmts), default=first)
    pattern = re.compile(rf"^\s*(async\s+)?def\s+{re.escape(func.name)}\s*\(")
    for line in range(first, func.firstlineno - 1, -1):
        if pattern.match(func.line_text(line)):
            return line, last
    return func.firstlineno, last


class _Stop(BaseException):
    """Unwinds the interpreter after a failing step was recorded (not an Exception,
    so the handlers of enclosing bodies let it through)."""


class _Limit(BaseException):
    """Unwinds the interpreter at the step cap."""


_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "^": operator.xor,
}
def _wrapping(op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    return lambda a, b: int_wrap(op(a, b))


_BASE_GLOBALS = {"_rb_math": math, "_rb_np": np, "_rb_libm": libm, "_rb_loop_sum": loop_sum,
                 "_rb_loop_extreme": loop_extreme, "_rb_int_wrap": int_wrap,
                 "__builtins__": builtins.__dict__}
_ZERO = {"bool": False, "int": 0, "float": 0.0, "complex": 0j}


def _close(actual: Any, expected: Any, dtype: str, atol: float, rtol: float) -> bool:
    """As ``codegen.Emitter.close``: equal values (inf included), within tolerance, or
    both nan."""
    if dtype in ("int", "bool"):
        return bool(actual == expected)
    with np.errstate(invalid="ignore"):
        return bool(actual == expected or abs(actual - expected) <= atol + rtol * abs(expected)
                    or (actual != actual and expected != expected))


def _close_array(actual: np.ndarray, expected: Any, dtype: str, atol: float, rtol: float) -> np.ndarray:
    if dtype in ("int", "bool"):
        return actual == expected
    with np.errstate(invalid="ignore"):
        return (actual == expected) | (np.abs(actual - expected) <= atol + rtol * np.abs(expected)) \
            | (np.isnan(actual) & np.isnan(expected))


def _wrap(i: Any, n: int) -> int:
    return i if i >= 0 else i + n


_GENERATED_INDEX = re.compile(r"\[_rb_w\d+(?:, _rb_w\d+)*\]")
_ADJOINT_NAME = re.compile(r"\b_rb_adj_(\w+)")


def readable(text: str) -> str:
    """Generated names in a statement's text, as users read them: ``_rb_adj_x`` -> ``∂x``."""
    return _ADJOINT_NAME.sub(r"∂\1", _GENERATED_INDEX.sub("", text))


def stmt_text(s: ir.Stmt) -> str:
    """The text of one executed statement (``y -= 3.0 * t + x`` in an inverse)."""
    x = expr_text
    if isinstance(s, ir.Update):
        return readable(f"{x(s.target)} {s.op} {x(s.value)}")
    if isinstance(s, ir.Swap):
        return readable(f"{x(s.a)}, {x(s.b)} = {x(s.b)}, {x(s.a)}")
    if isinstance(s, ir.Alloc):
        return readable(f"{s.name} = {x(s.init)}")
    if isinstance(s, ir.Dealloc):
        return readable(f"del {s.name}")
    if isinstance(s, ir.Call):
        args = ", ".join(x(a) for a in s.args)
        return f"{'~' if s.inverted else ''}{s.func}({args})"
    if isinstance(s, ir.If):
        return f"if {x(s.pre)}" if s.pre == s.post else f"if ({x(s.pre)}, {x(s.post)})"
    if isinstance(s, ir.While):
        return f"while ({x(s.cond)}, {x(s.post)})"
    if isinstance(s, ir.For):
        bounds = [x(s.start), x(s.stop), x(s.step)]
        if bounds[2] == "1":  # as written: range(n), range(a, b)
            bounds = bounds[1:2] if bounds[0] == "0" else bounds[:2]
        rng = f"range({', '.join(bounds)})"
        return f"for {s.var} in {'reversed(' + rng + ')' if s.reverse else rng}"
    if isinstance(s, ir.Print):
        return "print(" + ", ".join(x(a) for a in s.args) + ")"
    if isinstance(s, ir.Assert):
        return f"assert {x(s.cond)}"
    return type(s).__name__


def _writes(s: ir.Stmt) -> str | None:
    """The variable a simple statement writes (None for control flow and calls)."""
    if isinstance(s, ir.Update):
        return s.target.name
    if isinstance(s, ir.Swap):
        return s.a.name
    if isinstance(s, (ir.Alloc, ir.Dealloc)):
        return s.name
    if isinstance(s, ir.For) and s.var.startswith(GENERATED):  # an elementwise loop of AD
        names = {_writes(b) for b in s.body}
        primal = [n for n in names if n is None or not n.startswith(ADJOINT)]
        return primal[0] if primal else ADJOINT
    return None


class _Run:
    """A function being executed: its variables, its frame, its ancillas' statuses."""

    __slots__ = ("V", "anc", "code", "frame")

    def __init__(self, V: dict, frame: Frame, code: _Code):
        self.V = V
        self.frame = frame
        self.code = code
        self.anc: dict[str, tuple] = {}


class _Code:
    """One function in one direction, for one signature, compiled into closures."""

    def __init__(self, tracer: Tracer, prog, direction: str, typed, check: bool,
                 atol: float, rtol: float):
        self.tracer = tracer
        self.prog = prog
        self.direction = direction
        self.typed = typed
        self.func: ir.Function = typed.func
        self.env: dict[str, VarType] = typed.env
        self.check = check
        self.atol = atol if prog.atol is None else prog.atol
        self.rtol = rtol if prog.rtol is None else prog.rtol
        self.G = dict(_BASE_GLOBALS)
        self.def_line = function_span(prog.ir)[0]
        self._em = codegen.Emitter(typed, direction, codegen.Options(check=check, wrap_ints=not check,
                                                                    backend="python"),
                                   callee_symbol=lambda call, types: "")
        self._exprs: dict[str, Any] = {}
        self.table = CheckTable(self.func.name, self.func.filename, direction)
        self.key = tracer.register_table(self.table)
        self.G["_RB_MODULE"] = self.key  # checked integer operations in expressions
        self._em.check = self.add_check  # report through this table
        self.run: Callable[[_Run], None] = _not_compiled

    def expr(self, e: ir.Expr, ew: tuple[str, ...] = ()):
        """A code object evaluating ``e`` on a variables dict (``eval(code, G, V)``)."""
        src = self._em.x(e, ew)
        code = self._exprs.get(src)
        if code is None:
            for impl, rule in self._em.user_functions.items():
                self.G[impl] = rule.user_function
            code = self._exprs[src] = compile(src, f"<revbench trace {self.func.name}>", "eval")
        return code

    def add_check(self, kind: str, variable: str, loc: ir.Loc, detail: str = "") -> int:
        self.table.checks.append(CheckInfo(kind, variable, loc.line, detail))
        self.table.source_lines[loc.line] = self.func.line_text(loc.line)
        return len(self.table.checks) - 1

    def error(self, k: int, expected: Any, actual: Any, *index: Any) -> ReversibilityError:
        return to_user_error(CheckFailed(self.key, k, expected, actual, *index))


def _refuse_subarrays(typed) -> None:
    """The debugger keeps every array of a run in a slot of its own and records changes
    per slot; a sub-array (``A[i]``, ``x[a:b]``) is a view into another slot's memory,
    which that model cannot show truthfully yet: refuse it clearly rather than show
    states that are not the program's."""
    env, func = typed.env, typed.func
    for st in ir.walk_stmts(func.body):
        exprs = []
        if isinstance(st, ir.Update):
            exprs = [st.target, st.value]
        elif isinstance(st, ir.Call):
            exprs = list(st.args)
        elif isinstance(st, (ir.Alloc, ir.Dealloc)) and st.init is not None:
            exprs = [st.init]
        elif isinstance(st, ir.Swap):
            exprs = [st.a, st.b]
        for e in exprs:
            for n in ir.walk_expr(e):
                if isinstance(n, ir.Elem) and n.name in env and ir.is_subarray(n, env[n.name].ndim):
                    raise ReversibilityTypeError(
                        f"the debugger cannot step through sub-arrays yet: `{expr_text(n)}` "
                        f"(in reversible function {func.name}, {func.filename}, line "
                        f"{st.loc.line}); run the function itself (or grad) instead, or index "
                        "single elements in loops to debug it", function=func.name,
                        filename=func.filename, lineno=st.loc.line, stage="debugger")


def _not_compiled(run: _Run) -> None:  # pragma: no cover - replaced before any run
    raise RuntimeError("internal error: a traced function ran before it was compiled")


@dataclass
class Recording:
    """What one traced run produced (see :class:`revbench.tracing.Trace`)."""

    steps: list[tuple]
    top: Frame
    turn: int | None = None
    outputs: tuple | None = None
    inputs: tuple | None = None
    gradients: tuple | None = None
    error: BaseException | None = None
    error_step: int | None = None
    params: tuple[str, ...] = field(default_factory=tuple)
    #: gradient mode: the loss, as ``(parameter position, element index or None)``
    loss: tuple[int, tuple[int, ...] | None] | None = None


class Tracer:
    """Interprets IR and records steps; one instance per traced run."""

    def __init__(self, max_steps: int = DEFAULT_MAX_STEPS, atol: float = 1e-8, rtol: float = 1e-8):
        self.steps: list[tuple] = []
        self.max_steps = max_steps
        self.direction = "forward"
        self.atol, self.rtol = atol, rtol
        self._merge: list | None = None
        self._pending: list = []
        self._codes: dict[tuple, _Code] = {}
        self._compiling: set[tuple] = set()
        self._tables: list[int] = []
        self._slots: dict[int, int] = {}
        self._keep: list[np.ndarray] = []
        self._frames = count()

    # -- bookkeeping -------------------------------------------------------------------
    def register_table(self, table: CheckTable) -> int:
        key = -next(_TABLE_KEYS)  # negative: never a generated module's key
        TABLES[key] = table
        self._tables.append(key)
        return key

    def close(self) -> None:
        """Forget the check tables (the recorded errors already carry their messages)."""
        for key in self._tables:
            TABLES.pop(key, None)
        self._tables.clear()

    def slot(self, arr: np.ndarray) -> int:
        """The slot of an array the run knows (arguments, ancillas, adjoints)."""
        return self._slots[id(arr)]

    def new_slot(self, arr: np.ndarray) -> int:
        s = len(self._keep)
        self._keep.append(arr)  # kept alive, so its id is never reused during the run
        self._slots[id(arr)] = s
        return s

    def ref(self, value: Any) -> Any:
        """A value as a delta stores it: arrays by slot, scalars as they are."""
        return ArrayRef(self._slots[id(value)]) if isinstance(value, np.ndarray) else value

    def new_frame(self, function: ir.Function, direction: str, parent: Frame | None = None,
                  call_line: int | None = None) -> Frame:
        return Frame(next(self._frames), function, direction, parent, call_line)

    # -- recording ---------------------------------------------------------------------
    def emit(self, kind: str, frame: Frame, line: int, action: str, deltas,
             error: BaseException | None = None, code: tuple[str, ...] | None = None) -> None:
        """Record a step.  ``code``: the statements it executed, as text; by default the
        action itself for a simple statement (its action is its statement's text)."""
        if code is None:
            code = (action,) if kind in _SIMPLE_KINDS else ()
        if self._pending:
            deltas = [*self._pending, *deltas]
            self._pending = []
        if self._merge is not None:
            self._merge.extend(deltas)
            if error is None:
                return
            deltas, self._merge = self._merge, None
        if error is None and len(self.steps) >= self.max_steps:
            raise _Limit  # (a failing step is always recorded)
        self.steps.append((self.direction, kind, frame, line, action, tuple(deltas), error, code))

    def fail(self, run: _Run, line: int, kind: str, action: str, error: BaseException,
             deltas=(), code: tuple[str, ...] | None = None) -> None:
        """Record the failing step with its error and stop the run."""
        self.emit(kind, run.frame, line, action, deltas, error, code)
        raise _Stop

    def check_failed(self, run: _Run, line: int, kind: str, action: str, k: int, expected: Any,
                     actual: Any, *index: Any, deltas=(), code: tuple[str, ...] | None = None) -> None:
        self.fail(run, line, kind, action, run.code.error(k, expected, actual, *index), deltas, code)

    def fail_exception(self, run: _Run, line: int, exc: Exception, deltas=()) -> None:
        """An exception of the program itself (index out of range, ...), told on the user's line."""
        f = run.frame
        if isinstance(exc, CheckFailed):  # a checked operation in an expression (overflow)
            exc = to_user_error(exc)
        if hasattr(exc, "add_note"):
            exc.add_note(f"in reversible function {f.name}, {f.filename}, line {line}: "
                         f"{f.line_text(line).strip()}")
        self.fail(run, line, "error", f"{type(exc).__name__}: {exc}", exc, deltas)

    # -- compiling -----------------------------------------------------------------------
    def code(self, prog, direction: str, signature: tuple[VarType, ...], check: bool,
             inactive: frozenset[str] = frozenset()) -> _Code:
        """``prog`` compiled for the tracer (cached; callees compiled as calls are met)."""
        key = (id(prog), direction, signature, check, inactive)
        hit = self._codes.get(key)
        if hit is not None:
            return hit
        if key in self._compiling:
            raise ReversibilityTypeError(
                f"{prog.ir.name} calls itself (directly or through other functions); recursive "
                "reversible functions are not supported", function=prog.ir.name, stage="types")
        self._compiling.add(key)
        try:
            if prog.opaque or (direction == "backward" and prog.custom_adjoint() is not None):
                c = self._opaque_top(prog, direction, signature, check, inactive)
                self._codes[key] = c
                return c
            typed = prog.typed(direction, signature, 1, inactive)
            _refuse_subarrays(typed)
            c = _Code(self, prog, direction, typed, check, self.atol, self.rtol)
            c.run = self.body(c, typed.func.body)  # compiles the callees too
            self._codes[key] = c
        finally:
            self._compiling.discard(key)
        return c

    def body(self, c: _Code, stmts: tuple[ir.Stmt, ...]) -> Callable[[_Run], None]:
        """A statement list as one closure; an exception of the program becomes its step."""
        ops: list[Callable[[_Run], None]] = []
        lines: list[int] = []
        for group in _groups(stmts):
            ops.append(self.group(c, group) if len(group) > 1 else self.stmt(c, group[0]))
            lines.append(group[0].loc.line)
        ops_t, lines_t = tuple(ops), tuple(lines)
        fail_exception = self.fail_exception

        def run_body(run: _Run) -> None:
            i = 0
            try:
                for i, op in enumerate(ops_t):  # noqa: B007 - i names the failing statement
                    op(run)
            except Exception as exc:
                fail_exception(run, lines_t[i], exc)

        return run_body

    def stmt(self, c: _Code, s: ir.Stmt) -> Callable[[_Run], None]:
        if isinstance(s, ir.For) and s.var.startswith(GENERATED):
            return self.group(c, (s,))
        return getattr(self, "s_" + type(s).__name__)(c, s)

    def group(self, c: _Code, stmts: tuple[ir.Stmt, ...]) -> Callable[[_Run], None]:
        """Statements recorded as one step: a primal statement of the reverse sweep with
        the adjoint updates beside it, or an elementwise loop of the reverse sweep."""
        ops = tuple(self.s_For(c, s) if isinstance(s, ir.For) else self.stmt(c, s) for s in stmts)
        primal = [s for s in stmts if not (_writes(s) or ADJOINT).startswith(ADJOINT)]
        main = primal[0] if primal else stmts[0]
        if isinstance(main, ir.For):
            main = next((b for b in main.body if not (_writes(b) or ADJOINT).startswith(ADJOINT)),
                        main.body[0] if main.body else main)
        kind = _KINDS.get(type(main), "update")
        line = stmts[0].loc.line
        action = stmt_text(main)
        if len(stmts) > 1 or isinstance(stmts[0], ir.For):
            action += " (with adjoints)" if primal else ""
        code = _group_code(stmts)
        tracer = self

        def run_group(run: _Run) -> None:
            if tracer._merge is not None:  # inside another group: part of its step
                for op in ops:
                    op(run)
                return
            tracer._merge = []
            try:
                for op in ops:
                    op(run)
            except Exception as exc:
                buf, tracer._merge = tracer._merge or [], None
                tracer.fail_exception(run, line, exc, buf)
            buf, tracer._merge = tracer._merge, None
            tracer.emit(kind, run.frame, line, action, buf, code=code)

        return run_group

    # -- statements ------------------------------------------------------------------------
    def s_Update(self, c: _Code, s: ir.Update) -> Callable[[_Run], None]:
        t = c.env[s.target.name]
        rule = UPDATES[s.op]
        integer = t.dtype in ("int", "bool")
        fn = _OPS[rule.int_op if integer else rule.python_op]
        if t.dtype == "int" and not c.check:  # as the Python backend: int64 wraps around
            fn = _wrapping(fn)
        name, line, action = s.target.name, s.loc.line, stmt_text(s)
        const_nonzero = isinstance(s.value, ir.Const) and s.value.value != 0
        k_zero = k_inexact = None
        if isinstance(s.target, ir.Elem) and c.check:
            alias = tuple((c.add_check("alias", expr_text(s.target), s.loc,
                                       expr_text(o)), tuple(c.expr(i) for i in o.indices))
                          for o in s.alias_checks)
        else:
            alias = ()
        if c.check and rule.nonzero_operand and not const_nonzero:
            k_zero = c.add_check("zero", expr_text(s.value), s.loc, s.op)
        if c.check and rule.nonzero_operand and integer and rule.exact_int_division:
            k_inexact = c.add_check("inexact", expr_text(s.value), s.loc,
                                    expr_text(s.target))
        if isinstance(s.target, ir.Var) and t.is_array:
            return self._whole_update(c, s, t, fn, k_zero, k_inexact)
        vcode, G, emit = c.expr(s.value), c.G, self.emit

        guard = self._update_guard(c, s, t)

        def checks(run: _Run, old: Any, val: Any) -> None:
            if k_zero is not None and val == 0:
                self.check_failed(run, line, "update", action, k_zero, 0, val)
            if k_inexact is not None and old % val != 0:
                self.check_failed(run, line, "update", action, k_inexact, old, val)
            if guard is not None:
                guard(run, old, val)

        guarded = k_zero is not None or k_inexact is not None or guard is not None
        if isinstance(s.target, ir.Var):
            def update_var(run: _Run) -> None:
                V = run.V
                val = eval(vcode, G, V)
                old = V[name]
                if guarded:
                    checks(run, old, val)
                V[name] = new = fn(old, val)
                emit("update", run.frame, line, action, ((VAR, run.frame, name, old, new),))

            return update_var
        index = self._indexer(c, s.target)
        slot = self.slot

        def update_elem(run: _Run) -> None:
            V = run.V
            arr = V[name]
            idx = index(V)
            if alias:
                self._alias(run, line, action, arr, idx, alias)
            val = eval(vcode, G, V)
            old = arr[idx]
            if guarded:
                checks(run, old, val)
            arr[idx] = fn(old, val)
            emit("update", run.frame, line, action,
                 ((ELEM, slot(arr), idx, old, arr[idx], run.frame, name),))

        return update_elem

    def _indexer(self, c: _Code, e: ir.Elem) -> Callable[[dict], tuple]:
        codes, G = tuple(c.expr(i) for i in e.indices), c.G
        if len(codes) == 1:
            (c0,) = codes
            return lambda V: (eval(c0, G, V),)
        return lambda V: tuple(eval(ci, G, V) for ci in codes)

    def _alias(self, run: _Run, line: int, action: str, arr: np.ndarray, idx: tuple,
               alias: tuple) -> None:
        G = run.code.G
        for k, codes in alias:
            other = tuple(eval(ci, G, run.V) for ci in codes)
            wa = [_wrap(i, n) for i, n in zip(idx, arr.shape)]
            if all(a == _wrap(j, n) for a, j, n in zip(wa, other, arr.shape)):
                first = wa[0] if len(wa) == 1 else tuple(wa)
                self.check_failed(run, line, "update", action, k, first, first)

    def _shape_checks(self, c: _Code, name: str, ndim: int, value: ir.Expr, loc: ir.Loc):
        """The whole-array statement's shape checks: every array it reads has its shape."""
        if not c.check:
            return ()
        others = sorted({n.name for n in ir.walk_elementwise(value)
                         if isinstance(n, ir.Var) and c.env[n.name].is_array})
        return tuple((c.add_check("shape", name, loc, o), o) for o in others)

    def _check_shapes(self, run: _Run, line: int, kind: str, action: str, name: str, checks) -> None:
        V = run.V
        target = V[name].shape
        for k, other in checks:
            for ax, n in enumerate(target):
                if V[other].shape[ax] != n:
                    self.check_failed(run, line, kind, action, k, V[other].shape[ax], n, ax)

    def _whole_update(self, c: _Code, s: ir.Update, t: VarType, fn, k_zero, k_inexact):
        """``y op= e`` on a whole array: computed elementwise, recorded as one delta."""
        name, line, action = s.target.name, s.loc.line, stmt_text(s)
        shapes = self._shape_checks(c, name, t.ndim, s.value, s.loc)
        guard = self._update_guard(c, s, t)
        vec, G = c.expr(s.value), c.G
        ew = tuple(f"_rb_trace_i{ax}" for ax in range(t.ndim))
        scalar = c.expr(s.value, ew)

        def values(V: dict, shape: tuple) -> Any:
            try:  # NumPy evaluates most expressions on whole arrays at once
                with np.errstate(all="ignore"):
                    return np.broadcast_to(eval(vec, G, V), shape)
            except (TypeError, ValueError):  # math.* functions, min/max: element by element
                pass
            out = np.empty(shape, dtype=object)
            try:
                for idx in np.ndindex(*shape):
                    V.update(zip(ew, idx))
                    out[idx] = eval(scalar, G, V)
            finally:
                for i in ew:
                    V.pop(i, None)
            return out

        def update_whole(run: _Run) -> None:
            V = run.V
            self._check_shapes(run, line, "update", action, name, shapes)
            arr = V[name]
            val = values(V, arr.shape)
            if k_zero is not None:
                zero = np.argwhere(val == 0)
                if len(zero):
                    self.check_failed(run, line, "update", action, k_zero, 0, val[tuple(zero[0])])
            if k_inexact is not None:
                bad = np.argwhere(arr % np.where(val == 0, 1, val) != 0)
                if len(bad):
                    i = tuple(bad[0])
                    self.check_failed(run, line, "update", action, k_inexact, arr[i], val[i])
            if guard is not None:
                for o, v in zip(arr.flat, np.broadcast_to(val, arr.shape).flat):
                    guard(run, o, v)
            old = arr.copy()
            arr[...] = fn(old, val)
            self.emit("update", run.frame, line, action,
                      ((WHOLE, self.slot(arr), old, arr.copy(), run.frame, name),))

        return update_whole

    def _update_guard(self, c: _Code, s: ir.Update, t: VarType):
        """The checks of generated code that an update's result can be undone (see
        ``codegen.Emitter.int_update_checked`` and ``float_scale_checked``), or ``None``."""
        if not c.check or s.op == "^=":
            return None
        line, action = s.loc.line, stmt_text(s)
        target, text = expr_text(s.target), stmt_text(s)
        if t.dtype == "int":
            sym = {"+=": "+", "-=": "-", "*=": "*", "/=": "//"}[s.op]
            exact_op, k = _OPS[sym], c.add_check("overflow", target, s.loc, f"{sym}\t{text}")

            def int_guard(run: _Run, old: Any, val: Any) -> None:
                if not INT64_MIN <= exact_op(int(old), int(val)) <= INT64_MAX:
                    self.check_failed(run, line, "update", action, k, int(old), int(val))

            return int_guard
        if s.target.name.startswith("_rb_adj"):  # adjoints are never undone
            return None
        if s.op in ("+=", "-="):
            return self._shift_guard(c, s)
        fn = _OPS[UPDATES[s.op].python_op]
        inv = _OPS[UPDATES[UPDATES[s.op].inverse].python_op]
        k_op = c.add_check("nonfinite", expr_text(s.value), s.loc, s.op) \
            if c.typed.expr_type(s.value).dtype in ("float", "complex") else None
        k_res = c.add_check("result", target, s.loc, text)

        def float_guard(run: _Run, old: Any, val: Any) -> None:
            if k_op is not None and not abs(val) < math.inf:
                self.check_failed(run, line, "update", action, k_op, 0, val)
            with np.errstate(all="ignore"):
                r = fn(old, val)
                if not (FLOAT_TINY <= abs(r) <= FLOAT_HUGE and abs(old) <= FLOAT_HUGE) \
                        and abs(old) < math.inf \
                        and not abs(inv(r, val) - old) <= SCALE_RTOL * abs(old):
                    self.check_failed(run, line, "update", action, k_res, old, r)

        return float_guard

    def _shift_guard(self, c: _Code, s: ir.Update):
        """``codegen.Emitter.float_shift_checked``: a float ``+=`` / ``-=`` by an infinite
        or nan operand, or one that overflows a finite target, cannot be undone."""
        line, action = s.loc.line, stmt_text(s)
        target, text = expr_text(s.target), stmt_text(s)
        fn = _OPS[UPDATES[s.op].python_op]
        k_op = c.add_check("nonfinite", expr_text(s.value), s.loc, s.op)
        k_res = c.add_check("result", target, s.loc, text)

        def finite(v: Any) -> bool:
            v = complex(v)
            return abs(v.real) < math.inf and abs(v.imag) < math.inf

        def shift_guard(run: _Run, old: Any, val: Any) -> None:
            with np.errstate(all="ignore"):
                r = fn(old, val)
            if not finite(r):
                if not finite(val):
                    self.check_failed(run, line, "update", action, k_op, 0, val)
                if finite(old):
                    self.check_failed(run, line, "update", action, k_res, old, r)

        return shift_guard

    def s_Swap(self, c: _Code, s: ir.Swap) -> Callable[[_Run], None]:
        line, action = s.loc.line, stmt_text(s)
        ta = c.env[s.a.name]
        if isinstance(s.a, ir.Var) and ta.is_array:
            shapes = self._shape_checks(c, s.a.name, ta.ndim, s.b, s.loc)
            a, b = s.a.name, s.b.name

            def swap_arrays(run: _Run) -> None:
                self._check_shapes(run, line, "swap", action, a, shapes)
                x, y = run.V[a], run.V[b]
                tmp = x.copy()
                x[...] = y
                y[...] = tmp
                self.emit("swap", run.frame, line, action,
                          ((SWAPARR, self.slot(x), self.slot(y), run.frame, a, b),))

            return swap_arrays
        get_a, set_a = self._accessors(c, s.a)
        get_b, set_b = self._accessors(c, s.b)

        def swap(run: _Run) -> None:
            V = run.V
            ka, va = get_a(V)
            kb, vb = get_b(V)
            d1 = set_a(run, ka, vb)
            d2 = set_b(run, kb, va)
            self.emit("swap", run.frame, line, action, (d1, d2))

        return swap

    def _accessors(self, c: _Code, t: ir.Target):
        """Read and write one scalar target; the writer returns the delta."""
        name = t.name
        if isinstance(t, ir.Var):
            def get_var(V):
                return None, V[name]

            def set_var(run, _key, value):
                old = run.V[name]
                run.V[name] = value
                return (VAR, run.frame, name, old, value)

            return get_var, set_var
        index = self._indexer(c, t)

        def get_elem(V):
            idx = index(V)
            return idx, V[name][idx]

        def set_elem(run, idx, value):
            arr = run.V[name]
            old = arr[idx]
            arr[idx] = value
            return (ELEM, self.slot(arr), idx, old, arr[idx], run.frame, name)

        return get_elem, set_elem

    def s_Alloc(self, c: _Code, s: ir.Alloc) -> Callable[[_Run], None]:
        name, line, action = s.name, s.loc.line, stmt_text(s)
        t = c.env[name]
        hidden = name.startswith(GENERATED)
        is_clean = None if hidden else self._clean_test(c, s, t)
        G = c.G
        if isinstance(s.init, ir.ArrayAlloc):
            make = self._array_maker(c, s.init, t)
        else:
            icode = c.expr(s.init)

        def alloc(run: _Run) -> None:
            V, frame = run.V, run.frame
            if t.is_array:
                arr, init = make(V)
                slot = self.new_slot(arr)
                V[name] = arr
                deltas = [(NEWARR, slot, init), (VAR, frame, name, ABSENT, ArrayRef(slot))]
            else:
                V[name] = v = eval(icode, G, V)
                deltas = [(VAR, frame, name, ABSENT, v)]
            if not hidden:
                status = ("live", is_clean)
                deltas.append((ANC, frame, name, run.anc.get(name), status))
                run.anc[name] = status
            self.emit("alloc", frame, line, action, deltas)

        return alloc

    def _array_maker(self, c: _Code, init: ir.ArrayAlloc, t: VarType):
        dtype = NUMPY_DTYPES[t.dtype]
        G = c.G
        if init.kind == "zeros":
            dims = tuple(c.expr(d) for d in init.shape)

            def zeros(V):
                shape = tuple(int(eval(d, G, V)) for d in dims)
                return np.zeros(shape, dtype=dtype), (shape, dtype)

            return zeros
        src = init.source
        if init.kind == "zeros_like":
            def zeros_like(V):
                shape = V[src].shape
                return np.zeros(shape, dtype=dtype), (shape, dtype)

            return zeros_like

        def copy(V):
            arr = V[src].copy()
            return arr, arr.copy()

        return copy

    def _clean_test(self, c: _Code, s: ir.Alloc, t: VarType) -> Callable[[dict], bool]:
        """``is_clean(variables)``: does the ancilla hold its allocation value (now)?"""
        name, atol, rtol, G = s.name, c.atol, c.rtol, c.G
        init = s.init
        if not t.is_array:
            code = c.expr(init)
            return lambda V: _close(V[name], eval(code, G, V), t.dtype, atol, rtol)
        if init.kind == "copy":
            src = init.source
            return lambda V: (V[name].shape == V[src].shape
                              and bool(np.all(_close_array(V[name], V[src], t.dtype, atol, rtol))))
        if init.kind == "zeros":
            dims = tuple(c.expr(d) for d in init.shape)
            return lambda V: (V[name].shape == tuple(eval(d, G, V) for d in dims)
                              and not np.any(V[name]))
        src = init.source
        return lambda V: V[name].shape == V[src].shape and not np.any(V[name])

    def s_Dealloc(self, c: _Code, s: ir.Dealloc) -> Callable[[_Run], None]:
        name, line, action = s.name, s.loc.line, stmt_text(s)
        ref = self.ref
        if s.discard:  # an adjoint variable the reverse sweep no longer needs
            def discard(run: _Run) -> None:
                self.emit("del", run.frame, line, action,
                          ((VAR, run.frame, name, ref(run.V.pop(name)), ABSENT),))

            return discard
        t = c.env[name]
        hidden = name.startswith(GENERATED)
        check = self._dealloc_check(c, s, t)

        def dealloc(run: _Run) -> None:
            V, frame = run.V, run.frame
            value = V[name]
            failure = None
            if c.check:
                failure = check(V)
            elif not hidden:  # unchecked code goes on; the trace still shows a dirty ancilla
                try:
                    failure = check(V)
                except Exception:
                    failure = None
            old = run.anc.get(name)
            if failure is not None:
                dirty = ("dirty", value.copy() if isinstance(value, np.ndarray) else value)
                if c.check:  # stops here, as the compiled code raises here
                    run.anc[name] = dirty
                    self.check_failed(run, line, "del", action, *failure,
                                      deltas=() if hidden else ((ANC, frame, name, old, dirty),))
                status = dirty
            else:
                status = ("freed",)
            del V[name]
            deltas = [(VAR, frame, name, ref(value), ABSENT)]
            if not hidden:
                deltas.append((ANC, frame, name, old, status))
                run.anc[name] = status
            self.emit("del", frame, line, action, deltas)

        return dealloc

    def _dealloc_check(self, c: _Code, s: ir.Dealloc, t: VarType):
        """``check(variables)``: None when the ancilla is back at its value, else the
        failed check's ``(k, expected, actual, *index)`` as the generated code raises it."""
        name, atol, rtol, G = s.name, c.atol, c.rtol, c.G
        init = s.init
        k = c.add_check("ancilla", name, s.loc)
        if not t.is_array:
            code = c.expr(init)

            def scalar(V):
                expected = eval(code, G, V)
                return None if _close(V[name], expected, t.dtype, atol, rtol) else (k, expected, V[name])

            return scalar
        ks = c.add_check("ancilla-shape", name, s.loc)
        if init.kind == "zeros":
            dims = tuple(c.expr(d) for d in init.shape)
            shape_of = lambda V: tuple(eval(d, G, V) for d in dims)
        else:
            src = init.source
            shape_of = lambda V: V[src].shape

        def array(V):
            arr = V[name]
            for ax, n in enumerate(shape_of(V)):
                if arr.shape[ax] != n:
                    return (ks, n, arr.shape[ax], ax)
            expected = V[init.source] if init.kind == "copy" else _ZERO[t.dtype]
            bad = np.argwhere(~_close_array(arr, expected, t.dtype, atol, rtol))
            if not len(bad):
                return None
            i = tuple(int(j) for j in bad[0])
            want = expected[i] if isinstance(expected, np.ndarray) else expected
            return (k, want, arr[i], *i)

        return array

    def s_Call(self, c: _Code, s: ir.Call) -> Callable[[_Run], None]:
        prog, cdir = c.prog.callee(s)
        types = tuple(c.env[a.name] if isinstance(a, ir.Var) else c.env[a.name].scalar()
                      for a in s.args)
        off: frozenset[str] = frozenset()
        if s.backward:
            written = prog.written_params()
            off = frozenset(p for p, o in zip(prog.ir.params, s.inactive) if o and p not in written)
        args = list(s.args) + ([a for a in s.adj_args if a is not None] if s.backward else [])
        written = prog.written_params()
        changes = tuple(p in written for p in prog.ir.params) + (True,) * (len(args) - len(s.args))
        specs = tuple((a.name, None if isinstance(a, ir.Var) else self._indexer(c, a), ch)
                      for a, ch in zip(args, changes))
        if prog.opaque or (cdir == "backward" and prog.custom_adjoint() is not None):
            return self._opaque_call(c, s, prog, cdir, types, off, specs)
        callee = self.code(prog, cdir, types, c.check and prog.check, off)
        alias = tuple((c.add_check("call-alias", expr_text(a), s.loc, expr_text(b)),
                       a.name, self._indexer(c, a), self._indexer(c, b))
                      for a, b in s.alias_checks) if c.check else ()
        params = callee.func.params
        line, action = s.loc.line, stmt_text(s)
        code = (action + (" (its reverse sweep)" if s.backward else ""),)

        def call(run: _Run) -> None:
            V, frame = run.V, run.frame
            for k, array, ia, ib in alias:
                arr = V[array]
                wa = [_wrap(i, n) for i, n in zip(ia(V), arr.shape)]
                if all(a == _wrap(j, n) for a, j, n in zip(wa, ib(V), arr.shape)):
                    first = wa[0] if len(wa) == 1 else tuple(wa)
                    self.check_failed(run, line, "call", action, k, first, first, code=code)
            values, elems = [], []
            for j, (name, index, _) in enumerate(specs):
                if index is None:
                    values.append(V[name])
                else:
                    idx = index(V)
                    values.append(V[name][idx])
                    elems.append((j, idx))
            child = self.new_frame(prog.ir, cdir, frame, line)
            inner = _Run(dict(zip(params, values)), child, callee)
            self.emit("enter", child, callee.def_line, f"enter {child.name} from line {line}",
                      [(VAR, child, p, ABSENT, self.ref(v)) for p, v in zip(params, values)],
                      code=code)
            callee.run(inner)
            out = inner.V
            deltas = []
            for j, (name, index, _) in enumerate(specs):
                new = out[params[j]]
                if index is None and not isinstance(new, np.ndarray) and new is not V[name]:
                    deltas.append((VAR, frame, name, V[name], new))
                    V[name] = new
            for j, idx in elems:
                name, _, changed = specs[j]
                if changed:
                    arr = V[name]
                    old = arr[idx]
                    arr[idx] = out[params[j]]
                    deltas.append((ELEM, self.slot(arr), idx, old, arr[idx], frame, name))
            self.emit("return", frame, line, f"return from {child.name} to line {line}", deltas,
                      code=code)

        return call

    def _opaque_top(self, prog, direction: str, signature: tuple[VarType, ...], check: bool,
                    inactive: frozenset[str]) -> _Code:
        """The traced function itself when its code is the user's (an external function,
        a custom adjoint's reverse sweep): one step (:meth:`_opaque_call`) on its ``def``."""
        from revbench.transforms.adjoint import DIFFERENTIABLE, adj_name

        typed = prog.typed("forward", signature)
        c = _Code(self, prog, direction, typed, check, self.atol, self.rtol)
        params = prog.ir.params
        backward = direction.startswith("backward")
        adjs = tuple(ir.Var(adj_name(p)) if backward and t.dtype in DIFFERENTIABLE and
                     p not in inactive else None for p, t in zip(params, signature))
        call = ir.Call(prog.ir.name, tuple(ir.Var(p) for p in params),
                       inverted=direction in ("inverse", "backward-inverse"), backward=backward,
                       adj_args=adjs if backward else (), loc=ir.Loc(c.def_line))
        specs = tuple((a.name, None, True) for a in (*call.args, *adjs) if a is not None)
        c.run = self._opaque_call(c, call, prog, direction, signature, inactive, specs)
        return c

    def _opaque_call(self, c: _Code, s: ir.Call, prog, cdir: str, types: tuple[VarType, ...],
                     off: frozenset[str], specs: tuple) -> Callable[[_Run], None]:
        """A call whose code is the user's, as one step: an external function (any
        direction), or the reverse sweep of a callee with a custom adjoint.  There are no
        revbench lines inside to step through, so the step runs the callee's compiled
        code (Python backend) and records what it changed."""
        check = c.check and prog.check
        compiled = prog.compile(cdir, "python", check, types, 1,
                                off if cdir.startswith("backward") else frozenset())
        rule = prog.custom_adjoint()
        line = s.loc.line
        name, params = prog.ir.name, prog.ir.params
        if prog.opaque:
            op = "+=" if cdir in ("forward", "backward-inverse") else "-="
            what = f"external: {params[0]} {op} {name}({', '.join(params[1:])})"
            if cdir.startswith("backward"):
                what += f", with its custom adjoint {rule.label}"
        else:
            what = f"its custom adjoint {rule.label}, then ~{name}"
        action = f"{stmt_text(s)} ({what})"
        code = (action,)

        def call(run: _Run) -> None:
            V, frame = run.V, run.frame
            values, before = [], []
            for name, index, _ in specs:
                v = V[name] if index is None else V[name][index(V)]
                values.append(v)
                before.append(v.copy() if isinstance(v, np.ndarray) else v)
            try:
                out = compiled.run(*values, self.atol, self.rtol)
            except CheckFailed as exc:
                self.fail_exception(run, line, exc)
            except Exception as exc:  # the user's adjoint raised: told at the call
                self.fail_exception(run, line, exc)
            deltas = []
            for (name, index, changed), old, v, new in zip(specs, before, values, out):
                if isinstance(v, np.ndarray):
                    if not np.array_equal(old, v, equal_nan=v.dtype.kind in "fc"):
                        deltas.append((WHOLE, self.slot(v), old, v.copy(), frame, name))
                elif index is None:
                    if new is not V[name]:
                        deltas.append((VAR, frame, name, V[name], new))
                        V[name] = new
                elif changed:
                    arr = V[name]
                    idx = index(V)
                    old_el = arr[idx]
                    arr[idx] = new
                    deltas.append((ELEM, self.slot(arr), idx, old_el, arr[idx], frame, name))
            self.emit("call", frame, line, action, deltas, code=code)

        return call

    def s_Block(self, c: _Code, s: ir.Block) -> Callable[[_Run], None]:
        return self.body(c, s.body)

    def s_Inverted(self, c: _Code, s: ir.Inverted) -> Callable[[_Run], None]:
        return self.body(c, invert_body(s.body))

    def s_If(self, c: _Code, s: ir.If) -> Callable[[_Run], None]:
        pre, post, G = c.expr(s.pre), c.expr(s.post), c.G
        then, orelse = self.body(c, s.then), self.body(c, s.orelse)
        needs_post = c.check and not (
            s.pre == s.post and not (ir.names_read(s.pre) & ir.names_written(s.then + s.orelse)))
        k = c.add_check("if-post", expr_text(s.post), s.loc,
                        expr_text(s.pre)) if needs_post else None
        line, header = s.loc.line, stmt_text(s)
        skipped = "else branch" if s.orelse else "skipped"

        def if_(run: _Run) -> None:
            cond = bool(eval(pre, G, run.V))
            self.emit("if", run.frame, line, f"{header}: {cond} → {'then branch' if cond else skipped}",
                      (), code=(header,))
            (then if cond else orelse)(run)
            if k is not None:
                p = bool(eval(post, G, run.V))
                if p != cond:
                    self.check_failed(run, line, "if", f"{header}: postcondition {p}", k, cond, p,
                                      code=(header,))

        return if_

    def s_While(self, c: _Code, s: ir.While) -> Callable[[_Run], None]:
        cond, post, G = c.expr(s.cond), c.expr(s.post), c.G
        body = self.body(c, s.body)
        k_entry = c.add_check("while-entry", expr_text(s.post), s.loc) if c.check else None
        k_iter = c.add_check("while-iter", expr_text(s.post), s.loc) if c.check else None
        line, header = s.loc.line, stmt_text(s)

        def while_(run: _Run) -> None:
            if k_entry is not None and eval(post, G, run.V):
                self.check_failed(run, line, "while", f"{header}: postcondition True on entry",
                                  k_entry, False, True, code=(header,))
            while True:
                go = bool(eval(cond, G, run.V))
                self.emit("while", run.frame, line, f"{header}: {go} → {'iterate' if go else 'leave'}",
                          (), code=(header,))
                if not go:
                    return
                body(run)
                if k_iter is not None and not eval(post, G, run.V):
                    self.check_failed(run, line, "while", f"{header}: postcondition False",
                                      k_iter, True, False, code=(header,))

        return while_

    def s_For(self, c: _Code, s: ir.For) -> Callable[[_Run], None]:
        start, stop, step, G = c.expr(s.start), c.expr(s.stop), c.expr(s.step), c.G
        body = self.body(c, s.body)
        var, line, header = s.var, s.loc.line, stmt_text(s)
        quiet = var.startswith(GENERATED)  # an elementwise loop of AD: part of one step
        const_step = s.step.value if isinstance(s.step, ir.Const) else None
        k_step = c.add_check("for-step", expr_text(s.step), s.loc) \
            if c.check and const_step is None else None
        bounds = []
        if c.check:
            written = ir.names_written(s.body)
            for e, what, pos in ((s.start, "start", 0), (s.stop, "stop", 1), (s.step, "step", 2)):
                if ir.names_read(e) & written:
                    bounds.append((c.add_check("for-bound", expr_text(e), s.loc, what),
                                   c.expr(e), pos))

        def for_(run: _Run) -> None:
            V, frame = run.V, run.frame
            rng = (eval(start, G, V), eval(stop, G, V), eval(step, G, V))
            if k_step is not None and rng[2] == 0:
                self.check_failed(run, line, "for", f"{header}: step 0", k_step, 1, rng[2],
                                  code=(header,))
            values = range(*rng)
            last = ABSENT
            for i in (reversed(values) if s.reverse else values):
                if quiet:
                    V[var] = i
                else:
                    old = V.get(var, ABSENT)
                    V[var] = i
                    self.emit("for", frame, line, f"{header}: {var} = {i}", ((VAR, frame, var, old, i),),
                              code=(header,))
                last = i
                body(run)
            if last is ABSENT:
                if not quiet:
                    self.emit("for", frame, line, f"{header}: no iterations", (), code=(header,))
            else:
                del V[var]
                if not quiet:  # the loop variable goes out of scope with the next step
                    self._pending.append((VAR, frame, var, last, ABSENT))
            for k, code, pos in bounds:
                now = eval(code, G, V)
                if now != rng[pos]:
                    self.check_failed(run, line, "for", f"{header}: bound changed", k, rng[pos], now,
                                      code=(header,))

        return for_

    def s_Print(self, c: _Code, s: ir.Print) -> Callable[[_Run], None]:
        parts = tuple(a if isinstance(a, str) else c.expr(a) for a in s.args)
        line, G = s.loc.line, c.G

        def print_(run: _Run) -> None:
            text = " ".join(p if isinstance(p, str) else str(eval(p, G, run.V)) for p in parts)
            self.emit("print", run.frame, line, f"print: {text}", ())

        return print_

    def s_Assert(self, c: _Code, s: ir.Assert) -> Callable[[_Run], None]:
        cond, G, line, action = c.expr(s.cond), c.G, s.loc.line, stmt_text(s)
        msg = (f"{s.message or 'assertion failed'}: `{expr_text(s.cond)}` "
               f"(in {c.func.name}, line {line})")

        def assert_(run: _Run) -> None:
            if not eval(cond, G, run.V):
                self.fail(run, line, "assert", f"{action}: False", AssertionError(msg), code=(action,))
            self.emit("assert", run.frame, line, f"{action}: True", (), code=(action,))

        return assert_

    # -- a whole run -------------------------------------------------------------------------
    def start(self, frame: Frame, code: _Code, values: tuple) -> _Run:
        """The first step: the arguments bound (the run's only snapshot of them)."""
        run = _Run({}, frame, code)
        deltas: list[tuple] = []
        for p, v in zip(frame.params, values):
            run.V[p] = v
            if isinstance(v, np.ndarray):
                slot = self.new_slot(v)
                deltas += [(NEWARR, slot, v.copy()), (VAR, frame, p, ABSENT, ArrayRef(slot))]
            else:
                deltas.append((VAR, frame, p, ABSENT, v))
        self.emit("start", frame, code.def_line, f"call {frame.name}", deltas)
        return run

    def turn(self, run: _Run, frame: Frame, code: _Code, seeds: dict[str, Any]) -> None:
        """The turning point: the backward phase takes over the forward phase's state
        (and, for AD, the adjoints of the arguments, seeded)."""
        self.direction = "backward"
        run.frame, run.code = frame, code
        deltas: list[tuple] = []
        for name, v in seeds.items():
            run.V[name] = v
            if isinstance(v, np.ndarray):
                slot = self.new_slot(v)
                deltas += [(NEWARR, slot, v.copy()), (VAR, frame, name, ABSENT, ArrayRef(slot))]
            else:
                deltas.append((VAR, frame, name, ABSENT, v))
        # the line and the words are settled by `settle_turn`, once the backward run has begun
        self.emit("turn", frame, code.def_line, f"turn: run {frame.name}", deltas)

    def settle_turn(self, turn: int, top: Frame, last_line: int, seed: str | None) -> None:
        """Put the turning point on the line where the backward run really starts.

        That is the line of the first backward step (in the traced function: a
        first step inside a call counts at its call's line), or, when the run
        recorded nothing after the turn (the step cap), the function's last line,
        where an inverse begins.
        """
        step = self.steps[turn]
        line = last_line
        if turn + 1 < len(self.steps):
            nxt = self.steps[turn + 1]
            f, line = nxt[2], nxt[3]
            while f.parent is not None and f.id != top.id:
                line, f = f.call_line or line, f.parent
        frame = step[2]
        what = "the reverse sweep" if frame.direction.startswith("backward") else frame.name
        action = (f"turning point: the forward run is over; {what} runs from line {line}"
                  + (f", with the loss's adjoint ∂{seed} seeded to 1" if seed else ""))
        self.steps[turn] = (*step[:3], line, action, *step[5:])

    def flush(self) -> None:
        """Attach deltas still pending (a loop variable going out of scope) to the last step."""
        if self._pending and self.steps:
            last = self.steps[-1]
            self.steps[-1] = (*last[:5], last[5] + tuple(self._pending), *last[6:])
        self._pending = []


def _groups(stmts: tuple[ir.Stmt, ...]) -> list[tuple[ir.Stmt, ...]]:
    """Statements recorded as one step: consecutive simple statements of one line of
    which at most one changes the program's own variables (the others being adjoint
    updates the reverse sweep adds beside it)."""
    out: list[list[ir.Stmt]] = []
    primal_in_last = False
    for s in stmts:
        w = _writes(s)
        if w is None:
            out.append([s])
            primal_in_last = True
            continue
        is_primal = not w.startswith(ADJOINT)
        prev = out[-1] if out else None
        if (prev is not None and _writes(prev[-1]) is not None and prev[-1].loc.line == s.loc.line
                and not (is_primal and primal_in_last) and _has_adjoint(prev + [s])):
            prev.append(s)
            primal_in_last = primal_in_last or is_primal
        else:
            out.append([s])
            primal_in_last = is_primal
    return [tuple(g) for g in out]


def _has_adjoint(stmts: list[ir.Stmt]) -> bool:
    return any((_writes(s) or "").startswith(ADJOINT) for s in stmts)


_KINDS = {ir.Update: "update", ir.Swap: "swap", ir.Alloc: "alloc", ir.Dealloc: "del"}
#: steps of one simple statement: their action is the statement's text
_SIMPLE_KINDS = frozenset(_KINDS.values())


def _group_code(stmts: tuple[ir.Stmt, ...]) -> tuple[str, ...]:
    """The statements a group step executes, as text: the elementwise loops of AD by
    their bodies (``readable`` drops the generated element index)."""
    out: list[str] = []
    for s in stmts:
        if isinstance(s, ir.For) and s.var.startswith(GENERATED):
            out += _group_code(tuple(s.body))
        else:
            out.append(stmt_text(s))
    return tuple(out)


def record(f, args: tuple, loss: Any = None, max_steps: int = DEFAULT_MAX_STEPS) -> Recording:
    """Run ``f`` forward then backward on copies of ``args``, recording every step.

    Errors in the arguments, the loss, or the program's types raise here, before
    anything runs; a failure while running is recorded (``Recording.error``).
    """
    from revbench.ad import _resolve_loss
    from revbench.config import get_tolerance
    from revbench.function import _python_scalar
    from revbench.transforms.adjoint import DIFFERENTIABLE, adj_name

    prog = f._program
    sig = f.signature_of(args)
    forward = f._direction
    if loss is None:
        backward = "inverse" if forward == "forward" else "forward"
    else:
        backward = "backward" if forward == "forward" else "backward-inverse"
        seed = _resolve_loss(f, loss, sig, args)
    atol, rtol = get_tolerance()
    tracer = Tracer(max_steps, atol, rtol)
    try:
        fcode = tracer.code(prog, forward, sig, prog.check)
        bcode = tracer.code(prog, backward, sig, prog.check)
        top = tracer.new_frame(prog.ir, forward)
        rec = Recording(tracer.steps, top, params=prog.ir.params,
                        loss=None if loss is None else (seed.param, seed.index))
        values = tuple(a.copy() if isinstance(a, np.ndarray) else _python_scalar(a) for a in args)
        try:
            run = tracer.start(top, fcode, values)
            fcode.run(run)
            rec.outputs = tuple(run.V[p].copy() if isinstance(run.V[p], np.ndarray)
                                else _python_scalar(run.V[p]) for p in prog.ir.params)
            seeds: dict[str, Any] = {}
            if loss is not None:
                for k, (p, t) in enumerate(zip(prog.ir.params, sig)):
                    if t.dtype in DIFFERENTIABLE:
                        v = run.V[p]
                        z = np.zeros_like(v) if t.is_array else _ZERO[t.dtype]
                        if k == seed.param:
                            if seed.index is None:
                                z = 1.0
                            else:
                                z[seed.index] = 1.0
                        seeds[adj_name(p)] = z
            tracer.turn(run, Frame(top.id, prog.ir, backward), bcode, seeds)
            rec.turn = len(tracer.steps) - 1
            bcode.run(run)
            tracer.flush()
            rec.inputs = tuple(_python_scalar(run.V[p]) if not isinstance(run.V[p], np.ndarray)
                               else run.V[p] for p in prog.ir.params)
            if loss is not None:
                rec.gradients = tuple(
                    (run.V[adj_name(p)] if t.is_array else _python_scalar(run.V[adj_name(p)]))
                    if t.dtype in DIFFERENTIABLE else None for p, t in zip(prog.ir.params, sig))
        except _Stop:
            tracer.flush()
            rec.error_step = len(tracer.steps) - 1
            rec.error = tracer.steps[-1][6]
        except _Limit:
            tracer.flush()
            rec.error_step = len(tracer.steps) - 1
            rec.error = StepLimitError(
                f"the trace of {f.__name__} stopped after max_steps={max_steps} steps, before "
                f"the program finished; pass a larger max_steps (e.g. max_steps={max_steps * 10}) "
                "to record more, or trace it on smaller inputs")
        if rec.turn is not None:
            loss_name = None
            if loss is not None:
                loss_name = prog.ir.params[seed.param] + (
                    "" if seed.index is None else f"[{', '.join(map(str, seed.index))}]")
            tracer.settle_turn(rec.turn, top, function_span(prog.ir)[1], loss_name)
        return rec
    finally:
        tracer.close()
