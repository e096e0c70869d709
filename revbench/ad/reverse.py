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

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from revbench.ad import on_dask
from revbench.ad.batch import batch_names, batched_jacobian, batched_value_and_grad, batched_vjp
from revbench.ad.gpu import check_device
from revbench.ad.sweep import (
    Backward,
    Loss,
    as_names,
    check_loss,
    jacobian_lanes,
    param_index,
    refuse_wrt_without_gradient,
    require_reversible,
    resolve_loss,
)
from revbench.compiler import OneSeedAtATime
from revbench.function import ReversibleFunction, copy_arg, positional_only
from revbench.lang.errors import ReversibilityTypeError
from revbench.lang.types import VarType, python_scalar
from revbench.transforms.adjoint import DIFFERENTIABLE


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
    :mod:`revbench.ad.batch`.  ``device="cuda"`` runs the items on the GPU, one thread
    each (:mod:`revbench.ad.gpu`); there the sum is in a fixed order only with
    ``deterministic=True`` (bit-identical from run to run; otherwise the fastest order).
    On the CPU, ``workers`` threads (default: every core) run chunks of the items.
    """
    require_reversible(f, _api)
    if wrt is not None:
        ks = [param_index(f, w, "wrt") for w in as_names(wrt)]
        if len(set(ks)) != len(ks):
            raise ValueError(f"{_api}: wrt names an argument twice (got wrt={wrt!r})")
    check_loss(f, loss)
    check_device(device, batch, _api, workers)
    if batch is not None:
        local = batched_value_and_grad(f, loss, wrt, batch, _keep_values, _api, device, reduce,
                                       deterministic, workers,
                                       unbatched=lambda: value_and_grad(f, loss, wrt))
        # (Dask arrays: a task per chunk, each building this on its worker, one thread)
        return on_dask.dispatching(
            local, functools.partial(value_and_grad, f, loss, wrt, batch, device, reduce,
                                     deterministic, 1, _keep_values=_keep_values, _api=_api),
            "value_and_grad", batch_names(f, batch), _written(f), reduce, deterministic)
    if reduce is not None:
        raise ValueError(f"{_api}: reduce= sums gradients over the items of batch=: name them")
    b = Backward(f, wrt)

    def run(*args, **kwargs):
        if kwargs:
            raise positional_only(run.__name__, f.params, kwargs)
        sig, backward = b.prepare(args)
        refuse_wrt_without_gradient(f, sig, wrt)
        seed = resolve_loss(f, loss, sig, args)
        outs = b.forward(args, sweep_follows=True)
        values = b.snapshot(outs) if _keep_values else None
        adjs = b.seeded_adjoints(sig, outs, seed)
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
    if batch is None and device == "cpu":
        # what reversible code that calls this gradient differentiates (lang.parse)
        run.revbench_derivative = (f, loss, wrt)  # type: ignore[attr-defined]
    return run


#: the most Jacobian rows one reverse sweep computes (adjoint lanes); more lanes share
#: more uncomputation but compile a longer function (a large program gets fewer:
#: :func:`revbench.ad.sweep.jacobian_lanes`)
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
    ``jax.vmap(jax.jacrev(...))`` gives.  See :mod:`revbench.ad.batch`; ``device="cuda"``
    runs the items on the GPU, one thread each (:mod:`revbench.ad.gpu`); on the CPU,
    ``workers`` threads (default: every core) run chunks of the items.
    """
    require_reversible(f, "jacobian")
    check_device(device, batch, "jacobian", workers)
    many_out, many_wrt = (isinstance(w, (tuple, list)) for w in (outputs, wrt))
    out_names, wrt_names = as_names(outputs), as_names(wrt)
    for what, names in (("outputs", out_names), ("wrt", wrt_names)):
        if not names:
            raise ValueError(f"jacobian: {what} names no argument")
        for name in names:
            param_index(f, name, what)

    def shape_result(blocks: tuple) -> Any:
        if many_out and many_wrt:
            return blocks
        if many_out:
            return tuple(row[0] for row in blocks)
        return blocks[0] if many_wrt else blocks[0][0]

    if batch is not None:
        local = batched_jacobian(f, out_names, wrt_names, batch, shape_result, device, workers,
                                 unbatched=lambda: jacobian(f, out_names, wrt_names))
        return on_dask.dispatching(
            local, functools.partial(jacobian, f, outputs, wrt, batch, device, 1), "jacobian",
            batch_names(f, batch), _written(f))
    b = Backward(f, wrt_names + out_names)  # other read-only arguments need no adjoint

    def run(*args, **kwargs):
        if kwargs:
            raise positional_only(run.__name__, f.params, kwargs)
        sig = f.signature_of(args, on_copies=True)
        ko = [param_index(f, o, "outputs") for o in out_names]
        kw = [param_index(f, w, "wrt") for w in wrt_names]
        for what, ks in (("outputs", ko), ("wrt", kw)):
            for k in ks:
                if sig[k].dtype != "float":
                    raise ReversibilityTypeError(
                        f"{what} `{f.params[k]}` of {f.__name__} must be float (got {sig[k]})",
                        variable=f.params[k], function=f.name, stage="ad")
            if len(set(ks)) != len(ks):
                raise ValueError(f"jacobian: {what} names an argument twice")
        # (a sweep follows unless there is no output element to seed)
        outs = b.forward(args, sweep_follows=any(np.size(args[k]) for k in ko))
        saved = b.snapshot(outs)
        sizes_out = [outs[k].size if sig[k].is_array else 1 for k in ko]
        sizes_wrt = [outs[k].size if sig[k].is_array else 1 for k in kw]
        m = sum(sizes_out)
        rows = [(k, r) for k, size in zip(ko, sizes_out) for r in range(size)]  # seed per row
        lanes = jacobian_lanes(f, m, JACOBIAN_LANES)
        try:
            _, backward = b.prepare(args, lanes)
        except OneSeedAtATime:  # a checkpointed loop inside: one row per sweep
            lanes = 1
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


def _written(f: ReversibleFunction) -> frozenset[int]:
    """The positions of the arguments ``f`` changes."""
    written = f._program.written_params()
    return frozenset(k for k, p in enumerate(f.params) if p in written)


def vjp(f: ReversibleFunction, *args: Any, outputs: Any, wrt: Any = None, batch: Any = None,
        device: str = "cpu", reduce: str | None = None, deterministic: bool = False,
        workers: int | None = None) -> tuple[tuple, Callable[..., tuple]]:
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

    ``batch`` (names or positions) maps it over items, as for ``jacobian``: ``outs`` has
    a leading axis of items, each cotangent too (``None``: zeros), and so has each
    cotangent the pullback returns -- except, with ``reduce="sum"``, a shared argument's,
    summed over the items.  Outputs and ``wrt`` must then be float; ``wrt=None`` means
    every float argument (the others get ``None``).  ``device="cuda"`` runs the items on
    the GPU, ``workers=`` on CPU threads (:mod:`revbench.ad.batch`, docs/gpu.md).  A
    batched pullback runs the forward run again with its sweep (no state is kept).
    """
    require_reversible(f, "vjp")
    api = f"vjp({f.__name__})"
    check_device(device, batch, api, workers)
    if batch is not None:
        if any(on_dask.is_dask_array(a) for a in args):  # (a task per chunk, one thread)
            batched = batch_names(f, batch)
            positions = (range(len(f.params)) if wrt is None else
                         [param_index(f, w, "wrt") for w in as_names(wrt)])
            return on_dask.vjp(
                functools.partial(vjp, f, outputs=outputs, wrt=wrt, batch=batch,
                                  device=device, reduce=reduce, deterministic=deterministic,
                                  workers=1),
                args, batched, tuple(k in batched or reduce is None for k in positions),
                deterministic, api)
        wrt_names = None if wrt is None else as_names(wrt)
        return batched_vjp(f, as_names(outputs), wrt_names, batch,
                           device, reduce, deterministic, workers,
                           unbatched=lambda *a: vjp(f, *a, outputs=outputs, wrt=wrt))(*args)
    if reduce is not None:
        raise ValueError(f"{api}: reduce= sums gradients over the items of batch=: name them")
    out_names = as_names(outputs)
    wrt_names = f.params if wrt is None else as_names(wrt)
    for what, names in (("outputs", out_names), ("wrt", wrt_names)):
        if not names:
            raise ValueError(f"{api}: {what} names no argument")
    ko = [param_index(f, o, "outputs") for o in out_names]
    kw = [param_index(f, w, "wrt") for w in wrt_names]
    for what, ks in (("outputs", ko), ("wrt", kw)):
        if len(set(ks)) != len(ks):
            raise ValueError(f"{api}: {what} names an argument twice")
    b = Backward(f, tuple(f.params[k] for k in kw + ko))
    sig, backward = b.prepare(args)
    refuse_wrt_without_gradient(f, sig, wrt)  # (wrt=None: every argument, ints get None)
    for k in ko:
        if sig[k].dtype not in DIFFERENTIABLE:
            raise ReversibilityTypeError(
                f"{api}: output `{f.params[k]}` must be a float or complex value or array "
                f"(got {sig[k]}): integers and bools have no cotangents",
                variable=f.params[k], function=f.name, stage="ad")
    final = b.forward(args)
    state = b.snapshot(final)  # the sweeps' private copy: the caller may change `outs`
    outs = tuple(final[k] if sig[k].is_array else python_scalar(final[k]) for k in ko)
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


#: machine epsilon of float64, the unit of a loss's rounding error
_MACHINE_EPS = float(np.finfo(float).eps)

#: how many times its simplest estimate (machine epsilon * |loss| / h) a central difference's
#: rounding error may be: the loss's own rounding error is a few of its last bits, more where
#: it sums many terms
ROUNDING_MARGIN = 10.0


def check_grad(f: ReversibleFunction, *args: Any, loss: Loss, eps: float = 6e-6,
               rtol: float = 1e-5, atol: float = 1e-7, wrt: Any = None) -> tuple:
    """Compare ``grad(f, loss, wrt=wrt)`` with central finite differences; raise if they
    differ.

    Every float scalar, every element of a float array, and the real and imaginary parts
    of complex arguments are perturbed in turn (only those ``wrt`` names, when given: a
    custom adjoint may be exact for some arguments only).  Returns the AD gradients.

    ``eps`` is the *relative* step: an element ``x`` moves by ``h = eps * max(1, |x|)``
    either way (rounded so that ``x + h`` and ``x - h`` are exact).  The default, about
    the cube root of machine epsilon, balances the two errors of a central difference:
    truncation, which grows like ``h**2``, and the rounding of the loss, about
    ``machine_eps * |loss| / h`` -- a fixed step too small for a loss of hundreds or more
    makes that rounding larger than any fixed tolerance and calls a right gradient wrong.

    So the tolerance is that of the finite difference as well: AD and central differences
    agree when ``|ad - fd| <= atol + rtol * |fd| + err``, where ``err``, the finite
    difference's estimated error, is ``ROUNDING_MARGIN`` (10) times
    ``machine_eps * (|loss(x + h)| + |loss(x - h)|) / (2 h)``, from the loss values the
    check saw; where that is not enough, the check repeats the difference with the step
    ``2 h`` and adds the change (truncation and rounding both show in it) before it
    decides.  The ``AssertionError`` raised names the argument and element, both values,
    the step, the loss's value, the estimated error and the tolerance applied.
    """
    for name, v, positive in (("eps", eps, True), ("rtol", rtol, False), ("atol", atol, False)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)) \
                or not np.isfinite(v) or v < 0 or (positive and v == 0):
            need = "a finite number > 0" if positive else "a finite number >= 0"
            raise ValueError(f"check_grad: {name} must be {need}, got {v!r}")
    eps, rtol, atol = float(eps), float(rtol), float(atol)
    require_reversible(f, "check_grad")
    g = grad(f, loss, wrt=wrt)(*args)
    sig = f.signature_of(args, on_copies=True)
    seed = resolve_loss(f, loss, sig, args)
    checked = set(range(len(sig))) if wrt is None else {
        param_index(f, w, "wrt") for w in as_names(wrt)}

    def loss_of(a) -> float:
        out = f(*a)[seed.param]
        return float(out if seed.index is None else out[seed.index])

    def central(k: int, idx: Any, part: int, h: float) -> tuple[float, float, float, float]:
        """The central difference of the loss in one real direction (``part`` 1: the
        imaginary part) with step ``h``: ``(difference, loss at +h, loss at -h, the step
        actually taken)``."""
        value = args[k] if idx is None else args[k][idx]
        is_complex = sig[k].dtype == "complex"
        base = float(np.imag(value) if part else np.real(value))
        losses = []
        ends = (base + h, base - h)
        for end in ends:
            new = [copy_arg(x) for x in args]
            if is_complex:
                moved = complex(np.real(value), end) if part else complex(end, np.imag(value))
            else:
                moved = end
            if idx is None:
                new[k] = moved
            else:
                new[k][idx] = moved
            losses.append(loss_of(new))
        step = (ends[0] - ends[1]) / 2  # the step as rounded: x + h and x - h are exact
        return (losses[0] - losses[1]) / (2 * step), losses[0], losses[1], step

    for k, (t, a) in enumerate(zip(sig, args)):
        if t.dtype not in DIFFERENTIABLE or k not in checked:
            continue
        parts = (0, 1) if t.dtype == "complex" else (0,)
        for idx in (np.ndindex(a.shape) if t.is_array else [None]):
            value = a if idx is None else a[idx]
            h = eps * max(1.0, float(abs(value)))
            diffs = [central(k, idx, part, h) for part in parts]
            fd = _from_parts([d[0] for d in diffs])
            steps = [d[3] for d in diffs]
            rounding = ROUNDING_MARGIN * sum(
                _MACHINE_EPS * (abs(d[1]) + abs(d[2])) / (2 * d[3]) for d in diffs)
            ad = _from_parts([np.real(g[k] if idx is None else g[k][idx]),
                              np.imag(g[k] if idx is None else g[k][idx])][:len(parts)])
            diff = abs(ad - fd)
            if diff <= atol + rtol * abs(fd) + rounding:
                continue
            # not enough: how much the difference moves with twice the step (truncation
            # grows fourfold, rounding halves) tells what the finite difference is worth
            change = sum(abs(central(k, idx, part, 2 * h)[0] - d[0])
                         for part, d in zip(parts, diffs))
            err = rounding + change
            tol = atol + rtol * abs(fd) + err
            if diff <= tol:  # (a nan anywhere fails)
                continue
            where = f.params[k] + ("" if idx is None else str(list(idx)))
            used = f._program.custom_adjoints_used() if not f.is_inverse else ()
            hint = (f"\n  the reverse sweep uses the custom adjoint(s) {', '.join(used)}: "
                    "check them" if used else
                    "\n  (eps= sets the relative step; rtol= and atol= loosen the comparison)")
            raise AssertionError(
                f"check_grad({f.__name__}): d loss / d {where}: AD gives {ad!r}, central "
                f"differences give {fd!r}; they differ by {diff:.3g}, more than the "
                f"tolerance applied, {tol:.3g}"
                f"\n  step: h = {max(steps):.3g} either way (eps={eps:g} times "
                f"max(1, |{where}|) = {max(1.0, float(abs(value))):.6g})"
                f"\n  loss: {_loss_values(diffs)}"
                f"\n  estimated finite-difference error: {err:.3g} (rounding "
                f"{ROUNDING_MARGIN:g} * machine eps * |loss| / h = {rounding:.3g}, plus "
                f"{change:.3g}, the change from step h to 2h)"
                f"\n  tolerance: atol + rtol * |fd| + estimated error = {atol:g} + {rtol:g} * "
                f"{abs(fd):.3g} + {err:.3g} = {tol:.3g}{hint}")
    return g


def _from_parts(parts: list) -> float | complex:
    """A real number, or a complex one from its real and imaginary parts."""
    if len(parts) == 1:
        return float(parts[0])
    return complex(float(parts[0]), float(parts[1]))


def _loss_values(diffs: list) -> str:
    """The loss's values at the points a failed check moved to."""
    said = [f"{d[1]:.12g} at +h, {d[2]:.12g} at -h" for d in diffs]
    return said[0] if len(said) == 1 else f"{said[0]} (real part); {said[1]} (imaginary part)"
