"""The custom-adjoint rule table: reverse sweeps a user writes for a whole function.

revbench derives every reverse sweep from the program, by reverse computing.  Sometimes
the user knows a better one: an iterative solver whose adjoint is one more solve (the
implicit-function theorem) instead of running every iteration backwards, or a call into
a library that has its own vector-Jacobian product.  :func:`revbench.custom_adjoint`
(:mod:`revbench.ad.custom`) registers such an adjoint for a reversible function here
(:func:`register`); from then on the function's ``backward`` program -- the one every
consumer calls: ``grad``, ``jacobian``, ``vjp``, ``TimeLoop``, the JAX and PyTorch
exports, callers' own reverse sweeps -- is "the user's adjoint on the values at exit,
then the function's inverse" (:mod:`revbench.backends.custom_sweep`).

Entries are keyed by the function's module and name, so a notebook re-running the
function's cell, or the registering cell, replaces the entry instead of adding one;
functions of the same name in other modules are not affected.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

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


def register(module: str, name: str, adjoint: Callable) -> Callable:
    """Enter ``adjoint`` as the custom adjoint of ``module``'s reversible function ``name``."""
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


def unregister(module: str, name: str) -> None:
    """Remove the custom adjoint of ``module``'s function ``name`` (if any)."""
    if ADJOINTS.pop((module, name), None) is not None:
        fn_rules.REGISTRY_VERSION[0] += 1
