"""Batched derivatives over Dask arrays: one task per chunk of items, on any Dask scheduler.

``grad``, ``value_and_grad`` and ``jacobian`` with ``batch=`` take Dask arrays for the
batched arguments (``docs/scale.md``).  Each chunk of items (the chunks of the first
batched Dask array's first axis; the other batched arguments are cut the same way) is one
task, which runs the same compiled batched driver as a local call, on one thread of its
worker, over its items.  The shared arguments go into the graph once.  The function
travels by value (:mod:`revbench.transport`), and each worker builds the derivative once
(:data:`_BUILT`).

The chunks' results are put together as a local call's would be: per-item outputs and
gradients joined along the items' axis, and with ``reduce="sum"`` the shared arguments'
gradients summed -- with ``deterministic=True`` one chunk after the other in chunk order
(the sum a local call with ``workers=`` one thread per chunk makes, over the same chunks:
bit-identical to it, on any number of workers), else by a tree of pairwise sums (log depth;
also the same bits from run to run for the same chunks).  ``grad`` and ``value_and_grad``
give NumPy arrays; ``jacobian``, whose blocks grow with the items, gives Dask arrays.

An error inside a task (a failed check in item 17) is raised by the call with its own
message, the item numbered in the whole batch.  Dask runs a task again on another worker
when its worker dies, so a lost worker costs time, not results.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from typing import Any

import numpy as np

#: the derivatives this process has built for tasks, by their builder's description
_BUILT: dict[str, Callable] = {}

_ITEM = re.compile(r"\(in batch item (\d+) of")


def is_dask_array(a: Any) -> bool:
    """Whether ``a`` is a Dask array (without importing Dask)."""
    return type(a).__module__.split(".")[0] == "dask" and hasattr(a, "chunks")


def dispatching(local: Callable, builder: Callable, kind: str, batched: tuple[int, ...],
                written: frozenset[int], reduce: str | None = None,
                deterministic: bool = False) -> Callable:
    """``local`` (a batched derivative), running on Dask when a batched argument is a Dask
    array.  ``builder()`` makes the same derivative on a worker (it pickles: a
    ``functools.partial`` of the public function); ``kind`` is ``value_and_grad`` or
    ``jacobian``; ``written``: the positions of the arguments the function changes."""

    def run(*args: Any) -> Any:
        if not any(is_dask_array(a) for a in args):
            return local(*args)
        return _on_dask(local, builder, kind, batched, written, reduce, deterministic, args)

    run.__name__ = getattr(local, "__name__", "batched")
    return run


def _on_dask(local, builder, kind, batched, written, reduce, deterministic, args):
    import dask
    import dask.array as da

    name = getattr(local, "__name__", "batched")
    first = next(k for k in batched if is_dask_array(args[k]))
    edges = np.cumsum((0, *args[first].chunks[0]))
    n = int(edges[-1])
    for k in batched:
        if np.shape(args[k])[:1] != (n,):
            raise ValueError(f"{name}: batch arguments disagree on the number of items: "
                             f"{n} and {np.shape(args[k])[:1]}")
    if n == 0:  # (the local call's own error: an empty batch)
        return local(*(_writable(a) for a in args))
    sizes = tuple(int(c) for c in args[first].chunks[0] if c)
    bounds = [(int(lo), int(hi)) for lo, hi in itertools.pairwise(edges) if hi > lo]
    # each batched argument as its blocks along the items (one block across the other
    # axes), so a task reads its chunk where it lies; the shared ones once each
    blocks = {k: _blocks(args[k], sizes, da) for k in batched}
    shared = {k: dask.delayed(a) for k, a in enumerate(args) if k not in batched}
    parts = []
    for c, (lo, _) in enumerate(bounds):
        chunk = [blocks[k][c] if k in batched else shared[k] for k in range(len(args))]
        parts.append(dask.delayed(_chunk, pure=True)(builder, lo, *chunk))
    if kind == "jacobian":
        return _joined_lazily(local, args, batched, bounds, parts, da)
    values, grads = dask.compute(_combined(parts, len(args), batched, written, reduce,
                                           deterministic))[0]
    if values is not None:  # a shared argument the function does not change: as given
        values = tuple(args[k] if isinstance(v, str) and v == _SHARED else v
                       for k, v in enumerate(values))
    return values, grads


def _blocks(a: Any, sizes: tuple[int, ...], da) -> list:
    """``a``'s chunks of ``sizes`` items as delayed blocks, whole across its other axes."""
    if not is_dask_array(a):
        a = da.from_array(a, chunks=(sizes, *((s,) for s in np.shape(a)[1:])))
    else:
        a = a.rechunk((sizes, *((s,) for s in a.shape[1:])))
    return list(a.to_delayed().ravel())


#: stands for a shared argument returned as it was given
_SHARED = "shared"


def _chunk(builder: Callable, lo: int, *args: Any) -> Any:
    """One task: the derivative ``builder`` makes, over one chunk's items (whose first
    is item ``lo`` of the batch)."""
    key = repr(builder)
    fn = _BUILT.get(key)
    if fn is None:
        fn = _BUILT[key] = builder()
    args = tuple(_writable(a) for a in args)
    try:
        return fn(*args)
    except Exception as exc:  # the item as the whole batch numbers it
        notes = getattr(exc, "__notes__", None)
        if notes:
            exc.__notes__ = [_ITEM.sub(lambda m: f"(in batch item {int(m.group(1)) + lo} of",
                                       note) for note in notes]
        raise


def _writable(a: Any) -> Any:
    """A chunk's array as compiled code takes it: computed, writable and aligned (an
    array that came over the network can be a read-only, unaligned view of the bytes
    received)."""
    if is_dask_array(a):
        a = np.asarray(a)
    if isinstance(a, np.ndarray) and not (a.flags.writeable and a.flags.aligned):
        a = np.array(a)
    return a


def _combined(parts: list, n_args: int, batched, written, reduce, deterministic):
    """One delayed ``(values, grads)`` of the chunks' ``(values, grads)``: one task that
    joins them (a chunk's result is small next to its items: the shared gradients, and the
    per-item ones it computed)."""
    import dask

    return dask.delayed(_join, pure=True)(parts, n_args, tuple(batched), tuple(written),
                                          reduce, deterministic)


def _join(results: list, n_args: int, batched: tuple, written: tuple, reduce, deterministic):
    def per_item(k: int) -> bool:
        return k in batched or reduce is None

    grads: list[Any] = []
    for k in range(n_args):
        g = [r[1][k] for r in results]
        if g[0] is None:
            grads.append(None)
        elif per_item(k):
            grads.append(np.concatenate([np.atleast_1d(x) for x in g]))
        elif deterministic:  # one after the other, in chunk order
            total = g[0]
            for x in g[1:]:
                total = _plus(total, x)
            grads.append(total)
        else:  # a tree of pairwise sums
            while len(g) > 1:
                g = [_plus(g[i], g[i + 1]) if i + 1 < len(g) else g[i]
                     for i in range(0, len(g), 2)]
            grads.append(g[0])
    values = None
    if results[0][0] is not None:
        values = tuple(np.concatenate([r[0][k] for r in results])
                       if k in batched or k in written else _SHARED for k in range(n_args))
    return values, tuple(grads)


def _plus(a: Any, b: Any) -> Any:
    return a + b if not isinstance(a, np.ndarray) else np.add(a, b)


def _joined_lazily(local, args, batched, bounds, parts, da):
    """A batched Jacobian's blocks as Dask arrays, chunked as the items: each block's
    per-item shape from one item run here."""
    one = local(*(_writable(a[:1]) if k in batched else _writable(a)
                  for k, a in enumerate(args)))

    def build(template, path):
        if isinstance(template, tuple):
            return tuple(build(t, path + (i,)) for i, t in enumerate(template))
        pieces = [da.from_delayed(_pick(p, path), shape=(hi - lo, *template.shape[1:]),
                                  dtype=template.dtype)
                  for p, (lo, hi) in zip(parts, bounds)]
        return da.concatenate(pieces, axis=0)

    return build(one, ())


def _pick(part, path: tuple[int, ...]):
    out = part
    for i in path:
        out = out[i]
    return out
