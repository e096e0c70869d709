"""Batched derivatives over Dask arrays: one task per chunk of items, on any Dask scheduler.

``grad``, ``value_and_grad``, ``jacobian`` and ``vjp`` with ``batch=`` take Dask arrays
for the batched arguments (``docs/scale.md``).  Each chunk of items (the chunks of the first
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
also the same bits from run to run for the same chunks).  ``grad``, ``value_and_grad`` and
``vjp`` give NumPy arrays (a ``vjp``'s pullback is a task per chunk again, each running its
chunk's forward run and sweep); ``jacobian``, whose blocks grow with the items, gives Dask
arrays.

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


class _Chunks:
    """A batched call's arguments cut into the chunks of its first batched Dask array:
    ``bounds`` (each chunk's items) and ``args(c)``, chunk ``c``'s arguments as the graph
    holds them -- each batched argument's block where it lies (one block across its other
    axes), the shared ones once each."""

    def __init__(self, name: str, args: tuple, batched: tuple[int, ...]):
        import dask
        import dask.array as da

        first = next(k for k in batched if is_dask_array(args[k]))
        edges = np.cumsum((0, *args[first].chunks[0]))
        self.n = n = int(edges[-1])
        for k in batched:
            if np.shape(args[k])[:1] != (n,):
                raise ValueError(f"{name}: batch arguments disagree on the number of items: "
                                 f"{n} and {np.shape(args[k])[:1]}")
        self.sizes = tuple(int(c) for c in args[first].chunks[0] if c)
        self.bounds = [(int(lo), int(hi)) for lo, hi in itertools.pairwise(edges) if hi > lo]
        self.blocks = {k: _blocks(args[k], self.sizes, da) for k in batched} if n else {}
        self.shared = {k: dask.delayed(a) for k, a in enumerate(args) if k not in batched}
        self.n_args = len(args)

    def args(self, c: int) -> list:
        return [self.blocks[k][c] if k in self.blocks else self.shared[k]
                for k in range(self.n_args)]

    def cut(self, a: Any) -> list:
        """An array of the items (NumPy or Dask) as the chunks' blocks; None stays."""
        import dask.array as da

        return [None] * len(self.bounds) if a is None else _blocks(a, self.sizes, da)


def _on_dask(local, builder, kind, batched, written, reduce, deterministic, args):
    import dask
    import dask.array as da

    ch = _Chunks(getattr(local, "__name__", "batched"), args, batched)
    if ch.n == 0:  # (the local call's own error: an empty batch)
        return local(*(_writable(a) for a in args))
    bounds = ch.bounds
    parts = [dask.delayed(_chunk, pure=True)(builder, lo, *ch.args(c))
             for c, (lo, _) in enumerate(bounds)]
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
    return _numbered(lo, fn, *(_writable(a) for a in args))


def _numbered(lo: int, fn: Callable, *args: Any) -> Any:
    """``fn(*args)`` over the chunk whose first item is item ``lo`` of the batch; an error
    it raises names the item as the whole batch numbers it."""
    try:
        return fn(*args)
    except Exception as exc:
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
        else:
            grads.append(_summed(g, deterministic))
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


# -- vjp: the outputs now, a pullback of cotangents later ------------------------------------
def vjp(call: Callable, args: tuple, batched: tuple[int, ...], per_item: tuple[bool, ...],
        deterministic: bool, api: str) -> tuple[tuple, Callable]:
    """A batched ``vjp`` over Dask arrays: ``call(*chunk)`` is the local batched ``vjp``
    of one chunk (a ``functools.partial`` of :func:`revbench.vjp`, which pickles); each
    entry the pullback returns is per item, or summed over the items (``per_item``)."""
    import dask

    ch = _Chunks(api, args, batched)
    if ch.n == 0:
        return call(*(_writable(a) for a in args))
    outs = dask.compute([dask.delayed(_vjp_outs, pure=True)(call, lo, *ch.args(c))
                         for c, (lo, _) in enumerate(ch.bounds)])[0]
    outs = tuple(np.concatenate(parts) for parts in zip(*outs))

    def pullback(*cotangents: Any) -> tuple:
        if len(cotangents) != len(outs):
            raise TypeError(f"{api}: pullback takes one cotangent per output, got "
                            f"{len(cotangents)} for {len(outs)}")
        cuts = [ch.cut(ct) for ct in cotangents]
        parts = [dask.delayed(_vjp_pull, pure=True)(call, lo, [cut[c] for cut in cuts],
                                                    *ch.args(c))
                 for c, (lo, _) in enumerate(ch.bounds)]
        return dask.compute(dask.delayed(_join_cotangents, pure=True)(
            parts, per_item, deterministic))[0]

    pullback.__name__ = f"pullback({api}, on Dask)"
    return outs, pullback


def _vjp_outs(call: Callable, lo: int, *args: Any) -> tuple:
    return _numbered(lo, call, *(_writable(a) for a in args))[0]


def _vjp_pull(call: Callable, lo: int, cotangents: list, *args: Any) -> tuple:
    _, pullback = _numbered(lo, call, *(_writable(a) for a in args))
    return _numbered(lo, pullback, *(None if c is None else _writable(c) for c in cotangents))


def _join_cotangents(results: list, per_item: tuple[bool, ...], deterministic: bool) -> tuple:
    out = []
    for j, item_wise in enumerate(per_item):
        g = [r[j] for r in results]
        if g[0] is None:
            out.append(None)
        elif item_wise:
            out.append(np.concatenate([np.atleast_1d(x) for x in g]))
        else:
            out.append(_summed(g, deterministic))
    return tuple(out)


def _summed(g: list, deterministic: bool) -> Any:
    """The chunks' sums: one after the other in chunk order, or a tree of pairwise sums."""
    if deterministic:
        total = g[0]
        for x in g[1:]:
            total = _plus(total, x)
        return total
    while len(g) > 1:
        g = [_plus(g[i], g[i + 1]) if i + 1 < len(g) else g[i] for i in range(0, len(g), 2)]
    return g[0]
