"""Second derivatives of a scalar loss: ``hvp`` (Hessian-vector products) and ``hessian``.

Forward over reverse.  The gradient program -- the forward run followed by its
reverse sweep, which the adjoint transform builds as ordinary reversible IR --
is differentiated once more, in forward mode, by the tangent transform
(:mod:`revbench.transforms.tangent`): every float variable, adjoints included,
carries a tangent.  Seeding the tangent of ``x`` with ``v`` (and every other
input tangent with 0) makes the tangents of the adjoints, at the end of the
sweep, the derivative of the gradient along ``v``: ``H v``.  One compiled
program (direction ``hvp`` of :class:`revbench.compiler.Program`) does it in one
pass, with no tape and no finite differences; like the gradient, its memory is
the program's variables times four (values, adjoints and their tangents).

``hessian`` is ``hvp`` on each unit vector: ``x.size`` passes of that program,
each about four times the cost of a forward run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from revbench.ad.sweep import Backward, Loss, check_loss, check_recovered, param_index, resolve_loss
from revbench.function import ReversibleFunction
from revbench.lang.errors import ReversibilityTypeError
from revbench.lang.types import python_scalar

__all__ = ["hessian", "hvp"]


class _SecondOrder:
    """The pieces ``hvp`` and ``hessian`` share: checking the request, running the
    compiled ``hvp`` program on copies of the arguments."""

    def __init__(self, f: ReversibleFunction, loss: Loss, wrt: Any, api: str):
        if not isinstance(f, ReversibleFunction):
            raise TypeError(f"{api} needs a reversible function (decorated with @reversible), "
                            f"got {f!r}")
        if isinstance(wrt, (tuple, list)) and len(wrt) == 1:
            wrt = wrt[0]  # ("x",): one argument, as grad's wrt= spells it too
        if not isinstance(wrt, (str, int, np.integer)) or isinstance(wrt, bool):
            raise TypeError(
                f"{api}: wrt must name one argument (a name or a position), got {wrt!r}; for "
                "several arguments, pass them packed in one array (the Hessian is then the "
                "whole block matrix)")
        check_loss(f, loss)
        self.f, self.loss, self.api = f, loss, api
        self.k = param_index(f, wrt, "wrt")
        loss_name = loss[0] if isinstance(loss, tuple) else loss
        # read-only arguments other than wrt need no adjoint (nor its tangent)
        self.b = Backward(f, (wrt, loss_name))
        self.direction = f._direction.hvp_of()

    def check_args(self, args: tuple):
        f = self.f
        if len(args) != len(f.params):
            raise TypeError(f"{self.api}({f.__name__}) takes the {len(f.params)} argument(s) of "
                            f"{f.__name__}{f.params}, got {len(args)}")
        sig = f.signature_of(args, on_copies=True)
        seed = resolve_loss(f, self.loss, sig, args)
        t = sig[self.k]
        name = f.params[self.k]
        if t.dtype != "float":
            raise ReversibilityTypeError(
                f"{self.api}: wrt `{name}` of {f.__name__} must be a real float scalar or "
                f"array (got {t}); second derivatives are taken with respect to real floats",
                variable=name, function=f.name, stage="ad")
        return sig, seed

    def run(self, sig, seed, args: tuple, v: np.ndarray | float) -> tuple[Any, Any]:
        """One pass of the ``hvp`` program: (the gradient with respect to wrt, H v)."""
        f, b = self.f, self.b
        p = f._program
        compiled = p.compile(self.direction, p.backend, p.check, sig, 1, b.inactive)
        state = b.snapshot(args)  # copies of what the program writes
        adjs = b.seeded_adjoints(sig, state, seed)
        tans = []
        for k, (t, a) in enumerate(zip(sig, state)):
            if t.dtype != "float":
                continue
            if k == self.k:
                tans.append(np.array(v, dtype=float) if t.is_array else float(v))
            else:
                tans.append(np.zeros(np.shape(a)) if t.is_array else 0.0)
        adj_tans = [np.zeros(np.shape(a)) if isinstance(a, np.ndarray) else 0.0 for a in adjs]
        n, m = len(state), len(adjs)
        out = f._execute(compiled, (*state, *adjs, *tans, *adj_tans))
        error = check_recovered(f, args, out[:n], f"{self.api}({f.__name__})")
        if error is not None:
            raise error
        wslot = b.adjoint_slot(sig, self.k)
        g = out[n + wslot]
        hv = out[n + m + len(tans) + wslot]
        return g, hv


def hvp(f: ReversibleFunction, loss: Loss, wrt: str | int) -> Callable[..., Any]:
    """``hvp(f, loss="y", wrt="x")(*args, v)``: the Hessian-vector product
    ``d2 loss / dx2 @ v`` at ``args``.

    ``loss`` is as for :func:`revbench.grad` (a float scalar argument, or one element
    of a float array with ``(name, index)``); ``wrt`` names one float argument (a
    name or position).  ``v`` has the shape of that argument (a float for a scalar);
    the result has it too.  Computed forward over reverse by one compiled pass (the
    tangent of the forward run and its reverse sweep), on copies of the arguments.
    """
    so = _SecondOrder(f, loss, wrt, "hvp")

    def run(*args_and_v: Any) -> Any:
        if len(args_and_v) != len(f.params) + 1:
            raise TypeError(
                f"hvp({f.__name__}) takes the {len(f.params)} argument(s) of {f.__name__}"
                f"{f.params} and then v, the vector (the shape of `{f.params[so.k]}`): "
                f"{len(f.params) + 1} in all, got {len(args_and_v)}"
                + (" -- is v missing?" if len(args_and_v) == len(f.params) else ""))
        *args, v = args_and_v
        args = tuple(args)
        sig, seed = so.check_args(args)
        x = args[so.k]
        name = f.params[so.k]
        vv = np.asarray(v)
        if vv.dtype.kind not in "biuf" or vv.dtype.kind == "b":
            raise TypeError(f"hvp({f.__name__}): v must be real numbers, got {vv.dtype} ({v!r})")
        shape = np.shape(x) if sig[so.k].is_array else ()
        if vv.shape != shape:
            raise ValueError(f"hvp({f.__name__}): v must have the shape of `{name}`, {shape}, "
                             f"got {vv.shape}")
        _, hv = so.run(sig, seed, args, vv if shape else float(vv))  # run() copies it
        return hv if shape else python_scalar(hv)

    run.__name__ = f"hvp({f.__name__})"
    return run


def hessian(f: ReversibleFunction, loss: Loss, wrt: str | int) -> Callable[..., np.ndarray]:
    """``hessian(f, loss="y", wrt="x")(*args)``: the dense Hessian ``d2 loss / dx2``.

    Shape ``(x.size, x.size)``, ``x`` flattened in C order; ``(1, 1)`` for a scalar
    ``x``.  Column ``j`` is :func:`hvp` on the ``j``-th unit vector: ``x.size``
    passes of the compiled program.  It is symmetric up to round-off (not
    symmetrised: an asymmetry larger than round-off would mean a wrong derivative).
    """
    so = _SecondOrder(f, loss, wrt, "hessian")

    def run(*args: Any) -> np.ndarray:
        sig, seed = so.check_args(args)
        x = args[so.k]
        if not sig[so.k].is_array:
            _, h = so.run(sig, seed, args, 1.0)
            return np.array([[float(h)]])
        n = x.size
        H = np.empty((n, n))
        e = np.zeros(n)
        for j in range(n):
            e[j] = 1.0
            _, hv = so.run(sig, seed, args, e.reshape(x.shape))
            H[:, j] = np.asarray(hv).reshape(-1)
            e[j] = 0.0
        return H

    run.__name__ = f"hessian({f.__name__})"
    return run
