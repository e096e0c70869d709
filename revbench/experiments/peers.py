"""JAX and PyTorch rows for the built-in workloads: what ML users run today (optional).

When JAX or PyTorch is installed, :func:`revbench.experiments.compare` adds rows for the
same workloads, the same math, in float64:

==========  ==========================  ==================================================
framework   strategy                    how the states come back for the gradient
==========  ==========================  ==================================================
jax         ``lax.scan``                ``jax.grad`` of a ``lax.scan`` over the T steps: the
                                        residuals of every step are stored
jax         ``lax.scan+jax.checkpoint`` the T steps split into about sqrt(T) segments: an
                                        outer ``lax.scan`` over segments whose body (an inner
                                        scan) is wrapped in ``jax.checkpoint``, so only the
                                        segment boundaries are stored and each segment is
                                        recomputed on the way back
torch       ``autograd``                a Python loop of the steps, ``backward`` through the
                                        recorded graph (every step's tensors stored)
torch       ``autograd+checkpoint``     ``torch.utils.checkpoint.checkpoint`` (non-reentrant)
                                        on segments of about sqrt(T) steps
==========  ==========================  ==================================================

Neither framework is a dependency of revbench, and neither is imported until
:func:`measure` runs (:func:`available` only looks them up).  Each row is measured as
revbench's own rows are: one untimed warm-up call (JAX compiles there, once per workload,
strategy and length), then ``repeats`` samples (a short call repeated back to back until a
sample lasts long enough for the clock), their median time per call, and the most memory the
operating system saw a sample add (:func:`~revbench.experiments.memory.measure_call`).
"""

from __future__ import annotations

import gc
import importlib.util
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from revbench.experiments.memory import measure_call

__all__ = ["FRAMEWORKS", "available", "measure", "variants"]

#: the frameworks looked for, in row order
FRAMEWORKS = ("jax", "torch")

#: (framework, strategy, label, checkpointed) in row order
_VARIANTS = (
    ("jax", "lax.scan", "jax lax.scan", False),
    ("jax", "lax.scan+jax.checkpoint", "jax lax.scan+checkpoint", True),
    ("torch", "autograd", "torch autograd", False),
    ("torch", "autograd+checkpoint", "torch autograd+checkpoint", True),
)

#: the workloads with peer implementations: name -> number of state arrays
_N_STATE = {"heat": 1, "wave": 2, "rnn": 1, "revnet": 2}


def available() -> list[str]:
    """The installed frameworks among ``("jax", "torch")`` (looked up, not imported)."""
    out = []
    for name in FRAMEWORKS:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if found:
            out.append(name)
    return out


def variants(name: str) -> list[str]:
    """The labels of the rows :func:`measure` makes for workload ``name`` with what is
    installed (``[]`` for a workload without peer implementations)."""
    if name not in _N_STATE:
        return []
    have = set(available())
    return [label for fw, _, label, _ in _VARIANTS if fw in have]


def segments(n_steps: int) -> tuple[int, int, int]:
    """How the checkpointed variants split ``n_steps`` steps: ``(n_segments, length,
    remainder)`` -- ``n_full = n_steps // length`` segments of ``length ~ sqrt(n_steps)``
    steps, then one shorter segment of ``remainder`` steps if that is not zero
    (``n_segments`` counts it)."""
    length = max(1, round(math.sqrt(n_steps)))
    full, rem = divmod(n_steps, length)
    return full + (rem > 0), length, rem


def measure(name: str, n_steps: int, args: tuple, repeats: int) -> list[dict[str, Any]]:
    """One row per :func:`variants` label: ``workload, framework, strategy, knob, n_steps,
    seconds, measured_peak_bytes, value, grad, error``.

    ``grad`` is aligned with ``args`` (NumPy arrays, floats for scalars, ``None`` for the
    integer CSR index arrays).  A variant that fails (out of memory, ...) gives a row with
    ``error`` set to a one-line message, ``seconds`` NaN and ``grad`` None.
    """
    if name not in _N_STATE:
        return []
    T = int(n_steps)
    have = set(available())
    rows = []
    for fw, strategy, _, ckpt in _VARIANTS:
        if fw not in have:
            continue
        knob = f"segments={segments(T)[0]}" if ckpt else ""
        row: dict[str, Any] = {"workload": name, "framework": fw, "strategy": strategy,
                               "knob": knob, "n_steps": T, "seconds": math.nan,
                               "measured_peak_bytes": math.nan, "value": math.nan,
                               "grad": None, "error": ""}
        try:
            runner = _jax_runner if fw == "jax" else _torch_runner
            row.update(runner(name, T, tuple(args), ckpt, repeats))
        except Exception as exc:  # a failed variant (out of memory, ...) is a row, not a crash
            msg = str(exc).strip().splitlines()
            row.update(seconds=math.nan, grad=None, value=math.nan,
                       error=f"{type(exc).__name__}: {msg[0] if msg else ''}"[:300])
        rows.append(row)
    return rows


# --------------------------------------------------------------------------- #
# shared helpers
# --------------------------------------------------------------------------- #
def _is_int_array(a) -> bool:
    return isinstance(a, np.ndarray) and np.issubdtype(a.dtype, np.integer)


def _is_scalar(a) -> bool:
    return np.ndim(a) == 0


def _csr_rows(indptr: np.ndarray) -> np.ndarray:
    return np.repeat(np.arange(len(indptr) - 1, dtype=np.int64), np.diff(indptr))


def _aux(name: str, args: tuple) -> tuple[np.ndarray, ...]:
    """The integer arrays a step needs: ``(indices, rows)`` of the CSR Laplacian."""
    if name in ("heat", "wave"):
        ints = [a for a in args if _is_int_array(a)]
        indices, indptr = ints
        return np.asarray(indices, dtype=np.int64), _csr_rows(np.asarray(indptr))
    return ()


def _release_freed_memory() -> None:
    """Give memory freed by earlier calls back to the operating system (glibc's
    ``malloc_trim``), so that a call reusing it still shows in the resident size.

    Without it, the many small tensors a framework frees after the warm-up call stay in
    the C heap, the timed calls are served from there, and their peak reads as ~0.
    """
    global _TRIM
    gc.collect()
    if _TRIM is None:
        try:
            import ctypes
            import ctypes.util

            _TRIM = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _TRIM = False
    if _TRIM:
        _TRIM(0)


_TRIM: Any = None


def _timed(call: Callable[[], Any], repeats: int) -> tuple[Any, float, int | float, int]:
    """One untimed warm-up call (JAX compiles, PyTorch warms its allocator), then the
    samples of :func:`~revbench.experiments.memory.measure_call` -- short calls repeated
    back to back, as revbench's rows are: (last result, median seconds per call, max
    measured peak bytes, calls timed)."""
    call()
    _release_freed_memory()
    result, seconds, peak, runs = measure_call(call, max(1, int(repeats)))
    return result, seconds, (math.nan if peak is None else int(peak)), runs


def _pack_grads(args: tuple, float_pos: list[int], grads) -> tuple:
    out: list[Any] = [None] * len(args)
    for i, g in zip(float_pos, grads):
        g = np.array(g, dtype=np.float64)
        out[i] = float(g) if _is_scalar(args[i]) else g
    return tuple(out)


# --------------------------------------------------------------------------- #
# JAX
# --------------------------------------------------------------------------- #
def _x64():
    import jax

    if hasattr(jax, "enable_x64"):              # jax >= 0.7: a context manager
        return jax.enable_x64(True)
    from jax.experimental import enable_x64  # older jax

    return enable_x64()


def _model(name: str, tanh, lap, total):
    """The workloads' math, written once for any array library (its ``tanh``, its CSR
    product ``lap(data, u, aux)`` and its ``total`` sum): ``step(state, x_t, params, aux)
    -> state`` (``x_t`` the step's input row for the rnn, else unused) and ``loss(state)``."""
    if name == "heat":
        def step(state, x, p, aux):
            (u,) = state
            data, f, kappa, dt = p
            return (u + dt * (kappa * lap(data, u, aux) + f),)
    elif name == "wave":
        def step(state, x, p, aux):
            u, v = state
            data, c2, dt = p
            v = v + dt * c2 * lap(data, u, aux)
            return (u + dt * v, v)
    elif name == "rnn":
        def step(state, x, p, aux):
            (h,) = state
            W, U, b, _ = p
            return (tanh(W @ h + U @ x + b),)
    else:  # revnet
        def step(state, x, p, aux):
            x1, x2 = state
            W1, b1, W2, b2 = p
            x1 = x1 + tanh(x2 @ W1 + b1)
            return (x1, x2 + tanh(x1 @ W2 + b2))

    def loss(state):
        return sum(total(s * s) for s in state)

    return step, loss


def _jax_model(name: str):
    """``(step, loss, sequence)`` in JAX: :func:`_model`, and ``sequence(params, T)`` -> the
    scanned inputs (or None)."""
    import jax.numpy as jnp
    from jax.ops import segment_sum

    def lap(data, u, aux):
        indices, rows = aux
        return segment_sum(data * u[indices], rows, num_segments=u.shape[0],
                           indices_are_sorted=True)

    def sequence(p, T):
        return p[3][:T] if name == "rnn" else None

    return (*_model(name, jnp.tanh, lap, jnp.sum), sequence)


_JAX_CACHE: dict[tuple, Any] = {}


def _jax_function(name: str, T: int, ckpt: bool, n_float: int):
    """The jitted ``value_and_grad`` of the loss after ``T`` steps, built once per
    (workload, T, variant); jit compiles it on the first call per shape."""
    key = (name, T, ckpt, n_float)
    if key in _JAX_CACHE:
        return _JAX_CACHE[key]
    import jax

    step, loss, sequence = _jax_model(name)
    n_state = _N_STATE[name]
    _, length, rem = segments(T)
    full = T // length

    def scan(state, params, aux, xs, n):
        def body(s, x):
            return step(s, x, params, aux), None

        return jax.lax.scan(body, state, xs, length=n)[0]

    def run(floats, aux):
        state, params = tuple(floats[:n_state]), tuple(floats[n_state:])
        xs = sequence(params, T)
        if not ckpt:
            state = scan(state, params, aux, xs, T)
        else:
            def segment(s, x):
                return scan(s, params, aux, x, length), None

            seg = jax.checkpoint(segment)
            head = None if xs is None else xs[:full * length].reshape(
                (full, length) + xs.shape[1:])
            state = jax.lax.scan(seg, state, head, length=full)[0]
            if rem:
                tail = None if xs is None else xs[full * length:]
                state = scan(state, params, aux, tail, rem)
        return loss(state)

    fn = jax.jit(jax.value_and_grad(run))
    if len(_JAX_CACHE) > 64:
        _JAX_CACHE.clear()
    _JAX_CACHE[key] = fn
    return fn


def _jax_runner(name: str, T: int, args: tuple, ckpt: bool, repeats: int) -> dict:
    import jax
    import jax.numpy as jnp

    float_pos = [i for i, a in enumerate(args) if not _is_int_array(a)]
    with _x64():
        floats = tuple(jnp.asarray(np.asarray(args[i], dtype=np.float64)) for i in float_pos)
        aux = tuple(jnp.asarray(a) for a in _aux(name, args))
        fn = _jax_function(name, T, ckpt, len(floats))

        def call():
            return jax.block_until_ready(fn(floats, aux))

        (value, grads), seconds, peak, runs = _timed(call, repeats)
        value = float(value)
        grads = [np.asarray(g) for g in grads]
    return {"seconds": seconds, "timed_runs": runs, "measured_peak_bytes": peak, "value": value,
            "grad": _pack_grads(args, float_pos, grads)}


# --------------------------------------------------------------------------- #
# PyTorch
# --------------------------------------------------------------------------- #
def _torch_model(name: str):
    """``step(state, t, params, aux) -> state`` and ``loss(state)`` in torch (:func:`_model`,
    with the rnn's input row picked by ``t``)."""
    import torch

    def lap(data, u, aux):
        indices, rows = aux
        return torch.zeros_like(u).index_add(0, rows, data * u[indices])

    step_x, loss = _model(name, torch.tanh, lap, torch.sum)

    def step(state, t, p, aux):
        return step_x(state, p[3][t] if name == "rnn" else None, p, aux)

    return step, loss


def _torch_runner(name: str, T: int, args: tuple, ckpt: bool, repeats: int) -> dict:
    import torch
    from torch.utils.checkpoint import checkpoint

    step, loss = _torch_model(name)
    n_state = _N_STATE[name]
    float_pos = [i for i, a in enumerate(args) if not _is_int_array(a)]
    aux = tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in _aux(name, args))
    length = segments(T)[1]

    def call():
        leaves = [torch.tensor(np.asarray(args[i], dtype=np.float64), dtype=torch.float64,
                               requires_grad=True) for i in float_pos]
        state, params = tuple(leaves[:n_state]), tuple(leaves[n_state:])
        if not ckpt:
            for t in range(T):
                state = step(state, t, params, aux)
        else:
            for start in range(0, T, length):
                stop = min(T, start + length)

                def segment(*s, start=start, stop=stop):
                    for t in range(start, stop):
                        s = step(s, t, params, aux)
                    return s

                state = checkpoint(segment, *state, use_reentrant=False)
        value = loss(state)
        grads = torch.autograd.grad(value, leaves)
        return float(value.detach()), [g.detach().numpy() for g in grads]

    (value, grads), seconds, peak, runs = _timed(call, repeats)
    return {"seconds": seconds, "timed_runs": runs, "measured_peak_bytes": peak, "value": value,
            "grad": _pack_grads(args, float_pos, grads)}
