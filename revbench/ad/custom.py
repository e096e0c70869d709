"""``custom_adjoint``: a reverse sweep of your own for a reversible function.

The rule table it fills (and what a custom adjoint is) lives in
:mod:`revbench.rules.adjoints`, below the compiler that reads it; this is the user's face
of it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from revbench.rules.adjoints import register, unregister

__all__ = ["custom_adjoint", "remove_adjoint"]


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
    return register(module, name, adjoint)


def remove_adjoint(f: Any) -> None:
    """Remove ``f``'s custom adjoint (its reverse sweep is derived from its code again)."""
    unregister(*_target(f, 2))


class _Decorator:
    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    def __call__(self, adjoint: Callable) -> Callable:
        register(self.module, self.name, adjoint)
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
