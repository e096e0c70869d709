"""Automatic differentiation by reverse computing: ``grad``, ``value_and_grad``, ``jacobian``,
``vjp``.

``grad(f, loss="y")`` runs ``f`` forward, seeds the adjoint of the loss with
1, then runs ``f``'s *reverse sweep* (the ``backward`` program built by
:mod:`revbench.transforms.adjoint`): the inverse of ``f``, which recovers
every intermediate value by uncomputation, carrying adjoints along.  No tape
is recorded, so the memory a gradient needs beyond the program's own is the
adjoint variables -- it does not grow with the number of steps executed.

The user's arguments are never modified: the work happens on copies.

With checks on, each reverse sweep must also give back the arguments' values
at entry (within the function's tolerance): when running the program
backwards amplifies round-off -- chaotic maps, long in-place loops -- the
recovered inputs, and so the gradient, would be wrong, and a
:class:`~revbench.ReversibilityError` is raised instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from revbench.config import get_tolerance
from revbench.function import ReversibleFunction, _python_scalar, copy_arg, positional_only
from revbench.gpu import check_device
from revbench.lang.errors import ReversibilityError, ReversibilityTypeError
from revbench.lang.types import VarType
from revbench.transforms.adjoint import DIFFERENTIABLE

Loss = str | int | tuple

#: what to do when a reverse sweep does not recover the inputs (the end of its message)
_RECOVERY_ADVICE = (
    "so the gradient cannot be trusted. Running the program backwards amplified round-off, as "
    "it does in chaotic maps and long in-place loops. To fix it, write the loop as a "
    "revbench.checkpoint.TimeLoop and differentiate it with a strategy such as "
    "Revolve(snapshots=...) or StoreAll(), which keep states instead of recovering them by "
    "running backwards, or loosen the tolerance with @reversible(atol=..., rtol=...)")
#: the same for an integer or bool argument, which no round-off can excuse
_EXACT_ADVICE = (
    "so the gradient cannot be trusted: running the program backwards does not undo it, which "
    "the runtime checks should have caught (please report it, with the function)")


@dataclass(frozen=True)
class _Seed:
    param: int
    index: tuple[int, ...] | None  # element of an array loss, or None for a scalar


def _require_reversible(f: Any, api: str) -> None:
    """Refuse anything but a reversible function, naming what was given."""
    if not isinstance(f, ReversibleFunction):
        what = f"the plain function {f.__name__}" if callable(f) and hasattr(f, "__name__") \
            else repr(f)
        raise TypeError(f"{api} needs a reversible function (decorated with @reversible, or made "
                        f"by revbench.define), got {what}")


def _param_index(f: ReversibleFunction, which: Any, what: str) -> int:
    params = f.params
    if isinstance(which, str):
        if which not in params:
            raise ValueError(f"{what} {which!r} is not an argument of {f.__name__}{params}")
        return params.index(which)
    if isinstance(which, (int, np.integer)) and not isinstance(which, bool):
        if not -len(params) <= which < len(params):
            raise ValueError(f"{what} position {which} is out of range for {f.__name__}{params}")
        return int(which) % len(params)
    raise TypeError(f"{what} must be an argument name or position, got {which!r}")


def _check_loss(f: ReversibleFunction, loss: Loss) -> None:
    """Refuse a ``loss`` that names no argument or whose index is not made of ints,
    as soon as ``grad``/``value_and_grad`` is asked for (its types are checked per call)."""
    which = loss
    if isinstance(loss, tuple):
        if len(loss) != 2:
            raise ValueError("loss=(name, index) picks one element of an array argument")
        which, index = loss
        _loss_index(loss, index)
    _param_index(f, which, "loss")


def _resolve_loss(f: ReversibleFunction, loss: Loss, sig: tuple[VarType, ...], args) -> _Seed:
    index = None
    which = loss
    if isinstance(loss, tuple):
        if len(loss) != 2:
            raise ValueError("loss=(name, index) picks one element of an array argument")
        which, index = loss
        index = _loss_index(loss, index)
    k = _param_index(f, which, "loss")
    t = sig[k]
    name = f.params[k]
    if t.dtype != "float":
        raise ReversibilityTypeError(
            f"the loss `{name}` of {f.__name__} must be a real float (got {t}); differentiate a "
            "float scalar, or one element of a float array with loss=(name, index)",
            variable=name, function=f.name, stage="ad")
    if t.is_array and index is None:
        raise ReversibilityTypeError(
            f"the loss `{name}` of {f.__name__} is an array ({t}); pick one element with "
            f"loss=({name!r}, index), or use jacobian()", variable=name, function=f.name, stage="ad")
    if not t.is_array and index is not None:
        raise ValueError(f"the loss `{name}` is a scalar; it takes no index")
    if index is not None:
        shape = args[k].shape
        if len(index) != len(shape) or not all(-n <= i < n for i, n in zip(index, shape)):
            raise IndexError(f"loss index {index} is out of bounds for `{name}` of shape {shape}")
    return _Seed(k, index)


def _loss_index(loss: tuple, index: Any) -> tuple[int, ...]:
    """The element index of ``loss=(name, index)``: an int, or a tuple of ints (no bools,
    no floats, which ``int()`` would silently round or turn into 0 and 1)."""
    parts = tuple(np.ravel(index)) if isinstance(index, np.ndarray) else \
        tuple(index) if isinstance(index, (tuple, list)) else (index,)
    ok = len(parts) > 0 and all(isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_))
                                for i in parts)
    if not ok:
        raise TypeError(f"loss={loss!r}: the index of an array loss must be an int (1-D) or a "
                        f"tuple of ints (`loss=(\"A\", (i, j))`), got {index!r}")
    return tuple(int(i) for i in parts)


class _Backward:
    """Runs f forward, then its reverse sweep, on copies of the arguments."""

    def __init__(self, f: ReversibleFunction, wrt: Any = None):
        _require_reversible(f, "AD")
        self.f = f
        self.direction = "backward" if not f.is_inverse else "backward-inverse"
        self.inactive: frozenset[str] = frozenset()
        if wrt is not None:
            names = (wrt,) if isinstance(wrt, (str, int)) else tuple(wrt)
            keep = {f.params[_param_index(f, w, "wrt")] for w in names}
            # only read-only arguments can be left out: the gradient flows through the rest
            written = f._program.written_params()
            self.inactive = frozenset(p for p in f.params if p not in keep and p not in written)

    def prepare(self, args: tuple, lanes: int = 1):
        f = self.f
        sig = f.signature_of(args)
        backward = f._code_for_call(sig, self.direction, lanes, self.inactive)
        return sig, backward

    def has_adjoint(self, name: str, t: VarType) -> bool:
        return t.dtype in DIFFERENTIABLE and name not in self.inactive

    def forward(self, args: tuple) -> tuple:
        """f(*args) on copies of the arrays f can change (the caller's stay untouched)."""
        written = self.f._program.written_params()
        work = tuple(copy_arg(a) if name in written else a for name, a in zip(self.f.params, args))
        return self.f(*work)

    def snapshot(self, state: tuple) -> tuple:
        """Copies of the arrays in ``state`` that a reverse sweep will change."""
        written = self.f._program.written_params()
        return tuple(copy_arg(a) if name in written else a for name, a in zip(self.f.params, state))

    def zero_adjoints(self, sig: tuple[VarType, ...], state: tuple) -> list:
        adjs = []
        for name, t, v in zip(self.f.params, sig, state):
            if not self.has_adjoint(name, t):
                continue
            if t.is_array:
                adjs.append(np.zeros_like(v))
            else:
                adjs.append(0j if t.dtype == "complex" else 0.0)
        return adjs

    def adjoint_slot(self, sig, k: int) -> int:
        """Position of parameter k's adjoint among the adjoint arguments."""
        return sum(1 for name, t in zip(self.f.params[:k], sig[:k]) if self.has_adjoint(name, t))

    def run(self, backward, state: tuple, adjs: list) -> tuple:
        out = self.f._execute(backward, (*state, *adjs))
        n = len(state)
        return out[:n], out[n:]

    def sweep(self, backward, state: tuple, adjs: list, entry: tuple, api: str) -> tuple:
        """The reverse sweep (:meth:`run`), then, with checks on, the check that it
        recovered the arguments' values at ``entry``.  Returns the adjoints, or the
        :class:`ReversibilityError` to raise (raised by the caller, in the user's frame)."""
        recovered, adj_out = self.run(backward, state, adjs)
        return adj_out, _check_recovered(self.f, entry, recovered, api)

    def gradients(self, sig, adj_out) -> tuple:
        grads, j = [], 0
        for name, t in zip(self.f.params, sig):
            if self.has_adjoint(name, t):
                g = adj_out[j]
                grads.append(g if t.is_array else _python_scalar(g))
                j += 1
            else:
                grads.append(None)
        return tuple(grads)


def _tolerance(f: ReversibleFunction) -> tuple[float, float]:
    """The function's own ``atol, rtol`` where it sets them, else the global ones."""
    p = f._program
    atol, rtol = get_tolerance()
    return (atol if p.atol is None else p.atol), (rtol if p.rtol is None else p.rtol)


def _check_recovered(f: ReversibleFunction, entry: tuple, recovered: tuple,
                     api: str) -> ReversibilityError | None:
    """The error to raise if a reverse sweep did not give back every argument ``f``
    writes at its value at ``entry`` (None if it did, or if ``f``'s checks are off).

    Floats and complex numbers must be within ``|a - b| <= atol + rtol |b|``
    (``b`` the value at entry; equal infinities, and NaN where NaN was, count as
    recovered), integers and bools exactly.  One vectorised comparison per
    array; the error's details are worked out only when it fails.
    """
    p = f._program
    if not p.check:
        return None
    written = p.written_params()
    atol, rtol = _tolerance(f)
    for name, b, a in zip(f.params, entry, recovered):
        if name not in written:
            continue
        if isinstance(b, np.ndarray):
            exact = b.dtype.kind in "biu"
            if exact:
                if np.array_equal(a, b):
                    continue
            else:
                with np.errstate(invalid="ignore", over="ignore"):
                    if (np.abs(a - b) <= atol + rtol * np.abs(b)).all():
                        continue
        else:  # a scalar: no NumPy call on the way that passes
            exact = not isinstance(b, (float, complex, np.inexact))
            if a == b or (not exact and abs(a - b) <= atol + rtol * abs(b)):
                continue
        error = _not_recovered(name, np.asarray(b), np.asarray(a), exact, atol, rtol)
        if error is not None:
            msg, expected, actual = error
            advice = _EXACT_ADVICE if exact else _RECOVERY_ADVICE
            return ReversibilityError(
                f"{api}: the reverse sweep did not recover the value of argument `{name}` at "
                f"entry: {msg}, {advice}",
                variable=name, expected=expected, actual=actual, function=f.name, stage="ad")
    return None


def _not_recovered(name: str, b: np.ndarray, a: np.ndarray, exact: bool, atol: float,
                   rtol: float) -> tuple[str, Any, Any] | None:
    """Where recovered ``a`` is furthest from ``b``, the value at entry: the message part
    and both values there; None if the only differences are infinities or NaN that match."""
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(a.astype(np.result_type(a, float)) - b)
        ok = a == b
        if not exact:
            ok |= (err <= atol + rtol * np.abs(b)) | (np.isnan(a) & np.isnan(b))
    if ok.all():
        return None
    err = np.where(ok, -1.0, err)  # a value that became NaN counts as the largest error
    flat = int(np.argmax(err))
    where = np.unravel_index(flat, b.shape)
    expected, actual = _python_scalar(b[where]), _python_scalar(a[where])
    largest = float(err.reshape(-1)[flat])
    tol = ("integers and bools must match exactly" if exact
           else f"tolerance atol={atol:g}, rtol={rtol:g}")
    if b.ndim:
        index = ", ".join(str(int(i)) for i in where)
        bad = int((~ok).sum())
        msg = (f"the largest difference is {largest:.3g}, at {name}[{index}] (recovered "
               f"{actual!r}, value at entry {expected!r}; {bad} of {b.size} element(s) off; {tol})")
    else:
        msg = (f"recovered {actual!r}, value at entry {expected!r} (difference {largest:.3g}; "
               f"{tol})")
    return msg, expected, actual


def value_and_grad(f: ReversibleFunction, loss: Loss, wrt: Any = None, batch: Any = None,
                   device: str = "cpu", reduce: str | None = None, deterministic: bool = False,
                   workers: int | None = None, _keep_values: bool = True,
                   _api: str = "value_and_grad") -> Callable[..., tuple[tuple, tuple]]:
    """``value_and_grad(f, loss)(*args) -> (outputs, gradients)``.

    ``outputs`` is what ``f(*args)`` returns; ``gradients`` is aligned with the
    arguments: the derivative of the loss's final value with respect to each
    argument's value at entry (float for a float, array for a float or complex
    array, complex ``dL/dRe + i dL/dIm`` for a complex, ``None`` for ints and bools).

    ``wrt`` (names or positions) limits the work to the gradients you need: a
    read-only argument outside ``wrt`` gets no adjoint code at all (its gradient
    is ``None``) -- data arrays then cost nothing in the reverse sweep.
    Arguments the program changes always carry their gradient.

    ``batch`` (names or positions) maps the call over items, in compiled code: those
    arguments take one more leading axis (item ``i`` is ``x[i]``), the others are
    shared, and every output and gradient gets a leading axis of items (a shared
    argument the function does not change is returned as it is).  With
    ``reduce="sum"`` the gradient of a shared argument is summed over the items: the
    gradient of the total loss (model parameters over a data set).  See
    :mod:`revbench.batch`.  ``device="cuda"`` runs the items on the GPU, one thread
    each (:mod:`revbench.gpu`); there the sum is in a fixed order only with
    ``deterministic=True`` (bit-identical from run to run; otherwise the fastest order).
    On the CPU, ``workers`` threads (default: every core) run chunks of the items.
    """
    _require_reversible(f, _api)
    _check_loss(f, loss)
    check_device(device, batch, _api, workers)
    if batch is not None:
        from revbench.batch import batched_value_and_grad

        return batched_value_and_grad(f, loss, wrt, batch, _keep_values, _api, device, reduce,
                                      deterministic, workers)
    if reduce is not None:
        raise ValueError(f"{_api}: reduce= sums gradients over the items of batch=: name them")
    b = _Backward(f, wrt)

    def run(*args, **kwargs):
        if kwargs:
            raise positional_only(run.__name__, f.params, kwargs)
        sig, backward = b.prepare(args)
        seed = _resolve_loss(f, loss, sig, args)
        outs = b.forward(args)
        values = b.snapshot(outs) if _keep_values else None
        adjs = b.zero_adjoints(sig, outs)
        slot = b.adjoint_slot(sig, seed.param)
        if seed.index is None:
            adjs[slot] = 1.0
        else:
            adjs[slot][seed.index] = 1.0
        adj_out, error = b.sweep(backward, outs, adjs, args, f"{_api}({f.__name__})")
        if error is not None:
            raise error from None
        return values, b.gradients(sig, adj_out)

    run.__name__ = f"value_and_grad({f.__name__})"
    return run


def grad(f: ReversibleFunction, loss: Loss, wrt: Any = None, batch: Any = None,
         device: str = "cpu", reduce: str | None = None, deterministic: bool = False,
         workers: int | None = None) -> Callable[..., tuple]:
    """``grad(f, loss)(*args)``: the gradients of ``value_and_grad`` alone (``batch``,
    ``device``, ``reduce``, ``deterministic`` and ``workers`` as there)."""
    vg = value_and_grad(f, loss, wrt, batch, device, reduce, deterministic, workers,
                        _keep_values=False, _api="grad")  # no output copies

    def run(*args, **kwargs):
        if kwargs:
            raise positional_only(run.__name__, f.params, kwargs)
        return vg(*args)[1]

    run.__name__ = f"grad({f.__name__})"
    return run


#: how many Jacobian rows one reverse sweep computes (adjoint lanes); more lanes share
#: more uncomputation but compile a longer function
JACOBIAN_LANES = 8


def jacobian(f: ReversibleFunction, outputs: Any, wrt: Any, batch: Any = None,
             device: str = "cpu", workers: int | None = None) -> Callable[..., Any]:
    """``jacobian(f, outputs="r", wrt="x")(*args)``: the dense Jacobian d r_out / d x_in.

    Shape ``(r.size, x.size)``, both flattened in C order.  The forward run
    happens once; each reverse sweep then carries up to :data:`JACOBIAN_LANES`
    seeds at once (one per output element), sharing the uncomputation.

    ``wrt`` and ``outputs`` may each name several arguments (a tuple of names or
    positions): the result is then a tuple of blocks, one per name, as JAX's
    ``jacrev`` with several ``argnums`` gives (``outputs`` outermost:
    ``J[k][l]`` is d outputs[k] / d wrt[l]).  All blocks come from the same
    forward run and the same reverse sweeps.

    ``batch`` (names or positions) maps it over items in one compiled loop: those
    arguments take one more leading axis (item ``i`` is ``x[i]``), the others are
    shared by all items, and each block gets a leading axis of items, shape
    ``(n, out.size, wrt.size)`` -- the local Jacobian of every item, as
    ``jax.vmap(jax.jacrev(...))`` gives.  See :mod:`revbench.batch`; ``device="cuda"``
    runs the items on the GPU, one thread each (:mod:`revbench.gpu`); on the CPU,
    ``workers`` threads (default: every core) run chunks of the items.
    """
    _require_reversible(f, "jacobian")
    check_device(device, batch, "jacobian", workers)
    many_out, many_wrt = not isinstance(outputs, (str, int)), not isinstance(wrt, (str, int))
    out_names = tuple(outputs) if many_out else (outputs,)
    wrt_names = tuple(wrt) if many_wrt else (wrt,)
    for what, names in (("outputs", out_names), ("wrt", wrt_names)):
        if not names:
            raise ValueError(f"jacobian: {what} names no argument")
        for name in names:
            _param_index(f, name, what)

    def shape_result(blocks: tuple) -> Any:
        if many_out and many_wrt:
            return blocks
        if many_out:
            return tuple(row[0] for row in blocks)
        return blocks[0] if many_wrt else blocks[0][0]

    if batch is not None:
        from revbench.batch import batched_jacobian

        return batched_jacobian(f, out_names, wrt_names, batch, shape_result, device, workers)
    b = _Backward(f, wrt_names + out_names)  # other read-only arguments need no adjoint

    def run(*args, **kwargs):
        if kwargs:
            raise positional_only(run.__name__, f.params, kwargs)
        sig = f.signature_of(args)
        ko = [_param_index(f, o, "outputs") for o in out_names]
        kw = [_param_index(f, w, "wrt") for w in wrt_names]
        for what, ks in (("outputs", ko), ("wrt", kw)):
            for k in ks:
                if sig[k].dtype != "float":
                    raise ReversibilityTypeError(
                        f"{what} `{f.params[k]}` of {f.__name__} must be float (got {sig[k]})",
                        variable=f.params[k], function=f.name, stage="ad")
            if len(set(ks)) != len(ks):
                raise ValueError(f"jacobian: {what} names an argument twice")
        outs = b.forward(args)
        saved = b.snapshot(outs)
        sizes_out = [outs[k].size if sig[k].is_array else 1 for k in ko]
        sizes_wrt = [outs[k].size if sig[k].is_array else 1 for k in kw]
        m = sum(sizes_out)
        rows = [(k, r) for k, size in zip(ko, sizes_out) for r in range(size)]  # seed per row
        lanes = max(1, min(m, JACOBIAN_LANES))
        _, backward = b.prepare(args, lanes)
        per_lane = len(b.zero_adjoints(sig, saved))
        slots_out = {k: b.adjoint_slot(sig, k) for k in ko}
        slots_wrt = [b.adjoint_slot(sig, k) for k in kw]
        J = np.zeros((m, sum(sizes_wrt)))
        for start in range(0, m, lanes):
            state = b.snapshot(saved)
            adjs = []
            for lane in range(lanes):
                lane_adjs = b.zero_adjoints(sig, state)
                if start + lane < m:  # the last sweep may have idle lanes (zero seeds)
                    k, r = rows[start + lane]
                    if sig[k].is_array:
                        lane_adjs[slots_out[k]].reshape(-1)[r] = 1.0
                    else:
                        lane_adjs[slots_out[k]] = 1.0
                adjs += lane_adjs
            adj_out, error = b.sweep(backward, state, adjs, args, f"jacobian({f.__name__})")
            if error is not None:
                raise error from None
            for lane in range(min(lanes, m - start)):
                J[start + lane] = np.concatenate([
                    np.asarray(adj_out[lane * per_lane + sw], dtype=float).reshape(-1)
                    for sw in slots_wrt])
        row_edges = np.cumsum([0, *sizes_out])
        col_edges = np.cumsum([0, *sizes_wrt])
        return shape_result(tuple(tuple(J[row_edges[a]:row_edges[a + 1],
                                            col_edges[c]:col_edges[c + 1]]
                                          for c in range(len(kw))) for a in range(len(ko))))

    run.__name__ = f"jacobian({f.__name__})"
    return run


def _names(which: Any) -> tuple:
    """``outputs=`` / ``wrt=`` as a tuple: one name or position, or a tuple or list of them."""
    return (which,) if isinstance(which, (str, int, np.integer)) else tuple(which)


def vjp(f: ReversibleFunction, *args: Any, outputs: Any,
        wrt: Any = None) -> tuple[tuple, Callable[..., tuple]]:
    """``outs, pullback = vjp(f, *args, outputs=("r",), wrt=("x", "w"))``: a
    vector-Jacobian product, for losses that are not one scalar argument.

    ``outs`` are the final values of the ``outputs`` (a tuple, one per name, also for
    one).  ``pullback(*cotangents)`` takes one cotangent per output -- a number for a
    scalar output, an array of the output's shape for an array, ``None`` for zero -- and
    returns a tuple aligned with ``wrt``: the cotangents of those arguments at entry,
    ``sum_k <cotangent_k, d outputs_k / d wrt>``.  ``wrt=None`` means every argument
    (aligned with them, as ``grad``'s tuple is); integer and bool arguments get ``None``.

    Why a pullback rather than a Jacobian: the cotangents of every output are
    seeded at once into one reverse sweep, so a pullback costs one sweep whatever
    the number of outputs (``jacobian`` needs one seed per output element).  The
    forward run happens here, once; each ``pullback`` call runs one sweep from a
    copy of the state after it, so a pullback can be called again (other
    cotangents, or the same).  It is what the JAX and PyTorch exports
    (:mod:`revbench.interop`) call in their backward passes.

    Complex numbers follow ``grad``'s convention: the cotangent ``c`` of a complex
    output ``z`` seeds the real loss ``Re(conj(c) z)`` (``c.real * z.real + c.imag
    * z.imag``), and a complex argument's cotangent is ``dL/dRe + i dL/dIm``.

    With checks on, the sweep must give back the arguments' values at entry (as
    for ``grad``); otherwise a :class:`ReversibilityError` is raised rather than a
    gradient computed along a trajectory the inverse did not recover.  Neither
    ``args`` nor the cotangents are changed.
    """
    _require_reversible(f, "vjp")
    api = f"vjp({f.__name__})"
    out_names = _names(outputs)
    wrt_names = f.params if wrt is None else _names(wrt)
    for what, names in (("outputs", out_names), ("wrt", wrt_names)):
        if not names:
            raise ValueError(f"{api}: {what} names no argument")
    ko = [_param_index(f, o, "outputs") for o in out_names]
    kw = [_param_index(f, w, "wrt") for w in wrt_names]
    for what, ks in (("outputs", ko), ("wrt", kw)):
        if len(set(ks)) != len(ks):
            raise ValueError(f"{api}: {what} names an argument twice")
    b = _Backward(f, tuple(f.params[k] for k in kw + ko))
    sig, backward = b.prepare(args)
    for k in ko:
        if sig[k].dtype not in DIFFERENTIABLE:
            raise ReversibilityTypeError(
                f"{api}: output `{f.params[k]}` must be a float or complex value or array "
                f"(got {sig[k]}): integers and bools have no cotangents",
                variable=f.params[k], function=f.name, stage="ad")
    final = b.forward(args)
    state = b.snapshot(final)  # the sweeps' private copy: the caller may change `outs`
    outs = tuple(final[k] if sig[k].is_array else _python_scalar(final[k]) for k in ko)
    slots = [b.adjoint_slot(sig, k) for k in ko]

    def pullback(*cotangents: Any) -> tuple:
        if len(cotangents) != len(ko):
            raise TypeError(f"{api}: pullback takes one cotangent per output "
                            f"({', '.join(f.params[k] for k in ko)}), got {len(cotangents)}")
        adjs = b.zero_adjoints(sig, state)
        for k, slot, ct in zip(ko, slots, cotangents):
            if ct is not None:
                adjs[slot] = _cotangent(f, api, sig[k], state[k], f.params[k], ct)
        adj_out, error = b.sweep(backward, b.snapshot(state), adjs, args, api)
        if error is not None:
            raise error from None
        grads = b.gradients(sig, adj_out)
        return tuple(grads[k] for k in kw)

    pullback.__name__ = f"pullback({f.__name__})"
    return outs, pullback


def _cotangent(f: ReversibleFunction, api: str, t: VarType, value: Any, name: str, ct: Any) -> Any:
    """A cotangent given for output ``name``, checked and converted to a fresh adjoint
    (the sweep updates adjoint arrays in place: never the caller's)."""
    complex_ = t.dtype == "complex"
    if not complex_ and np.iscomplexobj(ct):
        raise TypeError(f"{api}: the cotangent of `{name}` is complex, but `{name}` is real "
                        f"({t}); pass a real cotangent")
    try:
        arr = np.array(ct, dtype=complex if complex_ else float, copy=True)
    except (TypeError, ValueError):
        raise TypeError(f"{api}: the cotangent of `{name}` must be a number or array of numbers, "
                        f"got {ct!r}") from None
    shape = value.shape if t.is_array else ()
    if arr.shape != shape:
        raise ValueError(f"{api}: the cotangent of `{name}` has shape {arr.shape}; `{name}` "
                         f"has shape {shape}" + ("" if t.is_array else " (a scalar)"))
    if t.is_array:
        return arr
    return complex(arr) if complex_ else float(arr)


def check_grad(f: ReversibleFunction, *args: Any, loss: Loss, eps: float = 1e-6,
               rtol: float = 1e-5, atol: float = 1e-7, wrt: Any = None) -> tuple:
    """Compare ``grad(f, loss, wrt=wrt)`` with central finite differences; raise if they
    differ.

    Every float scalar, every element of a float array, and the real and
    imaginary parts of complex arguments are perturbed by ``eps`` (only those ``wrt``
    names, when given: a custom adjoint may be exact for some arguments only).  Returns
    the AD gradients.
    """
    for name, v, positive in (("eps", eps, True), ("rtol", rtol, False), ("atol", atol, False)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)) \
                or not np.isfinite(v) or v < 0 or (positive and v == 0):
            need = "a finite number > 0" if positive else "a finite number >= 0"
            raise ValueError(f"check_grad: {name} must be {need}, got {v!r}")
    _require_reversible(f, "check_grad")
    g = grad(f, loss, wrt=wrt)(*args)
    sig = f.signature_of(args)
    seed = _resolve_loss(f, loss, sig, args)
    checked = set(range(len(sig))) if wrt is None else {
        _param_index(f, w, "wrt") for w in ((wrt,) if isinstance(wrt, (str, int)) else wrt)}

    def loss_of(a) -> float:
        out = f(*(copy_arg(x) for x in a))[seed.param]
        return float(out if seed.index is None else out[seed.index])

    for k, (t, a) in enumerate(zip(sig, args)):
        if t.dtype not in DIFFERENTIABLE or k not in checked:
            continue
        parts = [1.0] + ([1j] if t.dtype == "complex" else [])
        for idx in (np.ndindex(a.shape) if t.is_array else [None]):
            fd = 0.0
            for unit in parts:
                def shifted(h, idx=idx, unit=unit, k=k):
                    new = list(copy_arg(x) for x in args)
                    if idx is None:
                        new[k] = new[k] + h * unit
                    else:
                        new[k][idx] += h * unit
                    return new
                d = (loss_of(shifted(eps)) - loss_of(shifted(-eps))) / (2 * eps)
                fd = fd + d * unit
            ad = g[k] if idx is None else g[k][idx]
            if not abs(ad - fd) <= atol + rtol * abs(fd):
                where = f.params[k] + ("" if idx is None else str(list(idx)))
                used = f._program.custom_adjoints_used() if not f.is_inverse else ()
                hint = (f" (the reverse sweep uses the custom adjoint(s) "
                        f"{', '.join(used)}: check them)" if used else "")
                raise AssertionError(
                    f"check_grad({f.__name__}): d loss / d {where}: AD gives {ad!r}, central "
                    f"differences give {fd!r}{hint}")
    return g
