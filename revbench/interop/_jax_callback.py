"""A call from compiled JAX code into revbench's Python, at less cost than
``jax.pure_callback``.

``jax.pure_callback`` works everywhere, but on its way into Python it turns every
operand XLA hands over (already host NumPy buffers) into a JAX array by ``device_put``,
only for the callback to turn it back into NumPy: on a small machine that is about
15 µs of a callback's 35.  :func:`host_call` emits the same host callback
(``emit_python_callback``, what ``pure_callback`` lowers to) from a primitive of its
own, which hands the buffers straight to revbench.  The primitive batches like
``vmap_method="expand_dims"``: batched operands move their batch axis to the front,
unbatched ones get a leading axis of size 1, and the callback sees every item at once.

That lowering function is JAX's internal API: where it is missing or has another
signature (other JAX versions), :func:`host_call` falls back to ``jax.pure_callback``
with the same semantics.  ``USE_PRIMITIVE = False`` forces the fallback (the tests run
both).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

#: use the lean primitive where this JAX version has what it needs
USE_PRIMITIVE = True


def host_call(fn: Callable[..., Sequence[Any]], result_sds: tuple, *args: Any) -> tuple:
    """``fn(*numpy_arrays) -> tuple of arrays`` called from JAX (eagerly, under ``jit``,
    ``vmap``), with results of shapes and dtypes ``result_sds``; returns a tuple."""
    prim = _primitive() if USE_PRIMITIVE else None
    if prim is None:
        return tuple(jax.pure_callback(lambda *a: tuple(fn(*a)), result_sds, *args,
                                       vmap_method="expand_dims"))
    avals = tuple(jax.core.ShapedArray(s.shape, s.dtype) for s in result_sds)
    return tuple(prim.bind(*args, fn=_Hashable.of(fn), result_avals=avals))


class _Hashable:
    """A callback as a primitive parameter: one per function (JAX caches compiled calls
    by their parameters, weakly: a new wrapper per call would compile again each time)."""

    __slots__ = ("__weakref__", "fn")

    def __init__(self, fn: Callable):
        self.fn = fn

    @staticmethod
    def of(fn: Callable) -> _Hashable:
        wrapper = getattr(fn, "_rb_host_call", None)
        if wrapper is None:
            wrapper = fn._rb_host_call = _Hashable(fn)
        return wrapper

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)


@functools.cache
def _primitive():
    """The primitive, or None where this JAX lacks the internals it is built on."""
    try:
        from jax._src import dispatch
        from jax._src.callback import emit_python_callback
        from jax._src.interpreters import batching, mlir
        from jax.extend.core import Primitive
    except ImportError:
        return None
    prim = Primitive("revbench_host_call")
    prim.multiple_results = True
    prim.def_impl(functools.partial(dispatch.apply_primitive, prim))
    prim.def_abstract_eval(lambda *avals, fn, result_avals: result_avals)

    def lowering(ctx, *args, fn, result_avals):
        def callback(*arrays):
            return tuple(fn(*arrays))

        result, _, _ = emit_python_callback(ctx, callback, None, list(args), ctx.avals_in,
                                            ctx.avals_out, has_side_effect=False,
                                            returns_token=False)
        return result

    def batched(args, dims, fn, result_avals):
        size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
        moved = [jnp.expand_dims(a, 0) if d is None else jnp.moveaxis(a, d, 0)
                 for a, d in zip(args, dims)]
        avals = tuple(jax.core.ShapedArray((size, *r.shape), r.dtype) for r in result_avals)
        return prim.bind(*moved, fn=fn, result_avals=avals), (0,) * len(avals)

    def no_derivative(primals, tangents, fn, result_avals):
        # forward mode through revbench's host call: a second derivative (jax.hessian,
        # jacfwd of a gradient), which the export does not have -- said in the user's terms
        raise NotImplementedError(
            "to_jax: the export has first derivatives (jax.grad, jax.vjp, jax.jacrev), not "
            "forward mode or second derivatives (jax.jvp, jax.jacfwd, jax.hessian); take "
            "those in revbench: revbench.jvp, revbench.hvp, revbench.hessian")

    try:
        from jax._src.interpreters import ad

        mlir.register_lowering(prim, lowering)
        batching.primitive_batchers[prim] = batched
        ad.primitive_jvps[prim] = no_derivative
    except Exception:  # pragma: no cover - an internal API that moved
        return None
    return prim
