"""``to_jax``: a reversible function as a JAX function with revbench's reverse sweep as
its backward pass.

How it is built: one ``jax.custom_vjp`` primitive per argument layout (shapes and
dtypes).  Its primal runs ``f`` forward through a host callback, so it works eagerly
and under ``jax.jit`` alike (XLA calls back into Python, where revbench runs its
compiled kernels).  The callback is :func:`revbench.interop._jax_callback.host_call`:
the lowering ``jax.pure_callback`` uses, from a primitive of revbench's own that hands
XLA's buffers straight over (``pure_callback`` itself, where this JAX lacks the
internals).  Small arguments travel concatenated, one buffer per dtype
(:class:`_Packing`): each argument of a callback costs about as much as the call.

Gradients: when the float outputs have at most ``JACOBIAN_IN_FORWARD`` elements (a
loss, a few residuals), the forward pass of a gradient returns their Jacobian as well,
by one reverse sweep carrying one seed per element, and the backward pass is its product
with the cotangents, in JAX -- one callback per ``jax.grad``.  With larger outputs the
residuals are the inputs themselves (JAX holds them anyway) and the backward pass is a
second callback running :func:`revbench.vjp`: a forward run and one reverse sweep
seeded with JAX's cotangents, nothing stored in between.

Precision: revbench computes in float64.  With JAX's default 32-bit mode a float64
result would be rounded to float32 on its way back, silently, so ``to_jax`` refuses to
run unless ``jax_enable_x64`` is on (it does not switch it on itself: that flag changes
the dtypes of the whole program, which is the caller's decision).

``jax.vmap``: the callbacks batch as ``vmap_method="expand_dims"`` does, so a vmapped
call reaches revbench once with all items.  The pullback callback then uses revbench's batched
Jacobian (one compiled loop over the items, :mod:`revbench.ad.batch`), contracted with
each item's cotangents, while the float outputs have at most :data:`JACOBIAN_LIMIT`
elements (a Jacobian costs one reverse sweep per eight output elements); with larger
outputs it runs the batched :func:`revbench.vjp` (one sweep per item, in the same
compiled loop).  Where only the cotangents are batched (``jax.jacrev``, ``jax.vmap`` of a
pullback) one unbatched Jacobian serves every cotangent (one ``vjp`` per cotangent
for large outputs).  The forward pass of a vmapped call (with its Jacobian,
for small outputs) runs ``f`` once per item, in a Python loop.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from revbench.ad import jacobian, vjp
from revbench.function import ReversibleFunction
from revbench.interop._common import DTYPES, JACOBIAN_IN_FORWARD, Export
from revbench.interop._jax_callback import host_call

#: the largest total size of float outputs whose vmapped backward pass is taken from a
#: batched Jacobian (one reverse sweep per 8 output elements and item) rather than
#: one ``vjp`` per item
JACOBIAN_LIMIT = 32
#: arguments of a callback above this many elements travel alone, not concatenated
PACK_LIMIT = 4096

_HINT = ": pass float64 arrays (jnp.asarray(x, jnp.float64)), int64 or bool ones"


def _require_x64(api: str) -> None:
    if not jax.config.read("jax_enable_x64"):
        raise RuntimeError(
            f"{api}: JAX is running in 32-bit mode, which would round revbench's float64 "
            "results to float32 without a word. Enable 64-bit mode at the start of your "
            "program: jax.config.update(\"jax_enable_x64\", True) (or set JAX_ENABLE_X64=1)")


def to_jax(f: ReversibleFunction, outputs: Any) -> Callable[..., Any]:
    """``jf = to_jax(f, outputs="r")``; ``jf(*args)`` is the final value of ``r`` after
    ``f(*args)`` (a tuple of final values for ``outputs=("r", "s")``).

    ``jf`` takes every argument of ``f``, in order: JAX or NumPy arrays, or Python
    numbers, of dtype float64 (differentiable), int64 or bool (passed through; JAX
    itself refuses to differentiate with respect to them).  Arguments are never
    changed.  Wrong dtypes or a wrong number of arguments raise ``TypeError`` at once,
    also while JAX traces.  Errors of ``f`` itself (a failed runtime check, a sweep that
    did not recover the inputs) are revbench's own in a plain call; under a
    transformation (``jax.jit``, ``jax.grad``, ...) they come back from the callback as a
    ``JaxRuntimeError`` whose message holds revbench's.
    """
    ex = Export(f, outputs, "to_jax")
    cache: dict[tuple, Callable] = {}

    def jf(*args: Any) -> Any:
        _require_x64(ex.api)
        ex.check_arity(len(args))
        xs = []
        for k, a in enumerate(args):
            if isinstance(a, jax.Array):
                x = a
            else:
                try:
                    x = jnp.asarray(a)
                except (TypeError, ValueError):  # (None, a str: JAX's words name no argument)
                    raise TypeError(f"{ex.api}: argument `{f.params[k]}` must be an array or a "
                                    f"number, got {type(a).__name__} {a!r}") from None
            if x.dtype not in DTYPES:
                raise ex.dtype_error(k, x.dtype, x.shape, _HINT)
            xs.append(x)
        if not any(isinstance(x, jax.core.Tracer) for x in xs):
            # a plain call, outside any transformation: run f directly (revbench's own
            # errors, raised here, and no callback's cost)
            res = tuple(jnp.asarray(r) for r in ex.forward(tuple(np.asarray(x) for x in xs)))
            return res[0] if ex.single else res
        key = tuple((x.shape, x.dtype) for x in xs)
        prim = cache.get(key)
        if prim is None:
            prim = cache[key] = _primitive(ex, key)
        out = prim(*xs)
        return out[0] if ex.single else out

    jf.__name__ = jf.__qualname__ = f"to_jax({f.__name__})"
    jf.__doc__ = f"{f.__name__} as a JAX function (revbench.interop.to_jax)."
    return jf


def _primitive(ex: Export, key: tuple) -> Callable:
    """The ``custom_vjp`` function for arguments of these shapes and dtypes."""
    shapes = tuple(s for s, _ in key)
    dtypes = tuple(np.dtype(d) for _, d in key)
    n = len(key)
    out_sds = tuple(jax.ShapeDtypeStruct(shapes[k], dtypes[k]) for k in ex.outputs)
    wrt = tuple(k for k in range(n) if dtypes[k] == np.float64)
    fouts = ex.float_outputs(dtypes)
    grad_sds = tuple(jax.ShapeDtypeStruct(shapes[k], np.float64) for k in wrt)
    inner = shapes + tuple(shapes[k] for k in fouts)  # of the backward callback's arguments
    pack = _Packing(shapes, dtypes)
    pack_inner = _Packing(inner, dtypes + (np.dtype(np.float64),) * len(fouts))
    rows = sum(math.prod(shapes[k]) for k in fouts)
    cols = sum(math.prod(shapes[k]) for k in wrt)
    # a gradient with few float outputs: their Jacobian comes with the forward pass
    in_forward = 0 < rows <= JACOBIAN_IN_FORWARD and bool(wrt)
    jac_sds = out_sds + (jax.ShapeDtypeStruct((rows, cols), np.float64),)

    def forward_cb(*buffers):
        arrays = pack.unpack(buffers)
        lead = _lead(arrays, shapes)
        if lead is None:
            return ex.forward(arrays)
        return _map_items(ex.forward, arrays, shapes, lead, out_sds)

    def forward_jacobian_cb(*buffers):
        arrays = pack.unpack(buffers)

        def one(item):
            outs, J = ex.value_and_jacobian(item)
            return (*outs, J)

        lead = _lead(arrays, shapes)
        return one(arrays) if lead is None else _map_items(one, arrays, shapes, lead, jac_sds)

    def backward_cb(*buffers):
        arrays = pack_inner.unpack(buffers)
        lead = _lead(arrays, inner)
        if lead is None:
            return ex.backward(arrays[:n], arrays[n:])
        return _backward_batched(ex, arrays, inner, lead, wrt, fouts)

    def primal(*xs):
        return host_call(forward_cb, out_sds, *pack.pack(xs))

    def primal_fwd(*xs):
        if in_forward:
            *outs, J = host_call(forward_jacobian_cb, jac_sds, *pack.pack(xs))
            return tuple(outs), (J, None)
        return primal(*xs), (None, xs)

    def primal_bwd(res, cts):
        J, xs = res
        if not wrt:
            return (None,) * n
        fcts = [ct for k, ct in zip(ex.outputs, cts) if k in fouts]
        if J is not None:  # J^T times the cotangents, in JAX
            flat = jnp.concatenate([jnp.ravel(ct) for ct in fcts]) @ J
            grads, start = [], 0
            for k in wrt:
                size = math.prod(shapes[k])
                grads.append(flat[start:start + size].reshape(shapes[k]))
                start += size
            grads = iter(grads)
        else:
            grads = iter(host_call(backward_cb, grad_sds, *pack_inner.pack((*xs, *fcts))))
        return tuple(next(grads) if k in wrt else None for k in range(n))

    prim = jax.custom_vjp(primal)
    prim.defvjp(primal_fwd, primal_bwd)
    return prim


class _Packing:
    """A callback's arguments, one flat buffer per dtype.

    Under ``jax.jit`` each argument of a ``pure_callback`` costs about as much as the
    callback itself (some 17 µs on a 2-core machine), so small arguments travel
    concatenated -- one float64 buffer, one int64, one bool -- and are cut apart again
    (views, no copies) on the NumPy side.  Arrays above :data:`PACK_LIMIT` elements
    travel on their own, not to copy them.  Vmapped buffers keep their leading axes.
    """

    def __init__(self, shapes: tuple, dtypes: tuple):
        self.shapes = shapes
        groups: dict[Any, list[int]] = {}
        for k, (shape, dtype) in enumerate(zip(shapes, dtypes)):
            group = dtype if math.prod(shape) <= PACK_LIMIT else ("alone", k)
            groups.setdefault(group, []).append(k)
        self.groups = tuple(tuple(ks) for ks in groups.values())

    def pack(self, xs: tuple) -> list:
        return [xs[ks[0]] if len(ks) == 1 else jnp.concatenate([jnp.ravel(xs[k]) for k in ks])
                for ks in self.groups]

    def unpack(self, buffers: tuple) -> tuple:
        out: list[Any] = [None] * len(self.shapes)
        for ks, buf in zip(self.groups, buffers):
            buf = np.asarray(buf)
            if len(ks) == 1:
                out[ks[0]] = buf
                continue
            lead, start = buf.shape[:-1], 0
            for k in ks:
                size = math.prod(self.shapes[k])
                out[k] = buf[..., start:start + size].reshape(lead + tuple(self.shapes[k]))
                start += size
        return tuple(out)


def _lead(arrays: tuple, shapes: tuple) -> tuple[int, ...] | None:
    """The batch shape of a vmapped callback's arguments (``expand_dims`` gives every
    argument the same number of leading axes, of size 1 where it is not batched), or
    None for a call that is not vmapped."""
    extra = np.ndim(arrays[0]) - len(shapes[0])
    if extra == 0:
        return None
    return tuple(np.broadcast_shapes(*(np.shape(a)[:extra] for a in arrays)))


def _split(a: Any, shape: tuple, lead: tuple) -> tuple[bool, np.ndarray]:
    """(batched?, the argument: ``(items, *shape)`` if batched, else ``shape``)."""
    a = np.asarray(a)
    own = a.shape[:len(lead)]
    if all(d == 1 for d in own) and math.prod(lead) != 1:
        return False, a.reshape(shape)
    return True, np.broadcast_to(a, lead + tuple(shape)).reshape((-1, *shape))


def _map_items(fn: Callable, arrays: tuple, shapes: tuple, lead: tuple, out_sds: tuple) -> tuple:
    """``fn`` (one item's arguments -> its results) over the items of a vmapped call, in a
    Python loop; the results stacked with the call's leading axes."""
    items = math.prod(lead)
    parts = [_split(a, s, lead) for a, s in zip(arrays, shapes)]
    outs = [np.empty((items, *sd.shape), dtype=sd.dtype) for sd in out_sds]
    for i in range(items):
        res = fn(tuple(v[i] if batched else v for batched, v in parts))
        for o, r in zip(outs, res):
            o[i] = r
    return tuple(o.reshape(lead + o.shape[1:]) for o in outs)


def _backward_batched(ex: Export, arrays: tuple, inner: tuple, lead: tuple, wrt: tuple,
                      fouts: tuple) -> tuple:
    items = math.prod(lead)
    n = len(ex.f.params)
    parts = [_split(a, s, lead) for a, s in zip(arrays, inner)]
    args, cts = parts[:n], parts[n:]
    grads = [np.zeros((items, *inner[k])) for k in wrt]
    if not fouts:
        return tuple(g.reshape(lead + g.shape[1:]) for g in grads)
    batched = tuple(k for k, (b, _) in enumerate(args) if b)
    flat = ex.arguments(tuple(v for _, v in args))
    if sum(math.prod(inner[k]) for k in fouts) <= JACOBIAN_LIMIT:
        # outputs and wrt as tuples: blocks J[o][w] of d fouts[o] / d wrt[w], with a
        # leading axis of items (of one item where no argument is batched)
        if batched:
            J = jacobian(ex.f, outputs=fouts, wrt=wrt, batch=batched)(*flat)
        else:
            J = tuple(tuple(blk[None] for blk in row)
                      for row in jacobian(ex.f, outputs=fouts, wrt=wrt)(*flat))
        for o, (cb, ct) in enumerate(cts):
            c = ct.reshape(ct.shape[0] if cb else 1, -1)
            c = np.broadcast_to(c, (items, c.shape[1]))
            for w in range(len(wrt)):
                blk = np.broadcast_to(J[o][w], (items, *J[o][w].shape[1:]))
                grads[w] += np.einsum("io,iow->iw", c, blk).reshape(grads[w].shape)
        return tuple(g.reshape(lead + g.shape[1:]) for g in grads)
    if batched:  # one batched pullback: one compiled loop over the items
        _, pullback = vjp(ex.f, *flat, outputs=fouts, wrt=wrt, batch=batched)
        res = pullback(*(ct if cb else np.broadcast_to(ct, (items, *inner[k]))
                         for (cb, ct), k in zip(cts, fouts)))
        return tuple(np.asarray(r, dtype=np.float64).reshape(lead + tuple(inner[k]))
                     for r, k in zip(res, wrt))
    for i in range(items):  # only the cotangents are batched: one sweep each
        res = ex.backward(tuple(v for _, v in args), tuple(v[i] if b else v for b, v in cts))
        for g, r in zip(grads, res):
            g[i] = r
    return tuple(g.reshape(lead + g.shape[1:]) for g in grads)
