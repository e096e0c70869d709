"""The kernels of a checkpointed loop: its step run many times, under a schedule.

``for t in checkpointed(range(a, b, s), strategy, new=y1, old=y0): body`` is outlined by
the parser (:class:`revbench.lang.ir.LoopDef`): the body becomes the *step* function
``step(*new, *old, t, *free)``, and the loop a call of the loop itself, whose meaning is

    ``new += s[n]``, where ``s[0] = old`` and ``s[i+1] = step(s[i], t_i)``.

Its kernels, generated here with the calling convention of every kernel (arguments, then
adjoints, then ``atol, rtol``; all returned), call the step's own compiled kernels:

* *forward* (*inverse*): run the ``n`` steps, rotating two buffers, and add (subtract)
  the final state into ``new``.  No state is kept.
* *backward* (the loop's reverse sweep; that of its inverse adds ``s[n]`` back and
  carries the negated adjoint): run the strategy's schedule
  (:mod:`revbench.checkpoint.actions`, a generator compiled with the kernel) on a store of
  ``slots`` states: forward steps, the reverse sweeps of the steps (which uncompute the
  later state and carry the adjoint back one step), the seed of the adjoint at ``s[n]``,
  where ``new`` is also restored (``new -= s[n]``).  With checks on, every uncomputed state
  must come back to zero within the tolerance, or the sweep stops
  (``loop-not-recovered``): the gradient would come from a wrong trajectory.

Memory: ``slots`` states (the strategy's), two adjoint buffers, whatever the step's own
kernels allocate; time: the strategy's forward steps, and ``n`` reverse steps.
"""

from __future__ import annotations

from revbench.backends.codegen import CODEGEN_VERSION, Generated, assemble
from revbench.backends.custom_sweep import adjoint_param
from revbench.backends.runtime import CheckInfo
from revbench.backends.source import SourceWriter
from revbench.lang.types import VarType
from revbench.transforms.pipeline import BACKWARD, BACKWARD_INVERSE, Direction

DIFFERENTIABLE = ("float", "complex")
#: what generated code calls: the step's kernels, the schedule and its store size
FORWARD_SYMBOL, BACKWARD_SYMBOL = "_rb_step_forward", "_rb_step_backward"
INVERSE_SYMBOL = "_rb_step_inverse"
#: a while loop's condition kernel: ``cond(flag, *old, *free)`` sets ``flag``
COND_SYMBOL = "_rb_condition"
#: a schedule with a second level (disk): its size ``(n, knob)``, the function that maps a
#: store of it (``(n, like, directory, label)``, called in object mode) and Numba's objmode
DISK_SYMBOL, DISK_STORE_SYMBOL, OBJMODE_SYMBOL = "_rb_schedule_disk", "_rb_disk_store", "_rb_objmode"
ACTIONS_SYMBOL, SLOTS_SYMBOL = "_rb_schedule", "_rb_schedule_slots"
#: the loop's own parameters for its range, between the state and the free variables
BOUNDS = ("_rb_lo", "_rb_hi", "_rb_st")


def generate(name: str, params: tuple[str, ...], types: tuple[VarType, ...], n_state: int,
             direction: Direction, check: bool, knob: int, inactive: frozenset[str],
             step_params: tuple[str, ...], step_active: tuple[str, ...], line: int,
             filename: str, label: str, atol: float | None = None,
             rtol: float | None = None, uncomputes: bool = False,
             schedule: str = "", condition: str | None = None,
             disk: tuple[str | None] | None = None) -> Generated:
    """The module of one direction (forward, inverse or backward) of the loop ``name``.

    ``params``: ``(*new, *old, *BOUNDS, *free)``; ``step_params`` the step's
    (``(*new, *old, t, *free)``); ``step_active``: the step's parameters that carry an
    adjoint in its backward kernel, in order.  ``condition``: for a ``while`` loop, the
    text of its line; the loop then steps while :data:`COND_SYMBOL` holds on the state,
    at most ``len(range(*BOUNDS))`` times (its ``max_steps``), and its backward kernel
    runs the strategy's online schedule, which asks before each step (``ASK``).  ``disk``:
    for a schedule with a second level, ``(directory,)`` where its states go."""
    S = n_state
    new, old = params[:S], params[S:2 * S]
    free = params[2 * S + 3:]
    w = SourceWriter()
    emit = w.emit
    checks: list[CheckInfo] = []

    def numbered(info: CheckInfo) -> int:
        checks.append(info)
        return len(checks) - 1

    lo, hi, st = BOUNDS
    # the function's own tolerance, where it has one, for the loop's checks and its steps
    if atol is not None:
        emit(f"_rb_gatol = {float(atol)!r}")
    if rtol is not None:
        emit(f"_rb_grtol = {float(rtol)!r}")
    if condition is not None:  # (its range is range(0, max_steps, 1))
        c = numbered(CheckInfo("loop-max-steps", label, line, condition))
        with w.block(f"if {hi} < 0:"):
            emit(f"raise _RbCheckFailed(_RB_MODULE, {c}, 0, {hi})")
    emit(f"_rb_n = len(range({lo}, {hi}, {st}))")
    if condition is not None:
        emit("_rb_limit = _rb_n")
        limit = numbered(CheckInfo("loop-step-limit", label, line, condition))
    if check:
        for k in range(S):
            c = numbered(CheckInfo("loop-state-shape", new[k], line, old[k]))
            with w.block(f"if {new[k]}.shape != {old[k]}.shape:"):
                emit(f"raise _RbCheckFailed(_RB_MODULE, {c}, 0, 0)")
    store = [f"_rb_s{k}" for k in range(S)]
    adjs = [f"_rb_a{k}" for k in range(S)]
    free_args = ", ".join(free)
    fcomma = f", {free_args}" if free else ""

    def step_call(symbol: str, dst: str, src: str, extra: str = "") -> str:
        new_args = ", ".join(f"{s}[{dst}]" for s in store)
        old_args = ", ".join(f"{s}[{src}]" for s in store)
        return f"{symbol}({new_args}, {old_args}, _rb_t{fcomma}{extra}, _rb_gatol, _rb_grtol)"

    def holds(slot: str) -> str:
        """The condition, on the state in ``slot``."""
        old_args = ", ".join(f"{s}[{slot}]" for s in store)
        return f"{COND_SYMBOL}(False, {old_args}{fcomma}, _rb_gatol, _rb_grtol)[0]"

    def stop_at_limit() -> None:
        with w.block("if _rb_i >= _rb_limit:  # the condition still holds after max_steps"):
            emit(f"raise _RbCheckFailed(_RB_MODULE, {limit}, _rb_limit, _rb_i)")

    def allocate(slots: str) -> None:
        for k in range(S):
            emit(f"{store[k]} = _rb_np.zeros(({slots},) + {old[k]}.shape, {old[k]}.dtype)",
                 f"{store[k]}[0] = {old[k]}")

    if direction.is_run:  # (before a sweep too: then its steps are the lean runs)
        ufunc = "subtract" if direction.inverse else "add"
        allocate("2")
        header = "for _rb_i in range(_rb_n):" if condition is None else "while True:"
        if condition is not None:
            emit("_rb_i = 0")
        with w.block(header):
            if condition is not None:
                with w.block(f"if not {holds('_rb_i % 2')}:"):
                    emit("break")
                stop_at_limit()
            emit(f"_rb_t = {lo} + _rb_i * {st}",
                 "_rb_src = _rb_i % 2", "_rb_dst = 1 - _rb_src")
            for s in store:
                emit(f"{s}[_rb_dst][...] = 0")
            emit(step_call(FORWARD_SYMBOL, "_rb_dst", "_rb_src"))
            if condition is not None:
                emit("_rb_i += 1")
        if condition is not None:
            emit("_rb_n = _rb_i")
        for k in range(S):
            emit(f"_rb_np.{ufunc}({new[k]}, {store[k]}[_rb_n % 2], {new[k]})")
        everything = params
    elif direction in (BACKWARD, BACKWARD_INVERSE):
        # (of the inverse, new -= s[n]: new is restored by adding, the adjoint enters negated)
        restore, seed = (("subtract", "") if direction == BACKWARD else ("add", "-"))
        active = [p for p, t in zip(params, types) if t.dtype in DIFFERENTIABLE
                  and p not in inactive]
        everything = (*params, *(adjoint_param(p, 0, 1) for p in active))
        emit(f"_rb_nslots = max(2, {SLOTS_SYMBOL}(_rb_n, {knob}))")
        if condition is not None:  # (its length is known when the schedule has asked)
            emit("_rb_n = -1", "_rb_ended = _rb_np.zeros(1, _rb_np.int64)")
        allocate("_rb_nslots")
        for k in range(S):
            emit(f"{adjs[k]} = _rb_np.zeros((2,) + {old[k]}.shape, {old[k]}.dtype)")
        disks = [f"_rb_d{k}" for k in range(S)] if disk is not None else []
        if disk is not None:  # (mapped files, made in object mode: compiled code opens none)
            emit(f"_rb_ndisk = {DISK_SYMBOL}(_rb_n, {knob})")
            kinds = ", ".join(f"{d}={_numba_type(types[S + k], 1)!r}" for k, d in enumerate(disks))
            with w.block(f"with {OBJMODE_SYMBOL}({kinds}):"):
                for k, d in enumerate(disks):
                    emit(f"{d} = {DISK_STORE_SYMBOL}(_rb_ndisk, {old[k]}, {disk[0]!r}, "
                         f"{label!r})")
        # the step's adjoints: of its new state, its old state, then the free variables'
        step_adjs = []
        scalar_results = []  # (position in the step's result, the loop's adjoint variable)
        n_step = len(step_params)
        for j, p in enumerate(step_active):
            if j < S:
                step_adjs.append(f"{adjs[j]}[_rb_up]")
            elif j < 2 * S:
                step_adjs.append(f"{adjs[j - S]}[_rb_here]")
            else:
                a = adjoint_param(p, 0, 1)
                step_adjs.append(a)
                t = types[params.index(p)]
                if not t.is_array:
                    scalar_results.append((n_step + j, a))
        extra = ", " + ", ".join(step_adjs)
        not_back = [numbered(CheckInfo("loop-not-recovered", new[k], line, label))
                    for k in range(S)] if check else []

        def uncompute(call: str) -> None:
            """``call`` brings the state in slot b back to zero: with checks, the largest
            value left must be within the tolerance of the largest before."""
            if check:
                emit("_rb_scale = 0.0")
                for s in store:
                    emit(f"_rb_v = {s}[_rb_b].reshape(-1)")
                    with w.block("for _rb_j in range(_rb_v.size):"):
                        emit("_rb_scale = max(_rb_scale, abs(_rb_v[_rb_j]))")
            emit(call)
            for k, s in enumerate(store):
                if not check:
                    continue
                emit("_rb_left = 0.0", f"_rb_v = {s}[_rb_b].reshape(-1)")
                with w.block("for _rb_j in range(_rb_v.size):"):
                    emit("_rb_left = max(_rb_left, abs(_rb_v[_rb_j]))")
                with w.block("if _rb_left > _rb_gatol + _rb_grtol * _rb_scale:"):
                    emit(f"raise _RbCheckFailed(_RB_MODULE, {not_back[k]}, _rb_t, _rb_left)")

        schedule_args = f"-1, {knob}, _rb_ended" if condition is not None else f"_rb_n, {knob}"
        with w.block(f"for _rb_op, _rb_i, _rb_a, _rb_b in {ACTIONS_SYMBOL}({schedule_args}):"):
            emit(f"_rb_t = {lo} + _rb_i * {st}")
            if condition is not None:
                with w.block("if _rb_op == 5:  # is there a step i? the condition, on slot a"):
                    with w.block(f"if not {holds('_rb_a')}:"):
                        emit("_rb_ended[0] = 1", "_rb_n = _rb_i")
                        emit("continue")
                    stop_at_limit()
                    emit("continue")
            with w.block("if _rb_op == 0:  # forward step: s[i+1] into slot b from slot a"):
                for s in store:
                    emit(f"{s}[_rb_b][...] = 0")
                emit(step_call(FORWARD_SYMBOL, "_rb_b", "_rb_a"))
            if uncomputes:
                with w.block("elif _rb_op == 1:  # the step's inverse: uncompute s[i+1]"):
                    uncompute(step_call(INVERSE_SYMBOL, "_rb_b", "_rb_a"))
            with w.block("elif _rb_op == 2:  # the step's reverse sweep: adjoint s[i+1] -> s[i]"):
                emit("_rb_up = (_rb_i + 1) % 2", "_rb_here = _rb_i % 2")
                uncompute(f"_rb_r = {step_call(BACKWARD_SYMBOL, '_rb_b', '_rb_a', extra)}")
                for pos, a in scalar_results:
                    emit(f"{a} = _rb_r[{pos}]")
                for k in range(S):
                    emit(f"{adjs[k]}[_rb_up][...] = 0")
            if disk is not None:
                with w.block("elif _rb_op == 6:  # s[i] to the second level"):
                    for st_, d in zip(store, disks):
                        emit(f"{d}[_rb_b][...] = {st_}[_rb_a]")
                with w.block("elif _rb_op == 7:  # and back"):
                    for st_, d in zip(store, disks):
                        emit(f"{st_}[_rb_b][...] = {d}[_rb_a]")
            with w.block("elif _rb_op == 4:  # s[n] is in slot a: the adjoint enters there"):
                for k in range(S):
                    emit(f"_rb_np.{restore}({new[k]}, {store[k]}[_rb_a], {new[k]})",
                         f"{adjs[k]}[_rb_n % 2][...] = {seed}{adjoint_param(new[k], 0, 1)}")
        with w.block("if _rb_n == 0:  # no step: s[n] is old itself"):
            for k in range(S):
                emit(f"_rb_np.{restore}({new[k]}, {old[k]}, {new[k]})",
                     f"{adjs[k]}[0][...] = {seed}{adjoint_param(new[k], 0, 1)}")
        for k in range(S):
            if old[k] in active:
                a = adjoint_param(old[k], 0, 1)
                emit(f"_rb_np.add({a}, {adjs[k]}[0], {a})")
    else:  # pragma: no cover - the loop program refuses other directions first
        raise ValueError(f"no {direction.name} kernel for a checkpointed loop")
    emit(f"return ({', '.join(everything)}{',' if len(everything) == 1 else ''})")

    sig = ", ".join(f"{p}: {t}" for p, t in zip(params, types))
    comments = [
        f"# revbench {direction.name} code for the checkpointed loop {name} "
        f"({filename}:{line}) under {label}; schedule {schedule}",
        f"# signature: ({sig}); checks {'on' if check else 'off'}; without adjoints: "
        f"{', '.join(sorted(inactive)) or '-'}; codegen v{CODEGEN_VERSION}",
    ]
    return assemble(comments, f"{name}__{direction.name.replace('-', '_')}", everything,
                    w.lines, checks, line, check or condition is not None)


def _numba_type(t: VarType, extra: int) -> str:
    """Numba's spelling of an array like ``t`` with ``extra`` more leading axes."""
    scalar = {"float": "float64", "complex": "complex128"}[t.dtype]
    return f"{scalar}[{', '.join([':'] * (t.ndim + extra))}]"
