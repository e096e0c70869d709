"""The debugger's engine: walks a function's control flow, runs the generated code of
each statement, and records every step.

It runs exactly what compiled code runs: the forward program, then the program
:mod:`revbench.transforms.invert` derives (really executing the inverse), or, with a
loss, the reverse sweep of :mod:`revbench.transforms.adjoint` (so the adjoints are the
real ones).  It has no semantics of its own.  Each statement that is not control flow
(update, swap, allocation, ``del``, call, ``print``, ``assert``) and each check of a
control-flow statement (an ``if``'s postcondition, a ``while``'s entry and iteration
checks, a ``for``'s bounds) runs the code generator's own code for it, generated for
the Python backend as a small function and compiled once per IR node
(:class:`~revbench.backends.codegen.Fragment`).  So the debugger steps through
everything the compiler accepts (sub-arrays included), computes what compiled code
computes, and a failed check raises the generated code's ``CheckFailed``, told with the
compiled code's message (:func:`~revbench.backends.runtime.to_user_error`, through the
run's own check table).  The conditions of ``if`` and ``while`` and the indices of what
a statement writes are the emitter's expressions (``Emitter.x``), compiled the same way.

What is left here is the walker: which branch, which iteration and in which order; a
call enters the callee's traced code between an ``enter`` and a ``return`` step (except
an external function or a custom adjoint, whose code is the user's: one step); the
step cap and the turning point.  It records the steps of
:mod:`revbench.backends.trace_data`: what each statement wrote, read before and after
its code runs (a scalar, an element, an array or sub-array that changed), so no step
copies the whole state.  A failed check records its step with the error and stops the
run, as the compiled code raises at that point.
"""

from __future__ import annotations

import builtins
import math
import re
from collections.abc import Callable
from itertools import count
from typing import Any

import numpy as np

from revbench.backends import codegen, libm
from revbench.backends.runtime import (
    TABLES,
    CheckFailed,
    CheckTable,
    complex_pow,
    loop_extreme,
    loop_sum,
    safe_abs,
    to_user_error,
)
from revbench.backends.trace_data import (
    ABSENT,
    ADJOINT,
    DEFAULT_MAX_STEPS,
    GENERATED,
    AncillaDelta,
    ArrayRef,
    ElemDelta,
    Frame,
    NewArray,
    NewView,
    Recording,
    StepLimitError,
    StepRecord,
    SwapDelta,
    VarDelta,
    WholeDelta,
    function_span,
)
from revbench.lang import ir
from revbench.lang.errors import ReversibilityTypeError
from revbench.lang.text import MESSAGES
from revbench.lang.types import VarType
from revbench.rules.instructions import ADD, SUB
from revbench.transforms.invert import invert_body
from revbench.transforms.pipeline import BACKWARD, FORWARD, Direction

#: keys of the tracer's check tables in ``runtime.TABLES`` (registered while a trace runs)
_TABLE_KEYS = count(1)
#: what a ``for`` loop's check after it is given: the bounds it started with
_BOUNDS = ("_rb_start", "_rb_stop", "_rb_step")


class _Stop(BaseException):
    """Unwinds the walker after a failing step was recorded (not an Exception, so the
    handlers of enclosing bodies, and generated code, let it through)."""


class _Limit(BaseException):
    """Unwinds the walker at the step cap."""


#: what generated code finds in its module (``Emitter.imports``), and the sums the
#: expressions the walker evaluates itself call (``Emitter.x`` outside a statement)
_BASE_GLOBALS = {"_rb_math": math, "_rb_np": np, "_rb_libm": libm, "_rb_loop_sum": loop_sum,
                 "_rb_loop_extreme": loop_extreme,
                 "_rb_cpow": complex_pow, "abs": safe_abs,
                 "_RbCheckFailed": CheckFailed, "__builtins__": builtins.__dict__}
_ZERO = {"bool": False, "int": 0, "float": 0.0, "complex": 0j}

_GENERATED_INDEX = re.compile(r"\[_rb_w\d+(?:, _rb_w\d+)*\]")
_ADJOINT_NAME = re.compile(rf"\b{ir.ADJOINT_PREFIX}(\w+)")


def readable(text: str) -> str:
    """Generated names in a statement's text, as users read them: ``_rb_adj_x`` -> ``∂x``."""
    return _ADJOINT_NAME.sub(r"∂\1", _GENERATED_INDEX.sub("", text))


def stmt_text(s: ir.Stmt) -> str:
    """The text of one executed statement (``y -= (3.0 * t) + x`` in an inverse)."""
    return readable(MESSAGES.stmt(s))


def _writes(s: ir.Stmt) -> str | None:
    """The variable a simple statement writes (None for control flow and calls)."""
    names = ir.simple_writes(s)
    if names:
        return names[0]
    if isinstance(s, ir.For) and s.var.startswith(GENERATED):  # an elementwise loop of AD
        names = {_writes(b) for b in s.body}
        primal = [n for n in names if n is None or not n.startswith(ADJOINT)]
        return primal[0] if primal else ADJOINT
    return None


def _copy(value: Any) -> Any:
    return value.copy() if isinstance(value, np.ndarray) else value


def _same(old: np.ndarray, new: np.ndarray) -> bool:
    return bool(np.array_equal(old, new, equal_nan=new.dtype.kind in "fc"))


class _Run:
    """A function being executed: its variables, its frame, its ancillas' statuses."""

    __slots__ = ("V", "anc", "code", "frame")

    def __init__(self, V: dict, frame: Frame, code: _Code):
        self.V = V
        self.frame = frame
        self.code = code
        self.anc: dict[str, tuple] = {}


#: ``taken = place(run)`` reads what a statement may write, before it runs;
#: ``taken()`` afterwards gives the delta (None: an array that did not change)
Place = Callable[[_Run], Callable[[], tuple | None]]


class _Code:
    """One function in one direction, for one signature: the generated code of its
    statements (compiled once each) behind the walker's closures, and its check table."""

    def __init__(self, tracer: Tracer, prog, direction: Direction, typed, check: bool):
        self.tracer = tracer
        self.prog = prog
        self.func: ir.Function = typed.func
        self.env: dict[str, VarType] = typed.env
        self.check = check
        self.def_line = function_span(prog.ir)[0]
        opts = codegen.Options(check=check, atol=prog.atol, rtol=prog.rtol, backend="python")
        self.em = codegen.Emitter(typed, direction, opts, self.callee_symbol, prog.callee_writes)
        #: the emitter of the checks an ancilla's ``del`` makes, which tell whether it is
        #: clean (back at its value) even where the code itself does not check
        self.probe = self.em if check else codegen.Emitter(
            typed, direction, codegen.Options(check=True, atol=prog.atol, rtol=prog.rtol,
                                              backend="python"), self.callee_symbol)
        lines = range(self.func.firstlineno, self.func.firstlineno + len(self.func.source_lines))
        self.table = CheckTable(self.func.name, self.func.filename, direction.name, self.em.checks,
                                source_lines={ln: self.func.line_text(ln) for ln in lines})
        self.key = tracer.register_table(self.table)
        self.G = {**_BASE_GLOBALS, "_RB_MODULE": self.key}
        self.where = f"<revbench trace {self.func.name}>"
        self._exprs: dict[str, Any] = {}
        #: the callee of the call statement being generated: (program, direction, code)
        self.called: tuple | None = None
        self.run: Callable[[_Run], None] = _not_compiled

    def _globals(self, em: codegen.Emitter) -> dict:
        for impl, rule in em.user_functions.items():
            self.G[impl] = rule.user_function
        return self.G

    def expr(self, e: ir.Expr) -> Any:
        """A code object evaluating ``e`` on a variables dict (``eval(code, G, V)``)."""
        return self.source(self.em.x(e))

    def source(self, src: str) -> Any:
        code = self._exprs.get(src)
        if code is None:
            self._globals(self.em)
            code = self._exprs[src] = compile(src, self.where, "eval")
        return code

    def runner(self, frag: codegen.Fragment, em: codegen.Emitter | None = None,
               **bound: Any) -> Callable[..., tuple]:
        """``run(V, *extra)``: the fragment run on the variables ``V`` (its ``extra``
        values given), returning what it returns; ``bound``: globals of its own."""
        fn, params = self.load(frag, em, **bound), frag.params
        atol, rtol = self.tracer.atol, self.tracer.rtol

        def run(V: dict, *extra: Any) -> tuple:
            return fn(*[V[p] for p in params], *extra, atol, rtol)

        return run

    def load(self, frag: codegen.Fragment, em: codegen.Emitter | None = None, **bound: Any):
        ns = {**self._globals(em or self.em), **bound}
        exec(compile(frag.source, self.where, "exec"), ns)
        return ns[frag.name]

    def checks(self, s: ir.Stmt, emit: Callable[[], Any], exprs: tuple,
               extra: tuple[str, ...] = ()) -> Callable[..., tuple] | None:
        """The checks (or the bounds) of a control-flow statement that ``emit`` writes, as
        ``run(V, *extra)``; None where there is nothing to check or compute."""
        before = len(self.em.checks)
        names = set().union(*map(ir.names_used, exprs))
        frag = self.em.fragment("_rb_check", names, emit, s.loc, extra)
        if len(self.em.checks) == before and not frag.returns:
            return None
        return self.runner(frag)

    def callee_symbol(self, call: ir.Call, types: tuple[VarType, ...]) -> str:
        """For the emitter: compile the callee for the tracer (an external function or a
        custom adjoint: its compiled code), remembered in :attr:`called`."""
        prog, cdir = self.prog.callee(call)
        check = self.check and prog.check
        off: frozenset[str] = frozenset()
        if call.backward:
            written = prog.written_params()
            off = frozenset(p for p, o in zip(prog.ir.params, call.inactive) if o and p not in written)
        if _opaque(prog, cdir):
            code: Any = prog.compile(cdir, "python", check, types, 1, off if cdir.sweep else frozenset())
        else:
            code = self.tracer.code(prog, cdir, types, check, off)
        self.called = (prog, cdir, code)
        return "_rb_callee"


def _opaque(prog, direction: Direction) -> bool:
    """Whether a function runs as one step: its code is the user's (an external function,
    a custom adjoint's reverse sweep), with no revbench lines to step through."""
    return prog.opaque or (direction == BACKWARD and prog.custom_adjoint() is not None)


def _not_compiled(run: _Run) -> None:  # pragma: no cover - replaced before any run
    raise RuntimeError("internal error: a traced function ran before it was compiled")


class Tracer:
    """Walks the control flow of IR, runs the generated code of its statements and
    records steps; one instance per traced run."""

    def __init__(self, max_steps: int = DEFAULT_MAX_STEPS, atol: float = 1e-8, rtol: float = 1e-8):
        self.steps: list[StepRecord] = []
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

    def slot(self, arr: np.ndarray, deltas: list | None = None) -> int:
        """The slot of an array of the run; a sub-array met for the first time (a view
        passed to a call) gets one, over its array's, told by a delta in ``deltas``."""
        s = self._slots.get(id(arr))
        if s is None:
            if deltas is None or arr.base is None or id(arr.base) not in self._slots:
                raise RuntimeError(f"internal error: an array the trace does not know: {arr!r}")
            base = arr.base
            s = self.new_slot(arr)
            offset = arr.__array_interface__["data"][0] - base.__array_interface__["data"][0]
            deltas.append(NewView(s, self._slots[id(base)], offset, arr.shape, arr.strides))
        return s

    def new_slot(self, arr: np.ndarray) -> int:
        s = len(self._keep)
        self._keep.append(arr)  # kept alive, so its id is never reused during the run
        self._slots[id(arr)] = s
        return s

    def ref(self, value: Any, deltas: list | None = None) -> Any:
        """A value as a delta stores it: arrays by slot, scalars as they are."""
        return ArrayRef(self.slot(value, deltas)) if isinstance(value, np.ndarray) else value

    def bind(self, frame: Frame, name: str, value: Any, deltas: list, copy: bool = False) -> None:
        """Deltas binding a new variable (an argument, a seed, an ancilla); ``copy``: a new
        array that gets a slot of its own, recorded with its contents."""
        if isinstance(value, np.ndarray) and copy:
            slot = self.new_slot(value)
            deltas.append(NewArray(slot, value.copy()))
        deltas.append(VarDelta(frame, name, ABSENT, self.ref(value, deltas)))

    def new_frame(self, function: ir.Function, direction: Direction, parent: Frame | None = None,
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
        self.steps.append(StepRecord(self.direction, kind, frame, line, action, tuple(deltas),
                                     error, code))

    def fail(self, run: _Run, line: int, kind: str, action: str, error: BaseException,
             deltas=(), code: tuple[str, ...] | None = None) -> None:
        """Record the failing step with its error and stop the run."""
        self.emit(kind, run.frame, line, action, deltas, error, code)
        raise _Stop

    def check_failed(self, run: _Run, line: int, kind: str, action: str, exc: CheckFailed,
                     deltas=(), code: tuple[str, ...] | None = None) -> None:
        """A check of the generated code failed: the step, with the compiled code's error."""
        self.fail(run, line, kind, action, to_user_error(exc), deltas, code)

    def fail_exception(self, run: _Run, line: int, exc: Exception, deltas=()) -> None:
        """An exception of the program itself (index out of range, ...), told on the user's line."""
        f = run.frame
        if isinstance(exc, CheckFailed):  # a checked operation in an expression (overflow)
            exc = to_user_error(exc)
        if hasattr(exc, "add_note"):
            exc.add_note(ir.where(f.name, f.filename, line, f.line_text(line).strip()))
        self.fail(run, line, "error", f"{type(exc).__name__}: {exc}", exc, deltas)

    # -- compiling -----------------------------------------------------------------------
    def code(self, prog, direction: Direction, signature: tuple[VarType, ...], check: bool,
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
            if _opaque(prog, direction):
                c = self._opaque_top(prog, direction, signature, check, inactive)
            else:
                c = _Code(self, prog, direction, prog.typed(direction, signature, 1, inactive), check)
                c.run = self.body(c, c.func.body)  # compiles the callees too
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

    # -- what a statement writes, read before and after it runs ---------------------------
    def place(self, c: _Code, t: ir.Target) -> Place:
        """Target ``t`` as a :data:`Place`: a scalar variable, an element, or an array or
        sub-array (recorded when it changed)."""
        name = t.name
        if isinstance(t, ir.Elem) and not c.em.is_view(t):
            index = self._indexer(c, t)

            def element(run: _Run) -> Callable[[], tuple]:
                arr = run.V[name]
                idx = index(run.V)
                old = arr[idx]
                return lambda: ElemDelta(self.slot(arr), idx, old, arr[idx], run.frame, name)

            return element
        key = self._key(c, t) if isinstance(t, ir.Elem) else None

        def value(run: _Run) -> Callable[[], tuple | None]:
            v = run.V[name]
            if not isinstance(v, np.ndarray):
                return lambda: VarDelta(run.frame, name, v, run.V[name])
            k = ... if key is None else key(run.V)
            part = v[k]
            old = part.copy()
            return lambda: None if _same(old, part) else WholeDelta(
                self.slot(v), old, part.copy(), run.frame, name, k)

        return value

    def _indexer(self, c: _Code, e: ir.Elem) -> Callable[[dict], tuple]:
        codes, G = tuple(c.expr(i) for i in e.indices), c.G
        if len(codes) == 1:
            (c0,) = codes
            return lambda V: (eval(c0, G, V),)
        return lambda V: tuple(eval(ci, G, V) for ci in codes)

    def _key(self, c: _Code, e: ir.Elem) -> Callable[[dict], tuple]:
        """The NumPy index of sub-array ``e`` (ints and slices), as the code computes it."""
        fixed, spans = c.em.view_parts(e)
        it, steps = iter(spans), iter(c.em.view_steps(e))
        parts = [code if code is not None else "slice({}, {}, {})".format(*next(it), next(steps))
                 for code in fixed]
        code, G = c.source("(" + ", ".join(parts) + ",)"), c.G
        return lambda V: eval(code, G, V)

    def statement(self, c: _Code, s: ir.Stmt, kind: str | None, frag: codegen.Fragment | None = None,
                  code: tuple[str, ...] | None = None, **bound: Any) -> Callable[[_Run], None]:
        """``run_statement(run)``: the generated code of ``s`` (``frag``, else
        ``Emitter.statement_fragment``) on the run's variables, which it updates; with a
        ``kind``, a failed check is that step, with the compiled code's error.  ``bound``:
        globals of the code's own (a call's callee)."""
        frag = frag or c.em.statement_fragment(s)
        fn, params, returns = c.load(frag, **bound), frag.params, frag.returns
        atol, rtol, line, action = self.atol, self.rtol, s.loc.line, stmt_text(s)

        def run_statement(run: _Run) -> None:
            V = run.V
            try:
                V.update(zip(returns, fn(*[V[p] for p in params], atol, rtol)))
            except CheckFailed as exc:
                if kind is None:
                    raise
                self.check_failed(run, line, kind, action, exc, code=code)

        return run_statement

    def leaf(self, c: _Code, s: ir.Stmt, kind: str, places: list[Place]) -> Callable[[_Run], None]:
        """A statement as one step: its code run, what it wrote recorded."""
        run_statement = self.statement(c, s, kind)
        line, action = s.loc.line, stmt_text(s)

        def run_leaf(run: _Run) -> None:
            taken = [p(run) for p in places]
            run_statement(run)
            self.emit(kind, run.frame, line, action, [d for t in taken if (d := t()) is not None])

        if len(places) != 1:
            return run_leaf
        (place,) = places  # most statements: the same, without the lists

        def run_one(run: _Run) -> None:
            taken = place(run)
            run_statement(run)
            d = taken()
            self.emit(kind, run.frame, line, action, () if d is None else (d,))

        return run_one

    # -- statements ------------------------------------------------------------------------
    def s_Update(self, c: _Code, s: ir.Update) -> Callable[[_Run], None]:
        return self.leaf(c, s, "update", [self.place(c, s.target)])

    def s_Swap(self, c: _Code, s: ir.Swap) -> Callable[[_Run], None]:
        if not (isinstance(s.a, ir.Var) and c.env[s.a.name].is_array):
            return self.leaf(c, s, "swap", [self.place(c, s.a), self.place(c, s.b)])
        run_statement = self.statement(c, s, "swap")
        line, action, a, b = s.loc.line, stmt_text(s), s.a.name, s.b.name

        def swap_arrays(run: _Run) -> None:  # recorded as an exchange, not as two copies
            run_statement(run)
            self.emit("swap", run.frame, line, action, (SwapDelta(
                self.slot(run.V[a]), self.slot(run.V[b]), run.frame, a, b),))

        return swap_arrays

    def s_Alloc(self, c: _Code, s: ir.Alloc) -> Callable[[_Run], None]:
        name, line, action = s.name, s.loc.line, stmt_text(s)
        run_statement = self.statement(c, s, "alloc")
        is_clean = None if name.startswith(GENERATED) else self._clean_test(c, s.name, s.init, s.loc)
        zeros = isinstance(s.init, ir.ArrayAlloc) and s.init.kind != "copy"

        def alloc(run: _Run) -> None:
            V, frame = run.V, run.frame
            run_statement(run)
            v = V[name]
            deltas: list = []
            if isinstance(v, np.ndarray):
                slot = self.new_slot(v)
                deltas.append(NewArray(slot, (v.shape, v.dtype) if zeros else v.copy()))
            deltas.append(VarDelta(frame, name, ABSENT, self.ref(v)))
            if is_clean is not None:
                status = ("live", is_clean)
                deltas.append(AncillaDelta(frame, name, run.anc.get(name), status))
                run.anc[name] = status
            self.emit("alloc", frame, line, action, deltas)

        return alloc

    def _clean_test(self, c: _Code, name: str, init: ir.Expr, loc: ir.Loc) -> Callable[[dict], bool]:
        """``is_clean(variables)``: is the ancilla back at its allocation value (now)?  The
        checks its ``del`` makes, generated with checks on, run on the variables."""
        run = c.runner(c.probe.statement_fragment(ir.Dealloc(name, init, loc)), c.probe)

        def is_clean(V: dict) -> bool:
            try:
                with np.errstate(all="ignore"):  # (also asked later, by the replay)
                    run(V)
            except CheckFailed:
                return False
            return True

        return is_clean

    def s_Dealloc(self, c: _Code, s: ir.Dealloc) -> Callable[[_Run], None]:
        name, line, action = s.name, s.loc.line, stmt_text(s)
        run_statement = self.statement(c, s, None)
        hidden = name.startswith(GENERATED)  # adjoints and temporaries: no ancilla status
        # unchecked code goes on past a dirty ancilla; the trace still shows it dirty
        is_clean = None if hidden or c.check else self._clean_test(c, s.name, s.init, s.loc)

        def dealloc(run: _Run) -> None:
            V, frame = run.V, run.frame
            value, old = V[name], run.anc.get(name)
            try:
                run_statement(run)
            except CheckFailed as exc:  # stops here, as the compiled code raises here
                dirty = ("dirty", _copy(value))
                run.anc[name] = dirty
                self.check_failed(run, line, "del", action, exc,
                                  () if hidden else (AncillaDelta(frame, name, old, dirty),))
            clean = True
            if is_clean is not None:
                try:
                    clean = is_clean(V)
                except Exception:  # what the value reads is gone: nothing to tell
                    pass
            status = ("freed",) if clean else ("dirty", _copy(value))
            del V[name]
            deltas: list = [VarDelta(frame, name, self.ref(value), ABSENT)]
            if not hidden:
                deltas.append(AncillaDelta(frame, name, old, status))
                run.anc[name] = status
            self.emit("del", frame, line, action, deltas)

        return dealloc

    def s_Call(self, c: _Code, s: ir.Call) -> Callable[[_Run], None]:
        """A call: the statement's code (alias checks, element arguments copied in and
        back, sub-arrays passed as views) with the callee stepped into, between an
        ``enter`` and a ``return`` step."""
        frag = c.em.statement_fragment(s)  # (compiles the callee: c.called)
        prog, cdir, callee = c.called
        if not isinstance(callee, _Code):
            return self._opaque(c, s, prog, cdir, self.statement(c, s, None, frag, _rb_callee=callee.run),
                                [self.place(c, a) for a, changed in c.em.call_arguments(s) if changed])
        line, text = s.loc.line, stmt_text(s)
        code = (text + (" (its reverse sweep)" if s.backward else ""),)
        caller: list[_Run] = []  # the run the call is made from, while it is made
        extra = len(c.em.EXTRA_PARAMS)  # (the tolerances, after the arguments)
        run_statement = self.statement(c, s, "call", frag, code,
                                       _rb_callee=lambda *args: enter(caller[-1], *args[:-extra]))
        # what the return step shows: the scalars and elements written back (arrays and
        # sub-arrays change in the callee's own steps)
        places = [self.place(c, a) for a, changed in c.em.call_arguments(s) if changed
                  and not (c.em.is_view(a) or (isinstance(a, ir.Var) and c.env[a.name].is_array))]
        params, callee_name = callee.func.params, Frame(-1, prog.ir, cdir).name

        def enter(run: _Run, *values: Any) -> tuple:
            child = self.new_frame(prog.ir, cdir, run.frame, line)
            deltas: list = []
            for p, v in zip(params, values):
                self.bind(child, p, v, deltas)
            self.emit("enter", child, callee.def_line, f"enter {child.name} from line {line}",
                      deltas, code=code)
            inner = _Run(dict(zip(params, values)), child, callee)
            callee.run(inner)
            return tuple(inner.V[p] for p in params)

        def call(run: _Run) -> None:
            taken = [p(run) for p in places]
            caller.append(run)
            try:
                run_statement(run)  # (its alias checks fail before it enters)
            finally:
                caller.pop()
            self.emit("return", run.frame, line, f"return from {callee_name} to line {line}",
                      [d for d in (t() for t in taken) if d is not None], code=code)

        return call

    def _opaque_top(self, prog, direction: Direction, signature: tuple[VarType, ...], check: bool,
                    inactive: frozenset[str]) -> _Code:
        """The traced function itself when its code is the user's (an external function,
        a custom adjoint's reverse sweep): one step (:meth:`_opaque`) on its ``def``."""
        from revbench.transforms.adjoint import DIFFERENTIABLE, adj_name

        c = _Code(self, prog, direction, prog.typed(FORWARD, signature), check)
        params = prog.ir.params
        adjs = tuple(ir.Var(adj_name(p)) if direction.sweep and t.dtype in DIFFERENTIABLE and
                     p not in inactive else None for p, t in zip(params, signature))
        call = ir.Call(prog.ir.name, tuple(ir.Var(p) for p in params), inverted=direction.inverse,
                       backward=direction.sweep, adj_args=adjs if direction.sweep else (),
                       loc=ir.Loc(c.def_line))
        names = (*params, *(a.name for a in adjs if a is not None))
        compiled = prog.compile(direction, "python", check, signature, 1,
                                inactive if direction.sweep else frozenset())
        atol, rtol = self.atol, self.rtol

        def run_compiled(run: _Run) -> None:
            run.V.update(zip(names, compiled.run(*[run.V[n] for n in names], atol, rtol)))

        c.run = self._opaque(c, call, prog, direction, run_compiled,
                             [self.place(c, ir.Var(n)) for n in names])
        return c

    def _opaque(self, c: _Code, s: ir.Call, prog, cdir: Direction, run_call: Callable[[_Run], None],
                places: list[Place]) -> Callable[[_Run], None]:
        """A call whose code is the user's, as one step: an external function (any
        direction), or the reverse sweep of a callee with a custom adjoint, run compiled
        (Python backend); the step records what it changed."""
        rule = prog.custom_adjoint()
        line = s.loc.line
        name, params = prog.ir.name, prog.ir.params
        own = prog.opaque_text(cdir)
        if own is not None:
            what = own
        elif prog.opaque:
            op = SUB if cdir.inverse != cdir.sweep else ADD  # (a sweep runs it backwards)
            what = f"external: {params[0]} {op} {name}({', '.join(params[1:])})"
            if cdir.sweep:
                what += f", with its custom adjoint {rule.label}"
        else:
            what = f"its custom adjoint {rule.label}, then ~{name}"
        action = f"{stmt_text(s)} ({what})"

        def call(run: _Run) -> None:
            taken = [p(run) for p in places]
            try:
                run_call(run)
            except Exception as exc:  # a check of its code, or the user's code raised
                self.fail_exception(run, line, exc)
            self.emit("call", run.frame, line, action,
                      [d for d in (t() for t in taken) if d is not None], code=(action,))

        return call

    def s_Block(self, c: _Code, s: ir.Block) -> Callable[[_Run], None]:
        return self.body(c, s.body)

    def s_Inverted(self, c: _Code, s: ir.Inverted) -> Callable[[_Run], None]:
        return self.body(c, invert_body(s.body))

    def control_check(self, c: _Code, s: ir.If | ir.While | ir.For, emit: Callable[[], Any],
                      exprs: tuple, failed: str, extra: tuple[str, ...] = ()):
        """``run_check(run, *extra)``: a check of a control-flow statement that the emitter
        writes with ``emit`` (or its bounds, which it returns); a failure is the statement's
        step, ``failed`` (formatted with the failing value) saying what failed."""
        run_fragment = c.checks(s, emit, exprs, extra)
        if run_fragment is None:
            return lambda run, *extra: None
        kind, line, header = type(s).__name__.lower(), s.loc.line, stmt_text(s)

        def run_check(run: _Run, *extra: Any) -> Any:
            try:
                return run_fragment(run.V, *extra)
            except CheckFailed as exc:
                self.check_failed(run, line, kind, f"{header}: {failed.format(exc.args[3])}", exc,
                                  code=(header,))

        return run_check

    def s_If(self, c: _Code, s: ir.If) -> Callable[[_Run], None]:
        pre, G = c.expr(s.pre), c.G
        then, orelse = self.body(c, s.then), self.body(c, s.orelse)
        post = self.control_check(c, s, lambda: c.em.if_post_check(s, "_rb_c"), (s.post,),
                                  "postcondition {}", ("_rb_c",)) if c.em.needs_post(s) else None
        line, header = s.loc.line, stmt_text(s)
        skipped = "else branch" if s.orelse else "skipped"

        def if_(run: _Run) -> None:
            cond = bool(eval(pre, G, run.V))
            self.emit("if", run.frame, line, f"{header}: {cond} → {'then branch' if cond else skipped}",
                      (), code=(header,))
            (then if cond else orelse)(run)
            if post is not None:
                post(run, cond)

        return if_

    def s_While(self, c: _Code, s: ir.While) -> Callable[[_Run], None]:
        cond, G = c.expr(s.cond), c.G
        body = self.body(c, s.body)
        entry = self.control_check(c, s, lambda: c.em.while_entry_check(s), (s.post,),
                                   "postcondition {} on entry")
        after = self.control_check(c, s, lambda: c.em.while_iter_check(s), (s.post,),
                                   "postcondition {}")
        line, header = s.loc.line, stmt_text(s)

        def while_(run: _Run) -> None:
            entry(run)
            while True:
                go = bool(eval(cond, G, run.V))
                self.emit("while", run.frame, line, f"{header}: {go} → {'iterate' if go else 'leave'}",
                          (), code=(header,))
                if not go:
                    return
                body(run)
                after(run)

        return while_

    def s_For(self, c: _Code, s: ir.For) -> Callable[[_Run], None]:
        bound_exprs = (s.start, s.stop, s.step)
        bounds = self.control_check(c, s, lambda: c.em.for_bounds(s), bound_exprs, "step {}")
        after = self.control_check(c, s, lambda: c.em.for_bound_checks(s, _BOUNDS), bound_exprs,
                                   "bound changed", _BOUNDS)
        body = self.body(c, s.body)
        var, line, header = s.var, s.loc.line, stmt_text(s)
        quiet = var.startswith(GENERATED)  # an elementwise loop of AD: part of one step

        def for_(run: _Run) -> None:
            V, frame = run.V, run.frame
            rng = bounds(run)
            values = range(*rng)
            last = ABSENT
            for i in (reversed(values) if s.reverse else values):
                if quiet:
                    V[var] = i
                else:
                    old = V.get(var, ABSENT)
                    V[var] = i
                    self.emit("for", frame, line, f"{header}: {var} = {i}",
                              (VarDelta(frame, var, old, i),), code=(header,))
                last = i
                body(run)
            if last is ABSENT:
                if not quiet:
                    self.emit("for", frame, line, f"{header}: no iterations", (), code=(header,))
            else:
                del V[var]
                if not quiet:  # the loop variable goes out of scope with the next step
                    self._pending.append(VarDelta(frame, var, last, ABSENT))
            after(run, *rng)

        return for_

    def s_Print(self, c: _Code, s: ir.Print) -> Callable[[_Run], None]:
        printed: list[str] = []
        run_statement = self.statement(c, s, "print",
                                       print=lambda *args: printed.append(" ".join(map(str, args))))
        line = s.loc.line

        def print_(run: _Run) -> None:
            run_statement(run)
            self.emit("print", run.frame, line, f"print: {printed.pop()}", ())

        return print_

    def s_Assert(self, c: _Code, s: ir.Assert) -> Callable[[_Run], None]:
        run_statement, line, action = self.statement(c, s, "assert"), s.loc.line, stmt_text(s)

        def assert_(run: _Run) -> None:
            try:
                run_statement(run)
            except AssertionError as exc:
                self.fail(run, line, "assert", f"{action}: False", exc.with_traceback(None),
                          code=(action,))
            self.emit("assert", run.frame, line, f"{action}: True", (), code=(action,))

        return assert_

    # -- a whole run -------------------------------------------------------------------------
    def start(self, frame: Frame, code: _Code, values: tuple) -> _Run:
        """The first step: the arguments bound (the run's only snapshot of them)."""
        run = _Run({}, frame, code)
        deltas: list = []
        for p, v in zip(frame.params, values):
            run.V[p] = v
            self.bind(frame, p, v, deltas, copy=True)
        self.emit("start", frame, code.def_line, f"call {frame.name}", deltas)
        return run

    def turn(self, run: _Run, frame: Frame, code: _Code, seeds: dict[str, Any]) -> None:
        """The turning point: the backward phase takes over the forward phase's state
        (and, for AD, the adjoints of the arguments, seeded)."""
        self.direction = "backward"
        run.frame, run.code = frame, code
        deltas: list = []
        for name, v in seeds.items():
            run.V[name] = v
            self.bind(frame, name, v, deltas, copy=True)
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
            f, line = nxt.frame, nxt.line
            while f.parent is not None and f.id != top.id:
                line, f = f.call_line or line, f.parent
        what = "the reverse sweep" if step.frame.direction.sweep else step.frame.name
        action = (f"turning point: the forward run is over; {what} runs from line {line}"
                  + (f", with the loss's adjoint ∂{seed} seeded to 1" if seed else ""))
        self.steps[turn] = step._replace(line=line, action=action)

    def flush(self) -> None:
        """Attach deltas still pending (a loop variable going out of scope) to the last step."""
        if self._pending and self.steps:
            last = self.steps[-1]
            self.steps[-1] = last._replace(deltas=last.deltas + tuple(self._pending))
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


def record(f, args: tuple, seed: Any = None, max_steps: int = DEFAULT_MAX_STEPS) -> Recording:
    """Run ``f`` forward then backward on copies of ``args``, recording every step.

    ``seed`` is the loss, resolved by the caller (:func:`revbench.sweep.resolve_loss`: the
    argument ``.param`` and the element ``.index``): the backward run is then the reverse
    sweep of AD, seeded there; None runs the inverse.  Errors in the arguments or the
    program's types raise here, before anything runs; a failure while running is recorded
    (``Recording.error``).
    """
    from revbench.config import get_tolerance
    from revbench.lang.types import python_scalar
    from revbench.transforms.adjoint import DIFFERENTIABLE, adj_name

    prog = f._program
    sig = f.signature_of(args)
    forward = f._direction
    backward = forward.flipped() if seed is None else forward.backward()
    atol, rtol = get_tolerance()
    tracer = Tracer(max_steps, atol, rtol)
    try:
        fcode = tracer.code(prog, forward, sig, prog.check)
        bcode = tracer.code(prog, backward, sig, prog.check)
        top = tracer.new_frame(prog.ir, forward)
        rec = Recording(tracer.steps, top, params=prog.ir.params,
                        loss=None if seed is None else (seed.param, seed.index))
        values = tuple(a.copy() if isinstance(a, np.ndarray) else python_scalar(a) for a in args)
        try:
            # as the Python backend runs its code: the checks, not NumPy's warnings, tell
            with np.errstate(all="ignore"):
                run = tracer.start(top, fcode, values)
                fcode.run(run)
                rec.outputs = tuple(run.V[p].copy() if isinstance(run.V[p], np.ndarray)
                                    else python_scalar(run.V[p]) for p in prog.ir.params)
                seeds: dict[str, Any] = {}
                if seed is not None:
                    for k, (p, t) in enumerate(zip(prog.ir.params, sig)):
                        if t.dtype in DIFFERENTIABLE:
                            z = np.zeros_like(run.V[p]) if t.is_array else _ZERO[t.dtype]
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
            rec.inputs = tuple(python_scalar(run.V[p]) if not isinstance(run.V[p], np.ndarray)
                               else run.V[p] for p in prog.ir.params)
            if seed is not None:
                rec.gradients = tuple(
                    (run.V[adj_name(p)] if t.is_array else python_scalar(run.V[adj_name(p)]))
                    if t.dtype in DIFFERENTIABLE else None for p, t in zip(prog.ir.params, sig))
        except _Stop:
            tracer.flush()
            rec.error_step = len(tracer.steps) - 1
            rec.error = tracer.steps[-1].error
        except _Limit:
            tracer.flush()
            rec.error_step = len(tracer.steps) - 1
            rec.error = StepLimitError(
                f"the trace of {f.__name__} stopped after max_steps={max_steps} steps, before "
                f"the program finished; pass a larger max_steps (e.g. max_steps={max_steps * 10}) "
                "to record more, or trace it on smaller inputs")
        if rec.turn is not None:
            loss_name = None
            if seed is not None:
                loss_name = prog.ir.params[seed.param] + (
                    "" if seed.index is None else f"[{', '.join(map(str, seed.index))}]")
            tracer.settle_turn(rec.turn, top, function_span(prog.ir)[1], loss_name)
        return rec
    finally:
        tracer.close()
