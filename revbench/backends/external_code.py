"""The forward and inverse code of an external function: ``out += g(*inputs)``.

An external function (:mod:`revbench.ad.external`) is a plain function ``g`` -- a call into
NumPy or a library, written by the user, compiled by Numba -- made reversible the one
way that needs nothing from ``g``: its value is *added* into an output, so running it
backwards *subtracts* it again.  This module generates those two kernels, with the
calling convention of every generated kernel (the arguments, then ``atol, rtol``; all
returned), so reversible code calls them like any reversible function.  With checks on,
``g``'s value must have ``out``'s shape and be finite (an infinite or nan value cannot be
subtracted again).  The reverse sweeps are those of a custom adjoint
(:mod:`revbench.backends.custom_sweep`).
"""

from __future__ import annotations

from revbench.backends.codegen import CODEGEN_VERSION, Generated, assemble
from revbench.backends.runtime import CheckInfo
from revbench.backends.source import SourceWriter
from revbench.lang.types import TypedFunction
from revbench.transforms.pipeline import FORWARD, Direction

#: what generated code calls: the user's function
EXTERNAL_SYMBOL = "_rb_external"


def generate(typed: TypedFunction, direction: Direction, check: bool, fingerprint: str) -> Generated:
    """The ``forward`` (``out += g(...)``) or ``inverse`` (``out -= g(...)``) module."""
    func = typed.func
    out, *inputs = func.params
    t = typed.env[out]
    op = "+" if direction == FORWARD else "-"
    line = func.firstlineno
    checks: list[CheckInfo] = []
    body = SourceWriter()
    body.emit(f"_rb_v = {EXTERNAL_SYMBOL}({', '.join(inputs)})")
    if check:
        checks.append(CheckInfo("external-shape", out, line, func.name))
        shape = f"{out}.shape" if t.is_array else "()"
        with body.block(f"if _rb_np.shape(_rb_v) != {shape}:"):
            body.emit("raise _RbCheckFailed(_RB_MODULE, 0, 0, 0)")
        checks.append(CheckInfo("external-nonfinite", out, line, func.name))
        finite = ("_rb_np.all(_rb_np.isfinite(_rb_v))" if t.is_array else
                  "abs(_rb_v) < _rb_math.inf")
        with body.block(f"if not ({finite}):"):
            body.emit("raise _RbCheckFailed(_RB_MODULE, 1, 0, 0)")
    value = "_rb_v"
    if t.dtype == "float":  # (always: a type error, not a runtime check to switch off)
        with body.block("if _rb_np.iscomplexobj(_rb_v):"):
            body.emit(f"raise TypeError({_complex_message(func.name, out)!r})")
        value = "_rb_v.real"  # (a no-op on real values; it keeps Numba's typing real)
    if t.is_array:
        ufunc = "add" if op == "+" else "subtract"
        body.emit(f"_rb_np.{ufunc}({out}, {value}, {out})")  # in place (Numba: no out[...] +=)
    else:
        cast = "complex" if t.dtype == "complex" else "float"
        body.emit(f"{out} = {out} {op} {cast}({value})")
    params = func.params
    body.emit(f"return ({', '.join(params)}{',' if len(params) == 1 else ''})")

    fname = f"{func.name}__{direction}"
    sig = ", ".join(f"{p}: {t}" for p, t in zip(params, typed.params))
    comments = [
        f"# revbench {direction} code for the external function {func.name} "
        f"({func.filename}:{func.firstlineno}, {fingerprint}): {out} {op}= "
        f"{func.name}({', '.join(inputs)})",
        f"# signature: ({sig}); checks {'on' if check else 'off'}; codegen v{CODEGEN_VERSION}",
    ]
    return assemble(comments, fname, params, body.lines, checks, line, check)


def _complex_message(name: str, out: str) -> str:
    return (f"the external function {name} returned complex values, but `{out}` is real: "
            f"adding them into it would drop their imaginary parts (pass a complex `{out}`, "
            "or return real values)")
