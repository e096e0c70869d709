"""revbench functions inside JAX and PyTorch programs: :func:`to_jax`, :func:`to_torch`.

A reversible function becomes a pure function of all its arguments, in order, that
returns the final values of the chosen outputs; its derivatives come from revbench's
own reverse sweep (:func:`revbench.vjp`), so JAX's and PyTorch's autodiff see one
primitive with a custom backward pass.  See ``docs/interop.md``.

JAX and PyTorch are optional: ``import revbench`` imports neither, and importing this
package does not either -- each export imports its framework when it is called
(``pip install 'revbench[interop]'`` installs both).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from revbench.function import ReversibleFunction

__all__ = ["to_jax", "to_torch"]


def to_jax(f: ReversibleFunction, outputs: Any) -> Callable[..., Any]:
    """``jf = to_jax(f, outputs="r")``: ``f`` as a JAX function of all its arguments that
    returns the final value of ``r`` (a tuple for several outputs).

    ``jax.grad``, ``jax.vjp``, ``jax.jit`` and ``jax.vmap`` work through it; float64
    arguments get gradients, int64 and bool ones are passed through.  JAX must run with
    64-bit floats (``jax.config.update("jax_enable_x64", True)``): otherwise calling
    ``jf`` raises instead of rounding revbench's float64 results to float32.  See
    :mod:`revbench.interop.jax`.
    """
    from revbench.interop.jax import to_jax as _to_jax

    return _to_jax(f, outputs)


def to_torch(f: ReversibleFunction, outputs: Any) -> Callable[..., Any]:
    """``tf = to_torch(f, outputs="r")``: ``f`` as a PyTorch operation on tensors (and
    Python numbers) that returns the final value of ``r`` (a tuple for several outputs).

    Autograd, ``torch.autograd.gradcheck`` and ``torch.compile`` work through it;
    float64 tensors get gradients, int64 and bool ones are passed through.  See
    :mod:`revbench.interop.torch`.
    """
    from revbench.interop.torch import to_torch as _to_torch

    return _to_torch(f, outputs)
