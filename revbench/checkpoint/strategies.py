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
``Reverse()``          each earlier state recovered by running the step       in-place
                       backwards: no stored state
=====================  =====================================================  ==============
"""

from __future__ import annotations

from dataclasses import dataclass

from revbench.checkpoint import plan

INPLACE = "in-place"
OUT_OF_PLACE = "out-of-place"


def _positive_int(value: object, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


class Strategy:
    """Base class: a way to recover a loop's states for its reverse sweep."""

    #: the loop kinds this strategy fits
    kinds: tuple[str, ...] = (INPLACE, OUT_OF_PLACE)

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def knob(self) -> str:
        """The knob's setting, as the experiments' tables and plots label it."""
        return ""

    @property
    def label(self) -> str:
        return f"{self.name}({self.knob})"

    def fits(self, inplace: bool) -> bool:
        return (INPLACE if inplace else OUT_OF_PLACE) in self.kinds

    def slots(self, n_steps: int, inplace: bool) -> int:
        """An upper bound on the states held at once (the storage to allocate)."""
        raise NotImplementedError

    def schedule(self, builder: plan.PlanBuilder, n_steps: int) -> None:
        raise NotImplementedError

    def fast_plan(self, n_steps: int, inplace: bool) -> plan.FastPlan | None:
        """The schedule as NumPy-generated sweeps, where it is that regular (else None)."""
        return None

    def __repr__(self) -> str:
        return self.label


@dataclass(frozen=True, repr=False)
class StoreAll(Strategy):
    """Keep every state of the forward sweep: T + 1 states, T forward steps."""

    def slots(self, n_steps: int, inplace: bool) -> int:
        return n_steps + 1

    def schedule(self, builder: plan.PlanBuilder, n_steps: int) -> None:
        plan.store_all(builder, n_steps)

    def fast_plan(self, n_steps: int, inplace: bool) -> plan.FastPlan:
        return plan.store_all_fast(n_steps, inplace)


@dataclass(frozen=True, repr=False)
class Periodic(Strategy):
    """Keep every ``every``-th state; recompute each segment from its start."""

    every: int = 10

    def __post_init__(self) -> None:
        _positive_int(self.every, "Periodic(every=...)", 1)

    @property
    def knob(self) -> str:
        return f"every={self.every}"

    def slots(self, n_steps: int, inplace: bool) -> int:
        return len(range(0, n_steps, self.every)) + min(self.every, n_steps) + 2

    def schedule(self, builder: plan.PlanBuilder, n_steps: int) -> None:
        plan.periodic(builder, n_steps, self.every)


@dataclass(frozen=True, repr=False)
class Revolve(Strategy):
    """Griewank's binomial checkpointing with ``snapshots`` stored states: the fewest
    forward steps any schedule with that many snapshots can make."""

    snapshots: int = 10

    def __post_init__(self) -> None:
        _positive_int(self.snapshots, "Revolve(snapshots=...)", 1)

    @property
    def knob(self) -> str:
        return f"snapshots={self.snapshots}"

    def slots(self, n_steps: int, inplace: bool) -> int:
        return min(self.snapshots, max(n_steps - 1, 0)) + 2

    def schedule(self, builder: plan.PlanBuilder, n_steps: int) -> None:
        plan.revolve(builder, n_steps, self.snapshots)


@dataclass(frozen=True, repr=False)
class Bennett(Strategy):
    """Bennett's k-ary pebbling: intermediate states are uncomputed by running the
    inverse step instead of being stored or thrown away (out-of-place steps)."""

    k: int = 2
    kinds = (OUT_OF_PLACE,)

    def __post_init__(self) -> None:
        _positive_int(self.k, "Bennett(k=...)", 2)

    @property
    def knob(self) -> str:
        return f"k={self.k}"

    def slots(self, n_steps: int, inplace: bool) -> int:
        return plan.bennett_slots(n_steps, self.k)

    def schedule(self, builder: plan.PlanBuilder, n_steps: int) -> None:
        plan.bennett(builder, n_steps, self.k)


@dataclass(frozen=True, repr=False)
class Reverse(Strategy):
    """Run the in-place step backwards: no stored state at all (one saved copy of the
    initial state measures how well the inverse recovered it)."""

    kinds = (INPLACE,)

    def slots(self, n_steps: int, inplace: bool) -> int:
        return 2

    def schedule(self, builder: plan.PlanBuilder, n_steps: int) -> None:
        plan.reverse(builder, n_steps)

    def fast_plan(self, n_steps: int, inplace: bool) -> plan.FastPlan:
        return plan.reverse_fast(n_steps)


ALL_STRATEGIES: tuple[type[Strategy], ...] = (StoreAll, Periodic, Revolve, Bennett, Reverse)


def fitting(inplace: bool) -> list[str]:
    """The names of the strategies that fit a loop of this kind."""
    return [s.__name__ for s in ALL_STRATEGIES if (INPLACE if inplace else OUT_OF_PLACE) in s.kinds]
