"""Loops of many steps and the space-time knob (``experiments.md`` §7).

``TimeLoop(step, n_steps, loss=...)`` runs a reversible step many times and
differentiates the loss of the final state with a strategy chosen by the user:
store every state, checkpoint some (periodically or by Griewank's Revolve, or online for
loops of unknown length), or
recover them by reverse computing -- running the step backwards (``Reverse()``,
in-place steps) or Bennett's pebbling, which uncomputes intermediate states
(``Bennett(k)``, out-of-place steps).  Schedules run in a compiled driver; see
``docs/checkpointing.md``.
"""

from revbench.checkpoint.disk import InsufficientDiskError
from revbench.checkpoint.loop import InsufficientMemoryError, ScheduleError, Stats, TimeLoop
from revbench.checkpoint.strategies import (
    STRATEGIES,
    Bennett,
    Multistage,
    Online,
    Periodic,
    Reverse,
    Revolve,
    StoreAll,
    Strategy,
    TwoLevel,
)
from revbench.lang.markers import checkpointed

# (named one by one, so that editors and type checkers see them: a strategy added to
# strategies.py is named here too -- tests/test_strategy_registry.py fails until it is)
__all__ = ["STRATEGIES", "Bennett", "InsufficientDiskError", "InsufficientMemoryError",
           "Multistage", "Online",
           "Periodic", "Reverse", "Revolve", "ScheduleError", "Stats", "StoreAll", "Strategy",
           "TimeLoop",
           "TwoLevel", "checkpointed"]
