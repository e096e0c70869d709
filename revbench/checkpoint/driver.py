"""The compiled driver that executes a schedule with the step's own kernels: rows planned
in Python, or (``DriverShape.compiled_schedule``) the actions of a compiled generator
(:mod:`revbench.checkpoint.actions`) run inside it.

For each loop shape (in-place or not, how many state arrays, which parameters are
arrays and which carry adjoints) the driver is *generated* as plain Python source
that calls the step's compiled forward, inverse and reverse-sweep kernels and the
loss's forward and reverse sweep (``ReversibleFunction.kernel``), then compiled by
``numba.njit(cache=True)`` through the same content-hashed loader as every other
generated module -- so a second process loads it from disk.  With the Python
backend the very same source runs uncompiled.

States live in one array per state variable, ``store[k]`` of shape
``(slots, *shape)``; a slot is ``store[k][s]``.  Out-of-place loops keep two
adjoint buffers per state variable (``adj[k][t % 2]`` is the adjoint of
``s[t]``), in-place loops one.  Parameter adjoints are accumulated across steps:
arrays in place, scalars as locals returned at the end.

With checks on, every uncomputation (an inverse step, or the reverse sweep of an
out-of-place step) must bring the new state back to zero within the tolerance;
otherwise :class:`StateNotRecovered` is raised with the numbers, and the loop
turns it into a :class:`~revbench.ReversibilityError`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from revbench.backends.loader import load_module
from revbench.backends.runtime import Interrupted, interrupted
from revbench.backends.source import SourceWriter, emit_given_back
from revbench.checkpoint.actions import LOAD, STORE
from revbench.checkpoint.plan import COPY, FWD, INV, LOSS, REV

#: the kind of StateNotRecovered raised when an in-place reverse step misses the stored state
RECOVER = 5


class StateNotRecovered(Exception):
    """Raised by the driver: ``(op, t, state_index, residual, scale)``."""


@dataclass(frozen=True)
class ParamSpec:
    is_array: bool
    has_adjoint: bool
    complex: bool = False


@dataclass(frozen=True)
class DriverShape:
    inplace: bool
    n_state: int
    params: tuple[ParamSpec, ...]
    check: bool
    #: the schedule is a compiled generator of actions (:mod:`revbench.checkpoint.actions`)
    #: run inside the driver, not rows planned in Python
    compiled_schedule: bool = False
    #: the schedule keeps states on a second level (disk): the driver takes those arrays
    #: (memory-mapped files) after the store, and copies to and from them
    disk: bool = False


DRIVER_VERSION = "3"


def driver_source(shape: DriverShape, symbols: dict[str, str]) -> str:
    """The driver's source; ``symbols`` names the kernels it calls (fwd, inv, bwd, lossf, lossb)."""
    S = shape.n_state
    P = len(shape.params)
    st = [f"st{k}" for k in range(S)]
    ad = [f"ad{k}" for k in range(S)]
    ps = [f"p{j}" for j in range(P)]
    gs = [f"g{j}" for j, p in enumerate(shape.params) if p.has_adjoint]
    scalar_g = [(f"g{j}", pos) for pos, (j, p) in
                enumerate((j, p) for j, p in enumerate(shape.params) if p.has_adjoint)
                if not p.is_array]
    w = SourceWriter()
    w.emit(f"# revbench checkpoint driver v{DRIVER_VERSION}: "
           f"{'in-place' if shape.inplace else 'out-of-place'}, {S} state(s), {P} param(s), "
           f"checks {'on' if shape.check else 'off'}",
           "import numpy as np",
           "")
    plist = ", ".join(ps)
    pcomma = f", {plist}" if P else ""
    gcomma = "".join(f", {g}" for g in gs)
    sa = ", ".join(f"{s}[a]" for s in st)
    sb = ", ".join(f"{s}[b]" for s in st)

    def uncompute(kind: int, call: str) -> None:
        """``call`` brings the new state ``s[b]`` back to zero: with checks, the largest
        value left must be within the tolerance of the largest before."""
        if shape.check:
            w.emit("scale = 0.0")
            for k in range(S):
                w.emit(f"v = {st[k]}[b].reshape(-1)")
                with w.block("for i in range(v.size):"):
                    w.emit("scale = max(scale, abs(v[i]))")
        w.emit(call)
        for k in range(S):
            if not shape.check:
                w.emit(f"{st[k]}[b][...] = 0")
                continue
            # the residual, read while the slot is cleared for its next use
            w.emit("resid = 0.0", f"v = {st[k]}[b].reshape(-1)")
            with w.block("for i in range(v.size):"):
                w.emit("resid = max(resid, abs(v[i]))", "v[i] = 0")
            with w.block("if resid > atol + rtol * scale:"):
                w.emit(f"raise _RbNotRecovered({kind}, t, {k}, resid, scale)")

    def take_scalars(offset: int) -> None:
        for g, pos in scalar_g:
            w.emit(f"{g} = res[{offset + pos}]")

    def copy() -> None:
        with w.block(f"elif op == {COPY}:"):
            for s in st:
                w.emit(f"{s}[b][...] = {s}[a]")
        if shape.disk:
            with w.block(f"elif op == {STORE}:  # s[i] to the second level"):
                for s, d in zip(st, dk):
                    w.emit(f"{d}[b][...] = {s}[a]")
            with w.block(f"elif op == {LOAD}:  # and back"):
                for s, d in zip(st, dk):
                    w.emit(f"{s}[b][...] = {d}[a]")

    gradient = "bwd" in symbols
    dk = [f"dk{k}" for k in range(S)] if shape.disk else []
    everything = ", ".join(st + dk + ad + ps + gs)
    if shape.compiled_schedule:
        # the actions of :mod:`revbench.checkpoint.actions`, counted as they run; in place,
        # a forward step copies its state first, and a reverse step runs on s[i+1]'s slot
        # and checks what it recovers against s[i]'s (the rows' in-place convention)
        header = (f"def _rb_driver(nsteps, knob, counts, value, {everything}, atol, rtol):",
                  "for op, i, a0, b0 in _rb_schedule(nsteps, knob):")
    else:
        header = (f"def _rb_driver(ops, nops, value, {everything}, atol, rtol):",
                  "for r in range(nops):")
    with w.block(header[0]):
        with w.block(header[1]):
            with w.block("if _rb_interrupted():  # Ctrl-C (revbench.backends.runtime.interrupted)"):
                w.emit("raise _RbInterrupted()")
            if not shape.compiled_schedule:
                w.emit("op = ops[r, 0]", "t = np.int64(ops[r, 1])", "a = ops[r, 2]",
                       "b = ops[r, 3]")
            else:
                w.emit("t = np.int64(i)", "counts[op] += 1", "a = a0", "b = b0")
                if shape.inplace:
                    with w.block(f"if op == {FWD}:"):
                        for s_ in st:
                            w.emit(f"{s_}[b0][...] = {s_}[a0]")
                        w.emit("a = b0")
                    with w.block(f"elif op == {REV}:"):
                        w.emit("a = b0", "b = a0")
            with w.block(f"if op == {FWD}:"):
                if shape.inplace:
                    w.emit(f"{symbols['fwd']}({sa}, t{pcomma}, atol, rtol)")
                else:
                    for s in st:
                        w.emit(f"{s}[b][...] = 0")
                    w.emit(f"{symbols['fwd']}({sb}, {sa}, t{pcomma}, atol, rtol)")
            if not gradient:  # run(): forward steps and copies only
                copy()
            elif shape.inplace:
                with w.block(f"elif op == {REV}:"):
                    w.emit(f"res = {symbols['bwd']}({sa}, t{pcomma}, {', '.join(ad)}{gcomma}, "
                           "atol, rtol)")
                    take_scalars(S + 1 + P + S)
                    if shape.check:
                        # where s[t] is stored, the state the step's inverse recovered must match it
                        with w.block("if b >= 0:"):
                            for k in range(S):
                                emit_given_back(
                                    w, f"{st[k]}[a]", f"{st[k]}[b]", False,
                                    [f"raise _RbNotRecovered({RECOVER}, t, {k}, "
                                     "abs({got} - {want}), abs({want}))"], "atol", "rtol", None)
                adj_loss = ", ".join(ad)
            else:
                with w.block(f"elif op == {INV}:"):
                    uncompute(INV, f"{symbols['inv']}({sb}, {sa}, t{pcomma}, atol, rtol)")
                with w.block(f"elif op == {REV}:"):
                    w.emit("n1 = (t + 1) % 2", "n0 = t % 2")
                    adj_new = ", ".join(f"{x}[n1]" for x in ad)
                    adj_old = ", ".join(f"{x}[n0]" for x in ad)
                    uncompute(REV, f"res = {symbols['bwd']}({sb}, {sa}, t{pcomma}, {adj_new}, "
                                   f"{adj_old}{gcomma}, atol, rtol)")
                    take_scalars(2 * S + 1 + P + 2 * S)
                    for x in ad:
                        w.emit(f"{x}[n1][...] = 0")
                adj_loss = ", ".join(f"{x}[t % 2]" for x in ad)
            if gradient:
                copy()
                with w.block(f"elif op == {LOSS}:"):
                    w.emit(f"res0 = {symbols['lossf']}(0.0, {sa}{pcomma}, atol, rtol)",
                           "value = res0[0]",
                           f"res = {symbols['lossb']}(value, {sa}{pcomma}, 1.0, {adj_loss}{gcomma}, "
                           "atol, rtol)")
                    take_scalars(1 + S + P + 1 + S)
        w.emit(f"return ({', '.join(['value'] + [g for g, _ in scalar_g])},)")
    return w.text()


#: drivers built in this process, by what they are built from: a gradient call asks again
#: for the driver it ran last time, which costs a lookup rather than writing its source
_BUILT: dict[tuple, object] = {}


def build_driver(shape: DriverShape, kernels: dict[str, tuple[object, str]], backend: str,
                 schedule: object = None):
    """Compile the driver for ``shape`` calling ``kernels`` (name -> (callable, content key));
    with a compiled schedule, ``schedule`` is its generator of actions."""
    from revbench.backends.native import engine

    memo = (shape, backend, schedule, engine.enabled(),
            tuple((name, id(fn), key) for name, (fn, key) in sorted(kernels.items())))
    hit = _BUILT.get(memo)
    if hit is not None:
        return hit
    if len(_BUILT) >= 256:
        _BUILT.clear()
    _BUILT[memo] = built = _build_driver(shape, kernels, backend, schedule)
    return built


def _build_driver(shape: DriverShape, kernels: dict[str, tuple[object, str]], backend: str,
                  schedule: object = None):
    symbols = {name: f"_rb_k_{name}_{key[:16]}" for name, (_, key) in kernels.items()}
    source = driver_source(shape, symbols)
    if schedule is not None:  # (the generator's name and code key the module)
        from revbench.backends.numba_backend import helper_fingerprint

        source += (f"# schedule: {schedule.__module__}.{schedule.__qualname__} "
                   f"({helper_fingerprint(schedule)})\n")
    key = hashlib.sha256(source.encode()).hexdigest()[:32]
    injected: dict[str, object] = {sym: kernels[name][0] for name, sym in symbols.items()}
    if schedule is not None:
        if backend == "numba":
            from revbench.backends.numba_backend import helper

            schedule = helper(schedule)
        injected["_rb_schedule"] = schedule
    injected["_RbNotRecovered"] = StateNotRecovered
    injected["_rb_interrupted"], injected["_RbInterrupted"] = interrupted, Interrupted
    flavour = "nb" if backend == "numba" else "py"
    mod = load_module(key, source, flavour, injected)
    if backend != "numba":
        return mod._rb_driver
    from revbench.backends.native import engine
    from revbench.backends.numba_backend import module_dispatcher

    run = module_dispatcher(mod, "_rb_driver")
    # the native code generator compiles the driver with the kernels and the schedule it
    # calls, where it can (a schedule of states on disk maps files: Numba's object mode)
    engine.register(run, engine.DriverSource(source, key, "_rb_driver"), mod.__dict__,
                    check=False, fastmath=False)
    return engine.runner(run) or run
