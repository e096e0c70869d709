"""``to_jax``: a reversible function as a JAX function with revbench's reverse sweep as
its backward pass.

How it is built: one ``jax.custom_vjp`` primitive per argument layout (shapes and
dtypes).  Its primal runs ``f`` forward through ``jax.pure_callback``, so it works
eagerly and under ``jax.jit`` alike (XLA calls back into Python, where revbench runs
its compiled kernels); its backward pass is another callback that runs
:func:`revbench.vjp` -- a forward run and one reverse sweep seeded with JAX's
cotangents.  The residuals are the inputs themselves (JAX holds them anyway), so
``jax.grad`` costs two forward runs and one sweep, and nothing is stored in between.

Precision: revbench computes in float64.  With JAX's default 32-bit mode a float64
result would be rounded to float32 on its way back, silently, so ``to_jax`` refuses to
run unless ``jax_enable_x64`` is on (it does not switch it on itself: that flag changes
the dtypes of the whole program, which is the caller's decision).

``jax.vmap``: the callbacks use ``vmap_method="expand_dims"``, so a vmapped call
reaches revbench once with all items.  The backward pass then uses revbench's batched
Jacobian (one compiled loop over the items, :mod:`revbench.batch`), contracted with
each item's cotangents, while the float outputs have at most :data:`JACOBIAN_LIMIT`
elements (a Jacobian costs one reverse sweep per eight output elements); with larger
outputs it runs one :func:`revbench.vjp` per item, in a Python loop.  Where only the
cotangents are batched (``jax.jacrev``, ``jax.vmap`` of a pullback) one unbatched
Jacobian serves every cotangent.  The forward pass of a vmapped call runs ``f`` once
per item, in a Python loop.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from revbench.ad import jacobian
from revbench.function import ReversibleFunction
from revbench.interop._common import DTYPES, Export

#: the largest total size of float outputs whose vmapped backward pass is taken from a
#: batched Jacobian (one reverse sweep per 8 output elements and item) rather than
#: one ``vjp`` per item
JACOBIAN_LIMIT = 32

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
            x = a if isinstance(a, jax.Array) else jnp.asarray(a)
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

    def forward_cb(*arrays):
        lead = _lead(arrays, shapes)
        if lead is None:
            return ex.forward(arrays)
        return _forward_batched(ex, arrays, shapes, lead)

    def backward_cb(*arrays):
        lead = _lead(arrays, inner)
        if lead is None:
            return ex.backward(arrays[:n], arrays[n:])
        return _backward_batched(ex, arrays, inner, lead, wrt, fouts)

    def primal(*xs):
        return jax.pure_callback(forward_cb, out_sds, *xs, vmap_method="expand_dims")

    def primal_fwd(*xs):
        return primal(*xs), xs

    def primal_bwd(xs, cts):
        if not wrt:
            return (None,) * n
        fcts = [ct for k, ct in zip(ex.outputs, cts) if k in fouts]
        grads = iter(jax.pure_callback(backward_cb, grad_sds, *xs, *fcts,
                                       vmap_method="expand_dims"))
        return tuple(next(grads) if k in wrt else None for k in range(n))

    prim = jax.custom_vjp(primal)
    prim.defvjp(primal_fwd, primal_bwd)
    return prim


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


def _forward_batched(ex: Export, arrays: tuple, shapes: tuple, lead: tuple) -> tuple:
    items = math.prod(lead)
    parts = [_split(a, s, lead) for a, s in zip(arrays, shapes)]
    outs = [np.empty((items, *shapes[k]), dtype=np.asarray(arrays[k]).dtype) for k in ex.outputs]
    for i in range(items):
        res = ex.forward(tuple(v[i] if batched else v for batched, v in parts))
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
    if sum(math.prod(inner[k]) for k in fouts) <= JACOBIAN_LIMIT:
        batched = tuple(k for k, (b, _) in enumerate(args) if b)
        flat = ex.arguments(tuple(v for _, v in args))
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
    for i in range(items):
        res = ex.backward(tuple(v[i] if b else v for b, v in args),
                          tuple(v[i] if b else v for b, v in cts))
        for g, r in zip(grads, res):
            g[i] = r
    return tuple(g.reshape(lead + g.shape[1:]) for g in grads)
