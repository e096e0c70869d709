"""The reverse sweep of a function with a custom adjoint, as a generated module.

A reverse sweep takes the state at a function's exit and the adjoints there, and gives
back the state at entry and the adjoints there (see :mod:`revbench.transforms.adjoint`).
When the user gave the function an adjoint of their own (:mod:`revbench.rules.adjoints`),
that sweep is two calls instead of the derived program:

1. the user's adjoint, on the values at exit and the adjoints of the outputs, which
   returns the adjoints at entry (once per seed when a Jacobian carries several);
2. the function's inverse, which restores the values at entry -- reverse computing
   still recovers the state, only the derivative is the user's.

The module has the calling convention of every backward kernel (arguments, then their
adjoints lane by lane, then ``atol, rtol``; all returned), so callers' generated code,
``grad``, ``TimeLoop`` and the exports call it like any other.  With checks on, the
adjoints the user returns must have their arguments' shapes.
"""

from __future__ import annotations

from revbench.backends.codegen import CODEGEN_VERSION, Generated, assemble
from revbench.backends.runtime import CheckInfo
from revbench.backends.source import SourceWriter
from revbench.lang import ir
from revbench.lang.types import TypedFunction
from revbench.rules.adjoints import AdjointRule
from revbench.transforms.pipeline import Direction

DIFFERENTIABLE = ("float", "complex")
#: what generated code calls: the user's adjoint, the function's inverse, a result helper
ADJOINT_SYMBOL, INVERSE_SYMBOL, AS_TUPLE_SYMBOL = "_rb_adjoint", "_rb_inverse", "_rb_as_tuple"


def adjoint_param(name: str, lane: int, lanes: int) -> str:
    """The backward kernel's parameter for ``name``'s adjoint in a lane (the names of
    :func:`revbench.transforms.adjoint.adjoint_params`)."""
    return ir.adjoint_name(name, None if lanes == 1 else lane)


def generate(typed: TypedFunction, rule: AdjointRule, direction: Direction, check: bool, lanes: int,
             inactive: frozenset[str], inverse_key: str, tuple_result: bool = False,
             through: str | None = None) -> Generated:
    """The module of the custom reverse sweep of ``typed`` (the forward program).

    ``tuple_result``: the adjoint as called always returns a tuple of the right length
    (Numba's stand-in checks that when typing); else the module checks at run time.

    ``through`` names the output of an external function (``out += g(inputs)``,
    :mod:`revbench.ad.external`), for the reverse sweep of its *inverse* (``out -= g``):
    the state is first restored by running the function forward (``INVERSE_SYMBOL`` is
    then that forward kernel), then the adjoint runs on ``-out_bar`` -- ``-J^T out_bar``
    is the inverse's contribution -- while ``out``'s own adjoint passes through unchanged.
    """
    func = typed.func
    params, types = func.params, typed.params
    floats = [p for p, t in zip(params, types) if t.dtype in DIFFERENTIABLE]
    active = [p for p in floats if p not in inactive]
    adj_params = [adjoint_param(p, k, lanes) for k in range(lanes) for p in active]
    line = func.firstlineno
    checks: list[CheckInfo] = []
    body = SourceWriter()
    emit = body.emit
    state = ", ".join(params) + ("," if len(params) == 1 else "")
    restore = f"{state} = {INVERSE_SYMBOL}({', '.join(params)}, _rb_gatol, _rb_grtol)"
    if through is not None:
        emit(restore)
    for k in range(lanes):
        adjoints = []
        for p in floats:
            t = typed.env[p]
            if p == through and p in active:  # (its own adjoint passes through unchanged)
                emit(f"_rb_negated = -{adjoint_param(p, k, lanes)}")
                adjoints.append("_rb_negated")
            elif p in active:
                adjoints.append(adjoint_param(p, k, lanes))
            else:  # read-only data without an adjoint here: a zero the user may write to
                z = f"_rb_zero_{p}"
                emit(f"{z} = _rb_np.zeros_like({p})" if t.is_array else
                     f"{z} = {0j if t.dtype == 'complex' else 0.0!r}")
                adjoints.append(z)
        call = f"{ADJOINT_SYMBOL}({', '.join((*params, *adjoints))})"
        emit(f"_rb_r = {call}" if tuple_result else f"_rb_r = {AS_TUPLE_SYMBOL}({call})")
        if check and not tuple_result:
            checks.append(CheckInfo("adjoint-count", func.name, line,
                                    f"{rule.label}\t{len(floats)}"))
            with body.block(f"if len(_rb_r) != {len(floats)}:"):
                emit(f"raise _RbCheckFailed(_RB_MODULE, {len(checks) - 1}, {len(floats)}, len(_rb_r))")
        for j, p in enumerate(floats):
            if p not in active or p == through:
                continue
            a, t = adjoint_param(p, k, lanes), typed.env[p]
            if t.is_array:
                if check:
                    checks.append(CheckInfo("adjoint-shape", p, line, rule.label))
                    with body.block(f"if _rb_np.shape(_rb_r[{j}]) != {a}.shape:"):
                        emit(f"raise _RbCheckFailed(_RB_MODULE, {len(checks) - 1}, 0, 0)")
                emit(f"{a}[...] = _rb_r[{j}]")
            else:
                emit(f"{a} = {'complex' if t.dtype == 'complex' else 'float'}(_rb_r[{j}])")
    if through is None:
        emit(restore)
    everything = (*params, *adj_params)
    emit(f"return ({', '.join(everything)}{',' if len(everything) == 1 else ''})")

    fname = f"{func.name}__{direction.name.replace('-', '_')}"
    sig = ", ".join(f"{p}: {t}" for p, t in zip(params, types))
    order = (f"its forward run ({inverse_key}), then its custom adjoint {rule.label} "
             f"({rule.fingerprint}) on -{through}'s adjoint" if through is not None else
             f"its custom adjoint {rule.label} ({rule.fingerprint}), then its inverse "
             f"({inverse_key})")
    comments = [
        f"# revbench {direction} code for {func.name} ({func.filename}:{func.firstlineno}): "
        f"{order}",
        f"# signature: ({sig}); checks {'on' if check else 'off'}; lanes {lanes}; "
        f"without adjoints: {', '.join(sorted(inactive)) or '-'}; codegen v{CODEGEN_VERSION}",
    ]
    return assemble(comments, fname, everything, body.lines, checks, line, check)
