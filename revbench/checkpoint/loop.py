"""``TimeLoop``: a reversible step run many times, differentiated with a chosen strategy.

A ``TimeLoop`` is the loop statement ``for t in checkpointed(range(n), strategy, new=...,
old=...)`` followed by its loss, and runs that statement's kernels
(:mod:`revbench.checkpoint.driver`): the gradient is one compiled call that runs the
strategy's schedule, a generator of actions (:mod:`revbench.checkpoint.actions`), with the
step's and the loss's compiled kernels -- no planning in Python, no table of actions in
memory, no Python iteration per step.  (A strategy without a compiled schedule has its rows
planned in Python by :mod:`revbench.checkpoint.plan` first.)  What is left here is the
user's side: the signatures, the arguments, the memory check, the counts and the messages.
The caller's arrays are only ever read.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from revbench.backends import loop_code
from revbench.checkpoint import actions
from revbench.checkpoint import plan as plans
from revbench.checkpoint.driver import LoopShape, gradient_kernel, run_kernel
from revbench.checkpoint.strategies import LoopSchedule, Reverse, StoreAll, Strategy, fitting
from revbench.config import get_tolerance
from revbench.function import ReversibleFunction
from revbench.lang.errors import ReversibilityError
from revbench.lang.types import VarType

#: schedules of at most this many rows (16 bytes each) are kept and reused by later calls
PLAN_CACHE_ROWS = 1 << 15
#: (strategy, n_steps, inplace) -> (its actions, its peak): rows planned in Python
_PLAN_CACHE: dict[tuple, tuple[np.ndarray, int]] = {}


@dataclass(frozen=True)
class ParamSpec:
    """A parameter of the loop, as its gradient sees it."""

    is_array: bool
    has_adjoint: bool
    complex: bool = False


class ScheduleError(ValueError):
    """A strategy's schedule, planned in Python, that would not give the gradient."""


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
        return self._executor(state, params).run()

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
        try:
            counts, value, grads, roundtrip = ex.gradient(strategy, slots)
        except ScheduleError as exc:
            raise exc.with_traceback(None) from None
        self.stats = Stats(strategy.label, self.n_steps, counts.forward_steps,
                           counts.inverse_steps, counts.reverse_steps, counts.peak_states,
                           counts.peak_states * state_bytes, ex.disk_bytes,
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
            # (the gradient's own kernel, running a schedule of one kind of step)
            calibration = LoopSchedule(schedule, None, None, uncomputes=kind == "inverse")

            def sample(n: int, calibration: LoopSchedule = calibration) -> float:
                t0 = time.perf_counter()
                ex.sweep(calibration, self.n_steps, 2, "calibration", n=n)
                return time.perf_counter() - t0

            sample(steps)  # (compiles the kernel)
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
    """One call's kernels (:mod:`revbench.checkpoint.driver`) and arguments."""

    def __init__(self, loop: TimeLoop, state: list[np.ndarray], params: list[Any]):
        self.loop = loop
        self.state = state
        self.params = params
        step, loss = loop.step, loop.loss
        example_state = [np.zeros_like(s, order="C") for s in state]
        step_args = ([*example_state] if loop.inplace else
                     [*example_state, *[np.zeros_like(s, order="C") for s in state]])
        step_args += [0, *params]
        try:
            step_sig = step.signature_of(tuple(step_args))
            loss_sig = loss.signature_of((0.0, *example_state, *params))
        except (ReversibilityError, TypeError) as exc:
            raise exc.with_traceback(None) from None
        self.pspecs = tuple(ParamSpec(t.is_array, t.dtype in ("float", "complex"),
                                      t.dtype == "complex")
                            for t in step_sig[loop._lead + 1:])
        self.check = step.check
        p = step._program
        self.atol, self.rtol = get_tolerance()
        if p.atol is not None:
            self.atol = p.atol
        if p.rtol is not None:
            self.rtol = p.rtol
        self.shape = LoopShape(p.ir.name, p.ir.params, step_sig, loop.n_state, loop.inplace,
                               self.check, p.ir.filename, p.ir.firstlineno, p.atol, p.rtol)
        self.step_sig, self.loss_sig = step_sig, loss_sig
        # (compiled only where both are: compiled code cannot call the Python backend's
        # functions, while Python calls compiled kernels as well as its own)
        self.backend = "numba" if step.backend == loss.backend == "numba" else "python"
        self.disk_bytes = 0

    def _kernels(self, uncomputes: bool) -> dict[str, tuple[Any, str]]:
        """The step's and the loss's kernels a gradient calls, by symbol."""
        step, loss = self.loop.step, self.loop.loss
        try:
            # (every forward step's own reverse sweep follows later from the same state,
            # and checks what its forward run would: the lean run)
            kernels = {loop_code.FORWARD_SYMBOL: _kernel(step, "forward", self.step_sig,
                                                         before_sweep=True),
                       loop_code.BACKWARD_SYMBOL: _kernel(step, "backward", self.step_sig),
                       loop_code.LOSS_FORWARD_SYMBOL: _kernel(loss, "forward", self.loss_sig),
                       loop_code.LOSS_BACKWARD_SYMBOL: _kernel(loss, "backward", self.loss_sig)}
            if uncomputes:
                kernels[loop_code.INVERSE_SYMBOL] = _kernel(step, "inverse", self.step_sig)
        except (ReversibilityError, TypeError) as exc:
            raise exc.with_traceback(None) from None
        return kernels

    def run(self) -> tuple[np.ndarray, ...]:
        """The final state, in new arrays (the loop's forward kernel)."""
        try:
            forward = _kernel(self.loop.step, "forward", self.step_sig)
        except (ReversibilityError, TypeError) as exc:
            raise exc.with_traceback(None) from None
        kernel, _ = run_kernel(self.shape, forward, self.backend)
        out = [np.zeros_like(s) for s in self.state]
        self._call(kernel, (*out, *self.state, 0, self.loop.n_steps, 1, *self.params))
        return tuple(out)

    def sweep(self, schedule: LoopSchedule, knob: Any, slots: int, label: str,
              directory: str | None = None, n: int | None = None) -> tuple[float, float, np.ndarray]:
        """Run ``schedule`` in the gradient kernel: ``(value, drift, counts)``; the
        gradients are left in :attr:`adj` and :attr:`gacc` (:meth:`gradients`)."""
        kernel, gen = gradient_kernel(self.shape, self._kernels(schedule.uncomputes), schedule,
                                      self.backend, label, directory)
        self.gen = gen
        self.adj = [np.zeros_like(s) for s in self.state]
        self.gacc = []
        for spec, p in zip(self.pspecs, self.params):
            if spec.has_adjoint:
                if spec.is_array:
                    self.gacc.append(np.zeros_like(p, dtype=np.complex128 if spec.complex
                                                   else np.float64))
                else:
                    self.gacc.append(0j if spec.complex else 0.0)
        counts = np.zeros(8, np.int64)
        result = np.zeros(2)  # (the loss's value, the round trip's difference)
        n = self.loop.n_steps if n is None else n
        out = self._call(kernel, (*self.state, n, knob, slots, counts, result, *self.params,
                                  *self.adj, *self.gacc))
        # (it returns its arguments: the scalar adjoints among them)
        at = len(self.state) + len(loop_code.SEEDED) + len(self.params) + len(self.adj)
        for j, g in enumerate(self.gacc):
            if not isinstance(g, np.ndarray):
                self.gacc[j] = out[at + j]
        return float(result[0]), float(result[1]), counts

    def _call(self, kernel: Any, args: tuple) -> tuple:
        try:
            return kernel(*args, self.atol, self.rtol)
        except KeyboardInterrupt:  # Ctrl-C, noticed by the compiled loop
            raise KeyboardInterrupt from None
        except Exception as exc:
            from revbench.backends.runtime import CheckFailed, to_user_error

            if isinstance(exc, CheckFailed):
                mine = getattr(self, "gen", None)
                if mine is not None and exc.args[0] == mine.module_key:
                    raise self._not_recovered(exc) from None
                raise to_user_error(exc).with_traceback(None) from None
            if isinstance(exc, (IndexError, ZeroDivisionError)):
                located = self._located(type(exc))
                if located is not None:
                    raise located.with_traceback(None) from None
            raise

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
        return self._replayed(kind)

    def _replayed(self, kind: type) -> BaseException | None:
        """A later step's error: the loop run again on the Python backend (the step's and
        the loss's twins, the same generated loop), which names the line, the index and
        the size -- for ``REPLAY_SECONDS`` at most, as a function's call is replayed."""
        from revbench.backends.python_backend import Deadline, with_deadline
        from revbench.function import REPLAY_SECONDS, add_user_line_note

        loop = self.loop
        step, loss = loop.step.python_twin(), loop.loss.python_twin()

        def run() -> None:
            forward = _kernel(step, "forward", self.step_sig)
            kernel, _ = run_kernel(self.shape, forward, "python")
            out = [np.zeros_like(s) for s in self.state]
            kernel(*out, *self.state, 0, loop.n_steps, 1, *self.params, self.atol, self.rtol)
            loss(0.0, *out, *self.params)

        try:
            with_deadline(run, REPLAY_SECONDS)
        except kind as exc:
            if add_user_line_note(exc):
                exc.add_note(f"(in {loop!r}: found by running it again on the Python backend)")
                return exc
        except (Deadline, Exception):
            pass
        return None

    def gradient(self, strategy: Strategy, slots: int) -> tuple[plans.Counts, float, tuple, float]:
        """Run ``strategy``'s schedule with adjoints: ``(counts, value, grads, roundtrip)``
        (``roundtrip``: ``Reverse()``'s, else 0).

        A strategy with a compiled schedule runs it inside the kernel, as its generator
        yields it; another's rows are planned in Python first (:mod:`.plan`), then run by
        the same kernel."""
        n = self.loop.n_steps
        schedule = strategy.compiled_schedule()
        directory = getattr(strategy, "directory", None)
        if schedule is not None:
            knob = schedule.knob
            # (Bennett's generator may be given more slots than it uses: it takes the lowest)
            slots = max(2, min(schedule.size(schedule.slots, n), slots))
            peak = schedule.size(schedule.peak, n)
            self.disk_bytes = (0 if schedule.disk is None else
                               schedule.size(schedule.disk, n) * sum(s.nbytes for s in self.state))
        else:
            knob, peak = _planned_rows(strategy, n, self.loop.inplace, slots)
            schedule = LoopSchedule(actions.planned_actions, None, None)
        # (named by its class, not its label: one kernel serves every setting of the knob)
        value, drift, counts = self.sweep(schedule, knob, slots, type(strategy).__name__,
                                          directory)
        summary = plans.Counts(int(counts[plans.FWD]), int(counts[plans.INV]),
                               int(counts[plans.REV]), peak)
        return summary, value, self._gradients(), drift if isinstance(strategy, Reverse) else 0.0

    def _gradients(self) -> tuple:
        S = self.loop.n_state
        out: list[Any] = [a.copy() for a in self.adj]
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

    def _not_recovered(self, exc: Exception) -> ReversibilityError:
        """The loop's own checks (:mod:`revbench.rules.checks`, ``loop-*``), worded for
        a ``TimeLoop``: the step, the step number, the numbers."""
        _, k, t, resid, *rest = exc.args
        scale = rest[0] if rest else 0.0
        info = self.gen.checks[k]
        name = info.variable
        step = self.loop.step
        tol = f"tolerance atol={self.atol:g}, rtol={self.rtol:g}"
        if info.kind == "loop-not-restored" and int(t) == 0 and info.detail == "Reverse":
            return ReversibilityError(
                f"Reverse() did not recover the initial state: running {step.__name__} "
                f"backwards {self.loop.n_steps} steps gives `{name}` back with an error of "
                f"{float(resid):.3g} (where its value is {float(scale):.3g}; {tol}), so the "
                "gradient came from a wrong trajectory. Round-off grows when a step is run "
                "backwards many times (chaotic dynamics); use a strategy that stores states "
                "instead, such as Revolve(snapshots=...) or StoreAll(), or fewer steps",
                variable=name, actual=float(resid), function=step.name, stage="checkpoint")
        if info.kind == "loop-not-restored":
            return ReversibilityError(
                f"the reverse sweep of {step.__name__} at step t={int(t)} did not recover the "
                f"state `{name}` it started from: it differs from the stored state by "
                f"{float(resid):.3g} (where the stored value is {float(scale):.3g}; {tol}), so "
                "the step's adjoint was computed on a wrong state. The step is not undone by "
                "running it backwards (is it really reversible in floating point?); loosen the "
                "step's tolerance with @reversible(atol=..., rtol=...) if the difference is "
                "round-off", variable=name, actual=float(resid), function=step.name,
                stage="checkpoint")
        what = "inverse" if info.kind == "loop-not-uncomputed" else "reverse sweep"
        return ReversibilityError(
            f"the {what} of {step.__name__} at step t={int(t)} did not bring the new "
            f"state `{name}` back to zero: largest remaining value {float(resid):.3g} (state "
            f"values up to {float(scale):.3g}; {tol}). The step is not exactly undone by its "
            "inverse: make the step add the new state in one update per element, or use "
            "StoreAll()/Revolve(), which do not uncompute",
            variable=name, actual=float(resid), function=step.name, stage="checkpoint")


def _planned_rows(strategy: Strategy, n: int, inplace: bool, slots: int) -> tuple[np.ndarray, int]:
    """A strategy without a compiled schedule: its rows, planned in Python by a
    :class:`~.plan.PlanBuilder` and checked (:func:`_check_rows`), as actions; and its
    peak.  Remembered when small, for a strategy that cannot change (a frozen dataclass,
    as the built-in ones are): another's settings may differ at the next call."""
    params = getattr(type(strategy), "__dataclass_params__", None)
    key = (strategy, n, inplace) if params is not None and params.frozen else None
    hit = _PLAN_CACHE.get(key) if key is not None else None
    if hit is not None:
        return hit
    batches: list[np.ndarray] = []
    b = plans.PlanBuilder(inplace, slots, batches.append)
    b.start()
    try:
        strategy.schedule(b, n)
    except AssertionError as exc:  # (the builder's own checks: a state not held, ...)
        raise ScheduleError(f"the schedule of {strategy.label} is not valid for a loop of {n} "
                            f"steps: {exc}") from None
    b.flush()
    rows = np.concatenate(batches) if batches else np.zeros((0, 4), np.int32)
    _check_rows(strategy, rows, n)
    rows = actions.from_rows(rows, inplace)
    out = (rows, b.counts.peak_states)
    if key is not None and rows.shape[0] <= PLAN_CACHE_ROWS:
        if len(_PLAN_CACHE) >= 64:
            _PLAN_CACHE.clear()
        _PLAN_CACHE[key] = out
    return out


def _check_rows(strategy: Strategy, rows: np.ndarray, n: int) -> None:
    """A schedule planned in Python must take the loss of ``s[n]`` once, then reverse
    every step once, from the last to the first: else the gradient is wrong, silently."""
    ops, ts = rows[:, 0], rows[:, 1]
    losses = np.flatnonzero(ops == plans.LOSS)
    revs = np.flatnonzero(ops == plans.REV)
    problem = None
    if len(losses) != 1 or ts[losses[0]] != n:
        problem = (f"it takes the loss {len(losses)} time(s)" if len(losses) != 1 else
                   f"it takes the loss of s[{ts[losses[0]]}], not of the final state s[{n}]")
    elif len(revs) != n or (n and (revs[0] < losses[0]
                                   or not np.array_equal(ts[revs], np.arange(n - 1, -1, -1)))):
        problem = (f"it runs {len(revs)} reverse step(s)" if len(revs) != n else
                   "its reverse steps are not t = n-1, ..., 0 in turn after the loss")
    if problem is not None:
        raise ScheduleError(f"the schedule of {strategy.label} is not valid for a loop of {n} "
                            f"steps: {problem}; a schedule takes the loss of s[n] once "
                            "(builder.loss(n)), then reverses every step once, from t = n-1 "
                            "down to 0 (builder.rev(t))")


def _kernel(f: ReversibleFunction, kind: str, sig: tuple[VarType, ...],
            before_sweep: bool = False) -> tuple[Any, str]:
    compiled = f.compiled_kernel(kind, sig, before_sweep=before_sweep)
    return compiled.run, compiled.generated.key


def _describe(x: Any) -> str:
    if isinstance(x, np.ndarray):
        return f"a {x.ndim}-D array of {x.dtype}"
    return f"{type(x).__name__} {x!r}"


__all__: Sequence[str] = ["InsufficientMemoryError", "ScheduleError", "Stats", "TimeLoop"]
