"""The internal sweep API under every derivative: run ``f`` forward, then its reverse sweep.

:class:`Backward` runs a reversible function forward and then its *reverse sweep* (the
``backward`` program of :mod:`revbench.transforms.adjoint`) on copies of the arguments,
with the adjoints seeded; :func:`check_recovered` says whether the sweep gave back the
arguments' values at entry.  The loss and the argument names a caller passes are
resolved here too (:func:`param_index`, :func:`resolve_loss`).

Every derivative API is written over it: :mod:`revbench.ad` (``grad``, ``jacobian``,
``vjp``), the batched drivers (:mod:`revbench.ad.batch`, :mod:`revbench.ad.gpu`),
:mod:`revbench.ad.second_order`, the JAX and PyTorch exports, and the tracer's reverse
sweep (:mod:`revbench.debugging.tracing`).  It sits below all of them, so none imports another's
internals.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from revbench.config import get_tolerance
from revbench.function import ReversibleFunction, as_names, copy_arg, param_index
from revbench.lang.errors import ReversibilityError, ReversibilityTypeError
from revbench.lang.types import VarType, python_scalar
from revbench.transforms.adjoint import DIFFERENTIABLE

#: a loss: an argument's name or position, or ``(name, index)`` for one element of an array
Loss = str | int | tuple

#: what to do when a reverse sweep does not recover the inputs (the end of its message)
_RECOVERY_ADVICE = (
    "so the gradient cannot be trusted. Running the program backwards amplified round-off, as "
    "it does in chaotic maps and long in-place loops. To fix it, write the loop out of place "
    "as a checkpointed loop (`for t in checkpointed(range(n), Revolve(snapshots=...), "
    "new=..., old=...)`, or a revbench.checkpoint.TimeLoop) with a strategy such as "
    "Revolve(snapshots=...) or StoreAll(), which keep states instead of recovering them by "
    "running backwards, or loosen the tolerance with @reversible(atol=..., rtol=...)")
#: the same for an integer or bool argument, which no round-off can excuse
_EXACT_ADVICE = (
    "so the gradient cannot be trusted: running the program backwards does not undo it, which "
    "the runtime checks should have caught (please report it, with the function)")


@dataclass(frozen=True)
class Seed:
    """Where a reverse sweep seeds the loss's adjoint with 1: argument ``param``."""

    param: int
    index: tuple[int, ...] | None  # element of an array loss, or None for a scalar


def require_reversible(f: Any, api: str) -> None:
    """Refuse anything but a reversible function, naming what was given."""
    if not isinstance(f, ReversibleFunction):
        what = f"the plain function {f.__name__}" if callable(f) and hasattr(f, "__name__") \
            else repr(f)
        raise TypeError(f"{api} needs a reversible function (decorated with @reversible, or made "
                        f"by revbench.define), got {what}")


def check_loss(f: ReversibleFunction, loss: Loss) -> None:
    """Refuse a ``loss`` that names no argument or whose index is not made of ints,
    as soon as ``grad``/``value_and_grad`` is asked for (its types are checked per call)."""
    which = loss
    if isinstance(loss, tuple):
        if len(loss) != 2:
            raise ValueError("loss=(name, index) picks one element of an array argument")
        which, index = loss
        loss_index(loss, index)
    param_index(f, which, "loss")


def resolve_loss(f: ReversibleFunction, loss: Loss, sig: tuple[VarType, ...], args) -> Seed:
    index = None
    which = loss
    if isinstance(loss, tuple):
        if len(loss) != 2:
            raise ValueError("loss=(name, index) picks one element of an array argument")
        which, index = loss
        index = loss_index(loss, index)
    k = param_index(f, which, "loss")
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
        if len(index) != len(shape):
            raise IndexError(f"loss index {index} has {len(index)} part(s), but `{name}` has "
                             f"{len(shape)} axes (shape {shape}): pick one element with "
                             f"{len(shape)} indices, e.g. loss=({name!r}, {(0,) * len(shape)})")
        if not all(-n <= i < n for i, n in zip(index, shape)):
            raise IndexError(f"loss index {index} is out of bounds for `{name}` of shape {shape}")
        index = tuple(i % n for i, n in zip(index, shape))  # (-1: the last, as NumPy counts)
    return Seed(k, index)


def loss_index(loss: tuple, index: Any) -> tuple[int, ...]:
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


#: the dtypes of arrays revbench computes in (complex is refused later on the GPU, with
#: the variable that holds it)
ARRAY_DTYPES = frozenset(np.dtype(t) for t in (np.float64, np.int64, np.bool_, np.complex128))


def refuse_array_dtype(api: str, name: str, dtype: Any, hint: str = "") -> None:
    """A batched call's array of another dtype (float32, int32, ...) is refused, not
    converted: its items would otherwise become Python numbers of another precision
    behind the user's back (the CPU's items) or fail to compile (the GPU's)."""
    if np.dtype(dtype) not in ARRAY_DTYPES:
        raise TypeError(f"{api}: argument `{name}` has dtype {np.dtype(dtype)}; revbench "
                        "computes in float64, int64 and bool (convert it first: no type "
                        f"changes behind your back).{hint}")


def refuse_wrt_without_gradient(f: ReversibleFunction, sig: tuple[VarType, ...], wrt: Any) -> None:
    """An argument the user names in ``wrt=`` must be able to have a gradient (a float or
    complex): asked for by name, a gradient is never silently None."""
    if wrt is None:
        return
    for w in as_names(wrt):
        k = param_index(f, w, "wrt")
        t = sig[k]
        if t.dtype not in DIFFERENTIABLE:
            name = f.params[k]
            raise ReversibilityTypeError(
                f"`{name}` is named in wrt=, but it is {t} in this call: only float and "
                f"complex arguments have a gradient. Leave `{name}` out of wrt=, or pass it "
                "as a float (e.g. `1.0`, `x.astype(float)`)",
                variable=name, function=f.name, stage="ad")


class Backward:
    """Runs f forward, then its reverse sweep, on copies of the arguments."""

    def __init__(self, f: ReversibleFunction, wrt: Any = None):
        require_reversible(f, "AD")
        self.f = f
        # every caller runs the sweep on a copy of the state, and reads the arguments it
        # restores only to check them (with checks on): without checks, they go unrestored
        self.direction = f._direction.backward(adjoints_only=not f._program.check)
        self.inactive = f.inactive_for(wrt)

    def prepare(self, args: tuple, lanes: int = 1):
        f = self.f
        sig = f.signature_of(args, on_copies=True)
        backward = f._code_for_call(sig, self.direction, lanes, self.inactive)
        return sig, backward

    def has_adjoint(self, name: str, t: VarType) -> bool:
        return t.dtype in DIFFERENTIABLE and name not in self.inactive

    def forward(self, args: tuple, sweep_follows: bool = False) -> tuple:
        """f(*args) on copies of the arrays f can change (the caller's stay untouched);
        ``sweep_follows``: this call runs a reverse sweep right after, which checks the
        ancillas' ``del`` again (so the run may leave them out)."""
        written = self.f._program.written_params()
        work = tuple(copy_arg(a) if name in written else a for name, a in zip(self.f.params, args))
        return self.f._run(work, before_sweep=sweep_follows)

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

    def seeded_adjoints(self, sig: tuple[VarType, ...], state: tuple, seed: Seed) -> list:
        """The adjoint arguments of a sweep that differentiates the loss ``seed``: zeros,
        with 1 at the loss (the scalar, or its one element)."""
        adjs = self.zero_adjoints(sig, state)
        slot = self.adjoint_slot(sig, seed.param)
        if seed.index is None:
            adjs[slot] = 1.0
        else:
            adjs[slot][seed.index] = 1.0
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
        return adj_out, check_recovered(self.f, entry, recovered, api)

    def gradients(self, sig, adj_out) -> tuple:
        grads, j = [], 0
        for name, t in zip(self.f.params, sig):
            if self.has_adjoint(name, t):
                g = adj_out[j]
                grads.append(g if t.is_array else python_scalar(g))
                j += 1
            else:
                grads.append(None)
        return tuple(grads)


#: statements x lanes one Jacobian sweep may hold (:func:`jacobian_lanes`)
LANE_BUDGET = 400


def jacobian_lanes(f: ReversibleFunction, rows: int, most: int) -> int:
    """How many Jacobian rows (adjoint lanes) one reverse sweep of ``f`` carries: up to
    ``most``, fewer for a large program.

    More lanes share one uncomputation among more rows -- fewer sweeps -- but every lane is
    another copy of every adjoint statement, in ``f`` and in each function it calls, for
    Numba to compile: the hand-tracking model's first Jacobian (about 150 statements) took
    8 s to compile with one lane, 10 s with two, 33 s with eight, for sweeps 10 / 5.8 /
    3.7 ms long.  A program of ``n`` statements gets the most lanes, halving from ``most``,
    with ``lanes x n <= LANE_BUDGET`` (at least one): small functions keep eight."""
    lanes = most
    size = f._program.code_size()
    while lanes > 1 and lanes * size > LANE_BUDGET:
        lanes //= 2
    return max(1, min(rows, lanes))


def tolerance_of(f: ReversibleFunction) -> tuple[float, float]:
    """The function's own ``atol, rtol`` where it sets them, else the global ones."""
    p = f._program
    atol, rtol = get_tolerance()
    return (atol if p.atol is None else p.atol), (rtol if p.rtol is None else p.rtol)


def check_recovered(f: ReversibleFunction, entry: tuple, recovered: tuple,
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
    atol, rtol = tolerance_of(f)
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
        error = not_recovered(name, np.asarray(b), np.asarray(a), exact, atol, rtol)
        if error is not None:
            msg, expected, actual = error
            advice = _EXACT_ADVICE if exact else _RECOVERY_ADVICE
            return ReversibilityError(
                f"{api}: the reverse sweep did not recover the value of argument `{name}` at "
                f"entry: {msg}, {advice}",
                variable=name, expected=expected, actual=actual, function=f.name, stage="ad")
    return None


def not_recovered(name: str, b: np.ndarray, a: np.ndarray, exact: bool, atol: float,
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
    expected, actual = python_scalar(b[where]), python_scalar(a[where])
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


def block_rows(rows: list[tuple[int, int]]) -> list[int]:
    """The row inside its output's block of each seeded row (``rows``: (argument, flat
    element) per seed), for the batched drivers of the CPU and the GPU."""
    out, seen = [], {}
    for k, _ in rows:
        out.append(seen.get(k, 0))
        seen[k] = seen.get(k, 0) + 1
    return out
