"""``to_torch``: a reversible function as a PyTorch operation whose backward pass is
revbench's reverse sweep.

How it is built: two ``torch.library.custom_op`` operators per export, in the
``revbench`` namespace -- the forward run, and its pullback (:func:`revbench.vjp`: a
forward run and one reverse sweep seeded with autograd's cotangents) -- tied together
with ``register_autograd``.  Both have a ``register_fake`` (their results have the
shapes and dtypes of arguments), so ``torch.compile`` treats them as opaque calls and
traces around them, with no graph break; ``torch.autograd.gradcheck`` and
``opcheck`` pass.  Every argument travels as a tensor (Python numbers become 0-d
tensors), the operators run on the CPU (tensors elsewhere are copied there and the
results copied back), and no tensor passed in is ever changed.

Why custom operators and not ``torch.autograd.Function``: an operator is opaque to
``torch.compile`` (Dynamo does not try to trace revbench's Python), and autograd saves
only the inputs for the backward pass -- the sweep recomputes the rest.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from revbench.function import ReversibleFunction
from revbench.interop._common import JACOBIAN_IN_FORWARD, Export

_DTYPES = {torch.float64: np.float64, torch.int64: np.int64, torch.bool: np.bool_}
_HINT = ": pass float64 tensors (x.double()), int64 or bool ones"
_counter = itertools.count()


def to_torch(f: ReversibleFunction, outputs: Any) -> Callable[..., Any]:
    """``tf = to_torch(f, outputs="r")``; ``tf(*args)`` is the final value of ``r`` after
    ``f(*args)``, a tensor (a tuple of tensors for ``outputs=("r", "s")``).

    ``tf`` takes every argument of ``f``, in order: tensors or Python numbers, of dtype
    float64 (they get gradients), int64 or bool (passed through).  A wrong dtype or a
    wrong number of arguments raises ``TypeError``; errors of ``f`` itself (a failed
    runtime check, a sweep that did not recover the inputs) are revbench's own.
    """
    ex = Export(f, outputs, "to_torch")
    n, m = len(f.params), len(ex.outputs)
    ident = f"{_identifier(f.name)}_{next(_counter)}"
    params = ", ".join(f"Tensor a{k}" for k in range(n))
    results = ", ".join(["Tensor"] * m)

    def forward_impl(*tensors: torch.Tensor) -> Any:
        res = ex.forward(tuple(_to_numpy(t) for t in tensors))
        out = tuple(torch.from_numpy(r).to(tensors[k].device) for k, r in zip(ex.outputs, res))
        return out if m > 1 else out[0]

    def forward_fake(*tensors: torch.Tensor) -> Any:
        out = tuple(torch.empty_like(tensors[k]) for k in ex.outputs)
        return out if m > 1 else out[0]

    fwd = torch.library.custom_op(f"revbench::{ident}", forward_impl, mutates_args=(),
                                  schema=f"({params}) -> ({results})" if m > 1 else
                                  f"({params}) -> Tensor")
    fwd.register_fake(forward_fake)

    cts = ", ".join(f"Tensor? c{j}" for j in range(m))

    def pullback_impl(*tensors: torch.Tensor | None) -> list[torch.Tensor]:
        args, grads_in = tensors[:n], tensors[n:]
        arrays = tuple(_to_numpy(t) for t in args)
        dtypes = tuple(a.dtype for a in arrays)
        fouts = ex.float_outputs(dtypes)
        cot = tuple(None if g is None else _to_numpy(g)
                    for k, g in zip(ex.outputs, grads_in) if k in fouts)
        res = ex.backward(arrays, cot)
        wrt = [k for k in range(n) if dtypes[k] == np.float64]
        return [torch.from_numpy(r).to(args[k].device) for k, r in zip(wrt, res)]

    def pullback_fake(*tensors: torch.Tensor | None) -> list[torch.Tensor]:
        return [torch.empty_like(t) for t in tensors[:n] if t.dtype == torch.float64]

    pull = torch.library.custom_op(f"revbench::{ident}_pullback", pullback_impl,
                                   mutates_args=(), schema=f"({params}, {cts}) -> Tensor[]")
    pull.register_fake(pullback_fake)

    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        ctx.save_for_backward(*inputs)

    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple:
        _first_order_only(ex)
        inputs = ctx.saved_tensors
        if not any(ctx.needs_input_grad):
            return (None,) * n
        res = iter(pull(*inputs, *grads))
        return tuple(next(res) if t.dtype == torch.float64 else None for t in inputs)

    fwd.register_autograd(backward, setup_context=setup_context)
    eager = _eager_function(ex, pull)

    def tf(*args: Any) -> Any:
        ex.check_arity(len(args))
        tensors = []
        for k, a in enumerate(args):
            t = a if isinstance(a, torch.Tensor) else _scalar_tensor(ex, k, a)
            if t.dtype not in _DTYPES:
                raise ex.dtype_error(k, t.dtype, tuple(t.shape), _HINT)
            if t.device.type == "meta":  # (no values: the results would be memory's garbage)
                raise TypeError(f"{ex.api}: argument `{f.params[k]}` is a meta tensor, which "
                                "has no values to compute with")
            tensors.append(t)
        _refuse_unsupported_transforms(ex, tensors)
        if not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors)) or \
                torch.compiler.is_compiling() or torch._C._are_functorch_transforms_active():
            # the registered operator: what graphs capture; without a gradient to take,
            # the cheaper call too
            return fwd(*tensors)
        out = eager.apply(*tensors)
        return out if m > 1 else out[0]

    tf.__name__ = tf.__qualname__ = f"to_torch({f.__name__})"
    tf.__doc__ = f"{f.__name__} as a PyTorch operation (revbench.interop.to_torch)."
    tf.op = fwd  # the operator itself (torch.library.opcheck, inspection)
    tf.pullback_op = pull
    return tf


def _eager_function(ex: Export, pull: Any) -> type:
    """The export as a ``torch.autograd.Function``, for eager calls (the operator is kept
    for ``torch.compile``, ``torch.func`` and ``opcheck``): the same numbers, with less of
    the dispatcher's cost per call.

    When a gradient will be asked for and the float outputs have at most
    ``JACOBIAN_IN_FORWARD`` elements, the forward pass also takes their Jacobian by one
    reverse sweep (:meth:`Export.value_and_jacobian`), and the backward pass is ``J^T``
    times the incoming gradients (in NumPy: tiny arrays): one call into revbench, not two.
    """

    class RevbenchFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *tensors: torch.Tensor) -> tuple:
            arrays = tuple(_to_numpy(t) for t in tensors)
            fouts = ex.float_outputs(tuple(a.dtype for a in arrays))
            ctx.jacobian = None
            if any(ctx.needs_input_grad) and fouts and \
                    sum(arrays[k].size for k in fouts) <= JACOBIAN_IN_FORWARD:
                res, ctx.jacobian = ex.value_and_jacobian(arrays)
                ctx.arrays = arrays  # (shapes and dtypes only)
                ctx.fouts = fouts
            else:
                res = ex.forward(arrays)
                ctx.save_for_backward(*tensors)
            ctx.devices = tuple(t.device for t in tensors)
            outs = tuple(_to_tensor(r, tensors[k].device) for k, r in zip(ex.outputs, res))
            if len(fouts) < len(outs):  # int and bool outputs carry no gradient
                ctx.mark_non_differentiable(*(o for k, o in zip(ex.outputs, outs)
                                              if k not in fouts))
            return outs

        @staticmethod
        def jvp(ctx: Any, *tangents: torch.Tensor | None) -> tuple:
            raise RuntimeError(_FIRST_ORDER.format(api=ex.api))

        @staticmethod
        def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple:
            _first_order_only(ex)  # (so no once_differentiable: it would hide the grad mode)
            if ctx.jacobian is None:
                res = iter(pull(*ctx.saved_tensors, *grads))
                return tuple(next(res) if t.dtype == torch.float64 else None
                             for t in ctx.saved_tensors)
            # J^T times the incoming gradients, in NumPy (tiny arrays: cheaper than torch)
            arrays = ctx.arrays
            parts = [np.zeros(arrays[k].size) if g is None else _to_numpy(g).reshape(-1)
                     for k, g in zip(ex.outputs, grads) if k in ctx.fouts]
            flat = (parts[0] if len(parts) == 1 else np.concatenate(parts)) @ ctx.jacobian
            out, start = [], 0
            for k, a in enumerate(arrays):
                if a.dtype != np.float64:
                    out.append(None)
                    continue
                out.append(_to_tensor(flat[start:start + a.size].reshape(a.shape), ctx.devices[k]))
                start += a.size
            return tuple(out)

    return RevbenchFunction


_FIRST_ORDER = (
    "{api}: the export has first derivatives (reverse mode: loss.backward(), "
    "torch.autograd.grad), not forward mode or second derivatives (create_graph=True, "
    "torch.autograd.functional.hessian, forward_ad): PyTorch would take them as zero. Take "
    "them in revbench (revbench.jvp, revbench.hvp, revbench.hessian)")


def _first_order_only(ex: Export) -> None:
    """A backward pass run to be differentiated again (``create_graph=True``, which runs it
    with grad mode on) is refused: revbench's sweep is opaque to autograd, whose second
    derivative through it would silently be zero."""
    if torch.is_grad_enabled():
        raise RuntimeError(_FIRST_ORDER.format(api=ex.api))


def _refuse_unsupported_transforms(ex: Export, tensors: list[torch.Tensor]) -> None:
    """``torch.func``'s derivative transforms cannot run a custom operator's backward
    formula (PyTorch's own limit); forward-mode duals would get no tangent.  Both are
    refused by name; ``vmap`` alone runs (PyTorch loops over the items)."""
    functorch = torch._C._functorch
    level = functorch.peek_interpreter_stack() if torch._C._are_functorch_transforms_active() \
        else None
    if level is not None and level.key() != functorch.TransformType.Vmap:
        raise RuntimeError(
            f"{ex.api}: torch.func's grad, jacrev, jacfwd and jvp cannot differentiate the "
            "export (a custom operator's backward formula does not run under them in "
            "PyTorch); use loss.backward() or torch.autograd.grad, or revbench's own "
            "jacobian(..., batch=...) for per-item derivatives")
    import torch.autograd.forward_ad as fw

    if any(fw.unpack_dual(t).tangent is not None for t in tensors):
        raise RuntimeError(_FIRST_ORDER.format(api=ex.api))


def _identifier(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "f"


def _scalar_tensor(ex: Export, k: int, a: Any) -> torch.Tensor:
    """A Python or NumPy number (or NumPy array) as a tensor of revbench's dtype."""
    if isinstance(a, (bool, np.bool_)):
        return torch.tensor(bool(a))
    if isinstance(a, (int, np.integer)):
        return torch.tensor(int(a), dtype=torch.int64)
    if isinstance(a, (float, np.floating)):
        return torch.tensor(float(a), dtype=torch.float64)
    if isinstance(a, np.ndarray):
        return torch.from_numpy(np.array(a, copy=True))
    raise TypeError(f"{ex.api}: argument `{ex.f.params[k]}` must be a tensor or a number, "
                    f"got {type(a).__name__}")


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    """The tensor's values as a NumPy array (sharing memory on the CPU: Export copies
    what revbench may write)."""
    try:  # the common case, a plain CPU tensor, in one call
        return t.detach().numpy()
    except (RuntimeError, TypeError):  # on another device, or a lazy conj / neg view
        return t.detach().cpu().resolve_conj().resolve_neg().numpy()


def _to_tensor(a: np.ndarray, device: torch.device) -> torch.Tensor:
    t = torch.from_numpy(a if a.flags.c_contiguous else np.ascontiguousarray(a))  # (keeps 0-d)
    return t if device.type == "cpu" else t.to(device)
