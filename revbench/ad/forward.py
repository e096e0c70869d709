"""Forward mode for users: ``jvp``, the Jacobian-vector product.

The tangent transform (:mod:`revbench.transforms.tangent`) already gives every float
variable of a program a tangent, updated beside it by the rules the adjoint uses; ``hvp``
runs it over the gradient program.  Run over the *forward* program, it is forward-mode AD:
seed the arguments' tangents with a direction ``v`` and the tangents after the run are
``J v`` -- one pass, the cost of about two forward runs, no tape and no reverse sweep.

Why offer it beside ``vjp``: a derivative along one direction of many outputs (a
sensitivity, a directional derivative inside a Newton-Krylov solver, the columns of a tall
Jacobian) costs one forward pass here and one reverse sweep per output there.  Its program
is the ``tangent-forward`` direction of the function, compiled and cached like the others
on both backends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from revbench.ad.sweep import as_names, param_index, require_reversible
from revbench.function import ReversibleFunction, copy_arg
from revbench.lang.errors import ReversibilityError, ReversibilityTypeError
from revbench.lang.types import VarType, python_scalar

__all__ = ["jvp"]


def jvp(f: ReversibleFunction, *args: Any, tangents: Mapping[str, Any] | Sequence[Any],
        outputs: Any = None) -> tuple[tuple, tuple]:
    """``outs, out_tangents = jvp(f, *args, tangents={"x": v}, outputs="r")``: the
    Jacobian-vector product of ``f`` at ``args`` along ``v``, by forward mode.

    ``tangents`` gives the direction: a mapping from argument names (or positions) to
    their tangents -- a number for a float scalar, an array of the argument's shape for an
    array; arguments it leaves out have tangent 0 -- or a sequence with one entry per
    argument of ``f`` (``None`` for 0).  Only float arguments have tangents.

    ``outs`` are the final values of the ``outputs`` and ``out_tangents`` their tangents,
    ``d outputs / d args . v`` (tuples, one entry per output, also for one output).
    ``outputs=None`` means every argument; integer and bool outputs get ``None`` as their
    tangent.  Neither ``args`` nor the tangents are changed.

    Complex programs are refused (the tangent transform is for real programs), and so is a
    call of a function added with ``revbench.register`` (its partials have no tangents).
    """
    require_reversible(f, "jvp")
    api = f"jvp({f.__name__})"
    if len(args) != len(f.params):
        raise TypeError(f"{api} takes the {len(f.params)} argument(s) of "
                        f"{f.__name__}{f.params}, got {len(args)}")
    out_names = f.params if outputs is None else as_names(outputs)
    if not out_names:
        raise ValueError(f"{api}: outputs names no argument")
    ko = [param_index(f, o, "outputs") for o in out_names]
    if len(set(ko)) != len(ko):
        raise ValueError(f"{api}: outputs names an argument twice")
    try:
        sig = f.signature_of(args, on_copies=True)
        seeds, moved = _seeds(f, api, sig, args, tangents)
        written = f._program.written_params()
        # the arguments left fixed that f only reads: their tangents are zero throughout,
        # and the program is compiled knowing it (no term of theirs is computed)
        fixed = frozenset(p for k, (p, t) in enumerate(zip(f.params, sig))
                          if t.dtype == "float" and k not in moved and p not in written)
        program = f._code_for_call(sig, f._direction.with_tangent(), inactive=fixed)
    except (ReversibilityError, TypeError, ValueError) as exc:
        raise exc.with_traceback(None) from None
    state = tuple(copy_arg(a) if name in written else a for name, a in zip(f.params, args))
    out = f._execute(program, (*state, *seeds))
    n = len(state)
    tangent_of, j = {}, n
    for k, t in enumerate(sig):
        if t.dtype == "float":
            tangent_of[k] = out[j]
            j += 1
    outs = tuple(_value(sig[k], out[k]) for k in ko)
    out_tangents = tuple(_value(sig[k], tangent_of[k]) if k in tangent_of else None for k in ko)
    return outs, out_tangents


def _value(t: VarType, v: Any) -> Any:
    return v if t.is_array else python_scalar(v)


def _seeds(f: ReversibleFunction, api: str, sig: tuple[VarType, ...], args: tuple,
           tangents: Any) -> tuple[list, set[int]]:
    """The tangent arguments of the program, one per float argument: the user's direction
    (copied, checked for shape and type) or zeros; and the positions given one."""
    given: dict[int, Any] = {}
    if isinstance(tangents, Mapping):
        for key, v in tangents.items():
            given[param_index(f, key, "tangents")] = v
    elif isinstance(tangents, Sequence) and not isinstance(tangents, str):
        if len(tangents) != len(f.params):
            raise TypeError(f"{api}: tangents has {len(tangents)} entries, but {f.__name__} takes "
                            f"{len(f.params)} argument(s) {f.params}: give one per argument "
                            "(None for 0), or a dict naming the arguments that move")
        given = {k: v for k, v in enumerate(tangents) if v is not None}
    else:
        raise TypeError(f"{api}: tangents must be a dict from argument names to tangents, or "
                        f"one tangent per argument, got {tangents!r}")
    seeds = []
    for k, (name, t, a) in enumerate(zip(f.params, sig, args)):
        v = given.get(k)
        if t.dtype != "float":
            if v is not None and np.any(np.asarray(v) != 0):
                raise ReversibilityTypeError(
                    f"{api}: `{name}` is {t}, and only float arguments have tangents; leave "
                    f"`{name}` out of tangents=, or pass it as a float",
                    variable=name, function=f.name, stage="ad")
            continue
        shape = np.shape(a) if t.is_array else ()
        if v is None:
            seeds.append(np.zeros(shape) if t.is_array else 0.0)
            continue
        vv = np.asarray(v)
        if vv.dtype.kind not in "iuf":
            raise TypeError(f"{api}: the tangent of `{name}` must be real numbers, got "
                            f"{vv.dtype} ({v!r})")
        if vv.shape != shape:
            raise ValueError(f"{api}: the tangent of `{name}` must have its shape, {shape}, got "
                             f"{vv.shape}")
        seeds.append(np.array(vv, dtype=float) if t.is_array else float(vv))
    return seeds, {k for k, v in given.items() if v is not None}
