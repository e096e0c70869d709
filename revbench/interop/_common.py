"""What the JAX and PyTorch exports share: running ``f`` forward, and its pullback, on
NumPy arrays handed over by a framework.

The frameworks hand over arrays revbench must not change (JAX's buffers are read-only,
a tensor's ``.numpy()`` shares its memory): every array ``f`` writes, and every
read-only one, is copied before ``f`` runs, so the caller's arrays and tensors keep
their values.  Scalars travel as 0-d arrays and are handed to ``f`` as Python numbers,
as a revbench call expects them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from revbench.ad import _names, _param_index, vjp
from revbench.function import ReversibleFunction

#: the dtypes revbench computes with (complex is left out: JAX, PyTorch and revbench
#: each have their own convention for complex cotangents)
DTYPES = (np.dtype(np.float64), np.dtype(np.int64), np.dtype(np.bool_))


class Export:
    """``f`` with its outputs chosen, callable on NumPy arrays (one per argument)."""

    def __init__(self, f: ReversibleFunction, outputs: Any, api: str):
        if not isinstance(f, ReversibleFunction):
            raise TypeError(f"{api} needs a reversible function (decorated with @reversible), "
                            f"got {f!r}")
        self.f = f
        self.api = f"{api}({f.__name__})"
        self.single = isinstance(outputs, (str, int, np.integer))
        names = _names(outputs)
        if not names:
            raise ValueError(f"{self.api}: outputs names no argument")
        self.outputs = tuple(_param_index(f, o, "outputs") for o in names)
        if len(set(self.outputs)) != len(self.outputs):
            raise ValueError(f"{self.api}: outputs names an argument twice")
        self.written = f._program.written_params()

    def check_arity(self, n: int) -> None:
        params = self.f.params
        if n != len(params):
            raise TypeError(f"{self.api} takes {len(params)} argument(s) ({', '.join(params)}) "
                            f"but {n} were given")

    def dtype_error(self, k: int, dtype: Any, shape: tuple, hint: str) -> TypeError:
        name = self.f.params[k]
        return TypeError(
            f"{self.api}: argument `{name}` has dtype {dtype} (shape {shape}); revbench computes "
            f"with float64, int64 and bool{hint}")

    def arguments(self, arrays: tuple) -> tuple:
        """The arguments of a revbench call: 0-d arrays as Python numbers, arrays as
        writable copies where ``f`` writes them or the framework's are read-only."""
        out = []
        for name, a in zip(self.f.params, arrays):
            a = np.asarray(a)
            if a.ndim == 0:
                out.append(a.item())
            elif name in self.written or not a.flags.writeable or not a.flags.c_contiguous:
                out.append(np.array(a, copy=True, order="C"))
            else:
                out.append(a)
        return tuple(out)

    def forward(self, arrays: tuple) -> tuple[np.ndarray, ...]:
        """The final values of the outputs, as fresh arrays of the arguments' dtypes."""
        args = self.arguments(arrays)
        final = self.f(*args)
        return tuple(np.array(final[k], dtype=np.asarray(arrays[k]).dtype, copy=True)
                     for k in self.outputs)

    def float_outputs(self, dtypes: tuple) -> tuple[int, ...]:
        return tuple(k for k in self.outputs if np.dtype(dtypes[k]) == np.float64)

    def backward(self, arrays: tuple, cotangents: tuple) -> tuple[np.ndarray, ...]:
        """The cotangents of the float arguments at entry, by one reverse sweep
        (:func:`revbench.vjp`) seeded with ``cotangents``, one per float output."""
        dtypes = tuple(np.asarray(a).dtype for a in arrays)
        wrt = tuple(k for k, d in enumerate(dtypes) if d == np.float64)
        outs = self.float_outputs(dtypes)
        shapes = [np.shape(arrays[k]) for k in wrt]
        if not wrt:
            return ()
        if not outs:
            return tuple(np.zeros(s) for s in shapes)
        _, pullback = vjp(self.f, *self.arguments(arrays), outputs=outs, wrt=wrt)
        grads = pullback(*cotangents)
        return tuple(np.asarray(g, dtype=np.float64).reshape(s) for g, s in zip(grads, shapes))
