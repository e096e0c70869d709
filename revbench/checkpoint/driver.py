"""What runs a ``TimeLoop``: the kernels of the loop statement, around its step and loss.

``TimeLoop(step, n, loss=...)`` means what this reversible code means::

    for t in checkpointed(range(n), strategy, new=s_n, old=s_0):
        step(s_n, s_0, t, *params)
    loss(out, s_n, *params)

and runs the same code: :func:`revbench.backends.loop_code.generate` writes its kernels,
with the loss as the seed of the backward kernel (:class:`~revbench.backends.loop_code.LossSeed`),
so that a gradient is one call that runs the schedule once -- no forward run before it, as
a function containing the statement needs.  Its knob is an argument (one kernel serves
every setting), and it counts the actions it runs, which ``TimeLoop.stats`` reports.

The kernels are compiled like every generated module: by content (the source names the
content keys of the step's and the loss's kernels), through the same loader -- so a
second process loads them from disk -- and under the Python backend the same source runs
uncompiled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from revbench.backends import loop_code, targets
from revbench.backends.runtime import TABLES, CheckTable
from revbench.lang.types import VarType
from revbench.transforms.pipeline import BACKWARD, FORWARD


@dataclass(frozen=True)
class LoopShape:
    """What a TimeLoop's kernels are generated from, besides the kernels they call."""

    step_name: str
    step_params: tuple[str, ...]
    step_types: tuple[VarType, ...]
    n_state: int
    inplace: bool
    check: bool
    filename: str
    line: int
    atol: float | None  # the step's own tolerance, where it has one
    rtol: float | None

    @property
    def lead(self) -> int:
        """The step's arguments before ``t``."""
        return self.n_state if self.inplace else 2 * self.n_state

    @property
    def old(self) -> tuple[str, ...]:
        S = self.n_state
        return self.step_params[:S] if self.inplace else self.step_params[S:2 * S]

    @property
    def free(self) -> tuple[str, ...]:
        return self.step_params[self.lead + 1:]

    @property
    def free_types(self) -> tuple[VarType, ...]:
        return self.step_types[self.lead + 1:]

    @property
    def state_types(self) -> tuple[VarType, ...]:
        S = self.n_state
        return self.step_types[:S]


#: kernels built in this process, by their source's key and the kernels they call: a
#: gradient call asks again for the kernel it ran last time
_BUILT: dict[tuple, Any] = {}


def run_kernel(shape: LoopShape, forward: tuple[Any, str], backend: str):
    """The forward kernel: ``(*out, *s0, lo, hi, st, *params)`` adds ``s[n]`` into ``out``."""
    S = shape.n_state
    out = tuple(f"_rb_out{k}" for k in range(S))
    params = (*out, *shape.old, *loop_code.BOUNDS, *shape.free)
    types = (*shape.state_types, *shape.state_types, *[VarType("int")] * 3, *shape.free_types)
    gen = loop_code.generate(
        f"{shape.step_name}_timeloop", params, types, S, FORWARD, shape.check, 0, frozenset(),
        shape.step_params, (), shape.line, "TimeLoop.run", shape.atol,
        shape.rtol, inplace=shape.inplace, calls={loop_code.FORWARD_SYMBOL: forward[1]})
    return _compile(gen, {loop_code.FORWARD_SYMBOL: forward[0]}, backend, shape, "forward")


def gradient_kernel(shape: LoopShape, kernels: dict[str, tuple[Any, str]], schedule: Any,
                    backend: str, label: str, directory: str | None = None):
    """The backward kernel seeded by the loss (:class:`loop_code.LossSeed`):
    ``(*s0, n, knob, nslots, counts, result, *params, *adjoints of s0, *adjoints of the
    float params)``, returning its arguments.  ``kernels``: symbol ->
    (callable, content key) of the step's forward, backward (and inverse) kernels and the
    loss's; ``schedule``: a :class:`~revbench.checkpoint.strategies.LoopSchedule`."""
    S = shape.n_state
    params = (*shape.old, *loop_code.SEEDED, *shape.free)
    # (the knob may also be a tuple or an array of rows: its type is only shown)
    seeded = (VarType("int"), VarType("int"), VarType("int"), VarType("int", 1), VarType("float", 1))
    types = (*shape.state_types, *seeded, *shape.free_types)
    differentiable = loop_code.DIFFERENTIABLE
    step_active = tuple(p for p, t in zip(shape.step_params, shape.step_types)
                        if t.dtype in differentiable)
    free_active = tuple(p for p, t in zip(shape.free, shape.free_types) if t.dtype in differentiable)
    from revbench.compiler import schedule_name

    gen = loop_code.generate(
        f"{shape.step_name}_timeloop", params, types, S, BACKWARD, shape.check, None,
        frozenset(), shape.step_params, step_active, shape.line, label,
        shape.atol, shape.rtol, schedule.uncomputes, schedule_name(schedule.actions),
        disk=None if schedule.disk is None else (directory,), inplace=shape.inplace,
        seed=loop_code.LossSeed(free_active),
        calls={symbol: key for symbol, (_, key) in kernels.items()})
    injected = {symbol: run for symbol, (run, _) in kernels.items()}
    injected.update(_schedule_symbols(schedule, backend))
    return _compile(gen, injected, backend, shape, "backward")


def _schedule_symbols(schedule: Any, backend: str) -> dict[str, object]:
    from revbench.compiler import loop_code_runtime

    out = loop_code_runtime()
    fns = {loop_code.ACTIONS_SYMBOL: schedule.actions}
    if schedule.disk is not None:
        import numba

        fns[loop_code.DISK_SYMBOL] = schedule.disk
        out[loop_code.DISK_STORE_SYMBOL] = schedule.disk_store
        out[loop_code.OBJMODE_SYMBOL] = numba.objmode
    target = targets.target(backend)
    out.update({symbol: target.helper(fn) for symbol, fn in fns.items()})
    return out


def _compile(gen, injected: dict[str, object], backend: str, shape: LoopShape, direction: str):
    memo = (gen.key, backend, tuple(sorted((s, id(f)) for s, f in injected.items())))
    hit = _BUILT.get(memo)
    if hit is not None:
        return hit
    if len(_BUILT) >= 256:
        _BUILT.clear()
    TABLES[gen.module_key] = CheckTable(shape.step_name, shape.filename, direction, gen.checks,
                                        gen.linemap, {})
    target = targets.target(backend)
    # (no bounds checks in the loop itself: its slots come from the schedule, and the
    # steps it calls check their own indices; its checks of uncomputed states stay)
    run = target.runner(target.compile(gen, injected, False))
    _BUILT[memo] = built = (run, gen)
    return built
