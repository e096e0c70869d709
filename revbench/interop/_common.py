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

from revbench import compiler
from revbench.ad import vjp
from revbench.ad.sweep import Backward, as_names, check_recovered, param_index
from revbench.function import ReversibleFunction
from revbench.rules import functions as fn_rules

#: the most float output elements whose Jacobian the exports compute in the forward
#: pass when a gradient will follow (one reverse sweep carrying that many seeds, lanes):
#: the backward pass is then a product with it, in the framework, with no second call
#: into Python -- what dominates the cost of a small call
JACOBIAN_IN_FORWARD = 4

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
        names = as_names(outputs)
        if not names:
            raise ValueError(f"{self.api}: outputs names no argument")
        self.outputs = tuple(param_index(f, o, "outputs") for o in names)
        if len(set(self.outputs)) != len(self.outputs):
            raise ValueError(f"{self.api}: outputs names an argument twice")
        self.written = f._program.written_params()
        self._plans: dict[tuple, _JacobianPlan] = {}

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

    def value_and_jacobian(self, arrays: tuple) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
        """The outputs' final values and the Jacobian of the float outputs (raveled, in
        order: its rows) with respect to the float arguments (raveled, in order: its
        columns), by one reverse sweep carrying one seed per row.  For at most
        :data:`JACOBIAN_IN_FORWARD` rows; ``J.T @ cotangents`` is then the backward pass."""
        args = self.arguments(arrays)
        f = self.f
        sig = f.signature_of(args, on_copies=True)
        # (sizes fix the rows and columns; a rule registered or a function redefined
        # since means other kernels)
        key = (sig, tuple(np.shape(a) for a in args), fn_rules.REGISTRY_VERSION[0],
               compiler._GENERATION[0])
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = _JacobianPlan(self, sig, args)
        final = f._execute(plan.forward, args)  # on our copies of what f writes
        outs = tuple(np.array(final[k], dtype=np.asarray(arrays[k]).dtype, copy=True)
                     for k in self.outputs)
        J = np.zeros((plan.rows, plan.cols))
        n = len(args)
        for first in range(0, plan.rows, plan.lanes):  # (one sweep, or one per row)
            rows = range(first, min(first + plan.lanes, plan.rows))
            adjs = []
            for row in rows:
                lane_adjs = plan.zero_adjoints()
                k, r = plan.seeds[row]
                if sig[k].is_array:
                    lane_adjs[plan.slots[k]].reshape(-1)[r] = 1.0
                else:
                    lane_adjs[plan.slots[k]] = 1.0
                adjs += lane_adjs
            start = final if len(rows) == plan.rows else \
                tuple(a.copy() if isinstance(a, np.ndarray) else a for a in final)
            out = f._execute(plan.backward, (*start, *adjs))
            error = check_recovered(f, plan.entry(arrays), out[:n], f"{self.api} (its gradient)")
            if error is not None:
                raise error
            adj_out, per_lane = out[n:], plan.per_lane
            for lane, row in enumerate(rows):
                J[row] = np.concatenate([np.ravel(adj_out[lane * per_lane + plan.slots[k]])
                                         for k in plan.wrt])
        return outs, J


class _JacobianPlan:
    """What :meth:`Export.value_and_jacobian` needs for one signature: the kernels, the
    seed of each row, the adjoint slots of the outputs and of the arguments."""

    def __init__(self, ex: Export, sig: tuple, args: tuple):
        f = ex.f
        self.wrt = tuple(k for k, t in enumerate(sig) if t.dtype == "float")
        fouts = tuple(k for k in ex.outputs if sig[k].dtype == "float")
        self.b = b = Backward(f, tuple(f.params[k] for k in self.wrt))
        self.forward = f.compiled(sig)
        sizes = {k: (np.size(args[k]) if sig[k].is_array else 1) for k in range(len(sig))}
        self.seeds = [(k, r) for k in fouts for r in range(sizes[k])]
        self.rows = len(self.seeds)
        self.cols = sum(sizes[k] for k in self.wrt)
        #: rows per reverse sweep: all at once, or one by one through a checkpointed loop
        self.lanes = self.rows
        if self.rows:
            try:
                _, self.backward = b.prepare(args, self.rows)
            except compiler.OneSeedAtATime:
                self.lanes = 1
                _, self.backward = b.prepare(args, 1)
        self.slots = {k: b.adjoint_slot(sig, k) for k in range(len(sig))
                      if b.has_adjoint(f.params[k], sig[k])}
        self.per_lane = len(self.slots)
        #: per adjoint: the shape of its zero (None for a float scalar)
        self.zeros = tuple(np.shape(args[k]) if sig[k].is_array else None
                           for k in sorted(self.slots, key=self.slots.get))

    def zero_adjoints(self) -> list:
        """One lane's adjoints, zero (what ``Backward.zero_adjoints`` gives, for real
        floats, without looking at the arguments again)."""
        return [0.0 if shape is None else np.zeros(shape) for shape in self.zeros]

    def entry(self, arrays: tuple) -> tuple:
        """The arguments at entry, as the recovered state is compared with them."""
        return tuple(a if isinstance(a, np.ndarray) and a.ndim else np.asarray(a).item()
                     for a in arrays)
