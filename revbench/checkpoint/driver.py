"""The compiled driver that executes a schedule's rows with the step's own kernels.

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


DRIVER_VERSION = "2"


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
    lines = [
        f"# revbench checkpoint driver v{DRIVER_VERSION}: "
        f"{'in-place' if shape.inplace else 'out-of-place'}, {S} state(s), {P} param(s), "
        f"checks {'on' if shape.check else 'off'}",
        "import numpy as np",
        "",
        f"def _rb_driver(ops, nops, value, {', '.join(st + ad + ps + gs)}, atol, rtol):",
    ]
    emit = lines.append
    ind = "    "
    emit(f"{ind}for r in range(nops):")
    ind2 = ind * 2
    emit(f"{ind2}if _rb_interrupted():  # Ctrl-C (revbench.backends.runtime.interrupted)")
    emit(f"{ind2}    raise _RbInterrupted()")
    emit(f"{ind2}op = ops[r, 0]")
    emit(f"{ind2}t = np.int64(ops[r, 1])")
    emit(f"{ind2}a = ops[r, 2]")
    emit(f"{ind2}b = ops[r, 3]")
    plist = ", ".join(ps)
    pcomma = f", {plist}" if P else ""
    gcomma = "".join(f", {g}" for g in gs)

    def scale_and_resid(kind: int, call: list[str], ind3: str) -> None:
        if shape.check:
            emit(f"{ind3}scale = 0.0")
            for k in range(S):
                emit(f"{ind3}v = {st[k]}[b].reshape(-1)")
                emit(f"{ind3}for i in range(v.size):")
                emit(f"{ind3}    scale = max(scale, abs(v[i]))")
        for c in call:
            emit(ind3 + c)
        for k in range(S):
            if shape.check:  # the residual, read while the slot is cleared for its next use
                emit(f"{ind3}resid = 0.0")
                emit(f"{ind3}v = {st[k]}[b].reshape(-1)")
                emit(f"{ind3}for i in range(v.size):")
                emit(f"{ind3}    resid = max(resid, abs(v[i]))")
                emit(f"{ind3}    v[i] = 0")
                emit(f"{ind3}if resid > atol + rtol * scale:")
                emit(f"{ind3}    raise _RbNotRecovered({kind}, t, {k}, resid, scale)")
            else:
                emit(f"{ind3}{st[k]}[b][...] = 0")

    def take_scalars(offset: int, ind3: str) -> None:
        for g, pos in scalar_g:
            emit(f"{ind3}{g} = res[{offset + pos}]")

    ind3 = ind * 3
    gradient = "bwd" in symbols
    if not gradient:  # run(): forward steps and copies only
        emit(f"{ind2}if op == {FWD}:")
        if shape.inplace:
            emit(f"{ind3}{symbols['fwd']}({', '.join(f'{s}[a]' for s in st)}, t{pcomma}, atol, rtol)")
        else:
            for s in st:
                emit(f"{ind3}{s}[b][...] = 0")
            emit(f"{ind3}{symbols['fwd']}({', '.join(f'{s}[b]' for s in st)}, "
                 f"{', '.join(f'{s}[a]' for s in st)}, t{pcomma}, atol, rtol)")
        emit(f"{ind2}elif op == {COPY}:")
        for s in st:
            emit(f"{ind3}{s}[b][...] = {s}[a]")
        emit(f"{ind}return (value{''.join(', ' + g for g, _ in scalar_g)},)")
        return "\n".join(lines) + "\n"
    if shape.inplace:
        sa = ", ".join(f"{s}[a]" for s in st)
        emit(f"{ind2}if op == {FWD}:")
        emit(f"{ind3}{symbols['fwd']}({sa}, t{pcomma}, atol, rtol)")
        emit(f"{ind2}elif op == {REV}:")
        emit(f"{ind3}res = {symbols['bwd']}({sa}, t{pcomma}, {', '.join(ad)}{gcomma}, atol, rtol)")
        take_scalars(S + 1 + P + S, ind3)
        if shape.check:  # where s[t] is stored, the state the step's inverse recovered must match it
            emit(f"{ind3}if b >= 0:")
            for k in range(S):
                emit(f"{ind3}    x = {st[k]}[a].reshape(-1)")
                emit(f"{ind3}    y = {st[k]}[b].reshape(-1)")
                emit(f"{ind3}    for i in range(x.size):")
                emit(f"{ind3}        if abs(x[i] - y[i]) > atol + rtol * abs(y[i]):")
                emit(f"{ind3}            raise _RbNotRecovered({RECOVER}, t, {k}, abs(x[i] - y[i]), "
                     "abs(y[i]))")
        adj_loss = ", ".join(ad)
    else:
        sb = ", ".join(f"{s}[b]" for s in st)
        sa = ", ".join(f"{s}[a]" for s in st)
        emit(f"{ind2}if op == {FWD}:")
        for s in st:
            emit(f"{ind3}{s}[b][...] = 0")
        emit(f"{ind3}{symbols['fwd']}({sb}, {sa}, t{pcomma}, atol, rtol)")
        emit(f"{ind2}elif op == {INV}:")
        scale_and_resid(INV, [f"{symbols['inv']}({sb}, {sa}, t{pcomma}, atol, rtol)"], ind3)
        emit(f"{ind2}elif op == {REV}:")
        emit(f"{ind3}n1 = (t + 1) % 2")
        emit(f"{ind3}n0 = t % 2")
        adj_new = ", ".join(f"{x}[n1]" for x in ad)
        adj_old = ", ".join(f"{x}[n0]" for x in ad)
        scale_and_resid(REV, [f"res = {symbols['bwd']}({sb}, {sa}, t{pcomma}, {adj_new}, {adj_old}"
                              f"{gcomma}, atol, rtol)"], ind3)
        take_scalars(2 * S + 1 + P + 2 * S, ind3)
        for x in ad:
            emit(f"{ind3}{x}[n1][...] = 0")
        adj_loss = ", ".join(f"{x}[t % 2]" for x in ad)
    emit(f"{ind2}elif op == {COPY}:")
    for s in st:
        emit(f"{ind3}{s}[b][...] = {s}[a]")
    emit(f"{ind2}elif op == {LOSS}:")
    sa = ", ".join(f"{s}[a]" for s in st)
    emit(f"{ind3}res0 = {symbols['lossf']}(0.0, {sa}{pcomma}, atol, rtol)")
    emit(f"{ind3}value = res0[0]")
    emit(f"{ind3}res = {symbols['lossb']}(value, {sa}{pcomma}, 1.0, {adj_loss}{gcomma}, atol, rtol)")
    take_scalars(1 + S + P + 1 + S, ind3)
    ret = ", ".join(["value"] + [g for g, _ in scalar_g])
    emit(f"{ind}return ({ret},)")
    return "\n".join(lines) + "\n"


def build_driver(shape: DriverShape, kernels: dict[str, tuple[object, str]], backend: str):
    """Compile the driver for ``shape`` calling ``kernels`` (name -> (callable, content key))."""
    symbols = {name: f"_rb_k_{name}_{key[:16]}" for name, (_, key) in kernels.items()}
    source = driver_source(shape, symbols)
    key = hashlib.sha256(source.encode()).hexdigest()[:32]
    injected: dict[str, object] = {sym: kernels[name][0] for name, sym in symbols.items()}
    injected["_RbNotRecovered"] = StateNotRecovered
    injected["_rb_interrupted"], injected["_RbInterrupted"] = interrupted, Interrupted
    flavour = "nb" if backend == "numba" else "py"
    mod = load_module(key, source, flavour, injected)
    if backend != "numba":
        return mod._rb_driver
    from revbench.backends.numba_backend import module_dispatcher

    return module_dispatcher(mod, "_rb_driver")
