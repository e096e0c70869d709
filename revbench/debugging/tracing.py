"""``revbench.trace``: one run of a reversible function, step by step, as data.

``trace(f, *args)`` runs ``f`` forward, then runs its inverse on the result
(really executing the inverse program, not replaying the forward steps), and
returns a :class:`Trace`: a sequence of :class:`Step`.  With ``loss=`` the
backward phase is the reverse sweep of automatic differentiation instead, so
every step also carries the adjoints it changed, and :attr:`Trace.gradients`
are the values :func:`revbench.grad` computes.

Each step knows its direction (``"forward"``, ``"backward"``), the call stack,
the source line, what it executed (``y -= 3.0 * t + x`` in the inverse of
``y += 3.0 * t + x``; :attr:`Step.executed` lists the statements, the adjoint
updates of the reverse sweep included) and what it changed.  The turning
point (:attr:`Trace.turn`) is the first backward step; it stands on the line
where the backward run starts (the last statement, for an inverse), not on
the ``def``.  :meth:`Trace.state_at` gives the
variables, adjoints and ancillas as they are after any step.

**Errors.** Mistakes in the call itself (argument types, an unknown loss, a
type error in the program) raise, as calling ``f`` would.  A failure *while
running* -- a runtime reversibility check, such as an ancilla not back at its
value at ``del`` -- is recorded instead: the failing step is the last one, it
shows the ancilla as ``dirty``, and :attr:`Trace.error` holds the
:class:`~revbench.ReversibilityError` the compiled code raises (same message).
With ``check=False`` nothing stops, but the trace still shows a dirty
ancilla as ``dirty``.

**Size.** A step stores only what its statement wrote (old and new values of
a scalar, an element, or the array or sub-array a whole-array statement changed)
plus one snapshot of the arguments; states are rebuilt on demand.  A trace stops at ``max_steps``
(100 000 by default, a few seconds of recording) with a
:class:`StepLimitError` in :attr:`Trace.error` saying how to raise it; what was
recorded stays available.  Arrays are shown compactly: every element up to
12, else dtype, shape and the first and last few elements.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np

from revbench.ad.sweep import resolve_loss
from revbench.backends.trace_data import (
    ABSENT,
    ADJOINT,
    ANC,
    DEFAULT_MAX_STEPS,
    ELEM,
    GENERATED,
    NEWARR,
    SWAPARR,
    VAR,
    VIEW,
    WHOLE,
    ArrayRef,
    Frame,
    Recording,
    StepLimitError,
    StepRecord,
    function_span,
)
from revbench.backends.tracer import record
from revbench.function import ReversibleFunction
from revbench.lang import ir
from revbench.lang.errors import ReversibilityError

#: arrays up to this many elements are shown whole
ARRAY_SHOWN = 12
#: elements shown at each end of a bigger array
ARRAY_ENDS = 3

#: ancilla states, as :class:`AncillaView` and the debugger show them
ANCILLA_STATES = ("allocated", "clean", "dirty", "freed")


def trace(f: ReversibleFunction, *args: Any, loss: Any = None,
          max_steps: int = DEFAULT_MAX_STEPS) -> Trace:
    """Run ``f(*args)`` forward, then backward, recording every step.

    The backward phase runs ``~f`` on the forward result; with ``loss`` (as
    for :func:`revbench.grad`: an argument's name or position, or ``(name,
    index)``) it runs the reverse sweep of AD, carrying adjoints.  The
    caller's arrays are not changed.  See the module docstring for errors and
    the step cap.
    """
    if not isinstance(f, ReversibleFunction):
        raise TypeError(f"trace needs a reversible function (decorated with @reversible), got {f!r}")
    if not isinstance(max_steps, int) or isinstance(max_steps, bool) or max_steps < 1:
        raise ValueError(f"max_steps must be a positive int, got {max_steps!r}")
    try:
        seed = None if loss is None else resolve_loss(f, loss, f.signature_of(args), args)
        rec = record(f, args, seed, max_steps)
    except (ReversibilityError, TypeError, ValueError, IndexError) as exc:
        raise exc.with_traceback(None) from None  # the user's mistake, not the tracer's insides
    return Trace(rec, f, loss)


# --------------------------------------------------------------------------- #
# How values are shown
# --------------------------------------------------------------------------- #
def _float(x: float) -> str:
    s = f"{x:.6g}"
    return s + ".0" if s.lstrip("-").isdigit() else s


def show_value(v: Any) -> str:
    """A compact text for a value: scalars to 6 digits, big arrays abridged."""
    if v is ABSENT:
        return "—"
    if isinstance(v, np.ndarray):
        return _array(v)
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return _float(float(v))
    if isinstance(v, (complex, np.complexfloating)):
        z = complex(v)
        return f"({_float(z.real)}{'-' if z.imag < 0 else '+'}{_float(abs(z.imag))}j)"
    return repr(v)


def _array(a: np.ndarray) -> str:
    if a.size <= ARRAY_SHOWN:
        def nested(x):
            return "[" + ", ".join(nested(r) if r.ndim else show_value(r[()]) for r in x) + "]"

        return nested(a) if a.ndim else show_value(a[()])
    flat = a.reshape(-1)
    ends = [show_value(x) for x in flat[:ARRAY_ENDS]] + ["…"] + \
        [show_value(x) for x in flat[-ARRAY_ENDS:]]
    return f"{a.dtype.name}[{'×'.join(map(str, a.shape))}] [{', '.join(ends)}]"  # noqa: RUF001


def _index(idx: tuple, shape: tuple) -> str:
    return ", ".join(str(int(i) if i >= 0 else int(i) + n) for i, n in zip(idx, shape))


# --------------------------------------------------------------------------- #
# The data model
# --------------------------------------------------------------------------- #
@dataclass(frozen=True)
class VarView:
    """One variable of the current function as shown at a step."""

    name: str
    role: str  # 'argument', 'ancilla' or 'loop'
    value: str  # compact text (see show_value)
    changed: bool  # written by this step (its value or its adjoint)
    change: str | None = None  # what this step did to it, e.g. "x[503]: 1.0 → 2.0"
    adjoint: str | None = None  # gradient mode: the adjoint's compact text ('' when none yet)
    adjoint_changed: bool = False


@dataclass(frozen=True)
class AncillaView:
    """One ancilla of the current function at a step.

    ``state`` is ``clean`` (live, holding its allocation value: it could be
    freed now), ``allocated`` (live, in use), ``freed`` (deallocated back at
    its value) or ``dirty`` (its ``del`` found it not back at its value).
    """

    name: str
    state: str
    value: str


@dataclass(frozen=True)
class State:
    """What the debugger shows after a step: the current function's variables and ancillas."""

    index: int
    step: Step
    variables: tuple[VarView, ...]
    ancillas: tuple[AncillaView, ...]

    def var(self, name: str) -> VarView:
        for v in self.variables:
            if v.name == name:
                return v
        raise KeyError(f"no variable {name!r} in {self.step.function} at step {self.index}")

    def ancilla(self, name: str) -> AncillaView:
        for a in self.ancillas:
            if a.name == name:
                return a
        raise KeyError(f"no ancilla {name!r} in {self.step.function} at step {self.index}")


class Step:
    """One recorded step (a view into its :class:`Trace`)."""

    __slots__ = ("_t", "index")

    def __init__(self, trace: Trace, index: int):
        self._t = trace
        self.index = index

    @property
    def _raw(self) -> StepRecord:
        return self._t._steps[self.index]

    @property
    def direction(self) -> str:
        """``"forward"`` (running f) or ``"backward"`` (running its inverse / reverse sweep)."""
        return self._raw.direction

    @property
    def kind(self) -> str:
        """``start``, ``turn``, ``enter``, ``return``, ``update``, ``swap``, ``alloc``,
        ``del``, ``if``, ``while``, ``for``, ``print``, ``assert``, ``call`` or ``error``."""
        return self._raw.kind

    @property
    def frame(self) -> Frame:
        return self._raw.frame

    @property
    def lineno(self) -> int:
        return self._raw.line

    @property
    def action(self) -> str:
        """What ran, as code: ``y -= 3.0 * t + x``; ``for i in ...: i = 2``."""
        return self._raw.action

    @property
    def error(self) -> BaseException | None:
        """The error this step failed with (only the last step of a failed trace)."""
        return self._raw.error

    @property
    def executed(self) -> tuple[str, ...]:
        """The statements this step executed, as code, printed from the IR the tracer ran:
        ``("t -= x * x",)`` on a line reading ``t += x * x`` when the inverse runs, then
        the adjoint updates in the reverse sweep (``"∂x += ∂y"``); a control-flow step
        gives its header (``for i in reversed(range(n))``); ``()`` for start, turn, print."""
        return self._raw.code

    @property
    def function(self) -> str:
        return self.frame.name

    @property
    def filename(self) -> str:
        return self.frame.filename

    @property
    def source(self) -> str:
        """The user's source line of this step."""
        return self.frame.line_text(self.lineno)

    @property
    def stack(self) -> tuple[tuple[str, int], ...]:
        """``(function, line)`` pairs from the outermost call to this step."""
        return self.frame.stack(self.lineno)

    @property
    def changes(self) -> dict[str, tuple[str, str]]:
        """Variables (or elements) this step wrote: ``{"y": ("0.0", "14.0"), "x[2]": ...}``."""
        return _changes(self._t, self._raw.deltas, adjoints=False)

    @property
    def adjoint_changes(self) -> dict[str, tuple[str, str]]:
        """Adjoints this step wrote, by the variable they belong to."""
        return _changes(self._t, self._raw.deltas, adjoints=True)

    @property
    def state(self) -> State:
        return self._t.state_at(self.index)

    @property
    def ancillas(self) -> dict[str, str]:
        """Each ancilla of the current function and its state after this step."""
        return {a.name: a.state for a in self.state.ancillas}

    @property
    def adjoints(self) -> dict[str, str]:
        """Gradient mode: each variable's adjoint after this step ('' before it has one)."""
        return {v.name: v.adjoint for v in self.state.variables if v.adjoint is not None}

    def __repr__(self) -> str:
        return (f"<Step {self.index} {self.direction} {self.kind} {self.function} "
                f"line {self.lineno}: {self.action}>")


def _changes(t: Trace, deltas: tuple, adjoints: bool) -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    new_arrays = {d.slot: d.init for d in deltas if d.kind == NEWARR}

    def shown(v: Any) -> str:
        if isinstance(v, ArrayRef):
            init = new_arrays.get(v.slot)
            if isinstance(init, np.ndarray):
                return show_value(init)
            if init is not None:
                return show_value(np.zeros(*init))
            return f"<array {t._array_meta(v.slot)}>"
        return show_value(v)

    def key(name: str) -> str | None:
        if name.startswith(ADJOINT):
            return name[len(ADJOINT):] if adjoints else None
        return None if adjoints or name.startswith(GENERATED) else name

    for d in deltas:
        if d.kind == VAR:
            k = key(d.name)
            if k is not None:
                out[k] = (shown(d.old), shown(d.new))
        elif d.kind == ELEM:
            k = key(d.name)
            if k is not None:
                out[f"{k}[{_index(d.index, t._array_shape(d.slot))}]"] = (show_value(d.old),
                                                                        show_value(d.new))
        elif d.kind == WHOLE:
            k = key(d.name)
            if k is not None:
                out[k + _part(d.key, t._array_shape(d.slot))] = (show_value(d.old), show_value(d.new))
        elif d.kind == SWAPARR:
            a, b = key(d.name_a), key(d.name_b)
            if a is not None and b is not None:
                out[a] = ("", f"⇄ {b}")
                out[b] = ("", f"⇄ {a}")
    return out


def _part(key: Any, shape: tuple[int, ...]) -> str:
    """A sub-array's index as text, as it would be written: ``[1]``, ``[:, 0]``,
    ``[0, 1:3]`` (``""`` for a whole array)."""
    if key is Ellipsis:
        return ""
    parts = [(":" if (k.start, k.stop) == (0, n) else f"{k.start}:{k.stop}")
             if isinstance(k, slice) else str(k) for k, n in zip(key, shape)]
    while parts and parts[-1] == ":":
        parts.pop()
    return f"[{', '.join(parts)}]" if parts else ""


class _Replay:
    """The state at one step, moved to another by applying deltas forwards or backwards."""

    def __init__(self, steps: list[StepRecord]):
        self.steps = steps
        self.pos = -1
        self.stores: dict[int, dict[str, Any]] = {}
        self.arrays: dict[int, np.ndarray] = {}
        self.anc: dict[int, dict[str, tuple]] = {}

    def goto(self, k: int) -> None:
        while self.pos < k:
            self.pos += 1
            self._apply(self.steps[self.pos].deltas, True)
        while self.pos > k:
            self._apply(self.steps[self.pos].deltas, False)
            self.pos -= 1

    def _apply(self, deltas: tuple, forward: bool) -> None:
        arrays = self.arrays
        for d in (deltas if forward else reversed(deltas)):
            kind = d.kind
            if kind == VAR:
                v = d.new if forward else d.old
                store = self.stores.setdefault(d.frame.id, {})
                if v is ABSENT:
                    store.pop(d.name, None)
                else:
                    store[d.name] = arrays[v.slot] if isinstance(v, ArrayRef) else v
            elif kind == ELEM:
                arrays[d.slot][d.index] = d.new if forward else d.old
            elif kind == WHOLE:
                arrays[d.slot][d.key] = d.new if forward else d.old
            elif kind == NEWARR:
                if forward:
                    init = d.init
                    arrays[d.slot] = init.copy() if isinstance(init, np.ndarray) else np.zeros(*init)
            elif kind == VIEW:
                if forward:  # a view of the replay's own copy of the array
                    base = arrays[d.base]
                    arrays[d.slot] = np.ndarray(d.shape, base.dtype, buffer=base, offset=d.offset,
                                                strides=d.strides)
            elif kind == ANC:
                v = d.new if forward else d.old
                statuses = self.anc.setdefault(d.frame.id, {})
                if v is None:
                    statuses.pop(d.name, None)
                else:
                    statuses[d.name] = v
            elif kind == SWAPARR:
                a, b = arrays[d.slot_a], arrays[d.slot_b]
                tmp = a.copy()
                a[...] = b
                b[...] = tmp


def _name_order(func: ir.Function) -> dict[str, int]:
    """Parameters first, then loop variables and ancillas in the order the source has them."""
    order = {p: i for i, p in enumerate(func.params)}
    for s in ir.walk_stmts(func.body):
        name = s.var if isinstance(s, ir.For) else s.name if isinstance(s, ir.Alloc) else None
        if name is not None and name not in order:
            order[name] = len(order)
    return order


class Trace(Sequence[Step]):
    """A recorded run: forward steps, the turning point, then backward steps.

    ``trace[k]`` is a :class:`Step`; :meth:`state_at` rebuilds what is shown at
    step ``k``.  :attr:`outputs` are what ``f(*args)`` returns, :attr:`inputs`
    the values the backward phase ends with (the arguments again, when all is
    well), :attr:`gradients` (with a loss) what :func:`revbench.grad` returns.
    """

    def __init__(self, rec: Recording, f: ReversibleFunction, loss: Any = None):
        self._rec = rec
        self._steps = rec.steps
        self.function = f
        self.loss = loss
        self._replay = _Replay(rec.steps)
        self._orders: dict[int, dict[str, int]] = {}
        self._shapes: dict[int, tuple] | None = None
        self._has_calls: bool | None = None

    # -- the run's results ---------------------------------------------------------------
    @property
    def turn(self) -> int | None:
        """Index of the turning point (the first backward step), None if never reached; its
        line is where the backward run starts."""
        return self._rec.turn

    @property
    def outputs(self) -> tuple | None:
        return self._rec.outputs

    @property
    def inputs(self) -> tuple | None:
        return self._rec.inputs

    @property
    def gradients(self) -> tuple | None:
        return self._rec.gradients

    @property
    def error(self) -> BaseException | None:
        """Why the trace stopped early: a :class:`~revbench.ReversibilityError` (a failed
        runtime check), another exception of the program, or :class:`StepLimitError`."""
        return self._rec.error

    @property
    def error_step(self) -> int | None:
        return self._rec.error_step

    @property
    def gradient_mode(self) -> bool:
        return self.loss is not None

    @property
    def loss_label(self) -> str | None:
        """The loss as the adjoints are derivatives of it: ``y``, or ``y[2]`` for an element
        (None without a loss)."""
        if self._rec.loss is None:
            return None
        k, index = self._rec.loss
        name = self._rec.params[k]
        return name if index is None else f"{name}[{', '.join(map(str, index))}]"

    @property
    def has_calls(self) -> bool:
        """Whether the run entered another reversible function (then a call stack is worth showing)."""
        if self._has_calls is None:
            self._has_calls = any(st.kind == "enter" for st in self._steps)
        return self._has_calls

    @property
    def params(self) -> tuple[str, ...]:
        return self._rec.params

    @property
    def source(self) -> list[tuple[int, str]]:
        """The traced function's source lines, as ``(line number, text)``."""
        return source_lines(self._rec.top.function)

    # -- sequence ----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._steps)

    @overload
    def __getitem__(self, k: int) -> Step: ...
    @overload
    def __getitem__(self, k: slice) -> list[Step]: ...

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [Step(self, i) for i in range(*k.indices(len(self)))]
        n = len(self._steps)
        if not -n <= k < n:
            raise IndexError(f"step {k} is out of range: the trace has {n} steps")
        return Step(self, k % n)

    def __iter__(self) -> Iterator[Step]:
        return (Step(self, i) for i in range(len(self._steps)))

    def __repr__(self) -> str:
        n, turn = len(self), self.turn
        phases = f"{n} steps" if turn is None else f"{turn} forward + {n - turn} backward steps"
        err = f"; stopped: {str(self.error).splitlines()[0]}" if self.error is not None else ""
        return f"<Trace of {self.function.__name__}: {phases}{err}>"

    # -- states ----------------------------------------------------------------------------
    def values_at(self, k: int) -> dict[str, Any]:
        """The exact values (copies) of the current function's variables after step ``k``,
        adjoints included under their generated names (``_rb_adj_x``)."""
        step = self[k]
        self._replay.goto(step.index)
        store = self._replay.stores.get(step.frame.id, {})
        return {n: v.copy() if isinstance(v, np.ndarray) else v for n, v in store.items()
                if not n.startswith(GENERATED) or n.startswith(ADJOINT)}

    def state_at(self, k: int) -> State:
        """The variables and ancillas of the current function after step ``k``."""
        step = self[k]
        frame = step.frame
        self._replay.goto(step.index)
        store = self._replay.stores.get(frame.id, {})
        statuses = self._replay.anc.get(frame.id, {})
        order = self._order(frame.function)
        changed: dict[str, list[str]] = {}
        for name, text in self._changed_in(step, frame):
            changed.setdefault(name, []).append(text)
        loops = {s.var for s in ir.walk_stmts(frame.function.body) if isinstance(s, ir.For)}
        names = sorted((n for n in store if not n.startswith(GENERATED)),
                       key=lambda n: order.get(n, len(order)))
        grad = self.gradient_mode
        variables = []
        for n in names:
            role = "argument" if n in frame.params else "loop" if n in loops else "ancilla"
            adj = ADJOINT + n
            adjoint = show_value(store[adj]) if adj in store else ("" if grad and role != "loop" else None)
            mine = changed.get(n, [])
            variables.append(VarView(
                n, role, show_value(store[n]), bool(mine),
                "; ".join(t for t in mine if t) or None, adjoint, adj in changed))
        ancillas = []
        for n in sorted(statuses, key=lambda n: order.get(n, len(order))):
            status = statuses[n]
            if status[0] == "live":
                state = "clean" if _is_clean(status[1], store) else "allocated"
                value = show_value(store.get(n, ABSENT))
            elif status[0] == "dirty":
                state, value = "dirty", show_value(store.get(n, status[1]))
            else:
                state, value = "freed", "—"
            ancillas.append(AncillaView(n, state, value))
        return State(step.index, step, tuple(variables), tuple(ancillas))

    def _changed_in(self, step: Step, frame: Frame) -> Iterator[tuple[str, str]]:
        """(variable, what changed) for the deltas of ``step`` in ``frame``'s variables
        (binding the arguments when a function starts is not a change)."""
        binding = step.kind in ("start", "enter")
        for d in step._raw.deltas:
            if d.kind == VAR and d.frame.id == frame.id and not binding:
                yield d.name, ""
            elif d.kind == ELEM and d.frame.id == frame.id:
                yield d.name, (f"{d.name}[{_index(d.index, self._array_shape(d.slot))}]: "
                               f"{show_value(d.old)} → {show_value(d.new)}")
            elif d.kind == WHOLE and d.frame.id == frame.id:  # (a sub-array: which part)
                part = _part(d.key, self._array_shape(d.slot))
                yield d.name, f"{d.name}{part}: {show_value(d.old)} → {show_value(d.new)}" if part else ""
            elif d.kind == SWAPARR and d.frame.id == frame.id:
                yield d.name_a, ""
                yield d.name_b, ""

    def _order(self, func: ir.Function) -> dict[str, int]:
        order = self._orders.get(id(func))
        if order is None:
            order = self._orders[id(func)] = _name_order(func)
        return order

    def _array_shape(self, slot: int) -> tuple[int, ...]:
        return self._meta(slot)[0]

    def _array_meta(self, slot: int) -> str:
        shape, dtype = self._meta(slot)
        return f"{np.dtype(dtype).name}[{'×'.join(map(str, shape))}]"  # noqa: RUF001

    def _meta(self, slot: int) -> tuple[tuple[int, ...], Any]:
        """An array's shape and dtype (they never change), from its NEWARR (or VIEW) delta."""
        if self._shapes is None:
            self._shapes = {}
            for st in self._steps:
                for d in st.deltas:
                    if d.kind == NEWARR:
                        init = d.init
                        self._shapes[d.slot] = ((init.shape, init.dtype) if isinstance(init, np.ndarray)
                                                else init)
                    elif d.kind == VIEW:
                        self._shapes[d.slot] = (d.shape, self._shapes[d.base][1])
        return self._shapes[slot]


def _is_clean(test, store: dict) -> bool:
    try:
        return bool(test(store))
    except Exception:  # something it reads is gone: it is not shown as freeable
        return False


def source_lines(func: ir.Function) -> list[tuple[int, str]]:
    """A function's lines in its file, from its ``def`` to its last statement."""
    first, last = function_span(func)
    return [(n, func.line_text(n)) for n in range(first, last + 1)]


__all__ = [
    "ANCILLA_STATES",
    "AncillaView",
    "Frame",
    "State",
    "Step",
    "StepLimitError",
    "Trace",
    "VarView",
    "show_value",
    "source_lines",
    "trace",
]
