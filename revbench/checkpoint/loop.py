"""``TimeLoop``: a reversible step run many times, differentiated with a chosen strategy.

The loop never runs a Python iteration per step.  A strategy's schedule is a generator of
actions (:mod:`revbench.checkpoint.actions`) compiled into the driver
(:mod:`revbench.checkpoint.driver`), which runs it with the step's compiled kernels: no
planning in Python, no table of actions in memory.  (``Reverse()``'s regular sweep, and a
strategy without a compiled schedule, come as batches of integer rows planned by
:mod:`revbench.checkpoint.plan` instead.)  The caller's arrays are only ever read.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from revbench.checkpoint import actions
from revbench.checkpoint import plan as plans
from revbench.checkpoint.disk import DiskStore
from revbench.checkpoint.driver import (
    RECOVER,
    DriverShape,
    ParamSpec,
    StateNotRecovered,
    build_driver,
)
from revbench.checkpoint.strategies import LoopSchedule, StoreAll, Strategy, fitting
from revbench.config import get_tolerance
from revbench.function import ReversibleFunction
from revbench.lang.errors import ReversibilityError
from revbench.lang.types import VarType

#: schedules of at most this many rows (16 bytes each) are kept and reused by later calls
PLAN_CACHE_ROWS = 1 << 15
#: (strategy, n_steps, inplace) -> (row batches, their summary)
_PLAN_CACHE: dict[tuple, tuple[list[np.ndarray], plans.FastPlan]] = {}


class InsufficientMemoryError(MemoryError, ValueError):
    """A strategy would need more memory than the machine has free (raised before allocating)."""


@dataclass
class Stats:
    """What the last ``value_and_grad`` / ``grad`` call did, counted exactly
    (``experiments.md`` §7)."""

    strategy: str = ""
    n_steps: int = 0
    forward_steps: int = 0
    inverse_steps: int = 0
    reverse_steps: int = 0
    peak_states: int = 0
    peak_bytes: int = 0
    #: bytes of states kept on disk (a strategy with a second level: ``TwoLevel``)
    disk_bytes: int = 0
    seconds: float = 0.0
    roundtrip_error: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def available_memory() -> int | None:
    """Bytes of memory free for a new allocation (Linux ``MemAvailable``), or None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


class TimeLoop:
    """``n_steps`` runs of a reversible ``step``, then a reversible ``loss`` of the final state.

    * Out-of-place (``inplace=False``): ``step(*new, *old, t, *params)`` adds the new
      state into ``n_state`` arrays that enter at zero, reading the old ones.
    * In-place (``inplace=True``): ``step(*state, t, *params)`` updates the state.
    * ``loss(out, *state, *params)`` adds a scalar into the float ``out``.

    ``t`` is the step number (0-based).  Parameters may be scalars or arrays of any
    type the language takes; floats (and complex) get gradients.  See
    ``docs/checkpointing.md``.
    """

    def __init__(self, step: ReversibleFunction, n_steps: int, *, loss: ReversibleFunction,
                 n_state: int = 1, inplace: bool = False):
        for what, f in (("step", step), ("loss", loss)):
            if not isinstance(f, ReversibleFunction):
                raise TypeError(f"TimeLoop's {what} must be a reversible function (decorated "
                                f"with @reversible), got {f!r}")
        if isinstance(n_steps, bool) or not isinstance(n_steps, (int, np.integer)) or n_steps < 1:
            raise ValueError(f"n_steps must be an int >= 1, got {n_steps!r}")
        if n_steps >= 2**63:  # (the compiled loop counts steps in int64)
            raise ValueError(f"n_steps must fit in int64 (below 2**63), got {n_steps!r}")
        if isinstance(n_state, bool) or not isinstance(n_state, int) or n_state < 1:
            raise ValueError(f"n_state must be an int >= 1, got {n_state!r}")
        if not isinstance(inplace, bool):
            raise TypeError(f"inplace must be True or False, got {inplace!r}")
        self.step = step
        self.loss = loss
        self.n_steps = int(n_steps)
        self.n_state = n_state
        self.inplace = inplace
        self.stats: Stats | None = None
        self._check_signatures()

    # -- what the loop looks like ---------------------------------------------------
    @property
    def _lead(self) -> int:
        """Step arguments before ``t``."""
        return self.n_state if self.inplace else 2 * self.n_state

    @property
    def state_names(self) -> tuple[str, ...]:
        """The state's names as the step calls them (the old state, out-of-place)."""
        p = self.step.params
        return p[:self.n_state] if self.inplace else p[self.n_state:2 * self.n_state]

    @property
    def param_names(self) -> tuple[str, ...]:
        return self.step.params[self._lead + 1:]

    def _check_signatures(self) -> None:
        step, loss, S = self.step, self.loss, self.n_state
        sp = step.params
        if self.inplace:
            shape = f"step(*state, t, *params) with {S} state argument(s)"
        else:
            shape = f"step(*new, *old, t, *params) with {S} new and {S} old state argument(s)"
        if len(sp) < self._lead + 1:
            raise ValueError(f"{step.__name__}{sp} does not fit the loop: an "
                             f"{'in-place' if self.inplace else 'out-of-place'} TimeLoop calls "
                             f"{shape}, so it needs at least {self._lead + 1} arguments")
        written = step._program.written_params()
        t_name = sp[self._lead]
        read_only = (t_name, *self.param_names) + (() if self.inplace else self.state_names)
        changed = [n for n in read_only if n in written]
        if changed:
            role = {t_name: "the step number"}
            role.update({n: "a parameter" for n in self.param_names})
            role.update({n: "the old state" for n in (() if self.inplace else self.state_names)})
            n = changed[0]
            raise ValueError(f"{step.__name__} changes `{n}`, which the loop passes as "
                             f"{role[n]} ({shape}): a step may only change "
                             f"{'its state' if self.inplace else 'the new state'}")
        want = 1 + S + len(self.param_names)
        lp = loss.params
        if len(lp) != want:
            raise ValueError(f"{loss.__name__}{lp} does not fit the loop: the loss is called as "
                             f"loss(out, *state, *params) = loss(out, "
                             f"{', '.join(self.state_names + self.param_names)}), "
                             f"{want} arguments{self._shape_hint()}")
        # (a parameter `t` where the loop passes a state or a parameter, when other
        # settings would pass it the step number: the settings, surely, not the step)
        hint = self._shape_hint() if sp[self._lead] != "t" and "t" in sp else ""
        if hint:
            raise ValueError(f"{step.__name__}{sp} does not fit the loop: an "
                             f"{'in-place' if self.inplace else 'out-of-place'} TimeLoop with "
                             f"n_state={S} passes the step number as `{sp[self._lead]}`, but "
                             f"the step names a parameter `t`{hint}")
        lw = loss._program.written_params() - {lp[0]}
        if lw:
            raise ValueError(f"{loss.__name__} changes `{sorted(lw)[0]}`: a loss may only add "
                             f"into its first argument `{lp[0]}`")

    def _shape_hint(self) -> str:
        """The ``inplace=`` / ``n_state=`` under which step and loss would fit, where the
        ones given do not (a step's number named ``t`` where the loop passes it)."""
        sp, lp = self.step.params, self.loss.params
        for inplace in (self.inplace, not self.inplace):
            for S in range(1, len(sp)):
                lead = S if inplace else 2 * S
                if (inplace, S) == (self.inplace, self.n_state) or len(sp) < lead + 1:
                    continue
                if sp[lead] == "t" and len(lp) == 1 + S + len(sp) - lead - 1:
                    return (f"; with inplace={inplace}, n_state={S} they would fit (the step "
                            f"called as {self.step.__name__}({', '.join(sp)}), `t` the step "
                            "number)")
        return ""

    def _check_strategy(self, strategy: Any) -> Strategy:
        if isinstance(strategy, type) and issubclass(strategy, Strategy):
            raise TypeError(f"pass a strategy object, e.g. {strategy.__name__}(), not the class")
        if not isinstance(strategy, Strategy):
            raise TypeError(f"strategy must be one of {', '.join(fitting(self.inplace))} "
                            f"(from revbench.checkpoint), got {strategy!r}")
        if not strategy.fits(self.inplace):
            kind = "an in-place" if self.inplace else "an out-of-place"
            raise ValueError(f"{strategy.label} does not fit {kind} loop "
                             f"({strategy.fit_reason}); the strategies that fit are "
                             f"{', '.join(fitting(self.inplace))}")
        return strategy

    def _split(self, args: tuple) -> tuple[list[np.ndarray], list[Any]]:
        S = self.n_state
        want = S + len(self.param_names)
        if len(args) != want:
            raise TypeError(f"this TimeLoop takes {want} arguments "
                            f"({', '.join(self.state_names + self.param_names)}): the initial "
                            f"state, then the parameters; got {len(args)}")
        state = []
        for name, x in zip(self.state_names, args[:S]):
            if not isinstance(x, np.ndarray) or x.dtype not in (np.float64, np.complex128) \
                    or x.ndim == 0:
                raise TypeError(f"the initial state `{name}` must be a float64 (or complex128) "
                                f"NumPy array; got {_describe(x)} (wrap a scalar state in a "
                                "1-element array)")
            state.append(x)
        # kernels take writable arrays (they only read parameters): copy read-only ones
        params = [p.copy() if isinstance(p, np.ndarray) and not p.flags.writeable
                  else p for p in args[S:]]
        return state, params

    # -- running -------------------------------------------------------------------
    def run(self, *args: Any) -> tuple[np.ndarray, ...]:
        """The final state after ``n_steps`` steps, as new arrays (the caller's are unchanged)."""
        state, params = self._split(args)
        ex = self._executor(state, params)
        b = ex.run(lambda b: plans.forward_only(b, self.n_steps), 2, gradient=False)
        slot = b.held[self.n_steps]
        return tuple(s[slot].copy() for s in ex.store)

    def value_and_grad(self, *args: Any, strategy: Strategy | None = None) -> tuple[float, tuple]:
        """``(value, grads)``: the loss of the final state and its gradient with respect to
        the initial state and every parameter, aligned with ``(*state0, *params)``."""
        t0 = time.perf_counter()
        strategy = self._check_strategy(StoreAll() if strategy is None else strategy)
        state, params = self._split(args)
        ex = self._executor(state, params)
        slots = strategy.slots(self.n_steps, self.inplace)
        state_bytes = sum(s.nbytes for s in state)
        free = available_memory()
        if free is not None and slots * state_bytes > free:
            raise InsufficientMemoryError(
                f"{strategy.label} would hold {slots} states of {state_bytes:,} bytes "
                f"({slots * state_bytes / 2**30:.1f} GiB), more than the {free / 2**30:.1f} GiB "
                "of memory free: use Revolve(snapshots=c) (memory c + 2 states) "
                + ("or Reverse() (2 states)" if self.inplace else "or Bennett(k=...)"))
        key = (strategy, self.n_steps, self.inplace)
        builder, value, grads = ex.gradient(strategy, key, slots)
        counts = builder.counts
        roundtrip = 0.0
        if builder.saved_slot is not None:
            roundtrip = ex.roundtrip_error(builder, state, self.step, strategy)
        self.stats = Stats(strategy.label, self.n_steps, counts.forward_steps,
                           counts.inverse_steps, counts.reverse_steps, counts.peak_states,
                           counts.peak_states * state_bytes, getattr(ex, "disk_bytes", 0),
                           time.perf_counter() - t0, roundtrip)
        return value, grads

    def grad(self, *args: Any, strategy: Strategy | None = None) -> tuple:
        """The gradients of :meth:`value_and_grad` alone."""
        return self.value_and_grad(*args, strategy=strategy)[1]

    def step_times(self, *args: Any, steps: int = 2000, repeats: int = 5,
                   min_seconds: float = 0.02) -> dict[str, float]:
        """Seconds one step takes, each kind, run by the same compiled driver as a gradient
        (``forward``, ``reverse``: its reverse sweep, ``inverse``: out-of-place only, else
        NaN): medians of ``repeats`` runs of at least ``steps`` steps -- more where that
        many take less than ``min_seconds``, so that a sample outlasts the machine's noise
        -- after one run to compile.

        With a strategy's exact counts (``stats``) they make its *cost model*,
        ``forward_steps * forward + inverse_steps * inverse + reverse_steps * reverse``:
        what the method costs, against which the experiments measure what revbench adds
        (``revbench.experiments``, ``time_overhead``)."""
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"steps must be an int >= 1, got {steps!r}")
        state, params = self._split(args)
        ex = self._executor(state, params)
        calibrations = {"forward": actions.forward_calibration,
                        "reverse": actions.reverse_calibration}
        if not self.inplace:
            calibrations["inverse"] = actions.inverse_calibration
        seconds: dict[str, float] = {}
        for kind, schedule in calibrations.items():
            ex.allocate(2)
            driver = ex.driver(True, schedule)

            def sample(n: int, driver: Any = driver) -> float:
                for s, x in zip(ex.store, state):
                    s[0] = x
                    s[1] = 0
                call_args = ex._driver_args(True)
                counts = np.zeros(8, np.int64)
                t0 = time.perf_counter()
                ex._call(driver, (n, self.n_steps, counts), call_args)
                return time.perf_counter() - t0

            sample(steps)  # (compiles the driver)
            n = steps
            first = sample(n)
            if first < min_seconds:
                n = min(10**7, int(n * min_seconds / max(first, 1e-9)) + 1)
            runs = [sample(n) for _ in range(repeats)]
            seconds[kind] = statistics.median(runs) / n
        forward = seconds["forward"]
        return {"forward": forward, "reverse": max(seconds["reverse"] - forward, 0.0),
                "inverse": (max(seconds["inverse"] - forward, 0.0) if "inverse" in seconds
                            else float("nan"))}

    def _executor(self, state: list[np.ndarray], params: list[Any]) -> _Executor:
        return _Executor(self, state, params)

    def __repr__(self) -> str:
        kind = "in-place" if self.inplace else "out-of-place"
        return (f"TimeLoop({self.step.__name__}, n_steps={self.n_steps}, loss={self.loss.__name__}, "
                f"n_state={self.n_state}, {kind})")


class _Executor:
    """One call's compiled driver, storage and parameters."""

    def __init__(self, loop: TimeLoop, state: list[np.ndarray], params: list[Any]):
        self.loop = loop
        self.state = state
        self.params = params
        step, loss = loop.step, loop.loss
        S = loop.n_state
        example_state = [np.zeros_like(s, order="C") for s in state]
        step_args = ([*example_state] if loop.inplace else
                     [*example_state, *[np.zeros_like(s, order="C") for s in state]])
        step_args += [0, *params]
        try:
            step_sig = step.signature_of(tuple(step_args))
            loss_sig = loss.signature_of((0.0, *example_state, *params))
        except (ReversibilityError, TypeError) as exc:
            raise exc.with_traceback(None) from None
        pspecs = tuple(ParamSpec(t.is_array, t.dtype in ("float", "complex"), t.dtype == "complex")
                       for t in step_sig[loop._lead + 1:])
        self.pspecs = pspecs
        self.check = step.check
        p = step._program
        self.atol, self.rtol = get_tolerance()
        if p.atol is not None:
            self.atol = p.atol
        if p.rtol is not None:
            self.rtol = p.rtol
        self.shape = DriverShape(loop.inplace, S, pspecs, self.check)
        self.step_sig, self.loss_sig = step_sig, loss_sig
        # (compiled only where both are: a compiled driver cannot call the Python backend's
        # functions, while Python calls compiled kernels as well as its own)
        self.backend = "numba" if step.backend == loss.backend == "numba" else "python"
        self._drivers: dict[tuple, Any] = {}

    def driver(self, gradient: bool, schedule: Any = None, disk: bool = False):
        """The compiled driver: running rows, or (``schedule``: a generator of
        :mod:`revbench.checkpoint.actions`) running that schedule inside (``disk``: with a
        second store, on disk)."""
        key = (gradient, schedule, disk)
        if key not in self._drivers:
            step, loss = self.loop.step, self.loop.loss
            try:
                # (with a gradient, every forward step's own reverse sweep follows later
                # from the same state, and checks what its forward run would: the lean run)
                kernels = {"fwd": _kernel(step, "forward", self.step_sig, before_sweep=gradient)}
                if gradient:
                    kernels["bwd"] = _kernel(step, "backward", self.step_sig)
                    if not self.loop.inplace:
                        kernels["inv"] = _kernel(step, "inverse", self.step_sig)
                    kernels["lossf"] = _kernel(loss, "forward", self.loss_sig)
                    kernels["lossb"] = _kernel(loss, "backward", self.loss_sig)
            except (ReversibilityError, TypeError) as exc:
                raise exc.with_traceback(None) from None
            shape = replace(self.shape, compiled_schedule=schedule is not None, disk=disk)
            self._drivers[key] = build_driver(shape, kernels, self.backend, schedule)
        return self._drivers[key]

    def allocate(self, slots: int) -> None:
        self.store = [np.zeros((slots, *s.shape), dtype=s.dtype) for s in self.state]

    def run(self, schedule, slots: int, gradient: bool) -> plans.PlanBuilder:
        self.allocate(slots)
        driver = self.driver(gradient)
        args = self._driver_args(gradient)
        b = plans.PlanBuilder(self.loop.inplace, slots, lambda rows: self._exec(driver, rows, args))
        first = b.start()
        for s, x in zip(self.store, self.state):
            s[first] = x
        schedule(b)
        b.flush()
        return b

    def _driver_args(self, gradient: bool) -> list:
        S = self.loop.n_state
        lead = () if self.loop.inplace else (2,)  # out-of-place: adjoints of s[t] and s[t+1]
        self.adj = [np.zeros(lead + s.shape, dtype=s.dtype) for s in self.state]
        self.gacc = []
        for spec, p in zip(self.pspecs, self.params):
            if spec.has_adjoint:
                if spec.is_array:
                    self.gacc.append(np.zeros_like(p, dtype=np.complex128 if spec.complex
                                                   else np.float64))
                else:
                    self.gacc.append(0j if spec.complex else 0.0)
        self.value = 0.0
        return [*self.store[:S], *self.adj, *self.params, *self.gacc]

    def _exec(self, driver, rows: np.ndarray, args: list) -> None:
        self._call(driver, (rows, rows.shape[0]), args)

    def _call(self, driver, lead: tuple, args: list) -> None:
        try:
            out = driver(*lead, self.value, *args, self.atol, self.rtol)
        except StateNotRecovered as exc:
            raise self._not_recovered(exc) from None
        except KeyboardInterrupt:  # Ctrl-C, noticed by the compiled driver
            raise KeyboardInterrupt from None
        except Exception as exc:
            from revbench.backends.runtime import CheckFailed, to_user_error

            if isinstance(exc, CheckFailed):
                raise to_user_error(exc).with_traceback(None) from None
            if isinstance(exc, (IndexError, ZeroDivisionError)):
                located = self._located(type(exc))
                if located is not None:
                    raise located.with_traceback(None) from None
            raise
        self.value = out[0]
        k = 1
        for j, spec in enumerate(s for s in self.pspecs if s.has_adjoint):
            if not spec.is_array:
                args_pos = len(args) - len(self.gacc) + j
                args[args_pos] = out[k]
                self.gacc[j] = out[k]
                k += 1

    def _located(self, kind: type) -> BaseException | None:
        """Compiled kernels raise an ``IndexError`` (or a division by zero) with no line:
        call the step once from the initial state, and the loss of it, as plain reversible
        calls on copies (which name the line, the index and the size); their error of the
        same kind, noted with where the loop was, or None if they do not fail so."""
        loop = self.loop
        state = [s.copy() for s in self.state]
        new = [] if loop.inplace else [np.zeros_like(s) for s in state]
        calls = ((loop.step, (*new, *state, 0, *self.params), "its first step (t=0)"),
                 (loop.loss, (0.0, *state, *self.params), "its loss of the initial state"))
        for f, args, where in calls:
            try:
                f(*args)
            except kind as exc:
                exc.add_note(f"(in {loop!r}: found by calling {where} on its own)")
                return exc
            except Exception:  # (another error: the loop's own is reported)
                return None
        return None

    def gradient(self, strategy: Strategy, key: tuple, slots: int):
        """Run ``strategy``'s schedule with adjoints: ``(plan summary, value, grads)``.

        Regular schedules come as NumPy-generated sweeps; the others are written row by
        row by the builder, streamed to the driver as they are made, and remembered
        when small (a few thousand rows cost more to plan than to run)."""
        schedule = _compiled_schedule(strategy)
        if schedule is not None:
            self.strategy_slots = slots
            self.strategy_label = strategy.label
            self.strategy_directory = getattr(strategy, "directory", None)
            return self._run_compiled(schedule)
        self.allocate(slots)
        driver = self.driver(True)
        args = self._driver_args(True)
        for s, x in zip(self.store, self.state):
            s[0] = x  # the builder's first slot

        def run(rows: np.ndarray) -> None:
            self._exec(driver, rows, args)

        summary = plans.PlanBuilder(self.loop.inplace, slots, run)
        fast = strategy.fast_plan(self.loop.n_steps, self.loop.inplace)
        cached = _PLAN_CACHE.get(key)
        if fast is not None or cached is not None:
            batches = fast.batches() if fast is not None else cached[0]
            info = fast if fast is not None else cached[1]
            for rows in batches:
                run(rows)
            summary.counts, summary.saved_slot = info.counts, info.saved_slot
            if info.final_slot_of_s0 is not None:
                summary.held[0] = info.final_slot_of_s0
        else:
            kept: list[np.ndarray] | None = []

            def emit(rows: np.ndarray) -> None:
                nonlocal kept
                if kept is not None:
                    kept.append(rows)
                    if sum(r.shape[0] for r in kept) > PLAN_CACHE_ROWS:
                        kept = None
                run(rows)

            b = plans.PlanBuilder(self.loop.inplace, slots, emit)
            b.start()
            strategy.schedule(b, self.loop.n_steps)
            b.flush()
            if kept is not None:
                if len(_PLAN_CACHE) >= 64:
                    _PLAN_CACHE.clear()
                _PLAN_CACHE[key] = (kept, plans.FastPlan((), b.counts, b.saved_slot, b.held.get(0)))
            summary = b
        return summary, float(self.value), self._gradients()

    def _run_compiled(self, schedule: LoopSchedule):
        """The schedule run inside the compiled driver, as its compiled generator yields it:
        no rows, no planning in Python, whatever the number of steps."""
        n = self.loop.n_steps
        # (Bennett's generator may be given more slots than it uses: it takes the lowest)
        slots = min(schedule.slots(n, schedule.knob), self.strategy_slots)
        self.allocate(slots)
        on_disk = schedule.disk is not None
        driver = self.driver(True, schedule.actions, on_disk)
        args = self._driver_args(True)
        for s, x in zip(self.store, self.state):
            s[0] = x  # the schedule's first slot
        counts = np.zeros(8, np.int64)
        self.disk_bytes = 0
        if on_disk:
            with DiskStore(self.state, schedule.disk(n, schedule.knob), self.strategy_directory,
                           self.strategy_label) as disk:
                S = self.loop.n_state
                self.disk_bytes = disk.nbytes
                self._call(driver, (n, schedule.knob, counts),
                           [*args[:S], *disk.arrays, *args[S:]])
        else:
            self._call(driver, (n, schedule.knob, counts), args)
        summary = plans.PlanBuilder(self.loop.inplace, slots, lambda rows: None)
        summary.counts = plans.Counts(int(counts[plans.FWD]), int(counts[plans.INV]),
                                      int(counts[plans.REV]),
                                      schedule.peak(n, schedule.knob))
        summary.held[0] = 0
        return summary, float(self.value), self._gradients()

    def _gradients(self) -> tuple:
        S = self.loop.n_state
        out: list[Any] = []
        for a in self.adj:
            out.append((a if self.loop.inplace else a[0]).copy())
        j = 0
        for spec in self.pspecs:
            if spec.has_adjoint:
                g = self.gacc[j]
                out.append(g if spec.is_array else (complex(g) if spec.complex else float(g)))
                j += 1
            else:
                out.append(None)
        assert len(out) == S + len(self.params)
        return tuple(out)

    def roundtrip_error(self, builder: plans.PlanBuilder, state: list[np.ndarray],
                        step: ReversibleFunction, strategy: Strategy) -> float:
        """How far ``Reverse()``'s recovered initial state is from the true one; with checks
        on, beyond the tolerance is an error (the gradient came from a wrong trajectory)."""
        now = builder.held[0]
        worst, where, name = 0.0, None, None
        for k, s in enumerate(self.store):
            diff = np.abs(s[now] - s[builder.saved_slot])
            err = float(diff.max()) if diff.size else 0.0
            if err >= worst:
                worst = err
            if self.check:
                bad = diff > self.atol + self.rtol * np.abs(s[builder.saved_slot])
                if bad.any() and where is None:
                    where = np.unravel_index(int(np.argmax(diff)), diff.shape)
                    name = self.loop.state_names[k]
                    kerr = err
        if where is not None:
            raise ReversibilityError(
                f"Reverse() did not recover the initial state: running {step.__name__} backwards "
                f"{self.loop.n_steps} steps gives `{name}` back with an error of {kerr:.3g} "
                f"(at index {tuple(int(i) for i in where)}; tolerance atol={self.atol:g}, "
                f"rtol={self.rtol:g}), so the gradient came from a wrong trajectory. Round-off "
                "grows when a step is run backwards many times (chaotic dynamics); use a "
                "strategy that stores states instead, such as Revolve(snapshots=...) or "
                "StoreAll(), or fewer steps",
                variable=name, expected=None, actual=kerr, function=step.name, stage="checkpoint")
        return worst

    def _not_recovered(self, exc: StateNotRecovered) -> ReversibilityError:
        op, t, k, resid, scale = exc.args
        name = self.loop.step.params[int(k)]
        if op == RECOVER:
            return ReversibilityError(
                f"the reverse sweep of {self.loop.step.__name__} at step t={int(t)} did not "
                f"recover the state `{name}` it started from: it differs from the stored state "
                f"by {float(resid):.3g} (where the stored value is {float(scale):.3g}; tolerance "
                f"atol={self.atol:g}, rtol={self.rtol:g}), so the step's adjoint was computed "
                "on a wrong state. The step is not undone by running it backwards (is it really "
                "reversible in floating point?); loosen the step's tolerance with "
                "@reversible(atol=..., rtol=...) if the difference is round-off",
                variable=name, actual=float(resid), function=self.loop.step.name,
                stage="checkpoint")
        what = "inverse" if op == plans.INV else "reverse sweep"
        return ReversibilityError(
            f"the {what} of {self.loop.step.__name__} at step t={int(t)} did not bring the new "
            f"state `{name}` back to zero: largest remaining value {float(resid):.3g} (state "
            f"values up to {float(scale):.3g}; tolerance atol={self.atol:g}, rtol={self.rtol:g}). "
            "The step is not exactly undone by its inverse: make the step add the new state "
            "in one update per element, or use StoreAll()/Revolve(), which do not uncompute",
            variable=name, actual=float(resid), function=self.loop.step.name, stage="checkpoint")


def _compiled_schedule(strategy: Strategy) -> LoopSchedule | None:
    """The strategy's schedule as a compiled generator, where it has one."""
    try:
        return strategy.loop_schedule()
    except NotImplementedError:
        return None


def _kernel(f: ReversibleFunction, kind: str, sig: tuple[VarType, ...],
            before_sweep: bool = False) -> tuple[Any, str]:
    compiled = f.compiled_kernel(kind, sig, before_sweep=before_sweep)
    return compiled.run, compiled.generated.key


def _describe(x: Any) -> str:
    if isinstance(x, np.ndarray):
        return f"a {x.ndim}-D array of {x.dtype}"
    return f"{type(x).__name__} {x!r}"


__all__: Sequence[str] = ["InsufficientMemoryError", "Stats", "TimeLoop"]
