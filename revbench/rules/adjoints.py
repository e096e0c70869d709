"""The custom-adjoint rule table: reverse sweeps a user writes for a whole function.

revbench derives every reverse sweep from the program, by reverse computing.  Sometimes
the user knows a better one: an iterative solver whose adjoint is one more solve (the
implicit-function theorem) instead of running every iteration backwards, or a call into
a library that has its own vector-Jacobian product.  :func:`custom_adjoint` registers
such an adjoint for a reversible function; from then on the function's ``backward``
program -- the one every consumer calls: ``grad``, ``jacobian``, ``vjp``, ``TimeLoop``,
the JAX and PyTorch exports, callers' own reverse sweeps -- is "the user's adjoint on
the values at exit, then the function's inverse" (:mod:`revbench.backends.custom_sweep`).

Entries are keyed by the function's module and name, so a notebook re-running the
function's cell, or the registering cell, replaces the entry instead of adding one;
functions of the same name in other modules are not affected.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from revbench.rules import functions as fn_rules


@dataclass(frozen=True)
class AdjointRule:
    """A user adjoint ``fn`` for the reversible function ``function`` (of ``module``).

    ``fn(*values, *adjoints)`` gets every argument's value at the function's exit, then
    the adjoint (the cotangent at exit) of each float or complex argument, in order; it
    returns the adjoints at entry of those same arguments (a tuple, or one value when
    there is one).
    """

    module: str
    function: str
    fn: Callable = field(compare=False)
    fingerprint: str = ""

    @property
    def label(self) -> str:
        return getattr(self.fn, "__name__", "the custom adjoint")


#: (module, function name) -> its rule
ADJOINTS: dict[tuple[str, str], AdjointRule] = {}


def lookup(module: str, function: str) -> AdjointRule | None:
    return ADJOINTS.get((module, function))


def custom_adjoint(f: Any, adjoint: Callable | None = None, *, _depth: int = 1) -> Any:
    """Give the reversible function ``f`` an adjoint of your own.

    ``adjoint(*values, *adjoints)`` receives the value of every argument of ``f`` at
    its *exit* (after ``f`` ran), then, for each float or complex argument in order, its
    adjoint there (the cotangent of that output).  It returns the adjoints of those
    arguments at ``f``'s *entry*, in the same order: a tuple, or the value itself when
    ``f`` has a single float argument.  It must not change the values; it may update the
    adjoint arrays in place and return them.  Under the Numba backend it must compile
    with Numba (``np.linalg.solve`` does); it is called once per seed when a Jacobian
    carries several.

    The reverse sweep of ``f`` then runs that adjoint and then ``f``'s inverse (which
    restores the values at entry): ``grad``, ``jacobian``, ``vjp``, ``TimeLoop``,
    ``to_jax`` / ``to_torch`` and the reverse sweeps of functions calling ``f`` all use
    it, and ``check_grad`` compares it with finite differences.  Registering again
    replaces the adjoint; :func:`remove_adjoint` removes it.  ``f`` may also be the
    name of a reversible function of the calling module.  Used as a decorator,
    ``@custom_adjoint(f)``, it returns the adjoint unchanged.
    """
    module, name = _target(f, _depth + 1)
    if adjoint is None:
        return _Decorator(module, name)
    return _register(module, name, adjoint)


def remove_adjoint(f: Any) -> None:
    """Remove ``f``'s custom adjoint (its reverse sweep is derived from its code again)."""
    module, name = _target(f, 2)
    if ADJOINTS.pop((module, name), None) is not None:
        fn_rules.REGISTRY_VERSION[0] += 1


class _Decorator:
    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    def __call__(self, adjoint: Callable) -> Callable:
        _register(self.module, self.name, adjoint)
        return adjoint


def _register(module: str, name: str, adjoint: Callable) -> Callable:
    if not callable(adjoint):
        raise TypeError(f"the custom adjoint of {name} must be a function, got {adjoint!r}")
    if hasattr(adjoint, "_program"):
        raise TypeError(f"the custom adjoint of {name} must be a plain function (def) that "
                        f"returns the adjoints, not the reversible function {adjoint!r}")
    try:
        inspect.signature(adjoint)
    except (TypeError, ValueError):
        raise TypeError(f"the custom adjoint of {name} must be a plain Python function "
                        f"(def), got {adjoint!r}") from None
    fp = fn_rules.fingerprint(adjoint)
    ADJOINTS[(module, name)] = AdjointRule(module, name, adjoint, fp)
    # the version is part of every compile key: callers compiled before see the change
    fn_rules.REGISTRY_VERSION[0] += 1
    return adjoint


def _target(f: Any, depth: int) -> tuple[str, str]:
    """(module, name) of a reversible function, or of a name in the caller's module.
    (A reversible function is recognised by its program, not by importing its class: the
    rule tables sit below the function objects.)"""
    program = getattr(f, "_program", None)
    if program is not None and hasattr(program, "module"):
        if f.is_inverse:
            raise ValueError(f"give the adjoint of {f.name} itself, not of its inverse "
                             f"{f.__name__}: the reverse sweep of ~{f.name} is derived from "
                             f"{f.name}'s code")
        return program.module, f.name
    if isinstance(f, str) and f.isidentifier():
        caller = sys._getframe(depth).f_globals
        return caller.get("__name__", "__main__"), f
    raise TypeError(f"custom_adjoint needs a reversible function (or its name), got {f!r}")
