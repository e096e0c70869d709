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
from revbench.interop._common import Export

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
        inputs = ctx.saved_tensors
        if not any(ctx.needs_input_grad):
            return (None,) * n
        res = iter(pull(*inputs, *grads))
        return tuple(next(res) if t.dtype == torch.float64 else None for t in inputs)

    fwd.register_autograd(backward, setup_context=setup_context)

    def tf(*args: Any) -> Any:
        ex.check_arity(len(args))
        tensors = []
        for k, a in enumerate(args):
            t = a if isinstance(a, torch.Tensor) else _scalar_tensor(ex, k, a)
            if t.dtype not in _DTYPES:
                raise ex.dtype_error(k, t.dtype, tuple(t.shape), _HINT)
            tensors.append(t)
        return fwd(*tensors)

    tf.__name__ = tf.__qualname__ = f"to_torch({f.__name__})"
    tf.__doc__ = f"{f.__name__} as a PyTorch operation (revbench.interop.to_torch)."
    tf.op = fwd  # the operator itself (torch.library.opcheck, inspection)
    tf.pullback_op = pull
    return tf


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
    return t.detach().cpu().resolve_conj().resolve_neg().numpy()
