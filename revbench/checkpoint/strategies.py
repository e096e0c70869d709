"""The space-time knob: how a :class:`~revbench.checkpoint.TimeLoop` gets its states back.

Each strategy is a small immutable object (as ``checkpoint_schedules``' schedules
are) that knows which loops it fits, how many state slots it needs, and how to
write its schedule against a :class:`~revbench.checkpoint.plan.PlanBuilder`.

=====================  =====================================================  ==============
strategy               how states come back                                   for
=====================  =====================================================  ==============
``StoreAll()``         every state of the forward sweep is kept               both kinds
``Periodic(every=k)``  every k-th state kept; segments recomputed from them   both
``Revolve(c)``         Griewank's optimal binomial schedule, c snapshots      both
``Bennett(k=2)``       Bennett's pebbling: intermediate states *uncomputed*   out-of-place
                       by the inverse step, k-ary
``Online(c)``          c snapshots placed online, for loops of unknown        both
                       length (``while``); segments reversed by Revolve
``TwoLevel(k, c)``     every k-th state on disk, segments reversed by         both
                       Revolve(c) in RAM
``Multistage(c, d)``   Revolve's schedule with c snapshots in RAM and d on    both
                       disk, the busiest in RAM (checkpoint_schedules)
``Reverse()``          each earlier state recovered by running the step       in-place
                       backwards: no stored state
=====================  =====================================================  ==============

Each class is registered in :data:`STRATEGIES` when it is defined, and carries what the
rest of revbench needs to know about it: its command-line name, its knob, its plot marker,
the loops it fits and the settings the experiments try by default.  The command line of
``revbench.experiments``, its plots and default lists, :func:`fitting`, the exports of
``revbench.checkpoint`` and the tests read the registry; adding a strategy is one class
here (and its planner in ``plan.py`` if it needs a new schedule), nothing else.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import ClassVar

from revbench.checkpoint import actions, disk, plan

INPLACE = "in-place"
OUT_OF_PLACE = "out-of-place"

#: every registered strategy class by its class name, in the order they were defined: the
#: order of :func:`fitting`, of the default lists and of the command line's help
STRATEGIES: dict[str, type[Strategy]] = {}

#: Bennett(k) is offered by default only where its forward steps, about
#: T ** log_k(2k - 1), stay within this many times T
BENNETT_COST_LIMIT = 200


def _positive_int(value: object, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def _root(n_steps: int) -> int:
    """About the square root of the loop's length: a knob setting in the middle of the range."""
    return max(2, round(math.sqrt(n_steps)))


class Strategy:
    """Base class: a way to recover a loop's states for its reverse sweep.

    A subclass that sets ``cli_name`` in its body is registered in :data:`STRATEGIES`
    (a subclass without one, such as a variant of a registered strategy, is not).  Set the
    class attributes below without annotations: on a dataclass an annotation would make
    them fields.
    """

    #: the name on the command line (``revolve:10``): lower-case letters, unique
    cli_name: ClassVar[str] = ""
    #: the dataclass field that is the strategy's knob (``"snapshots"``), None if it has none
    knob_name: ClassVar[str | None] = None
    #: the knob's least value, checked when an object is made
    knob_min: ClassVar[int] = 1
    #: the letter the command line's help uses for the knob (``revolve:C``)
    knob_letter: ClassVar[str] = ""
    #: the matplotlib marker of its points and lines in the experiments' plots (unique)
    marker: ClassVar[str] = ""
    #: the loop kinds this strategy fits
    kinds: ClassVar[tuple[str, ...]] = (INPLACE, OUT_OF_PLACE)
    #: why it fits only those kinds: said when it is given a loop of the other kind
    fit_reason: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "cli_name" in cls.__dict__:
            _register(cls)

    def __post_init__(self) -> None:
        if self.knob_name is not None:
            _positive_int(getattr(self, self.knob_name), f"{self.name}({self.knob_name}=...)",
                          self.knob_min)

    @classmethod
    def fits(cls, inplace: bool) -> bool:
        return (INPLACE if inplace else OUT_OF_PLACE) in cls.kinds

    @classmethod
    def defaults(cls, n_steps: int) -> list[Strategy]:
        """The settings the experiments run by default on a loop of ``n_steps`` steps
        (where the strategy fits it): a small range of the knob, scaled to the length."""
        return [cls()]

    @classmethod
    def spelling(cls) -> str:
        """How it is written in Python, knob elided: ``Revolve(snapshots=...)``."""
        return f"{cls.__name__}({'' if cls.knob_name is None else cls.knob_name + '=...'})"

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def knob(self) -> str:
        """The knob's setting, as the experiments' tables and plots label it."""
        if self.knob_name is None:
            return ""
        return f"{self.knob_name}={getattr(self, self.knob_name)}"

    @property
    def label(self) -> str:
        return f"{self.name}({self.knob})"

    def slots(self, n_steps: int, inplace: bool) -> int:
        """An upper bound on the states held at once (the storage to allocate)."""
        raise NotImplementedError

    def schedule(self, builder: plan.PlanBuilder, n_steps: int) -> None:
        """The schedule on a :class:`~revbench.checkpoint.plan.PlanBuilder` (what the
        experiments' counts, the pebble plots and the course read): the very actions the
        compiled schedule yields (:meth:`compiled_schedule`), run in Python and replayed
        (:func:`plan.from_actions`) -- one schedule per strategy, not a second copy of it
        written for the builder.  A strategy without a compiled schedule writes this."""
        compiled = self.compiled_schedule()
        if compiled is None:
            raise NotImplementedError(f"{self.name} has no schedule")
        plan.from_actions(builder, n_steps, compiled.actions(n_steps, compiled.knob))

    def fast_plan(self, n_steps: int, inplace: bool) -> plan.FastPlan | None:
        """The schedule as NumPy-generated sweeps, where it is that regular (else None)."""
        return None

    def loop_schedule(self) -> LoopSchedule | None:
        """How a checkpointed loop of reversible code (``for t in checkpointed(...)``) runs
        this strategy: its schedule as a compiled generator (:mod:`.actions`), or None for
        a strategy that needs no schedule (``Reverse()``: the loop runs as written)."""
        raise NotImplementedError(f"{self.name} cannot run inside reversible code yet")

    def compiled_schedule(self) -> LoopSchedule | None:
        """The schedule ``TimeLoop`` runs in its kernel: :meth:`loop_schedule`'s, where the
        strategy has one (else None: ``TimeLoop`` plans its rows in Python, :meth:`schedule`)."""
        try:
            return self.loop_schedule()
        except NotImplementedError:
            return None

    def __repr__(self) -> str:
        return self.label


@dataclass(frozen=True)
class LoopSchedule:
    """A strategy's schedule as a compiled generator: ``actions(n, knob)`` yields the
    actions of :mod:`revbench.checkpoint.actions`; ``slots(n, knob)`` is the store they
    need, ``peak(n, knob)`` the most states alive at once (what ``TimeLoop.stats``
    reports)."""

    actions: object
    slots: object
    peak: object
    knob: int = 0
    #: its schedule runs the step's inverse (``INV``): Bennett's uncomputation
    uncomputes: bool = False
    #: for loops whose length is known only when they end (``while checkpointed(...)``):
    #: ``online(n, knob, ended)`` with ``n = -1`` asks before each step (``ASK``)
    online: object = None
    #: states on the second level (disk): ``disk(n, knob)``, None for a RAM-only schedule;
    #: and ``disk_store(n, like, directory, label)``, which maps a store of them
    disk: object = None
    disk_store: object = None
    #: its ``slots``, ``peak`` and ``disk`` simulate the whole schedule (Multistage's: seconds
    #: in Python for a million steps): :meth:`size` compiles them
    compiled_sizes: bool = False

    def size(self, fn: object, n: int) -> int:
        """``fn(n, knob)`` -- ``slots``, ``peak`` or ``disk`` -- compiled where the schedule
        says its sizes simulate it (``compiled_sizes``) and ``fn`` is one of :mod:`.actions`;
        otherwise run as it is, in Python.  (The other schedules' sizes are closed forms of
        microseconds: compiling each took a quarter of a second, in every process.)"""
        if not self.compiled_sizes or getattr(fn, "__module__", None) != actions.__name__:
            return int(fn(n, self.knob))
        from revbench.backends.numba_backend import helper

        return int(helper(fn)(n, self.knob))


def _register(cls: type[Strategy]) -> None:
    """Put ``cls`` in :data:`STRATEGIES`, after checking that it says what the registry's
    readers need.  Defining a class of the same module and name again (a reload) replaces it."""
    def same(other: type[Strategy]) -> bool:
        return (other.__module__, other.__qualname__) == (cls.__module__, cls.__qualname__)

    problems = []
    if not re.fullmatch("[a-z]+", cls.cli_name):  # what the command line's parser reads
        problems.append(f"cli_name must be lower-case letters, got {cls.cli_name!r}")
    if not cls.marker:
        problems.append("it needs a plot marker")
    if not cls.kinds or not set(cls.kinds) <= {INPLACE, OUT_OF_PLACE}:
        problems.append(f"kinds must be some of {INPLACE!r}, {OUT_OF_PLACE!r}, got {cls.kinds!r}")
    if cls.knob_name is not None and not cls.knob_letter:
        problems.append(f"its knob {cls.knob_name!r} needs a knob_letter for the command line")
    if not (cls.__doc__ or "").strip():
        problems.append("it needs a docstring (what it does, in a line)")
    for other in STRATEGIES.values():
        if same(other):
            continue
        for attr in ("__name__", "cli_name", "marker"):
            if getattr(other, attr) == getattr(cls, attr):
                problems.append(f"its {attr.strip('_')} {getattr(cls, attr)!r} is {other.__name__}'s")
    if problems:
        raise TypeError(f"strategy {cls.__name__} cannot be registered: " + "; ".join(problems))
    STRATEGIES[cls.__name__] = cls


@dataclass(frozen=True, repr=False)
class StoreAll(Strategy):
    """Keep every state of the forward sweep: T + 1 states, T forward steps."""

    cli_name = "storeall"
    marker = "s"

    def slots(self, n_steps: int, inplace: bool) -> int:
        return n_steps + 1

    def fast_plan(self, n_steps: int, inplace: bool) -> plan.FastPlan:
        return plan.store_all_fast(n_steps, inplace)

    def loop_schedule(self) -> LoopSchedule:
        return LoopSchedule(actions.store_all_actions, actions.store_all_slots,
                            actions.store_all_peak)


@dataclass(frozen=True, repr=False)
class Periodic(Strategy):
    """Keep every ``every``-th state; recompute each segment from its start."""

    every: int = 10
    cli_name = "periodic"
    knob_name = "every"
    knob_letter = "K"
    marker = "D"

    @classmethod
    def defaults(cls, n_steps: int) -> list[Strategy]:
        return [cls(every=_root(n_steps))]

    def slots(self, n_steps: int, inplace: bool) -> int:
        return actions.periodic_slots(n_steps, self.every)

    def loop_schedule(self) -> LoopSchedule:
        return LoopSchedule(actions.periodic_actions, actions.periodic_slots,
                            actions.periodic_peak, self.every)


@dataclass(frozen=True, repr=False)
class Revolve(Strategy):
    """Griewank's binomial checkpointing with ``snapshots`` stored states: the fewest
    forward steps any schedule with that many snapshots can make."""

    snapshots: int = 10
    cli_name = "revolve"
    knob_name = "snapshots"
    knob_letter = "C"
    marker = "o"

    @classmethod
    def defaults(cls, n_steps: int) -> list[Strategy]:
        log = max(1, math.ceil(math.log2(n_steps + 1)))
        return [cls(snapshots=c) for c in sorted({max(1, log // 2), log, _root(n_steps)})
                if c < n_steps]

    def slots(self, n_steps: int, inplace: bool) -> int:
        return actions.revolve_slots(n_steps, self.snapshots)

    def loop_schedule(self) -> LoopSchedule:
        return LoopSchedule(actions.revolve_actions, actions.revolve_slots,
                            actions.revolve_peak, self.snapshots)


@dataclass(frozen=True, repr=False)
class Bennett(Strategy):
    """Bennett's k-ary pebbling: intermediate states are uncomputed by running the
    inverse step instead of being stored or thrown away (out-of-place steps)."""

    k: int = 2
    cli_name = "bennett"
    knob_name = "k"
    knob_min = 2
    knob_letter = "K"
    marker = "^"
    kinds = (OUT_OF_PLACE,)
    fit_reason = "Bennett's pebbling uncomputes states of an out-of-place step"

    @classmethod
    def defaults(cls, n_steps: int) -> list[Strategy]:
        """k = 2, 4, 16, each where its forward steps stay within
        :data:`BENNETT_COST_LIMIT` times T (or k >= T)."""
        return [cls(k=k) for k in (2, 4, 16)
                if n_steps ** (math.log(2 * k - 1, k) - 1) <= BENNETT_COST_LIMIT or k >= n_steps]

    def slots(self, n_steps: int, inplace: bool) -> int:
        return plan.bennett_slots(n_steps, self.k)

    def loop_schedule(self) -> LoopSchedule:
        return LoopSchedule(actions.bennett_actions, actions.bennett_bound, _bennett_peak,
                            self.k, uncomputes=True)


@dataclass(frozen=True, repr=False)
class Online(Strategy):
    """Checkpointing for loops whose length is known only when they end (a ``while`` loop
    until convergence or an event): ``snapshots`` states kept online, spread over the loop
    by doubling their stride, then each segment reversed by the binomial schedule.  On a
    loop of known length it costs a little more than ``Revolve`` with as many snapshots."""

    snapshots: int = 10
    cli_name = "online"
    knob_name = "snapshots"
    knob_min = 3
    knob_letter = "C"
    marker = "v"

    @classmethod
    def defaults(cls, n_steps: int) -> list[Strategy]:
        return [cls(snapshots=max(3, _root(n_steps)))] if n_steps > 3 else []

    def slots(self, n_steps: int, inplace: bool) -> int:
        return actions.online_slots(n_steps, self.snapshots)

    def loop_schedule(self) -> LoopSchedule:
        return LoopSchedule(actions.online_known, actions.online_slots, actions.online_peak,
                            self.snapshots, online=actions.online_actions)


class _OnDisk(Strategy):
    """A strategy with a second storage level (memory-mapped files in ``directory``): its
    knob, then ``snapshots`` in RAM.  What it needs -- slots, disk states -- comes from its
    compiled schedule (:meth:`loop_schedule`), so a subclass says only that.  (No
    ``cli_name`` here: the base is not registered.)"""

    #: the least number of RAM snapshots
    snapshots_min: ClassVar[int] = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        _positive_int(self.snapshots, f"{self.name}(snapshots=...)", self.snapshots_min)
        if isinstance(self.directory, os.PathLike):  # (a pathlib.Path: kept as its text)
            object.__setattr__(self, "directory", os.fspath(self.directory))
        if self.directory is not None and not isinstance(self.directory, str):
            raise ValueError(f"{self.name}(directory=...) must be a path (a str or a "
                             f"pathlib.Path), got {self.directory!r}")

    @classmethod
    def defaults(cls, n_steps: int) -> list[Strategy]:
        return [cls(**{cls.knob_name: _root(n_steps)})] if n_steps > 3 else []

    @property
    def knob(self) -> str:
        return f"{self.knob_name}={getattr(self, self.knob_name)}, snapshots={self.snapshots}"

    def slots(self, n_steps: int, inplace: bool) -> int:
        sched = self.loop_schedule()
        return sched.size(sched.slots, n_steps)

    def disk_states(self, n_steps: int) -> int:
        """The states it keeps on disk for a loop of ``n_steps`` steps."""
        sched = self.loop_schedule()
        return sched.size(sched.disk, n_steps)


@dataclass(frozen=True, repr=False)
class TwoLevel(_OnDisk):
    """Every ``period``-th state on disk (memory-mapped files), each segment between them
    reversed by Revolve with ``snapshots`` states in RAM: memory beyond RAM, for loops
    whose states do not fit it (``directory``: where the files go, default the system's
    temporary directory)."""

    period: int = 100
    snapshots: int = 4
    directory: str | os.PathLike | None = None
    cli_name = "twolevel"
    knob_name = "period"
    knob_letter = "K"
    marker = "X"

    def loop_schedule(self) -> LoopSchedule:
        return LoopSchedule(actions.two_level_actions, actions.two_level_slots,
                            actions.two_level_peak, (self.period, self.snapshots),
                            disk=actions.two_level_disk, disk_store=disk.mapped)


@dataclass(frozen=True, repr=False)
class Multistage(_OnDisk):
    """Griewank's binomial schedule with ``disk`` snapshots on disk (memory-mapped files)
    and ``snapshots`` more in RAM: checkpoint_schedules' ``MultistageCheckpointSchedule``
    (Stumm & Walther, 2009), which puts the snapshots read and written most in RAM.  As
    many forward steps as ``Revolve(snapshots + disk)``, with only ``snapshots + 2`` states
    in RAM (``directory``: where the files go, default the system's temporary directory)."""

    disk: int = 16
    snapshots: int = 4
    directory: str | os.PathLike | None = None
    cli_name = "multistage"
    knob_name = "disk"
    knob_letter = "D"
    marker = "h"
    snapshots_min = 0

    def loop_schedule(self) -> LoopSchedule:
        actions.load_advance()  # (the library's step, before the schedule compiles)
        return LoopSchedule(actions.multistage_actions, actions.multistage_slots,
                            actions.multistage_peak, (self.snapshots, self.disk),
                            disk=actions.multistage_disk, disk_store=disk.mapped,
                            compiled_sizes=True)


@dataclass(frozen=True, repr=False)
class Reverse(Strategy):
    """Run the in-place step backwards: no stored state at all (one saved copy of the
    initial state measures how well the inverse recovered it)."""

    cli_name = "reverse"
    marker = "*"
    kinds = (INPLACE,)
    fit_reason = "Reverse() runs the step backwards in place, so it needs an in-place step (inplace=True)"

    def slots(self, n_steps: int, inplace: bool) -> int:
        return 2

    def schedule(self, builder: plan.PlanBuilder, n_steps: int) -> None:
        # (written for the builder: it keeps a copy of s[0] aside, to measure the round
        # trip, which no compiled action stands for -- TimeLoop's kernel keeps it itself)
        plan.reverse(builder, n_steps)

    def fast_plan(self, n_steps: int, inplace: bool) -> plan.FastPlan:
        return plan.reverse_fast(n_steps)

    def loop_schedule(self) -> None:
        return None  # an in-place loop, run as written: its reverse sweep runs it backwards

    def compiled_schedule(self) -> LoopSchedule:
        # (TimeLoop's in-place steps, run backwards in its kernel: the same sweep, with the
        # initial state kept to measure the round trip)
        return LoopSchedule(actions.reverse_actions, actions.reverse_slots, actions.reverse_peak)


def _bennett_peak(n_steps: int, k: int) -> int:
    return plan.bennett_slots(n_steps, k) if n_steps else 1


def fitting(inplace: bool) -> list[str]:
    """The names of the registered strategies that fit a loop of this kind."""
    return [name for name, cls in STRATEGIES.items() if cls.fits(inplace)]
