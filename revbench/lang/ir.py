"""The revbench intermediate representation (IR).

Every stage after parsing works on these nodes: the static checker, the
transforms (``invert``; later ``adjoint``) and the backends.  Nodes are small
immutable dataclasses so that a transform builds a new tree instead of editing
the old one, which keeps the forward program intact while its inverse and
adjoint are derived from it.

Each node carries a :class:`Loc` pointing into the user's source, so that any
stage can report an error against the user's own line and column.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Union

#: the prefix of adjoint variables, the one place it is spelled: the adjoint of ``x`` is
#: ``_rb_adj_x``; with several adjoint lanes (a Jacobian's rows at once), lane ``k``'s is
#: ``_rb_adj{k}_x`` (:func:`adjoint_name`, :func:`is_adjoint`)
ADJOINT_PREFIX = "_rb_adj_"


def adjoint_name(name: str, lane: int | None = None) -> str:
    """The adjoint variable of ``name`` (of lane ``lane`` where there are several)."""
    return f"{ADJOINT_PREFIX}{name}" if lane is None else f"_rb_adj{lane}_{name}"


def is_adjoint(name: str) -> bool:
    """Whether ``name`` is an adjoint variable, of any lane, or an adjoint ancilla the
    sweep computes (``_rb_adj__rb_g2``)."""
    return _ADJOINT_NAME.match(name) is not None


_ADJOINT_NAME = re.compile(r"_rb_adj\d*_")


#: the functions outlined from a checkpointed loop (its step, its condition, the loop
#: itself) -> (the function it is written in, the loop's line): what messages name
OUTLINED: dict[str, tuple[str, int]] = {}


def shown_name(name: str) -> str:
    """How messages name a function: a checkpointed loop's outlined parts as the function
    the user wrote and the loop's line, never an internal name (``f_loop8_step``)."""
    hit = OUTLINED.get(name)
    if hit is None:
        return name
    parent, line = hit
    return f"{shown_name(parent)} (its checkpointed loop at line {line})"


#: what people call a source file where they read a message: a notebook cell's file as
#: IPython names the cell, ``"Cell In[5]"`` (filled in by ``%%reversible``,
#: :mod:`revbench.jupyter.cell`); a file not in it is called by its name
FILE_LABELS: dict[str, str] = {}


def shown_file(filename: str) -> str:
    """How messages name a source file (the exceptions' ``filename`` stays the real one)."""
    return FILE_LABELS.get(filename, filename)


def where(function: str, filename: str, line: int, text: str) -> str:
    """``in reversible function f, FILE, line N: text``: where messages say a line is."""
    return (f"in reversible function {shown_name(function)}, {shown_file(filename)}, line "
            f"{line}: {text}")


@dataclass(frozen=True)
class Loc:
    """A position in the user's source file (1-based line, 0-based column)."""

    line: int
    col: int = 0
    end_line: int | None = None
    end_col: int | None = None


NO_LOC = Loc(0, 0)

# --------------------------------------------------------------------------- #
# Expressions (pure: they never change state)
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class Const:
    value: int | float | complex | bool
    loc: Loc = field(default=NO_LOC, compare=False)


@dataclass(frozen=True)
class Var:
    name: str
    loc: Loc = field(default=NO_LOC, compare=False)


@dataclass(frozen=True)
class Elem:
    """``x[i]`` or ``A[i, j]``: one element of an array variable -- or, with fewer
    indices than the array has axes or with :class:`Slice` parts, a *sub-array*
    (``A[i]``, ``A[i, :]``, ``x[a:b]``): a NumPy view of the variable, which whole-array
    statements read and update and calls update in place.  Which it is depends on
    the variable's type (:func:`is_subarray`)."""

    name: str
    indices: tuple[Expr, ...]
    loc: Loc = field(default=NO_LOC, compare=False)


@dataclass(frozen=True)
class Slice:
    """``a:b:s`` in a subscript: the indices ``a, a + s, ... < b`` of one axis.  A missing
    bound is the start or the end of the axis; a negative one counts from the end.  The
    step is a constant positive integer (1 when none is written)."""

    start: Expr | None
    stop: Expr | None
    loc: Loc = field(default=NO_LOC, compare=False)
    step: int = 1


@dataclass(frozen=True)
class BinOp:
    #: one of + - * / ** // %, or ``@`` (a matrix product) and ``outer`` (``np.outer(u, v)``),
    #: which :mod:`revbench.lang.products` lowers once types are known
    op: str
    left: Expr
    right: Expr
    loc: Loc = field(default=NO_LOC, compare=False)


@dataclass(frozen=True)
class UnaryOp:
    op: str  # '-', '+', 'not', or 'T' (``A.T``: lowered with products once types are known)
    operand: Expr
    loc: Loc = field(default=NO_LOC, compare=False)


@dataclass(frozen=True)
class Func:
    """A pure function from the function rule table (``sin``, ``atan2``, ...)."""

    name: str  # canonical name in revbench.rules.functions
    args: tuple[Expr, ...]
    loc: Loc = field(default=NO_LOC, compare=False)


@dataclass(frozen=True)
class Len:
    name: str
    loc: Loc = field(default=NO_LOC, compare=False)


@dataclass(frozen=True)
class Shape:
    name: str
    axis: int
    loc: Loc = field(default=NO_LOC, compare=False)
    #: ``m, n = x.shape`` unpacks all the axes: their number (checked against ``x``'s)
    unpacked: int = field(default=0, compare=False)


@dataclass(frozen=True)
class IfExp:
    cond: Expr
    then: Expr
    orelse: Expr
    loc: Loc = field(default=NO_LOC, compare=False)


@dataclass(frozen=True)
class Compare:
    """A (possibly chained) comparison ``a < b <= c``."""

    ops: tuple[str, ...]
    operands: tuple[Expr, ...]
    loc: Loc = field(default=NO_LOC, compare=False)


@dataclass(frozen=True)
class BoolOp:
    op: str  # 'and' or 'or'
    values: tuple[Expr, ...]
    loc: Loc = field(default=NO_LOC, compare=False)


@dataclass(frozen=True)
class Reduce:
    """``np.sum(e)``: the sum of every element of the whole-array expression ``e`` (whose
    arrays have one shape).  A scalar.  ``sum(e)`` (Python's) and ``np.dot(a, b)``
    (``sum(a * b)``) are the same, for 1-D arrays only (on 2-D arrays NumPy gives a row
    and a matrix product)."""

    kind: str  # "sum"; "sum1" and "dot": the same, of 1-D arrays only; "max", "min"
    arg: Expr
    loc: Loc = field(default=NO_LOC, compare=False)
    #: ``np.sum(e, axis=k)``: along one axis only -- an array (a scalar for a 1-D ``e``),
    #: lowered to a loop of whole sums by :mod:`revbench.lang.products` once types are known
    axis: int | None = None


#: each kind of :class:`Reduce` as the user spells it, for messages and printed code
#: (the kind ``dot`` of ``a * b`` is written ``np.dot(a, b)``)
REDUCE_SPELLINGS = {"sum": "np.sum", "sum1": "sum", "dot": "np.dot", "max": "np.max", "min": "np.min"}


@dataclass(frozen=True)
class Scan:
    """``np.cumsum(e)`` / ``np.cumprod(e)`` of a 1-D elementwise expression: the array of its
    running sums (products).  An array; lowered by :mod:`revbench.lang.products` into an
    ancilla array computed before its statement and uncomputed after it."""

    kind: str  # "cumsum" or "cumprod"
    arg: Expr
    loc: Loc = field(default=NO_LOC, compare=False)


@dataclass(frozen=True)
class Derivative:
    """A derivative of a reversible function ``f`` taken inside reversible code:

    * ``revbench.grad(f, loss="out", wrt="y")(a, b, c)`` (``kind`` ``"grad"``): the
      gradient of ``f``'s float scalar argument ``loss`` (after ``f`` runs) with respect to
      its argument ``wrt`` (before), at the arguments ``args``; the type of ``args[wrt]``;
    * ``revbench.jvp(f, a, b, c, tangents={"y": v}, outputs="r")`` (``kind`` ``"jvp"``):
      the tangent of ``f``'s argument ``loss`` (here: the output ``r``) along the
      direction ``directions`` given to the arguments ``along``; the type of ``args[loss]``.

    Lowered by :mod:`revbench.lang.derivatives` once types are known into an ancilla filled
    by a call of the derivative's own program (:func:`derivative_callee`), which the
    compiler resolves to :class:`revbench.compiler.DerivativeProgram`."""

    func: str  # the differentiated function, as written (dotted)
    params: tuple[str, ...]  # its parameters, when the caller was defined
    loss: int  # grad: the loss; jvp: the output
    wrt: int  # grad only (-1 for jvp)
    args: tuple[Expr, ...]
    loc: Loc = field(default=NO_LOC, compare=False)
    kind: str = "grad"
    along: tuple[int, ...] = ()  # jvp: the arguments given a tangent, in order
    directions: tuple[Expr, ...] = ()  # jvp: their tangents


#: the callee name of a lowered :class:`Derivative`, which reads as what it computes:
#: ``grad(f, loss=out, wrt=y)`` or ``jvp(f, outputs=r, tangents=x+y)``
_DERIVATIVE_CALLEE = re.compile(
    r"^(?:(?P<grad>grad)\((?P<gfunc>[\w.]+), loss=(?P<loss>\w+), wrt=(?P<wrt>\w+)\)"
    r"|(?P<jvp>jvp)\((?P<jfunc>[\w.]+), outputs=(?P<out>\w+), tangents=(?P<along>[\w+]+)\))$")


def derivative_callee(d: Derivative) -> str:
    """The name a call of ``d``'s program goes by."""
    if d.kind == "jvp":
        along = "+".join(d.params[k] for k in d.along)
        return f"jvp({d.func}, outputs={d.params[d.loss]}, tangents={along})"
    return f"grad({d.func}, loss={d.params[d.loss]}, wrt={d.params[d.wrt]})"


def parse_derivative_callee(name: str) -> tuple[str, str, str, tuple[str, ...]] | None:
    """``(kind, func, loss or output, (wrt,) or the arguments with a tangent)`` of a
    :func:`derivative_callee` name; None for any other name."""
    m = _DERIVATIVE_CALLEE.match(name)
    if m is None:
        return None
    if m["grad"]:
        return "grad", m["gfunc"], m["loss"], (m["wrt"],)
    return "jvp", m["jfunc"], m["out"], tuple(m["along"].split("+"))


@dataclass(frozen=True)
class MatMul:
    """``op(a) @ op(b)`` of two whole float64 arrays, ``op`` the transpose where ``trans_a`` /
    ``trans_b``: a matrix (2-D @ 2-D), a vector (2-D @ 1-D, 1-D @ 2-D) or, of two 1-D
    arrays, their *outer* product (``np.outer(a, b)``; a number ``x @ y`` is never one).

    Made by :mod:`revbench.lang.products` and by the transforms, only as the value of an
    :class:`Update` ``+=`` / ``-=`` of a whole float64 array that is neither operand: the
    statement is one call of :func:`revbench.backends.blas.matmul_update` (``rb_matmul``,
    BLAS above a size) on every backend, so the same operands give the same bits and
    ``C -= A @ B`` takes away exactly what ``C += A @ B`` added.  The inverse flips the
    update's operator; the adjoints are products again (:mod:`revbench.transforms.adjoint`)."""

    a: Var
    b: Var
    trans_a: bool = False
    trans_b: bool = False
    outer: bool = False  # two 1-D operands: np.outer(a, b) (no transposes)
    loc: Loc = field(default=NO_LOC, compare=False)


@dataclass(frozen=True)
class ArrayAlloc:
    """An array allocation: ``np.zeros(shape)``, ``np.zeros_like(x)``, ``x.copy()``.

    Only valid as the initial value of an ancilla.  ``shape`` holds the size
    expressions for ``zeros``; ``source`` the array copied or mimicked.
    """

    kind: str  # 'zeros' | 'zeros_like' | 'copy'
    shape: tuple[Expr, ...] = ()
    source: str | None = None
    dtype: str | None = None  # 'float' | 'int' | 'bool' | 'complex' | None (default)
    loc: Loc = field(default=NO_LOC, compare=False)


Expr = Union[Const, Var, Elem, Slice, BinOp, UnaryOp, Func, Len, Shape, IfExp, Compare, BoolOp, Reduce, Scan,
             Derivative, MatMul, ArrayAlloc]
Target = Union[Var, Elem]

# --------------------------------------------------------------------------- #
# Statements
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class Update:
    """``target op= value`` for op in the instruction table (``+=``, ``*=``, ...).

    ``alias_checks`` lists elements of the target's array read by ``value``
    with a different index expression: they must differ from the target's
    index at run time (the static checker fills it in).  ``shown``: where the update is
    one element of a lowered whole-array statement (``y += A @ x``,
    :mod:`revbench.lang.products`), that statement's target, as messages name it.
    """

    target: Target
    op: str
    value: Expr
    loc: Loc = field(default=NO_LOC, compare=False)
    alias_checks: tuple[Elem, ...] = ()
    shown: Target | None = field(default=None, compare=False)
    #: set by the adjoint transform on the undo of a fresh update (``t += e`` from a zero,
    #: :mod:`revbench.transforms.fresh`): it brings ``t`` back to exactly zero, so where no
    #: check reads the difference (``check=False``) it may be ``t -= t`` instead
    #: (:mod:`revbench.transforms.prune`), which needs no ``e``
    restores_zero: bool = field(default=False, compare=False)


@dataclass(frozen=True)
class Swap:
    a: Target
    b: Target
    loc: Loc = field(default=NO_LOC, compare=False)


@dataclass(frozen=True)
class Alloc:
    """``name = init``: allocate an ancilla."""

    name: str
    init: Expr
    loc: Loc = field(default=NO_LOC, compare=False)


@dataclass(frozen=True)
class Dealloc:
    """``del name``: deallocate an ancilla, which must equal ``init`` evaluated now.

    ``init`` is ``None`` straight out of the parser; the checker fills it in
    from the matching :class:`Alloc`.  The adjoint transform uses ``init=None``
    with ``discard=True`` to drop an adjoint variable whose value is no longer needed.
    """

    name: str
    init: Expr | None
    loc: Loc = field(default=NO_LOC, compare=False)
    discard: bool = False


@dataclass(frozen=True)
class Call:
    """A call of a reversible function (``inverted`` for ``~f(...)``)."""

    func: str
    args: tuple[Target, ...]
    inverted: bool = False
    loc: Loc = field(default=NO_LOC, compare=False)
    alias_checks: tuple[tuple[Elem, Elem], ...] = ()
    #: set by the adjoint transform: run the callee's reverse sweep, carrying the
    #: adjoints ``adj_args`` (None for an argument that has no gradient)
    backward: bool = False
    adj_args: tuple[Target | None, ...] = ()
    lanes: int = 1  # adjoint seeds carried at once (adj_args holds lanes x len(args))
    #: per argument: the caller keeps no adjoint for it (the callee need not compute one)
    inactive: tuple[bool, ...] = ()
    #: set by the tangent transform (second derivatives): run the callee's tangent
    #: program, carrying ``tan_args``: the tangents of ``args`` then of the non-None
    #: ``adj_args`` (None where there is none: an int or bool)
    tangent: bool = False
    tan_args: tuple[Target | None, ...] = ()


@dataclass(frozen=True)
class Block:
    """A block run as written: a ``with routine:`` body (label 'routine').

    ``replay``: in a reverse sweep, a routine run again where the program uncomputed it
    (``~routine`` read backwards); the sweep later runs the routine's own adjoint, which
    uncomputes it once more and checks its ancillas' ``del`` again."""

    body: tuple[Stmt, ...]
    label: str = ""
    loc: Loc = field(default=NO_LOC, compare=False)
    replay: bool = False


@dataclass(frozen=True)
class Inverted:
    """A block run backwards: ``with inverted:`` or the ``~routine`` uncompute."""

    body: tuple[Stmt, ...]
    label: str = ""
    loc: Loc = field(default=NO_LOC, compare=False)


@dataclass(frozen=True)
class Uncompute:
    """``~routine`` / ``~r`` as parsed; the checker turns it into :class:`Inverted`."""

    name: str | None
    loc: Loc = field(default=NO_LOC, compare=False)


@dataclass(frozen=True)
class If:
    """``if (pre, post):``; ``post`` must hold after the branch iff ``pre`` held before."""

    pre: Expr
    post: Expr
    then: tuple[Stmt, ...]
    orelse: tuple[Stmt, ...]
    loc: Loc = field(default=NO_LOC, compare=False)


@dataclass(frozen=True)
class While:
    """``while (cond, post):``; ``post`` false on entry, true after every iteration."""

    cond: Expr
    post: Expr
    body: tuple[Stmt, ...]
    loc: Loc = field(default=NO_LOC, compare=False)


@dataclass(frozen=True)
class For:
    """``for var in range(start, stop, step)``; ``reverse`` walks the range backwards."""

    var: str
    start: Expr
    stop: Expr
    step: Expr
    body: tuple[Stmt, ...]
    reverse: bool = False
    loc: Loc = field(default=NO_LOC, compare=False)


@dataclass(frozen=True)
class Print:
    args: tuple[Expr | str, ...]
    loc: Loc = field(default=NO_LOC, compare=False)


@dataclass(frozen=True)
class Assert:
    cond: Expr
    message: str | None = None
    loc: Loc = field(default=NO_LOC, compare=False)


Stmt = Union[Update, Swap, Alloc, Dealloc, Call, Block, Inverted, Uncompute, If, While, For, Print, Assert]


# --------------------------------------------------------------------------- #
# The statement table: what each statement kind holds, one entry per kind
# --------------------------------------------------------------------------- #


def _present(*parts) -> tuple:
    return tuple(p for p in parts if p is not None and not isinstance(p, str))


@dataclass(frozen=True)
class StatementKind:
    """The structure of one statement kind, which every pass reads instead of its own
    ``isinstance`` ladder.

    ``blocks``: the statement lists nested directly inside it.  ``expressions``: the
    expressions it holds itself (targets and arguments included), in the order they are
    evaluated.  ``checked``: those of them evaluated only by a runtime check (a ``del``'s
    expected value), which code generated without checks never reads.  ``targets``: what
    it writes through a target (``y``, ``x[i]``, a call's arguments and the adjoints and
    tangents it carries).  ``binds``: the variable it allocates or releases.  ``effects``:
    what it does beyond its variables: ``output`` (prints), ``fails`` (may stop the run
    with an error of its own), ``calls`` (runs another function) -- a statement with any
    is kept by ``prune`` whatever reads its variables.  ``before(s, check)``: the
    expressions it evaluates before it changes anything, where generated code computes
    the sums they hold first (not an ``if``'s or a ``while``'s conditions, evaluated again
    later; a ``del``'s expected value only with checks).  ``subarrays``: where it may hold
    sub-arrays besides those (its target, a call's arguments)."""

    blocks: Callable[[Any], tuple[tuple[Any, ...], ...]] = lambda s: ()
    expressions: Callable[[Any], tuple[Any, ...]] = lambda s: ()
    checked: Callable[[Any], tuple[Any, ...]] = lambda s: ()
    targets: Callable[[Any], tuple[Any, ...]] = lambda s: ()
    binds: Callable[[Any], str | None] = lambda s: None
    effects: frozenset[str] = frozenset()
    before: Callable[[Any, bool], tuple[Any, ...]] = lambda s, check: ()
    subarrays: Callable[[Any], tuple[Any, ...]] = lambda s: ()


def _call_targets(s: Call) -> tuple:
    return (*s.args, *(a for a in s.adj_args if a is not None),
            *(a for a in s.tan_args if a is not None))


def _indices(target) -> tuple:
    return target.indices if isinstance(target, Elem) else ()


def _allocated(init) -> tuple:
    """What an allocation evaluates: an array's shape, or a scalar's value."""
    return init.shape if isinstance(init, ArrayAlloc) else (init,)


def _checked_dealloc(s: Dealloc, check: bool) -> tuple:
    return () if not check or s.discard or s.init is None else _allocated(s.init)


#: every statement class -> its :class:`StatementKind` (``tests/test_rules_tables.py``
#: fails when a statement class has no entry)
STATEMENTS: dict[type, StatementKind] = {
    Update: StatementKind(expressions=lambda s: (s.target, s.value),
                          targets=lambda s: (s.target,),
                          before=lambda s, check: (s.value, *_indices(s.target)),
                          subarrays=lambda s: (s.target,)),
    Swap: StatementKind(expressions=lambda s: (s.a, s.b), targets=lambda s: (s.a, s.b),
                        before=lambda s, check: (*_indices(s.a), *_indices(s.b))),
    Alloc: StatementKind(expressions=lambda s: (s.init,), binds=lambda s: s.name,
                         before=lambda s, check: _allocated(s.init)),
    Dealloc: StatementKind(expressions=lambda s: _present(s.init),
                           checked=lambda s: _present(s.init), binds=lambda s: s.name,
                           before=_checked_dealloc),
    Call: StatementKind(expressions=_call_targets, targets=_call_targets,
                        effects=frozenset({"calls"}),
                        before=lambda s, check: tuple(i for a in s.args for i in _indices(a)),
                        subarrays=_call_targets),
    Block: StatementKind(blocks=lambda s: (s.body,)),
    Inverted: StatementKind(blocks=lambda s: (s.body,)),
    Uncompute: StatementKind(),  # (a marker the checker resolves into an Inverted block)
    If: StatementKind(blocks=lambda s: (s.then, s.orelse), expressions=lambda s: (s.pre, s.post)),
    While: StatementKind(blocks=lambda s: (s.body,), expressions=lambda s: (s.cond, s.post)),
    For: StatementKind(blocks=lambda s: (s.body,),
                       expressions=lambda s: (s.start, s.stop, s.step),
                       before=lambda s, check: (s.start, s.stop, s.step)),
    Print: StatementKind(expressions=lambda s: _present(*s.args), effects=frozenset({"output"}),
                         before=lambda s, check: _present(*s.args)),
    Assert: StatementKind(expressions=lambda s: (s.cond,), effects=frozenset({"fails"}),
                          before=lambda s, check: (s.cond,)),
}


def statement_kind(s: Stmt) -> StatementKind:
    try:
        return STATEMENTS[type(s)]
    except KeyError:
        raise TypeError(f"{type(s).__name__} is not a statement kind of the IR "
                        "(add it to ir.STATEMENTS)") from None


def statement_expressions(s: Stmt, checked: bool = True) -> tuple[Expr, ...]:
    """The expressions ``s`` holds itself, in evaluation order; ``checked=False``: only
    those code without runtime checks evaluates."""
    kind = statement_kind(s)
    out = kind.expressions(s)
    if not checked:
        skip = kind.checked(s)
        out = tuple(e for e in out if not any(e is c for c in skip))
    return out


@dataclass(frozen=True)
class Function:
    """A whole reversible function: parameters are in-out, nothing is returned."""

    name: str
    params: tuple[str, ...]
    body: tuple[Stmt, ...]
    filename: str
    firstlineno: int
    source_lines: tuple[str, ...] = field(default=(), compare=False, repr=False)
    #: its checkpointed loops, each outlined as a function of its own, which the body
    #: calls by :attr:`LoopDef.name` (``for t in checkpointed(...)``)
    loops: tuple[LoopDef, ...] = field(default=(), compare=False, repr=False)

    def line_text(self, line: int) -> str:
        """The user's source text of a line (``''`` when unknown)."""
        i = line - self.firstlineno
        if 0 <= i < len(self.source_lines):
            return self.source_lines[i].rstrip("\n")
        return ""


@dataclass(frozen=True)
class LoopDef:
    """An out-of-place loop run under a checkpointing strategy::

        for t in checkpointed(range(a, b, s), Revolve(snapshots=20), new=y1, old=y0):
            step(y1, y0, t, h)

    The parser outlines its body as the function ``step`` (parameters: the new state,
    the old state, the loop variable, then the variables the body reads from around it)
    and puts a :class:`Call` of :attr:`name` where the loop was, passing
    ``(*new, *old, a, b, s, *free)``.  The compiler resolves that name to the loop's
    program, whose kernels run the strategy's schedule over the step's kernels.
    ``while checkpointed(condition, Online(snapshots=c), new=y1, old=y0)`` is outlined the
    same way, with its condition as a function of its own (:attr:`cond`).
    """

    name: str
    step: Function
    strategy: Any  # a revbench.checkpoint strategy (compared by value)
    n_state: int
    loc: Loc = field(default=NO_LOC, compare=False)
    #: a ``while checkpointed(condition, ...)`` loop's condition, outlined as the function
    #: ``cond(CONDITION_FLAG, *old, *free)``, whose body is ``flag ^= condition``; its
    #: range is ``range(max_steps)``.  None for a ``for`` loop.
    cond: Function | None = None


#: the steps a ``while checkpointed(...)`` loop may run (``max_steps=``) before it stops
#: with an error: a condition that never ends is caught, not waited for
DEFAULT_MAX_STEPS = 1_000_000
#: the ancillas that carry a value passed to a reversible call (``f(y, 2.0 * h)``): the
#: callee must not change that parameter (:func:`revbench.lang.check.check_calls`)
PASSED_VALUE_PREFIX = "_rb_arg"
#: the flag a checkpointed while loop's condition sets: its function's first parameter
CONDITION_FLAG = "_rb_go"


# --------------------------------------------------------------------------- #
# Walking helpers
# --------------------------------------------------------------------------- #


def sub_expressions(e: Expr) -> tuple[Expr, ...]:
    """The direct children of an expression."""
    if isinstance(e, Elem):
        return e.indices
    if isinstance(e, Slice):
        return tuple(b for b in (e.start, e.stop) if b is not None)
    if isinstance(e, BinOp):
        return (e.left, e.right)
    if isinstance(e, UnaryOp):
        return (e.operand,)
    if isinstance(e, Func):
        return e.args
    if isinstance(e, IfExp):
        return (e.cond, e.then, e.orelse)
    if isinstance(e, Compare):
        return e.operands
    if isinstance(e, BoolOp):
        return e.values
    if isinstance(e, (Reduce, Scan)):
        return (e.arg,)
    if isinstance(e, Derivative):
        return (*e.args, *e.directions)
    if isinstance(e, MatMul):
        return (e.a, e.b)
    if isinstance(e, ArrayAlloc):
        return e.shape
    return ()


def map_children(e: Expr, f) -> Expr:
    """``e`` rebuilt with each direct sub-expression ``c`` replaced by ``f(c)`` (a leaf is
    returned as it is): the one place transforms need to know every node's children."""
    if isinstance(e, Elem):
        return replace(e, indices=tuple(f(i) for i in e.indices))
    if isinstance(e, Slice):
        return replace(e, start=None if e.start is None else f(e.start),
                       stop=None if e.stop is None else f(e.stop))
    if isinstance(e, BinOp):
        return replace(e, left=f(e.left), right=f(e.right))
    if isinstance(e, UnaryOp):
        return replace(e, operand=f(e.operand))
    if isinstance(e, Func):
        return replace(e, args=tuple(f(a) for a in e.args))
    if isinstance(e, IfExp):
        return replace(e, cond=f(e.cond), then=f(e.then), orelse=f(e.orelse))
    if isinstance(e, Compare):
        return replace(e, operands=tuple(f(o) for o in e.operands))
    if isinstance(e, BoolOp):
        return replace(e, values=tuple(f(v) for v in e.values))
    if isinstance(e, (Reduce, Scan)):
        return replace(e, arg=f(e.arg))
    if isinstance(e, Derivative):
        return replace(e, args=tuple(f(a) for a in e.args),
                       directions=tuple(f(v) for v in e.directions))
    if isinstance(e, MatMul):
        return replace(e, a=f(e.a), b=f(e.b))
    if isinstance(e, ArrayAlloc):
        return replace(e, shape=tuple(f(d) for d in e.shape))
    return e


def is_reshape(e: Expr) -> bool:
    """A node whose elements are its operands' elements taken elsewhere: ``A.T`` (``A[j, i]``
    at ``(i, j)``) and ``np.outer(u, v)`` (``u[i] * v[j]``), lowered once types are known
    (:mod:`revbench.lang.products`)."""
    return (isinstance(e, UnaryOp) and e.op == "T") or (isinstance(e, BinOp) and e.op == "outer")


def is_subarray(e: Expr, ndim: int) -> bool:
    """Is ``e`` (of an array with ``ndim`` axes) a sub-array rather than one element?"""
    return isinstance(e, Elem) and (len(e.indices) < ndim
                                    or any(isinstance(i, Slice) for i in e.indices))


def subarray_axes(e: Elem, ndim: int) -> tuple[tuple[int, Slice | None], ...]:
    """The axes of a sub-array: for each, the array's axis it runs along and its
    :class:`Slice` (``None`` where the axis is not indexed at all: all of it)."""
    out: list[tuple[int, Slice | None]] = []
    for ax in range(ndim):
        part = e.indices[ax] if ax < len(e.indices) else None
        if part is None or isinstance(part, Slice):
            out.append((ax, part))
    return tuple(out)


def slice_bounds(name: str, axis: int, part: Slice | None) -> tuple[Expr, Expr]:
    """``(lo, hi)`` of a slice of axis ``axis`` of array ``name``, as expressions with
    negative bounds counted from the end (``x[:-1]`` is ``x[0:len(x) - 1]``)."""
    n = Shape(name, axis)

    def bound(b: Expr | None, default: Expr) -> Expr:
        if b is None:
            return default
        if isinstance(b, Const) and type(b.value) is int:
            return b if b.value >= 0 else BinOp("+", b, n)
        return IfExp(Compare(("<",), (b, Const(0))), BinOp("+", b, n), b)

    if part is None:
        return Const(0), n
    return bound(part.start, Const(0)), bound(part.stop, n)


def slice_step(part: Slice | None) -> int:
    """The step of one axis of a sub-array (1 for an axis not indexed at all)."""
    return 1 if part is None else part.step


def walk_expr(e: Expr):
    """Yield ``e`` and every expression below it, depth first."""
    yield e
    for c in sub_expressions(e):
        yield from walk_expr(c)


def walk_elementwise(e: Expr):
    """``walk_expr`` without the insides of sums: what a whole-array statement
    evaluates per element (the arrays inside a sum are summed, not indexed)."""
    yield e
    if not isinstance(e, (Reduce, Scan, Derivative, MatMul)):
        for c in sub_expressions(e):
            yield from walk_elementwise(c)


def names_read(e: Expr) -> set[str]:
    """Variable names whose *values* an expression reads (``len``/``shape`` excluded)."""
    out: set[str] = set()
    for n in walk_expr(e):
        if isinstance(n, (Var, Elem)):
            out.add(n.name)
        elif isinstance(n, ArrayAlloc) and n.kind == "copy" and n.source:
            out.add(n.source)
    return out


def names_used(e: Expr) -> set[str]:
    """Every variable an expression needs: values read, ``len``/``shape``, the array an
    allocation copies or mimics."""
    out: set[str] = set()
    for n in walk_expr(e):
        if isinstance(n, (Var, Elem, Len, Shape)):
            out.add(n.name)
        elif isinstance(n, ArrayAlloc) and n.source:
            out.add(n.source)
    return out


def child_blocks(s: Stmt) -> tuple[tuple[Stmt, ...], ...]:
    """The statement lists nested directly inside a statement."""
    return statement_kind(s).blocks(s)


def walk_stmts(body: tuple[Stmt, ...]):
    """Yield every statement of a body, nested ones included, in source order."""
    for s in body:
        yield s
        for b in child_blocks(s):
            yield from walk_stmts(b)


def names_written(body: tuple[Stmt, ...]) -> set[str]:
    """Every variable a body may change (targets, swaps, call arguments, ancillas)."""
    out: set[str] = set()
    for s in walk_stmts(body):
        out.update(written_names(s))
    return out


def simple_writes(s: Stmt) -> tuple[str, ...] | None:
    """What a simple statement writes, its targets first (a swap's two sides, an update's
    target, the ancilla an allocation binds); None for a statement holding others or
    calling a function (debuggers and ``explain`` show those by their own structure)."""
    kind = statement_kind(s)
    if kind.blocks(s) or "calls" in kind.effects:
        return None
    bound = kind.binds(s)
    return tuple(t.name for t in kind.targets(s)) + ((bound,) if bound is not None else ())


def written_names(s: Stmt) -> set[str]:
    """The variables ``s`` itself writes: its targets (a reverse sweep's call updates the
    adjoints it carries, a tangent call the tangents), the variable it allocates or
    releases."""
    kind = statement_kind(s)
    out = {t.name for t in kind.targets(s)}
    bound = kind.binds(s)
    if bound is not None:
        out.add(bound)
    return out


__all__ = [
    "ADJOINT_PREFIX",
    "NO_LOC",
    "REDUCE_SPELLINGS",
    "STATEMENTS",
    "Alloc",
    "ArrayAlloc",
    "Assert",
    "BinOp",
    "Block",
    "BoolOp",
    "Call",
    "Compare",
    "Const",
    "Dealloc",
    "Elem",
    "Expr",
    "For",
    "Func",
    "Function",
    "If",
    "IfExp",
    "Inverted",
    "Len",
    "Loc",
    "LoopDef",
    "Print",
    "Shape",
    "Slice",
    "StatementKind",
    "Stmt",
    "Swap",
    "Target",
    "UnaryOp",
    "Uncompute",
    "Update",
    "Var",
    "While",
    "adjoint_name",
    "child_blocks",
    "is_adjoint",
    "is_reshape",
    "is_subarray",
    "map_children",
    "names_read",
    "names_used",
    "names_written",
    "replace",
    "slice_bounds",
    "slice_step",
    "statement_expressions",
    "statement_kind",
    "sub_expressions",
    "subarray_axes",
    "walk_expr",
    "walk_stmts",
    "written_names",
]
