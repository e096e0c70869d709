"""Checks for ``notebooks/05_space_time.ipynb``.

Three exercises on the space-time knob, each checked against the schedule revbench
really runs (:func:`plan_counts` builds it with the same planner as
:class:`~revbench.checkpoint.TimeLoop` and counts it, without running a step):
:func:`exercise_1` (predict the states held and forward steps of ``StoreAll`` and
``Periodic``), :func:`exercise_2` (Revolve with one snapshot, as a formula in ``T``) and
:func:`exercise_3` (the best strategy for a memory budget).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from revbench.checkpoint import plan as plans
from revbench.checkpoint.plan import Counts
from revbench.checkpoint.strategies import STRATEGIES, Bennett, Periodic, Revolve, StoreAll, Strategy
from revbench.course.feedback import Feedback, attempt, fail, show, success


@functools.lru_cache(maxsize=64)
def plan_counts(strategy: Strategy, n_steps: int, inplace: bool = False) -> Counts:
    """What ``strategy`` does for a loop of ``n_steps`` (forward, inverse and reverse
    steps, the most states held), counted from its schedule as ``TimeLoop`` plans it:
    the numbers ``loop.stats`` reports after a run."""
    if not strategy.fits(inplace):
        raise ValueError(f"{strategy.label} does not fit an "
                         f"{'in-place' if inplace else 'out-of-place'} step")
    fast = strategy.fast_plan(n_steps, inplace)
    if fast is not None:
        return fast.counts
    b = plans.PlanBuilder(inplace, strategy.slots(n_steps, inplace), lambda rows: None)
    b.start()
    strategy.schedule(b, n_steps)
    b.flush()
    return b.counts


def _number(ex: str, answer: dict, key: str) -> int:
    v = answer.get(key)
    if v is None:
        fail(ex, f"{key!r} is still None: put your prediction there")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v):
        fail(ex, f"{key!r} should be a whole number (a count), got {v!r}")
    return int(v)


# --------------------------------------------------------------------------------------
# Exercise 1: StoreAll and Periodic, predicted
# --------------------------------------------------------------------------------------
T1 = 100
EVERY = 10
KEYS_1 = ("StoreAll states", "StoreAll forward steps", "Periodic states",
          "Periodic forward steps")


def exercise_1(prediction: Any) -> Feedback:
    """``prediction`` gives, for a loop of ``T1`` = 100 steps, the most states
    ``StoreAll()`` and ``Periodic(every=10)`` hold at once and the forward steps they
    make (the first sweep included)."""
    ex = "Exercise 5.1"

    def check() -> Feedback:
        if not isinstance(prediction, dict):
            fail(ex, f"the prediction should be a dict with the keys {', '.join(KEYS_1)}")
        got = {k: _number(ex, prediction, k) for k in KEYS_1}
        store, periodic = plan_counts(StoreAll(), T1), plan_counts(Periodic(every=EVERY), T1)
        want = {"StoreAll states": store.peak_states, "StoreAll forward steps": store.forward_steps,
                "Periodic states": periodic.peak_states,
                "Periodic forward steps": periodic.forward_steps}
        segments = T1 // EVERY
        rules = {
            "StoreAll states": f"StoreAll keeps every state s_0, s_1, ..., s_T: count them "
                               f"for T = {T1} (s_0 is one too).",
            "StoreAll forward steps": "StoreAll runs the loop forward once, and the reverse sweep "
                                      "reads the stored states: no recomputation.",
            "Periodic states": f"Periodic(every={EVERY}) keeps the checkpoints s_0, s_{EVERY}, ..., "
                               f"s_{T1 - EVERY} ({segments} of them) and, while it reverses one "
                               f"segment, that segment's {EVERY} other states.",
            "Periodic forward steps": f"The first sweep makes {T1} steps; then each of the "
                                      f"{segments} segments is recomputed from its checkpoint, "
                                      f"except its last state (it is the next checkpoint, or s_T, "
                                      f"already held): {EVERY - 1} steps a segment.",
        }
        for k in KEYS_1:
            if got[k] != want[k]:
                off = ("too many" if got[k] > want[k] else "too few")
                fail(ex, f"{k} for T = {T1}: {got[k]} is {off}", rules[k])
        return success(ex, f"StoreAll holds {want['StoreAll states']} states for "
                           f"{want['StoreAll forward steps']} forward steps; Periodic(every={EVERY}) "
                           f"holds {want['Periodic states']} for {want['Periodic forward steps']}.",
                       "About T/k + k states for about 2T steps: the memory is smallest at "
                       "k ≈ √T, and the time never more than doubles.")

    return attempt(ex, check)


# --------------------------------------------------------------------------------------
# Exercise 2: one snapshot, as a formula
# --------------------------------------------------------------------------------------
TRIES_2 = (1, 2, 3, 10, 37, 100)


def exercise_2(one_snapshot_forward: Any) -> Feedback:
    """``one_snapshot_forward(T)`` must give the forward steps ``Revolve(snapshots=1)``
    makes for a loop of ``T`` steps, for every ``T`` in :data:`TRIES_2`."""
    ex = "Exercise 5.2"

    def check() -> Feedback:
        if not callable(one_snapshot_forward) or len(inspect.signature(one_snapshot_forward).parameters) != 1:
            fail(ex, "one_snapshot_forward should be a Python function of one argument, T")
        for T in TRIES_2:
            want = plan_counts(Revolve(snapshots=1), T).forward_steps
            got = one_snapshot_forward(T)
            if got is None:
                fail(ex, f"one_snapshot_forward({T}) returns None: return the count")
            if got != want:
                detail = ("The first sweep alone makes T steps; then, to reverse step t (t = T-1 "
                          "down to 0), s_t must be recomputed from the one snapshot s_0: t more "
                          "steps. Add them up.")
                if got == T * T or got == T * (T - 1) // 2:
                    detail += " (Careful with the ends of the sum: s_0 needs no recomputation.)"
                fail(ex, f"for T = {T}: one_snapshot_forward gives {show(got)}, Revolve(snapshots=1) "
                         f"makes {want} forward steps", detail)
        return success(ex, "T + (T-1) + ... + 1 = T(T+1)/2: with one snapshot the time grows "
                           "as T², for 3 states held.",
                       "Each snapshot more divides that cost: Griewank's binomial schedule makes "
                       "about T·log T steps with log T snapshots.")

    return attempt(ex, check)


# --------------------------------------------------------------------------------------
# Exercise 3: a memory budget
# --------------------------------------------------------------------------------------
T3 = 1000
BUDGET = 12


def exercise_3(strategy: Any) -> Feedback:
    """``strategy`` must hold at most :data:`BUDGET` states for an out-of-place loop of
    :data:`T3` steps, and make the fewest forward steps any strategy can in that budget
    (Revolve with every state of the budget used: ``BUDGET - 2`` snapshots)."""
    ex = "Exercise 5.3"

    def check() -> Feedback:
        if isinstance(strategy, type) and issubclass(strategy, Strategy):
            fail(ex, f"{strategy.__name__} is the class: give a strategy, e.g. "
                     f"{strategy.__name__}(...) with its knob")
        if not isinstance(strategy, Strategy):
            fitting = ", ".join(cls.spelling() for cls in STRATEGIES.values() if cls.fits(False))
            fail(ex, f"the answer should be a strategy ({fitting}), got {strategy!r}")
        if not strategy.fits(False):
            fail(ex, f"{strategy.label} needs an in-place step; this loop's step is out-of-place",
                 "An out-of-place step cannot be run backwards in place; its reverse-computing "
                 "option is Bennett(k).")
        c = plan_counts(strategy, T3)
        if c.peak_states > BUDGET:
            fail(ex, f"{strategy.label} holds up to {c.peak_states} states for T = {T3}: over "
                     f"the budget of {BUDGET}",
                 "StoreAll holds T + 1 states and Periodic about T/k + k (at least 2√T); the "
                 "strategies whose memory grows like log T or not at all are Revolve and Bennett.")
        best_strategy = Revolve(snapshots=BUDGET - 2)
        best = plan_counts(best_strategy, T3)
        if c.forward_steps + c.inverse_steps > best.forward_steps:
            if isinstance(strategy, Bennett):
                fail(ex, f"{strategy.label} fits ({c.peak_states} states), but makes "
                         f"{c.forward_steps} forward and {c.inverse_steps} inverse steps",
                     "Bennett never keeps a snapshot: it pays for its memory by uncomputing "
                     "intermediate states. With the same memory, snapshots recomputed from are "
                     "cheaper here.")
            if isinstance(strategy, Revolve):
                fail(ex, f"{strategy.label} fits ({c.peak_states} states), but makes "
                         f"{c.forward_steps} forward steps: the budget has room for more snapshots",
                     "Revolve(snapshots=c) holds at most c + 2 states; each extra snapshot "
                     "saves recomputation.")
            fail(ex, f"{strategy.label} fits ({c.peak_states} states), but makes "
                     f"{c.forward_steps + c.inverse_steps} steps; another strategy does with fewer")
        return success(ex, f"{strategy.label}: {c.peak_states} states, {c.forward_steps} forward "
                           f"steps, the fewest any strategy makes in {BUDGET} states.",
                       "Revolve's binomial schedule is optimal for a given number of snapshots "
                       "(Griewank & Walther): use the whole budget.")

    return attempt(ex, check)
