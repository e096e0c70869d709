"""Directions, and the passes that make each direction's program: one place.

A reversible function compiles to several programs.  Which one a compiled function runs is
its :class:`Direction`, a small value (not a string to parse):

========================  ========================================================
``FORWARD``               the function as written
``INVERSE``               its inverse (``~f``)
``BACKWARD``              the reverse sweep of AD of the forward run: restores the
                          inputs from the outputs while carrying adjoints
``BACKWARD_INVERSE``      the same for the inverse program
``d.with_tangent()``      the tangent (forward-mode) program of ``d``: what a
                          tangent call of a callee runs (second derivatives)
``HVP`` / ``HVP_INVERSE`` the tangent of the run followed by its reverse sweep, in one
                          program: seeded with v on the inputs, it gives H v
========================  ========================================================

Each direction's program is its *base* program's IR (:attr:`Direction.program`: the
function or its inverse) taken through a list of IR-to-IR passes, :func:`passes` -- the
one table of which pass runs for which direction.  :func:`transform` runs the passes that
define the program's meaning (what :meth:`Program.typed` returns: the debugger and
``explain`` show it), :func:`optimise` the ones that only make its code faster or
smaller.  Each pass is a function ``(TypedFunction, Host, Request, Direction) -> TypedFunction``
in :data:`PASSES` (it also receives the direction); a new pass is one entry there and
one line in :func:`passes`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from revbench.lang import ir
from revbench.lang.types import TypedFunction, VarType, infer


@dataclass(frozen=True)
class Direction:
    """Which program of a reversible function a compiled function runs.

    ``inverse``: the program is the function's inverse (else the function as written);
    ``sweep``: the reverse sweep of AD of that program (run after it); ``tangent``: the
    tangent program of the above; ``hvp``: the tangent of the run followed by its
    reverse sweep (excludes ``sweep`` and ``tangent``); ``before_sweep``: a plain run that
    a reverse sweep follows at once, in the same call (``grad``, ``value_and_grad``,
    ``jacobian``), which leaves the checks of its ancillas' ``del`` to that sweep;
    ``adjoints_only``: a reverse sweep whose caller reads only the adjoints it returns,
    not the arguments it restores (``grad`` and the like, with ``check=False``: nothing
    compares them with their values at entry), so it need not restore them."""

    inverse: bool = False
    sweep: bool = False
    tangent: bool = False
    hvp: bool = False
    before_sweep: bool = False
    adjoints_only: bool = False

    def __post_init__(self) -> None:
        if self.hvp and (self.sweep or self.tangent):
            raise ValueError("an hvp direction is neither a sweep nor a tangent")
        if self.before_sweep and (self.sweep or self.tangent or self.hvp):
            raise ValueError("only a plain run comes before a sweep")
        if self.adjoints_only and not (self.sweep and not self.tangent):
            raise ValueError("only a reverse sweep can give its adjoints alone")

    # -- names: in generated files' headers, error messages and the cache's keys ---------
    @property
    def name(self) -> str:
        """``forward``, ``inverse``, ``backward``, ``backward-inverse``, ``hvp``,
        ``hvp-inverse``, ``tangent-`` and one of the first four, ``forward-before-sweep``
        and ``inverse-before-sweep``, or ``backward-adjoints`` and
        ``backward-inverse-adjoints`` (:attr:`adjoints_only`)."""
        if self.adjoints_only:
            return ("backward-inverse" if self.inverse else "backward") + "-adjoints"
        if self.before_sweep:
            return ("inverse" if self.inverse else "forward") + "-before-sweep"
        if self.hvp:
            return "hvp-inverse" if self.inverse else "hvp"
        if self.sweep:
            base = "backward-inverse" if self.inverse else "backward"
        else:
            base = "inverse" if self.inverse else "forward"
        return "tangent-" + base if self.tangent else base

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Direction({self.name!r})"

    @classmethod
    def parse(cls, name: str) -> Direction:
        """The direction called ``name`` (:attr:`name`'s inverse)."""
        found = _BY_NAME.get(name)
        if found is None:
            raise ValueError(f"unknown direction {name!r}; one of {sorted(_BY_NAME)}")
        return found

    # -- relations ---------------------------------------------------------------------
    @property
    def program(self) -> Direction:
        """The run whose source lines this direction's code executes: ``FORWARD`` for the
        forward run and its sweeps and tangents, ``INVERSE`` for the inverse's."""
        return INVERSE if self.inverse else FORWARD

    @property
    def second_order(self) -> bool:
        return self.tangent or self.hvp

    @property
    def is_run(self) -> bool:
        """A plain forward or inverse run (no derivative)."""
        return not (self.sweep or self.tangent or self.hvp)

    def flipped(self) -> Direction:
        """The same kind of program of the other base: forward <-> inverse."""
        return replace(self, inverse=not self.inverse)

    def before_its_sweep(self) -> Direction:
        """This run, as the run a reverse sweep follows at once (:attr:`before_sweep`)."""
        if not self.is_run:
            raise ValueError(f"{self.name} is not a plain run")
        return replace(self, before_sweep=True)

    def backward(self, adjoints_only: bool = False) -> Direction:
        """The reverse sweep of this direction's program (``adjoints_only``: one whose
        caller reads only its adjoints, :attr:`adjoints_only`)."""
        return Direction(inverse=self.inverse, sweep=True, adjoints_only=adjoints_only)

    def restoring(self) -> Direction:
        """This direction, restoring the arguments where it is a sweep of adjoints only:
        what every program runs where restoring costs nothing (checks on, a custom
        adjoint, a checkpointed loop's own kernels)."""
        return replace(self, adjoints_only=False)

    def with_tangent(self) -> Direction:
        """The tangent program of this direction's program."""
        if self.second_order:
            raise ValueError(f"{self.name} has no tangent program")
        return replace(self, tangent=True)

    def without_tangent(self) -> Direction:
        return replace(self, tangent=False)

    def hvp_of(self) -> Direction:
        """The Hessian-vector-product program of this direction's base."""
        return Direction(inverse=self.inverse, hvp=True)

    def relative(self, kind: str) -> Direction:
        """A view's ``kind`` (``"forward"``, ``"inverse"``, ``"backward"`` or its
        synonym ``"adjoint"``) as a direction, for a view running this direction:
        ``(~f).kernel("forward")`` runs f's inverse."""
        if kind in ("backward", "adjoint"):
            return self.backward()
        if kind == "forward":
            return self.program
        if kind == "inverse":
            return self.program.flipped()
        raise ValueError(f"unknown kind {kind!r}")


FORWARD = Direction()
INVERSE = Direction(inverse=True)
BACKWARD = Direction(sweep=True)
BACKWARD_INVERSE = Direction(inverse=True, sweep=True)
HVP = Direction(hvp=True)
HVP_INVERSE = Direction(inverse=True, hvp=True)
#: the first-order directions (the programs ``kernel()`` and the batched drivers call)
FIRST_ORDER = (FORWARD, INVERSE, BACKWARD, BACKWARD_INVERSE)
#: every direction a program compiles to
ALL = (*FIRST_ORDER, *(d.with_tangent() for d in FIRST_ORDER), HVP, HVP_INVERSE,
       FORWARD.before_its_sweep(), INVERSE.before_its_sweep(),
       FORWARD.backward(adjoints_only=True), INVERSE.backward(adjoints_only=True))
_BY_NAME = {d.name: d for d in ALL}


# --------------------------------------------------------------------------------------- #
# The passes
# --------------------------------------------------------------------------------------- #


class Host(Protocol):
    """What the passes ask of the program being compiled (:class:`revbench.compiler.Program`)."""

    def ir_for(self, program: Direction) -> ir.Function: ...

    def callee_writes(self, call: ir.Call) -> tuple[bool, ...]: ...

    def callee_writes_only(self, call: ir.Call) -> tuple[bool, ...]: ...

    def callee_writes_mirrored(self, call: ir.Call) -> tuple[bool, ...]: ...

    def refuse_written_inactive(self, inactive: frozenset[str]) -> None: ...


@dataclass(frozen=True)
class Request:
    """One specialisation: the arguments' types, the adjoint lanes, the arguments left
    without an adjoint."""

    signature: tuple[VarType, ...]
    lanes: int = 1
    inactive: frozenset[str] = frozenset()


Pass = Callable[[TypedFunction, Host, Request, Direction], TypedFunction]


def _adjoint(typed: TypedFunction, host: Host, req: Request, d: Direction) -> TypedFunction:
    """The reverse sweep with adjoint variables (:mod:`revbench.transforms.adjoint`); an
    hvp's sweep has one lane (its tangent carries the direction v)."""
    from revbench.transforms.adjoint import adjoint

    host.refuse_written_inactive(req.inactive)
    func, full = adjoint(typed, 1 if d.hvp else req.lanes, req.inactive)
    return infer(func, full)


def _prepend_run(typed: TypedFunction, host: Host, req: Request, d: Direction) -> TypedFunction:
    """hvp: the forward (or inverse) run, then the reverse sweep, as one program."""
    run = infer(host.ir_for(d.program), req.signature)
    return infer(replace(typed.func, body=run.func.body + typed.func.body), typed.params)


def _drop_zero_adjoints(typed: TypedFunction, host: Host, req: Request,
                        d: Direction) -> TypedFunction:
    """Adjoint updates that add a product with a zero adjoint (:mod:`~.prune`)."""
    from revbench.transforms.prune import drop_zero_adjoint_updates

    return infer(drop_zero_adjoint_updates(typed.func, host.callee_writes), typed.params)


def _tangent(typed: TypedFunction, host: Host, req: Request, d: Direction) -> TypedFunction:
    """The tangent (forward-mode) program (:mod:`revbench.transforms.tangent`)."""
    from revbench.transforms.tangent import tangent

    # (of a plain run, ``inactive`` names the read-only arguments a jvp leaves fixed)
    constant = req.inactive if not (d.sweep or d.hvp) else frozenset()
    func, full = tangent(typed, constant)
    return infer(func, full)


def _prune(typed: TypedFunction, host: Host, req: Request, d: Direction) -> TypedFunction:
    """With ``check=False``: the statements nothing reads -- a reverse sweep's
    uncomputation, a forward run's ``~routine`` -- no runtime check needs them.  A sweep
    of adjoints only (:attr:`Direction.adjoints_only`) need not restore the arguments:
    only its adjoints are read after it (the uncompute of the loss goes too)."""
    from revbench.transforms.adjoint import is_adjoint
    from revbench.transforms.prune import prune

    live = None
    if d.adjoints_only:
        live = {p for p in typed.func.params if is_adjoint(p)}
    return replace(typed, func=prune(typed.func, host.callee_writes_only,
                                     host.callee_writes_mirrored, live=live))


def _cse(typed: TypedFunction, host: Host, req: Request, d: Direction) -> TypedFunction:
    """Each value once per step: a subexpression several statements in a row evaluate
    from the same operands is computed once, into a local they share
    (:mod:`revbench.transforms.cse`; types again: it adds locals)."""
    from revbench.transforms.cse import share_values

    return infer(share_values(typed), typed.params)


def _prune_before_sweep(typed: TypedFunction, host: Host, req: Request,
                        d: Direction) -> TypedFunction:
    """With checks on, a run that a reverse sweep follows at once: without the work only a
    ``del``'s check reads (:func:`~revbench.transforms.prune.prune_before_sweep`)."""
    from revbench.transforms.prune import prune_before_sweep

    return replace(typed, func=prune_before_sweep(typed.func, host.callee_writes_only,
                                                  host.callee_writes_mirrored))


def _prune_replays(typed: TypedFunction, host: Host, req: Request, d: Direction) -> TypedFunction:
    """With checks on, a reverse sweep: its replays of routines without the uncomputation
    that only a ``del``'s check reads (:func:`~revbench.transforms.prune.prune_replays`)."""
    from revbench.transforms.prune import prune_replays

    return replace(typed, func=prune_replays(typed.func, host.callee_writes_only))


def _hoist(typed: TypedFunction, host: Host, req: Request, d: Direction) -> TypedFunction:
    """Repeated loop-invariant element loads read once per iteration (types again:
    hoisting adds locals)."""
    from revbench.transforms.hoist import hoist

    ndims = {n: t.ndim for n, t in typed.env.items()}
    return infer(hoist(typed.func, ndims), typed.params)


#: every pass by name, as :func:`passes` lists them
PASSES: dict[str, Pass] = {
    "adjoint": _adjoint,
    "drop-zero-adjoints": _drop_zero_adjoints,
    "prepend-run": _prepend_run,
    "tangent": _tangent,
    "prune": _prune,
    "prune-before-sweep": _prune_before_sweep,
    "prune-replays": _prune_replays,
    "cse": _cse,
    "hoist": _hoist,
}


def passes(direction: Direction, check: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The passes that make ``direction``'s program from its base program's typed IR:
    ``(meaning, optimisation)``."""
    meaning: list[str] = []
    if direction.sweep or direction.hvp:
        meaning.append("adjoint")
    if (direction.tangent and direction.sweep) or direction.hvp:
        meaning.append("drop-zero-adjoints")  # (before the tangent transform sees them)
    if direction.hvp:
        meaning.append("prepend-run")
    if direction.second_order:
        meaning.append("tangent")
    optimising: list[str] = []
    if direction.sweep and not direction.tangent:
        optimising.append("drop-zero-adjoints")
    if not check and (not direction.second_order or (not direction.sweep and not direction.hvp)):
        # (a jvp's tangent run too: a tangent call keeps every tangent it is passed; the
        # tangents of sweeps keep the dead work, their calls mix adjoints and tangents)
        optimising.append("prune")
    elif direction.before_sweep:
        optimising.append("prune-before-sweep")
    elif direction.sweep and not direction.second_order:
        optimising.append("prune-replays")
    optimising += ["cse", "hoist"]
    return tuple(meaning), tuple(optimising)


def transform(direction: Direction, host: Host, req: Request) -> TypedFunction:
    """The typed program of ``direction``: its meaning passes, run on its base program."""
    typed = infer(host.ir_for(direction.program), req.signature)
    for name in passes(direction, check=True)[0]:
        typed = PASSES[name](typed, host, req, direction)
    return typed


def optimise(typed: TypedFunction, direction: Direction, check: bool, host: Host,
             req: Request) -> TypedFunction:
    """The optimising passes of ``direction`` on its typed program."""
    for name in passes(direction, check)[1]:
        typed = PASSES[name](typed, host, req, direction)
    return typed
