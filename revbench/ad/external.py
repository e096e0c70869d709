"""External functions: a plain (Numba-compilable) function made a reversible one.

Reversible code cannot call ``np.linalg.solve``, a routine of your own written with
loops and temporaries, or a library: their intermediate values are not revbench's to
uncompute.  :func:`external` wraps such a function ``g(*inputs)`` as the reversible
function ``g(out, *inputs)`` that *adds* ``g``'s value into ``out`` -- the one way of
using a value that is undone without knowing how it was computed: its inverse subtracts
it again.  Its derivative is yours to give, as a custom adjoint
(:mod:`revbench.rules.adjoints`): revbench never looks inside ``g``.

From there on the wrapped function is like any other: reversible code calls it
(``solve(x, A, b)``), ``grad``, ``jacobian``, ``vjp``, ``TimeLoop`` and the JAX and
PyTorch exports differentiate through it, and the debugger shows each call as one step.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from revbench.backends import external_code
from revbench.compiler import Program
from revbench.function import ReversibleFunction, validate_options
from revbench.lang import ir
from revbench.lang.errors import ReversibilityTypeError
from revbench.lang.types import VarType, infer
from revbench.rules import adjoints as adjoint_rules
from revbench.rules import functions as fn_rules
from revbench.transforms.pipeline import BACKWARD_INVERSE, Direction

#: the name of the output parameter a wrapped function gets in front of its own
OUT = "out"


@dataclass
class ExternalProgram(Program):
    """The program of an external function: generated kernels instead of derived ones."""

    opaque = True
    fn: Callable | None = None
    fingerprint: str = ""

    def written_params(self) -> frozenset[str]:
        return frozenset((OUT,))

    def has_effects(self, mirrored: bool = False) -> bool:
        return False

    def generate(self, direction: Direction, backend: str, check: bool,
                 signature: tuple[VarType, ...], compile_callees: bool = True, lanes: int = 1,
                 inactive: frozenset[str] = frozenset(), deps: list | None = None,
                 shapes: tuple | None = None):
        name = self.ir.name
        if backend == "cuda":
            self._refuse_on_gpu(None)
        t = signature[0]
        if t.dtype not in ("float", "complex"):
            raise ReversibilityTypeError(
                f"the output `{OUT}` of the external function {name} must be a float (or "
                f"complex) scalar or array, into which {name}'s value is added; got {t}",
                variable=OUT, function=name, filename=self.ir.filename,
                lineno=self.ir.firstlineno, stage="types")
        if direction.second_order:
            raise ReversibilityTypeError(
                f"{name} is an external function, whose adjoint gives first derivatives only: "
                "second derivatives (hvp, hessian) cannot differentiate it again",
                function=name, filename=self.ir.filename, lineno=self.ir.firstlineno,
                stage="types")
        if direction.is_run:
            typed = infer(self.ir, signature)
            gen = external_code.generate(typed, direction, check, self.fingerprint)
            if backend == "numba":
                from revbench.backends.numba_backend import external_callable

                impl = external_callable(self.fn, name, self.fingerprint)
            else:
                impl = self.fn
            return gen, {external_code.EXTERNAL_SYMBOL: impl}
        rule = self.custom_adjoint()
        if rule is None:
            raise ReversibilityTypeError(
                f"the external function {name} has no adjoint, so nothing can be "
                f"differentiated through it: give one with revbench.external({name}, "
                f"adjoint=...) or revbench.custom_adjoint({name}, ...)  (see docs/interop.md)",
                function=name, filename=self.ir.filename, lineno=self.ir.firstlineno,
                stage="types")
        return self._generate_custom(rule, backend, check, signature, lanes, inactive,
                                     compile_callees, deps, direction,
                                     through=OUT if direction == BACKWARD_INVERSE else None)


def external(fn: Callable | None = None, *, adjoint: Callable | None = None,
             check: bool = True, backend: str = "numba") -> Any:
    """Wrap a plain function as the reversible function ``fn(out, *inputs)``:
    ``out += fn(*inputs)`` (its inverse: ``out -= fn(*inputs)``).

    ``fn`` takes its inputs (arrays, floats, ints; it must not change them) and returns
    a value of ``out``'s shape: a float for a float ``out``, an array for an array.  Under
    the Numba backend it must compile with Numba; ``backend="python"`` calls any Python.
    ``adjoint`` is its custom adjoint (:func:`revbench.custom_adjoint`, which may also
    give or replace it later): ``adjoint(out, *inputs, out_bar, *input_bars)`` -- the
    values at exit, then the adjoints of the float arguments -- returns
    ``(out_bar, *input_bars)`` with each input's ``J^T out_bar`` added.  With checks on,
    ``fn``'s value must have ``out``'s shape and be finite.  Usable as a decorator,
    ``@external(adjoint=...)``.
    """
    validate_options(check, backend, None, None)
    if fn is None:
        return lambda f: external(f, adjoint=adjoint, check=check, backend=backend)
    if isinstance(fn, ReversibleFunction):
        raise TypeError(f"{fn.__name__} is a reversible function already; external wraps a "
                        "plain function")
    name = getattr(fn, "__name__", "")
    if not callable(fn) or not hasattr(fn, "__code__") or not name.isidentifier():
        raise TypeError(f"external needs a plain Python function (def), got {fn!r}")
    params = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) or p.default is not p.empty:
            raise TypeError(f"external({name}): its parameters must be plain positional ones "
                            f"without defaults; `{p.name}` is not")
        params.append(p.name)
    if OUT in params:
        raise TypeError(f"external({name}): a parameter is named `{OUT}`, the name of the "
                        "output the wrapped function adds into; rename it")
    py = getattr(fn, "py_func", fn)  # a Numba dispatcher: its Python function says the rest
    try:
        lines, first = inspect.getsourcelines(py)
    except (OSError, TypeError):
        lines, first = [], py.__code__.co_firstlineno
    func = ir.Function(name, (OUT, *params), (), py.__code__.co_filename, first, tuple(lines))
    prog = ExternalProgram(func, check=check, backend=backend, namespace=py.__globals__,
                           fn=fn, fingerprint=fn_rules.fingerprint(fn))
    view = ReversibleFunction(prog)
    view.__doc__ = fn.__doc__
    view.__module__ = fn.__module__
    view.__wrapped__ = fn
    if adjoint is not None:
        adjoint_rules.register(prog.module, view.name, adjoint)
    return view
