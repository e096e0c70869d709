"""``compare``: run a loop's gradient with each strategy, over a range of lengths, and measure.

Every row of the result is one (strategy, knob, n_steps): the wall time of one gradient
call (the median of ``repeats`` samples; a call shorter than ``min_seconds`` is repeated
back to back until a sample lasts that long, and ``timed_runs`` counts the calls timed),
the exact counts from ``loop.stats``, the memory the operating system saw the call add
(:mod:`revbench.experiments.memory`, which sees Numba's allocations; a figure below
``memory_floor_bytes``, what the measurement can tell from noise on this machine, is
flagged ``measured_below_floor``), and how far the gradient is from ``StoreAll()``'s.
``error`` says why a row has no figures (a strategy that ran out of memory, a peer that
failed); it is empty otherwise.

Each row also has its *cost model*: the exact counts times the cost of one step of each
kind, timed in the same run by the same compiled driver (``TimeLoop.step_times``), and
the states' bytes.  ``time_overhead = seconds / model_seconds`` and
``memory_overhead_bytes = measured - states`` are what revbench adds to the method.  When
JAX or PyTorch is installed, the built-in workloads add rows for what ML users run
today (:mod:`revbench.experiments.peers`).
"""

from __future__ import annotations

import math
import platform
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from revbench.checkpoint import STRATEGIES, Revolve, StoreAll, Strategy, TimeLoop
from revbench.checkpoint.loop import InsufficientMemoryError
from revbench.experiments.memory import MIN_SAMPLE_SECONDS, measure_call, measurement_floor
from revbench.lang.errors import ReversibilityError

COLUMNS = ["workload", "framework", "strategy", "knob", "n_steps", "seconds", "timed_runs",
           "model_seconds", "time_overhead", "forward_steps", "inverse_steps", "reverse_steps",
           "peak_states", "peak_bytes", "measured_peak_bytes", "memory_floor_bytes",
           "measured_below_floor", "memory_overhead_bytes", "disk_bytes", "grad_error",
           "roundtrip_error", "value", "error"]


def default_strategies(inplace: bool, n_steps: int) -> list[Strategy]:
    """Each fitting strategy over a small range of its knob, scaled to the loop's length:
    the registered strategies in their order, each with its ``defaults(n_steps)``."""
    return [s for cls in STRATEGIES.values() if cls.fits(inplace) for s in cls.defaults(n_steps)]


@dataclass
class Result:
    """What :func:`compare` measured: ``table`` (a pandas DataFrame), ``plot()``, ``save()``."""

    workload: str
    table: Any  # pandas.DataFrame
    info: dict[str, Any] = field(default_factory=dict)

    def plot(self):
        """A matplotlib Figure: memory against time (knobs labelled), time and memory against T."""
        from revbench.experiments.plot import plot_result

        return plot_result(self)

    def save(self, path: str | Path) -> dict[str, Path]:
        """Write ``path.json`` (table and machine info), ``path.csv`` and ``path.png``.

        ``path`` may be a directory (``results/``): the files are then named after the workload.
        """
        import json

        path = Path(path)
        if path.is_dir() or str(path).endswith(("/", "\\")):
            path = path / self.workload
        path.parent.mkdir(parents=True, exist_ok=True)
        out = {"json": path.with_name(path.name + ".json"), "csv": path.with_name(path.name + ".csv"),
               "png": path.with_name(path.name + ".png")}
        records = json.loads(self.table.to_json(orient="records"))
        with open(out["json"], "w") as f:
            json.dump({"workload": self.workload, "info": self.info, "rows": records}, f, indent=1)
        self.table.to_csv(out["csv"], index=False)
        fig = self.plot()
        fig.savefig(out["png"], dpi=110, bbox_inches="tight")
        import matplotlib.pyplot as plt

        plt.close(fig)
        return out

    def _repr_html_(self) -> str:
        return self.table._repr_html_()

    def __repr__(self) -> str:
        return f"Result({self.workload!r}, {len(self.table)} rows)\n{self.table.to_string()}"


@dataclass(frozen=True)
class _Maker:
    """Makes the loop of ``T`` steps and its arguments -- here, or in a worker process it
    is sent to (it pickles: a built-in workload by name, a user's TimeLoop by its step and
    loss, which pickle by value, :mod:`revbench.transport`)."""

    name: str
    size: tuple = ()
    seed: int = 0
    step: Any = None  # a user's TimeLoop: its step, loss, state count, in place
    loss: Any = None
    n_state: int = 1
    inplace: bool = False
    args: tuple = ()
    spec: Any = None  # a Workload object of the user's own (else the built-in by name)

    def __call__(self, T: int) -> tuple[TimeLoop, tuple]:
        if self.step is not None:
            return TimeLoop(self.step, T, loss=self.loss, n_state=self.n_state,
                            inplace=self.inplace), tuple(self.args)
        from revbench.experiments.workloads import WORKLOADS

        spec, size = self.spec or WORKLOADS[self.name], dict(self.size)
        return spec.loop(T, **size), spec.args(T, seed=self.seed, **size)


def compare(workload: Any, n_steps: Sequence[int] | int = (100, 1000),
            strategies: Iterable[Strategy] | None = None, repeats: int = 3,
            progress: bool = True, *, args: tuple | None = None, seed: int = 0,
            peers: bool = True, min_seconds: float = MIN_SAMPLE_SECONDS, client: Any = None,
            **size: Any) -> Result:
    """Measure each strategy's gradient on ``workload`` for each loop length in ``n_steps``.

    ``workload`` is a name of :data:`revbench.experiments.WORKLOADS` (its ``size``
    knobs may be passed as keywords) or your own :class:`~revbench.checkpoint.TimeLoop`,
    with its arguments in ``args``.  ``strategies=None`` runs each fitting strategy
    over a small range of its knob (:func:`default_strategies`).  ``repeats`` samples
    are timed after a warm-up (compilation is not measured); a sample is one gradient
    call, or, when one call is shorter than ``min_seconds``, as many back to back as
    last that long (:func:`~revbench.experiments.memory.measure_call`).  ``seconds`` is
    the median time of one call, ``timed_runs`` the calls timed.  A measured memory
    figure below ``memory_floor_bytes`` (:func:`~revbench.experiments.memory.measurement_floor`)
    is flagged ``measured_below_floor``.  ``peers=False`` leaves out JAX / PyTorch even
    where installed (their rows are timed the same way, after a warm-up call).

    ``client`` (a ``dask.distributed.Client``) runs each measured configuration as one
    task on the cluster (``docs/scale.md``): a row is timed inside one task, after that
    task's own warm-up, and its memory is the worker process's; the rows come back in the
    order a local run gives them.  Give each worker one thread, or tasks sharing a process
    time each other.
    """
    from revbench.experiments.workloads import WORKLOADS

    steps = [n_steps] if isinstance(n_steps, (int, np.integer)) else list(n_steps)
    if not steps or any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1
                        for n in steps):
        raise ValueError(f"n_steps must be a positive int or a list of them, got {n_steps!r}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
    if isinstance(min_seconds, bool) or not isinstance(min_seconds, (int, float)) \
            or not min_seconds >= 0:
        raise ValueError(f"min_seconds must be a number >= 0, got {min_seconds!r}")
    if client is not None and not (callable(getattr(client, "submit", None))
                                   and callable(getattr(client, "gather", None))):
        raise TypeError(f"client= takes a dask.distributed.Client (Client(address) or "
                        f"Client(LocalCluster(...))), got {client!r}")
    user_strategies = None if strategies is None else list(strategies)
    if user_strategies == []:  # (nothing would be measured, and empty files written)
        raise ValueError("strategies names no strategy: give at least one, or None for each "
                         "fitting strategy over a range of its knob")
    if isinstance(workload, TimeLoop):
        if args is None:
            raise TypeError("compare(loop, ...) needs the loop's arguments: args=(*state0, *params)")
        name, spec = "custom", None
        make = _Maker(name, step=workload.step, loss=workload.loss, n_state=workload.n_state,
                      inplace=workload.inplace, args=tuple(args))
    else:
        if isinstance(workload, str):
            if workload not in WORKLOADS:
                raise ValueError(f"unknown workload {workload!r}; the built-in workloads are "
                                 f"{', '.join(WORKLOADS)}")
            spec = WORKLOADS[workload]
        else:
            spec = workload
        if args is not None:
            raise TypeError("args= is for your own TimeLoop; a built-in workload makes its own")
        name = spec.name
        make = _Maker(name, size=tuple(sorted(size.items())), seed=seed,
                      spec=None if spec is WORKLOADS.get(name) else spec)

    inplace = make(1)[0].inplace
    for s in user_strategies or ():
        if not isinstance(s, Strategy):
            raise TypeError(f"strategies must be strategy objects (StoreAll(), Revolve(snapshots=10), "
                            f"...), got {s!r}")
        if not s.fits(inplace):
            TimeLoop._check_strategy(make(1)[0], s)  # raises the ValueError naming what fits

    # one set of knobs for every T (scaled to the longest loop), so each is a line over T
    chosen = user_strategies if user_strategies is not None else default_strategies(inplace, max(steps))
    plan = [(T, chosen) for T in steps]
    peer_mod = None
    if peers and spec is not None:
        from revbench.experiments import peers as peer_mod

        if not peer_mod.available():
            peer_mod = None
    if client is not None:
        rows, step_seconds, floor = _rows_on(client, make, name, plan, peer_mod is not None,
                                             repeats, min_seconds, progress)
        return _result(name, rows, floor, step_seconds, repeats, seed, size, min_seconds,
                       client)
    total = sum(len(s) for _, s in plan) + (
        len(steps) * len(peer_mod.variants(name)) if peer_mod is not None else 0)
    bar = _progress(total, name, progress)
    rows: list[dict[str, Any]] = []
    warm = make(min(3, max(steps)))
    _warm_up(*warm, chosen)
    # the cost model: what one step of each kind costs, timed by the same driver
    step_seconds = warm[0].step_times(*warm[1])
    floor = measurement_floor()
    try:
        for T, strats in plan:
            loop, loop_args = make(T)
            ref = _reference(loop, loop_args, strats)
            for s in strats:
                bar.set_postfix_str(f"T={T} {s.label}", refresh=False)
                rows.append(_measure(name, loop, loop_args, s, repeats, ref, step_seconds,
                                     min_seconds))
                bar.update()
            if peer_mod is not None:
                for row in _peer_rows(name, T, loop_args, repeats, ref):
                    bar.set_postfix_str(f"T={T} {row['framework']} {row['strategy']}", refresh=False)
                    rows.append(row)
                    bar.update()
    finally:
        bar.close()
    return _result(name, rows, floor, step_seconds, repeats, seed, size, min_seconds)


def _peer_rows(name: str, T: int, loop_args: tuple, repeats: int, ref) -> list[dict]:
    """The JAX / PyTorch rows of one loop length, their gradients compared with ``ref``."""
    from revbench.experiments import peers as peer_mod

    rows = []
    for row in peer_mod.measure(name, T, loop_args, repeats):
        grad = row.pop("grad", None)
        row.setdefault("workload", name)
        row.setdefault("n_steps", T)
        row.setdefault("timed_runs", repeats)  # (a failed peer row timed nothing)
        row["grad_error"] = _grad_error(grad, ref[1]) if grad is not None and ref else math.nan
        rows.append(row)
    return rows


def _result(name: str, rows: list[dict], floor, step_seconds, repeats: int, seed: int,
            size: dict, min_seconds: float, client: Any = None) -> Result:
    import pandas as pd

    table = pd.DataFrame(rows)
    for c in COLUMNS:
        if c not in table.columns:
            table[c] = np.nan if c != "error" else ""
    table["memory_floor_bytes"] = math.nan if floor is None else float(floor)
    table["measured_below_floor"] = table["measured_peak_bytes"] < table["memory_floor_bytes"]
    table = table[COLUMNS + [c for c in table.columns if c not in COLUMNS]]
    info = {"machine": platform.platform(), "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(), "repeats": repeats, "seed": seed,
            "size": size, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "step_seconds": step_seconds, "min_sample_seconds": min_seconds,
            "memory_floor_bytes": floor}
    if client is not None:
        workers = client.scheduler_info().get("workers", {})
        info["cluster"] = {"scheduler": client.scheduler.address, "workers": len(workers),
                           "threads": sum(w.get("nthreads", 0) for w in workers.values())}
    return Result(name, table, info)


# -- on a Dask cluster: one task per measured configuration ------------------------------
def _reference_task(make: _Maker, T: int):
    loop, loop_args = make(T)
    return _reference(loop, loop_args, [])


#: in a worker process: the cost model of each workload it measured, and the strategies
#: it warmed up (a sweep's tasks share them, as a local sweep's rows do)
_WORKER: dict[tuple, Any] = {}


def _worker_key(make: _Maker) -> tuple:
    """What a workload is in this process: its name, sizes and seed, or the (rebuilt, so
    shared) programs of a user's loop and its arguments' shapes."""
    if make.step is None:
        return (make.name, make.size, make.seed, id(make.spec))
    return (id(make.step._program), id(make.loss._program) if make.loss is not None else None,
            make.n_state, make.inplace, tuple(np.shape(a) for a in make.args))


def _measure_task(make: _Maker, name: str, T: int, strategy: Strategy, repeats: int,
                  min_seconds: float, ref) -> dict:
    """One row, measured as :func:`compare` measures it here: after a warm-up in this
    worker (it compiles, or loads the code from the cache) and with the cost model timed
    by the same driver in the same process (once per worker and workload)."""
    key = _worker_key(make)
    if ("warm", key, repr(strategy)) not in _WORKER:
        warm = make(3)
        _warm_up(*warm, [strategy])
        _WORKER["warm", key, repr(strategy)] = True
        if ("steps", key) not in _WORKER:
            _WORKER["steps", key] = warm[0].step_times(*warm[1])
    step_seconds = _WORKER["steps", key]
    loop, loop_args = make(T)
    row = _measure(name, loop, loop_args, strategy, repeats, ref, step_seconds, min_seconds)
    row["step_seconds"] = step_seconds
    return row


def _peer_task(make: _Maker, name: str, T: int, repeats: int, ref) -> list[dict]:
    return _peer_rows(name, T, make(T)[1], repeats, ref)


def _rows_on(client: Any, make: _Maker, name: str, plan, peers: bool, repeats: int,
             min_seconds: float, progress: bool):
    """Every row of the plan as tasks of ``client``, in the local order; the cost model
    and the memory floor of a worker."""
    refs = {T: client.submit(_reference_task, make, T, pure=False) for T, _ in plan}
    futures, labels = [], []
    for T, strats in plan:
        for s in strats:
            futures.append(client.submit(_measure_task, make, name, T, s, repeats, min_seconds,
                                         refs[T], pure=False))
            labels.append(f"T={T} {s.label}")
        if peers:
            futures.append(client.submit(_peer_task, make, name, T, repeats, refs[T], pure=False))
            labels.append(f"T={T} peers")
    floor = client.submit(measurement_floor, pure=False)
    _follow(futures, labels, name, progress)
    rows: list[dict] = []
    for got in client.gather(futures):  # (a task's error is raised here, with its message)
        rows.extend(got if isinstance(got, list) else [got])
    step_seconds = next((r.pop("step_seconds") for r in rows if "step_seconds" in r), {})
    for r in rows:
        r.pop("step_seconds", None)
    return rows, step_seconds, floor.result()


def _follow(futures: list, labels: list[str], name: str, enabled: bool) -> None:
    """Dask's progress bar in a notebook; in a terminal the usual one, a step per task."""
    if not enabled:
        return
    if _in_notebook():  # (a widget the cell shows, updated as the tasks finish)
        from distributed import progress
        from IPython.display import display

        display(progress(futures, notebook=True, multi=False))
        return
    from distributed import as_completed

    bar = _progress(len(futures), name, True)
    where = {f.key: label for f, label in zip(futures, labels)}
    try:
        for done in as_completed(futures):
            bar.set_postfix_str(where.get(done.key, ""), refresh=False)
            bar.update()
    finally:
        bar.close()


def _progress(total: int, name: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=f"experiments {name}", disable=not enabled, leave=False)


def _warm_up(loop: TimeLoop, args: tuple, strategies: list[Strategy]) -> None:
    """Compile the kernels and each strategy's driver on a short loop before anything is
    timed or its memory measured (compiling is neither the method nor a gradient's cost)."""
    for s in (StoreAll(), Revolve(snapshots=1), *strategies):
        try:
            loop.value_and_grad(*args, strategy=s)
        except ReversibilityError:
            pass


def _reference(loop: TimeLoop, args: tuple, strategies: list[Strategy]):
    """StoreAll()'s value and gradient, the yardstick of ``grad_error`` (Revolve if it does
    not fit in memory)."""
    for s in (StoreAll(), Revolve(snapshots=max(1, round(math.sqrt(loop.n_steps))))):
        try:
            return loop.value_and_grad(*args, strategy=s)
        except (InsufficientMemoryError, ReversibilityError):
            continue
    return None


def _flat(grads) -> np.ndarray:
    parts = [np.ravel(np.asarray(g)) for g in grads if g is not None]
    return np.concatenate(parts) if parts else np.zeros(0)


def _grad_error(grads, ref_grads) -> float:
    a, b = _flat(grads), _flat(ref_grads)
    if a.shape != b.shape:
        return math.nan
    denom = np.linalg.norm(b)
    return float(np.linalg.norm(a - b) / denom) if denom > 0 else float(np.linalg.norm(a - b))


def model_seconds(row: dict[str, Any], step_seconds: dict[str, float]) -> float:
    """The cost model of a row: its exact step counts times what each step costs."""
    total = 0.0
    for kind in ("forward", "inverse", "reverse"):
        count = row.get(f"{kind}_steps", 0) or 0
        if count:
            total += count * step_seconds[kind]
    return total


def _measure(name: str, loop: TimeLoop, args: tuple, strategy: Strategy, repeats: int, ref,
             step_seconds: dict[str, float] | None = None,
             min_seconds: float = MIN_SAMPLE_SECONDS) -> dict:
    row: dict[str, Any] = {"workload": name, "framework": "revbench", "strategy": strategy.name,
                           "knob": strategy.knob, "n_steps": loop.n_steps, "error": ""}
    try:
        # the same arguments every call: a TimeLoop's gradient does not change them
        result, seconds, peak, runs = measure_call(
            lambda: loop.value_and_grad(*args, strategy=strategy), repeats, min_seconds)
    except (ReversibilityError, InsufficientMemoryError) as exc:
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        row["seconds"] = math.nan
        return row
    st = loop.stats
    row.update(seconds=seconds, timed_runs=runs, forward_steps=st.forward_steps,
               inverse_steps=st.inverse_steps, reverse_steps=st.reverse_steps,
               peak_states=st.peak_states, peak_bytes=st.peak_bytes, disk_bytes=st.disk_bytes,
               measured_peak_bytes=math.nan if peak is None else peak,
               roundtrip_error=st.roundtrip_error, value=result[0],
               grad_error=_grad_error(result[1], ref[1]) if ref else math.nan)
    if step_seconds is not None:
        row["model_seconds"] = model_seconds(row, step_seconds)
        row["time_overhead"] = (row["seconds"] / row["model_seconds"] if row["model_seconds"] > 0
                                else math.nan)
    row["memory_overhead_bytes"] = row["measured_peak_bytes"] - st.peak_bytes
    return row


def _in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel (where Dask's progress bar is a widget)."""
    import sys

    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return type(shell).__name__ == "ZMQInteractiveShell"
