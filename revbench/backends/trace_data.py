"""What a trace records: steps, the deltas they carry, and the frames they run in.

:mod:`revbench.backends.tracer` writes these while it runs a function;
:mod:`revbench.debugging.tracing` reads them back (it rebuilds the state at any step by applying
deltas forwards or backwards).  A step (:class:`StepRecord`) stores only what its
statement wrote, as named tuples (:class:`VarDelta`, :class:`ElemDelta`, ...) whose
``kind`` is one of :data:`VAR`, :data:`ELEM`, :data:`WHOLE`, :data:`NEWARR`,
:data:`ANC`, :data:`SWAPARR`, :data:`VIEW`.  An array is known by its *slot* (an index
into the run's arrays), so a delta never holds a whole array unless a whole-array
statement changed it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from revbench.lang import ir
from revbench.transforms.pipeline import Direction


class _Absent:
    """A variable that does not exist (before its allocation, after its ``del``)."""

    def __repr__(self) -> str:
        return "<absent>"


ABSENT = _Absent()


class StepRecord(NamedTuple):
    """One recorded step (:class:`revbench.debugging.tracing.Step` is its public view)."""

    direction: str  # "forward" or "backward"
    kind: str  # start, turn, enter, return, update, swap, alloc, del, if, while, for, ...
    frame: Frame
    line: int
    action: str
    deltas: tuple
    error: BaseException | None
    code: tuple[str, ...]  # the IR statements it executed, as text


#: what a delta is (its class's ``kind``)
VAR, ELEM, WHOLE, NEWARR, ANC, SWAPARR, VIEW = range(7)


class VarDelta(NamedTuple):
    """A variable bound, changed or unbound (``ABSENT``); an array's value is an :class:`ArrayRef`."""

    frame: Frame
    name: str
    old: Any
    new: Any

    kind = VAR


class ElemDelta(NamedTuple):
    """One element of an array (slot) written."""

    slot: int
    index: tuple
    old: Any
    new: Any
    frame: Frame
    name: str

    kind = ELEM


class WholeDelta(NamedTuple):
    """An array, or its sub-array ``key`` (a NumPy index of ints and slices), changed."""

    slot: int
    old: np.ndarray
    new: np.ndarray
    frame: Frame
    name: str
    key: Any = ...

    kind = WHOLE


class NewArray(NamedTuple):
    """An array comes into being: ``init`` is a copy of it, or ``(shape, dtype)`` for zeros."""

    slot: int
    init: Any

    kind = NEWARR


class NewView(NamedTuple):
    """A sub-array passed to a call gets a slot: the view of slot ``base``'s memory at
    ``offset`` bytes with ``shape`` and ``strides`` (every array of a run is C-ordered, as
    the copies a replay makes are)."""

    slot: int
    base: int
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    kind = VIEW


class AncillaDelta(NamedTuple):
    """An ancilla's status: ``("live", is_clean)`` (``is_clean(variables) -> bool``),
    ``("freed",)`` or ``("dirty", value)`` (deallocated, or failed to be, while not back
    at its value); None before it was ever allocated."""

    frame: Frame
    name: str
    old: tuple | None
    new: tuple

    kind = ANC


class SwapDelta(NamedTuple):
    """Two arrays' contents exchanged."""

    slot_a: int
    slot_b: int
    frame: Frame
    name_a: str
    name_b: str

    kind = SWAPARR


#: a generated name (loop indices of the reverse sweep, adjoints, temporaries)
GENERATED = "_rb"
ADJOINT = ir.ADJOINT_PREFIX

DEFAULT_MAX_STEPS = 100_000


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

    def __init__(self, id: int, function: ir.Function, direction: Direction,
                 parent: Frame | None = None, call_line: int | None = None):
        self.id = id
        self.function = function  # the forward IR: name, file and source lines
        self.direction = direction  # the program this frame runs
        self.parent = parent
        self.call_line = call_line

    @property
    def name(self) -> str:
        """``f``, ``~f`` (running its inverse), ``f (reverse sweep)`` for AD."""
        base = self.function.name
        if self.direction.inverse:
            base = "~" + base
        return base + (" (reverse sweep)" if self.direction.sweep else "")

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




@dataclass
class Recording:
    """What one traced run produced (see :class:`revbench.debugging.tracing.Trace`)."""

    steps: list[StepRecord]
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
