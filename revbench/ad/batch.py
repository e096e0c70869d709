"""Batched derivatives: one call maps ``jacobian`` / ``grad`` / ``value_and_grad`` over items.

``jacobian(f, outputs="r", wrt=("cam", "X"), batch=("r", "cam", "X", "feat"))``
takes the ``batch`` arguments with one extra leading axis (item ``i`` is
``cam[i]``; the others are shared by every item) and returns one Jacobian block
per item, stacked: what ``jax.vmap(jax.jacrev(...))`` gives.  It is the fast way to
get the local Jacobians of many small problems (bundle adjustment's
observations): the loop over items runs in one generated function, compiled by
Numba like the kernels it calls (the forward run, then reverse sweeps carrying
several seeds at once), so no Python runs per item.

Why generate a driver rather than loop in Python: a call of a compiled kernel
from Python costs tens of microseconds (argument checks, dispatch, copies),
more than the kernel itself for a 2 x 15 block; inside one compiled loop the
kernels are plain calls.  The driver is written to the same on-disk cache as the
kernels and compiled with ``cache=True``, so later processes load it.

With checks on the driver checks, per item, that every reverse sweep gave back
the item's arguments (as :func:`revbench.grad` does); on any failure -- a
runtime check of the program, or a sweep that did not recover its item -- the
failing item is run again through the unbatched function, which raises the
usual error, with a note naming the item.  The caller's arrays are never
modified.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from revbench.ad import gpu
from revbench.ad.sweep import (
    Backward,
    block_rows,
    jacobian_lanes,
    param_index,
    refuse_array_dtype,
    refuse_wrt_without_gradient,
    resolve_loss,
    tolerance_of,
)
from revbench.backends import blas, cuda_arrays, targets
from revbench.backends.batch_steps import cotangent_names, each_block, seed_lanes
from revbench.backends.loader import load_module
from revbench.backends.runtime import Interrupted, interrupted
from revbench.backends.source import SourceWriter, emit_given_back
from revbench.compiler import OneSeedAtATime
from revbench.config import get_tolerance
from revbench.function import ReversibleFunction
from revbench.lang.errors import ReversibilityError, ReversibilityTypeError
from revbench.lang.types import NUMPY_DTYPES, VarType, python_scalar
from revbench.rules import functions as fn_rules

#: the most seeds per reverse sweep, as for the unbatched jacobian
LANES = 8


@dataclass(frozen=True)
class _Layout:
    """What a driver is specialised on: everything but the sizes."""

    sig: tuple[VarType, ...]
    batched: tuple[bool, ...]
    written: tuple[bool, ...]
    adjoint: tuple[bool, ...]  # carries an adjoint in the reverse sweep
    outputs: tuple[int, ...]  # parameters seeded (rows of the Jacobian)
    wrt: tuple[int, ...]  # parameters whose adjoints are read (columns)
    lanes: int
    one_sweep: bool  # every seed fits in one reverse sweep
    check: bool
    python: bool  # the Python backend: its kernels compute on Python scalars
    keep: tuple[bool, ...]  # parameters whose values per item are returned
    #: shared parameters whose gradient is summed over the items (``reduce="sum"``): the
    #: gradient of the total; their block has one row of items, added to in item order
    summed: tuple[bool, ...] = ()
    deterministic: bool = True  # (the GPU: a fixed order of the sum, else the fastest)
    #: a pullback (``vjp``): these outputs' adjoints start at cotangents given per item
    #: (one sweep, its one row that of ``outputs[0]``); empty for the other derivatives
    cotangents: tuple[int, ...] = ()


def batch_names(f: ReversibleFunction, batch: Any) -> tuple[int, ...]:
    names = (batch,) if isinstance(batch, (str, int)) else tuple(batch)
    if not names:
        raise ValueError("batch= names no argument")
    ks = tuple(param_index(f, b, "batch") for b in names)
    if len(set(ks)) != len(ks):
        raise ValueError("batch= names an argument twice")
    return ks


class _Batched:
    """Splits batched arguments into items, compiles and runs the driver."""

    def __init__(self, f: ReversibleFunction, b: Backward, batch: Any, api: str):
        self.f, self.b, self.api = f, b, api
        self.batch = batch_names(f, batch)
        self._drivers: dict[tuple, Callable] = {}

    # -- arguments ---------------------------------------------------------------------
    def split(self, args: tuple) -> tuple[int, tuple, tuple]:
        """(n, the arguments with batched arrays made contiguous, the first item)."""
        f = self.f
        if len(args) != len(f.params):
            raise TypeError(f"{f.__name__}() takes {len(f.params)} argument(s) "
                            f"({', '.join(f.params)}) but {len(args)} were given")
        n = None
        args = list(args)
        for k in self.batch:
            a, name = args[k], f.params[k]
            if not isinstance(a, np.ndarray) or a.ndim == 0:
                raise TypeError(f"{self.api}: batch argument `{name}` must be an array whose first "
                                f"axis runs over the items, got {type(a).__name__}")
            refuse_array_dtype(self.api, name, a.dtype)
            if n is None:
                n = a.shape[0]
            elif a.shape[0] != n:
                first = f.params[self.batch[0]]
                raise ValueError(f"{self.api}: batch arguments disagree on the number of items: "
                                 f"`{first}` has {n}, `{name}` has {a.shape[0]}")
        arrays = [(p, a) for p, a in zip(f.params, args) if isinstance(a, np.ndarray)]
        for i, (p1, a1) in enumerate(arrays):
            for p2, a2 in arrays[i + 1:]:
                if np.may_share_memory(a1, a2):
                    raise ReversibilityError(
                        f"arguments `{p1}` and `{p2}` of {f.__name__} share memory: updating one "
                        "would change the other, which is not reversible (pass a copy)",
                        variable=p2, function=f.name, stage="call")
        if n == 0:
            raise ValueError(f"{self.api}: the batch is empty (0 items)")
        for k in self.batch:  # rows of a C-contiguous array are C-contiguous views
            if not args[k].flags.c_contiguous:
                args[k] = np.ascontiguousarray(args[k])
        return n, tuple(args), self.item(args, 0)

    def take(self, args: tuple, device: str) -> tuple[int, tuple, tuple, Any]:
        """The call's items: (n, the arguments -- on the CPU with batched arrays made
        contiguous --, the first item (on the GPU, stand-ins of its types and shapes), the
        GPU's :class:`revbench.ad.gpu.Arguments` or ``None``)."""
        if device == "cuda":
            gargs = gpu.Arguments(args, self.batch, self.f.params, self.api)
            return gargs.n, args, gargs.item_standins(), gargs
        n, args, item = self.split(args)
        return n, args, item, None

    def item(self, args, i: int) -> tuple:
        return tuple(python_scalar(a[i]) if k in self.batch else a for k, a in enumerate(args))

    # -- the driver --------------------------------------------------------------------
    def layout(self, sig, outputs, wrt, lanes, n_rows, keep_values, reduce: str | None = None,
               deterministic: bool = True) -> _Layout:
        f, b = self.f, self.b
        written = tuple(p in f._program.written_params() for p in f.params)
        batched = tuple(k in self.batch for k in range(len(sig)))
        summed = tuple(reduce == "sum" and not bk and k in wrt for k, bk in enumerate(batched))
        return _Layout(sig, batched, written,
                       tuple(b.has_adjoint(p, t) for p, t in zip(f.params, sig)),
                       tuple(outputs), tuple(wrt), lanes, n_rows <= lanes, f._program.check,
                       f._program.backend == "python",
                       tuple(keep_values and (bk or wk) for bk, wk in zip(batched, written)),
                       summed, deterministic)

    def driver(self, lay: _Layout) -> Callable:
        # a user rule registered since (a custom adjoint, a pure function) means new kernels
        cache_key = (lay, fn_rules.REGISTRY_VERSION[0])
        hit = self._drivers.get(cache_key)
        if hit is not None:
            return hit
        f, b = self.f, self.b
        fwd = f.compiled_kernel("forward", lay.sig)
        # (the driver reads a sweep's restored arguments only to check them)
        bwd = f.compiled_kernel("backward", lay.sig, lay.lanes, b.inactive,
                                adjoints_only=not lay.check)
        source = _driver_source(lay, f.params)
        header = (f"# revbench batched driver for {f.__name__}\n"
                  f"# kernels: {fwd.generated.key} {bwd.generated.key}\n")
        source = header + "import numpy as np\n\n" + source
        key = hashlib.sha256(source.encode()).hexdigest()[:32]
        backend = f._program.backend
        mod = load_module(key, source, targets.target(backend).flavour,
                          {"_rb_fwd": fwd.run, "_rb_bwd": bwd.run,
                           "_rb_interrupted": interrupted, "_RbInterrupted": Interrupted})
        run = mod.driver
        if backend == "numba":
            from revbench.backends.native import engine
            from revbench.backends.numba_backend import module_dispatcher

            # nogil: workers run chunks of the items in threads (the interrupt poll asks
            # for Ctrl-C only in a thread that holds the GIL)
            run = module_dispatcher(mod, "driver", boundscheck=False, nogil=True)
            # the native code generator compiles the driver with its kernels where it can
            engine.register(run, engine.DriverSource(source, key), mod.__dict__, check=False,
                            fastmath=False, nogil=True)
            run = engine.runner(run) or run
        self._drivers[cache_key] = run
        return run

    def run(self, lay: _Layout, n: int, args: tuple, item0: tuple, rows: list[tuple[int, int]],
            blocks: list[np.ndarray], values: list[np.ndarray], workers: int | None = None) -> None:
        """Run the driver over the items, in chunks on ``workers`` threads; on a failure,
        find the first failing item and raise its own error."""
        seed_param = np.array([k for k, _ in rows], dtype=np.int64)
        seed_flat = np.array([r for _, r in rows], dtype=np.int64)
        block_row = np.array(block_rows(rows), dtype=np.int64)
        atol, rtol = get_tolerance()
        catol, crtol = tolerance_of(self.f)
        drive = self.driver(lay)
        stop = np.zeros(1, dtype=np.int64)
        bounds = chunks(n, 1 if lay.python else workers)
        # (one block per output and wrt, as the driver's J{o}_{w})
        summed = [bool(lay.summed and lay.summed[w]) for _ in lay.outputs for w in lay.wrt]
        # a summed gradient: each chunk adds into its own block, then they are added in
        # chunk order (a fixed order: the same result every run with the same workers)
        own = [[np.zeros_like(b) if s and c else b for b, s in zip(blocks, summed)]
               for c in range(len(bounds))]

        def part(c: int) -> int:
            lo, hi = bounds[c]
            return drive(*args, seed_param, seed_flat, block_row, *own[c], *values, lo, hi, stop,
                         atol, rtol, catol, crtol)

        outcomes: list[tuple[int, BaseException | None]] = []
        try:
            if len(bounds) == 1:
                try:
                    outcomes.append((part(0), None))
                except Exception as exc:  # a runtime check (or an error) inside some item
                    outcomes.append((-1, exc))
            else:
                with blas.batched_items():  # (the cores are the workers': products on theirs)
                    futures = [_pool().submit(part, c) for c in range(len(bounds))]
                    try:
                        for fut in futures:
                            exc = fut.exception()
                            outcomes.append((-1, exc) if exc is not None
                                            else (fut.result(), None))
                    except KeyboardInterrupt:  # Ctrl-C in the waiting thread: stop them
                        stop[0] = 1
                        for fut in futures:
                            fut.exception()
                        raise
        except KeyboardInterrupt:  # Ctrl-C, noticed by the compiled loop
            raise KeyboardInterrupt from None
        for (lo, _), (bad, exc) in zip(bounds, outcomes):
            if isinstance(exc, KeyboardInterrupt):
                raise KeyboardInterrupt from None
            if exc is not None:
                self.reraise_for_item(args, n, exc, start=lo)
                raise exc
            if bad >= 0:
                self.reraise_for_item(args, n, None, start=int(bad))
                raise ReversibilityError(f"{self.api}: the reverse sweep of item {bad} did "
                                         "not recover its arguments")
        for c in range(1, len(bounds)):
            for b, mine, s in zip(blocks, own[c], summed):
                if s:
                    b += mine

    def reraise_for_item(self, args: tuple, n: int, exc: BaseException | None,
                         start: int = 0) -> None:
        """Run items through the unbatched derivative until one raises; raise that error
        with a note naming the item.  Returns if none raises."""
        check = self.unbatched()
        for i in range(start, n):
            try:
                check(*self.item(args, i), *self.item_extra(i))
            except Exception as err:
                if hasattr(err, "add_note"):
                    err.add_note(f"(in batch item {i} of {self.api})")
                raise err.with_traceback(None) from None

    def unbatched(self) -> Callable:
        raise NotImplementedError

    def item_extra(self, i: int) -> tuple:
        """What the unbatched derivative takes after item ``i``'s arguments (a pullback's
        cotangents)."""
        return ()


#: items a chunk gets at least (fewer: threads would cost more than they save)
MIN_CHUNK = 256
_threads: list = []


def default_workers() -> int:
    """All the cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def chunks(n: int, workers: int | None) -> list[tuple[int, int]]:
    """``[lo, hi)`` ranges of contiguous items, one per worker (``None``: all cores)."""
    w = default_workers() if workers is None else int(workers)
    w = max(1, min(w, n // MIN_CHUNK))
    edges = [n * c // w for c in range(w + 1)]
    return [(edges[c], edges[c + 1]) for c in range(w)]


def _pool():
    """The threads that run chunks of items (the compiled driver releases the GIL)."""
    if not _threads:
        from concurrent.futures import ThreadPoolExecutor

        _threads.append(ThreadPoolExecutor(max_workers=max(2, default_workers()),
                                           thread_name_prefix="revbench-batch"))
    return _threads[0]


def _driver_source(lay: _Layout, params: tuple[str, ...]) -> str:
    """The driver: for each item, the forward kernel, then reverse sweeps of
    ``lay.lanes`` seeds each; adjoints of ``wrt`` go into ``J_o_w[i, row, :]``."""
    P = [f"P{k}" for k in range(len(params))]
    J = [f"J{o}_{w}" for o in lay.outputs for w in lay.wrt]
    V = [f"V{k}" for k in range(len(params)) if lay.keep[k]]
    C = cotangent_names(lay)
    w = SourceWriter()
    with w.block(f"def driver({', '.join([*P, 'seed_param', 'seed_flat', 'block_row', *J, *V, *C])}, "
                 "lo, hi, stop, atol, rtol, catol, crtol):"):
        w.emit("m = seed_param.shape[0]")
        # arrays every item needs afresh are allocated once, before the loop over the items,
        # and refilled per item (an item's arrays are small: allocating them would cost more
        # than the kernels); a batched array is C-contiguous (split() makes it so), its rows too
        fresh = {k for k, t in enumerate(lay.sig)
                 if t.is_array and lay.written[k] and lay.batched[k]}
        for k in sorted(fresh):
            w.emit(f"a{k} = np.empty_like(P{k}[0])")
        for lane in range(lay.lanes):
            for k, t in enumerate(lay.sig):
                if lay.adjoint[k] and t.is_array:
                    w.emit(f"g{lane}_{k} = np.zeros_like(P{k}{'[0]' if lay.batched[k] else ''})")
        with w.block("for i in range(lo, hi):"):
            with w.block("if _rb_interrupted():  # Ctrl-C (revbench.backends.runtime.interrupted)"):
                w.emit("raise _RbInterrupted()")
            with w.block("if stop[0] != 0:  # Ctrl-C seen by the thread waiting for the workers"):
                w.emit("return -1")
            _driver_item(w, lay, params, fresh)
        w.emit("return -1")
    return w.text()


def _driver_item(w: SourceWriter, lay: _Layout, params: tuple[str, ...], fresh: set[int]) -> None:
    """The driver's steps for item ``i``."""
    for k, t in enumerate(lay.sig):
        src = f"P{k}[i]" if lay.batched[k] else f"P{k}"
        if k in fresh:
            w.emit(f"a{k}.reshape(-1)[:] = {src}.reshape(-1)")
            continue
        if t.is_array and lay.written[k]:
            src += ".copy()"
        elif not t.is_array and lay.batched[k] and lay.python:
            src += ".item()"  # as a call from Python passes it (NumPy scalars round otherwise)
        w.emit(f"a{k} = {src}")
    call = ", ".join(f"a{k}" for k in range(len(params)))
    w.emit(f"r = _rb_fwd({call}, atol, rtol)")
    for k in range(len(params)):
        w.emit(f"s{k} = r[{k}]")
        if lay.keep[k]:
            w.emit(f"V{k}[i] = s{k}")
    with w.block(f"for start in range(0, m, {lay.lanes}):"):
        for k, t in enumerate(lay.sig):
            # a sweep runs on the state after the forward run and changes it: the next
            # sweep needs its own copy (one sweep, the usual case, needs none)
            copy = t.is_array and lay.written[k] and not lay.one_sweep
            # an array the function does not write is the argument itself: pass that
            src = f"s{k}" if lay.written[k] or not t.is_array else f"a{k}"
            w.emit(f"t{k} = {src}.copy()" if copy else f"t{k} = {src}")
        adj_names = seed_lanes(w, lay, lambda g, k: w.emit(f"{g}.fill(0)"),
                               lambda g, k: w.emit(f"{g}.reshape(-1)[seed_flat[row]] = 1.0"),
                               lambda g, k: w.emit(f"{g}.reshape(-1)[:] = C{k}[i].reshape(-1)"))
        tcall = ", ".join(f"t{k}" for k in range(len(params)))
        w.emit(f"res = _rb_bwd({tcall}, {', '.join(adj_names)}, atol, rtol)")
        if lay.check:  # the sweep gave back the item's arguments (as grad checks)
            for k, t in enumerate(lay.sig):
                if lay.written[k]:
                    emit_given_back(w, f"res[{k}]", f"P{k}[i]" if lay.batched[k] else f"P{k}",
                                    t.dtype in ("int", "bool"), ["return i"], "catol", "crtol",
                                    None if t.is_array else ())

        def put(o: int, wr: int, src: str) -> None:
            # a summed gradient: added to the one row, item after item (a fixed order)
            at, op = ("0", "+=") if lay.summed and lay.summed[wr] else ("i", "=")
            if lay.sig[wr].is_array and lay.sig[wr].ndim != 1:
                src += ".reshape(-1)"
            col = ":" if lay.sig[wr].is_array else "0"
            w.emit(f"J{o}_{wr}[{at}, block_row[row], {col}] {op} {src}")

        each_block(w, lay, len(params), put)


def _outputs_and_wrt(f, sig, out_names: tuple, wrt_names: tuple,
                     api: str) -> tuple[list[int], list[int]]:
    """The positions of the outputs and of ``wrt``, each float and named once."""
    ko = [param_index(f, o, "outputs") for o in out_names]
    kw = [param_index(f, w, "wrt") for w in wrt_names]
    for what, ks in (("outputs", ko), ("wrt", kw)):
        _float_params(f, sig, ks, what)
        if len(set(ks)) != len(ks):
            raise ValueError(f"{api}: {what} names an argument twice")
    return ko, kw


def _float_params(f, sig, ks, what: str) -> None:
    for k in ks:
        if sig[k].dtype != "float":
            raise ReversibilityTypeError(
                f"{what} `{f.params[k]}` of {f.__name__} must be float (got {sig[k]})",
                variable=f.params[k], function=f.name, stage="ad")


def _size(a) -> int:
    return a.size if isinstance(a, np.ndarray) else 1


def batched_jacobian(f: ReversibleFunction, out_names: tuple, wrt_names: tuple, batch: Any,
                     shape_result: Callable[[tuple], Any], device: str = "cpu",
                     workers: int | None = None, *,
                     unbatched: Callable[[], Callable]) -> Callable[..., Any]:
    """``jacobian(..., batch=...)``: blocks of shape ``(n, out.size, wrt.size)`` (on the GPU
    with ``device="cuda"``: :mod:`revbench.ad.gpu`).  ``unbatched()`` gives the unbatched
    jacobian, which runs a failing item again to raise its own error."""
    b = Backward(f, wrt_names + out_names)
    api = f"jacobian({f.__name__})"
    bat = _Batched(f, b, batch, api)
    bat.unbatched = unbatched
    lanes_for: dict[int, int] = {}  # rows -> lanes (jacobian_lanes walks f's code)

    def run(*args):
        n, args, item, gargs = bat.take(args, device)
        sig = f.signature_of(item, on_copies=True)
        ko, kw = _outputs_and_wrt(f, sig, out_names, wrt_names, "jacobian")
        rows = [(k, r) for k in ko for r in range(_size(item[k]))]
        lanes = lanes_for.get(len(rows))
        if lanes is None:
            lanes = lanes_for[len(rows)] = jacobian_lanes(f, len(rows), LANES)
        lay = bat.layout(sig, ko, kw, lanes, len(rows), keep_values=False)
        shapes = [(n, _size(item[o]), _size(item[w])) for o in ko for w in kw]
        if device == "cuda":
            blocks, _ = gpu.run(bat, lay, gargs, item, rows, shapes, [], tolerance_of(f))
        else:
            blocks = [np.zeros(s) for s in shapes]
            try:
                bat.run(lay, n, args, item, rows, blocks, [], workers)
            except OneSeedAtATime:  # a checkpointed loop inside: one row per sweep
                lanes_for[len(rows)] = 1
                lay = bat.layout(sig, ko, kw, 1, len(rows), keep_values=False)
                bat.run(lay, n, args, item, rows, blocks, [], workers)
        nw = len(kw)
        return shape_result(tuple(tuple(blocks[a * nw + c] for c in range(nw))
                                  for a in range(len(ko))))

    run.__name__ = f"jacobian({f.__name__}, batched)"
    return run


def batched_value_and_grad(f: ReversibleFunction, loss: Any, wrt: Any, batch: Any,
                           keep_values: bool, api: str, device: str = "cpu",
                           reduce: str | None = None, deterministic: bool = False,
                           workers: int | None = None, *,
                           unbatched: Callable[[], Callable]) -> Callable[..., tuple]:
    """``value_and_grad(..., batch=...)``: per item, the outputs and the gradients.

    Each result has a leading axis of length n (item i's outputs and gradients), except
    that a shared argument the function does not change is returned as it is, and that
    with ``reduce="sum"`` a shared argument's gradient is the sum over the items (the
    gradient of the total loss), without the axis.  ``unbatched()`` gives the unbatched
    value_and_grad, which runs a failing item again to raise its own error.
    """
    if reduce not in (None, "sum"):
        raise ValueError(f"{api}: reduce must be None or 'sum', got {reduce!r}")
    b = Backward(f, wrt)
    bat = _Batched(f, b, batch, f"{api}({f.__name__})")
    bat.unbatched = unbatched

    def run(*args):
        n, args, item, gargs = bat.take(args, device)
        sig = f.signature_of(item, on_copies=True)
        refuse_wrt_without_gradient(f, sig, wrt)
        seed = resolve_loss(f, loss, sig, item)
        flat = 0 if seed.index is None else int(np.ravel_multi_index(seed.index, item[seed.param].shape))
        kw = [k for k, (p, t) in enumerate(zip(f.params, sig)) if b.has_adjoint(p, t)]
        lay = bat.layout(sig, [seed.param], kw, 1, 1, keep_values, reduce, deterministic)
        shapes = [(1 if lay.summed[w] else n, 1, _size(item[w])) for w in kw]
        kept = [((n, *np.shape(a)), NUMPY_DTYPES[t.dtype])
                for a, t, keep in zip(item, sig, lay.keep) if keep]
        if device == "cuda":
            blocks, values = gpu.run(bat, lay, gargs, item, [(seed.param, flat)], shapes, kept,
                                     tolerance_of(f))
        else:
            blocks = [np.zeros(s, dtype=NUMPY_DTYPES[sig[w].dtype]) for s, w in zip(shapes, kw)]
            values = [np.empty(s, dtype=dt) for s, dt in kept]
            bat.run(lay, n, args, item, [(seed.param, flat)], blocks, values, workers)
        grads: list[Any] = [None] * len(sig)
        for w, blk in zip(kw, blocks):  # (views, of any kind of array)
            grads[w] = blk.reshape(np.shape(item[w]) if lay.summed[w] else (n, *np.shape(item[w])))
            if isinstance(grads[w], np.ndarray) and grads[w].ndim == 0:
                grads[w] = grads[w].item()  # a float's gradient is a float
        if not keep_values:
            return None, tuple(grads)
        kept = iter(values)
        outs = tuple(next(kept) if keep else a for keep, a in zip(lay.keep, args))
        return outs, tuple(grads)

    run.__name__ = f"{api}({f.__name__}, batched)"
    return run


def batched_vjp(f: ReversibleFunction, out_names: tuple, wrt_names: tuple, batch: Any,
                device: str = "cpu", reduce: str | None = None, deterministic: bool = False,
                workers: int | None = None, *,
                unbatched: Callable[..., tuple]) -> Callable[..., tuple]:
    """``vjp(f, *args, outputs=..., wrt=..., batch=...)``: per item, the outputs' final
    values and a pullback.

    Nothing is kept between the two (no tape, and no copy of every item's state): the call
    runs the forward run of every item, keeping only the outputs; each ``pullback`` runs
    the forward run again and one reverse sweep per item, seeded with that item's
    cotangents -- one sweep whatever the number of outputs, as the unbatched ``vjp``.
    ``unbatched(*item_args)`` is the unbatched ``vjp``, which runs a failing item again
    to raise its own error."""
    if reduce not in (None, "sum"):
        raise ValueError(f"vjp: reduce must be None or 'sum', got {reduce!r}")
    every = wrt_names is None  # every float argument, the result aligned with all of them
    b = Backward(f, (f.params if every else wrt_names) + out_names)
    api = f"vjp({f.__name__})"
    bat = _Batched(f, b, batch, api)
    npar = len(f.params)

    def check_item(*item: Any) -> None:
        _, pullback = unbatched(*item[:npar])
        if len(item) > npar:
            pullback(*item[npar:])

    bat.unbatched = lambda: check_item

    def call(*args):
        n, args, item, gargs = bat.take(args, device)
        if gargs is None:
            # the pullback runs the items again: from the arguments as they are now, as the
            # unbatched vjp keeps its state (the GPU holds its own copies of NumPy arrays,
            # and reads device arrays where they are: docs/gpu.md)
            args = tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)
        sig = f.signature_of(item, on_copies=True)
        ko, kw = _outputs_and_wrt(f, sig, out_names,
                                  tuple(p for p, t in zip(f.params, sig) if t.dtype == "float")
                                  if every else wrt_names, api)
        # the forward run: a driver with no rows (no sweep) keeping the outputs' values
        forward = replace(bat.layout(sig, ko, (), 1, 0, keep_values=False),
                          keep=tuple(k in ko for k in range(npar)))
        kept = [((n, *np.shape(item[k])), np.float64) for k in ko]
        if device == "cuda":
            _, outs = gpu.run(bat, forward, gargs, item, [], [], kept, tolerance_of(f))
        else:
            outs = [np.empty(s, dtype=dt) for s, dt in kept]
            bat.run(forward, n, args, item, [], [], outs, workers)
        sweep = replace(bat.layout(sig, ko[:1], kw, 1, 1, False, reduce, deterministic),
                        cotangents=tuple(ko))
        shapes = [(1 if sweep.summed[w] else n, 1, _size(item[w])) for w in kw]

        def pullback(*cotangents: Any) -> tuple:
            if len(cotangents) != len(ko):
                raise TypeError(f"{api}: pullback takes one cotangent per output "
                                f"({', '.join(f.params[k] for k in ko)}), got {len(cotangents)}")
            cts = [_batched_cotangent(api, f.params[k], ct, (n, *np.shape(item[k])), device)
                   for k, ct in zip(ko, cotangents)]
            bat.item_extra = lambda i: tuple(_item_of(ct, i) for ct in cts)
            if device == "cuda":
                blocks, _ = gpu.run(bat, sweep, gargs, item, [(ko[0], 0)], shapes, [],
                                    tolerance_of(f), cotangents=tuple(cts))
            else:
                blocks = [np.zeros(s) for s in shapes]
                bat.run(sweep, n, args, item, [(ko[0], 0)], blocks, cts, workers)
            grads: dict[int, Any] = {}
            for w, blk in zip(kw, blocks):
                g = blk.reshape(np.shape(item[w]) if sweep.summed[w] else (n, *np.shape(item[w])))
                grads[w] = g.item() if isinstance(g, np.ndarray) and g.ndim == 0 else g
            return tuple(grads.get(k) for k in (range(npar) if every else kw))

        pullback.__name__ = f"pullback({f.__name__}, batched)"
        return tuple(outs), pullback

    call.__name__ = f"vjp({f.__name__}, batched)"
    return call


def _batched_cotangent(api: str, name: str, ct: Any, shape: tuple, device: str) -> Any:
    """An output's cotangents, one per item, checked: float64 with a leading axis of items
    (``None``: zeros), on the device the call runs on; never the caller's array (the
    driver only reads it, but a NumPy array is copied to the GPU anyway)."""
    if ct is None:
        ct = np.zeros(shape)
    if device != "cuda" and hasattr(ct, "__cuda_array_interface__"):
        raise TypeError(f"{api}: the cotangent of `{name}` is on the GPU; this vjp runs on "
                        "the CPU (device='cpu'): pass a NumPy array")
    on_gpu = device == "cuda" and cuda_arrays.on_device(ct)
    if on_gpu:
        arr = cuda_arrays.to_device(ct)
        if np.dtype(arr.dtype) != np.float64:
            raise TypeError(f"{api}: the cotangent of `{name}` has dtype {np.dtype(arr.dtype)}; "
                            "it must be float64 (convert it first)")
    else:
        if np.iscomplexobj(ct):
            raise TypeError(f"{api}: the cotangent of `{name}` is complex, but `{name}` is real")
        try:
            arr = np.array(ct, dtype=np.float64, copy=True, order="C")
        except (TypeError, ValueError):
            raise TypeError(f"{api}: the cotangent of `{name}` must be an array of numbers, "
                            f"got {type(ct).__name__}") from None
    if tuple(arr.shape) != tuple(shape):
        raise ValueError(f"{api}: the cotangents of `{name}` have shape {tuple(arr.shape)}; "
                         f"expected {tuple(shape)} (one per item, each of `{name}`'s shape)")
    if device == "cuda" and not on_gpu:
        arr = gpu.cuda_backend.cuda_module().to_device(arr)
    return arr


def _item_of(ct: Any, i: int) -> Any:
    """Item ``i`` of a batch of cotangents, on the host (a failing item runs again on
    the CPU)."""
    v = ct[i] if isinstance(ct, np.ndarray) else ct[i:i + 1].copy_to_host()[0]
    return v.item() if np.ndim(v) == 0 else np.array(v)
