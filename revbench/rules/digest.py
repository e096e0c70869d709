"""Digests of user code for the compile cache: everything Numba bakes into machine code.

A function a user hands to revbench (:func:`revbench.register`,
:func:`revbench.custom_adjoint`, :func:`revbench.external`) is compiled *into* the
kernels that call it, and Numba freezes what it reads -- module-level numbers, tuples
and arrays, the ``@njit`` helpers it calls and what *they* read -- as constants.  The
cache key of those kernels must therefore cover all of it, at any depth, or a later
process runs yesterday's constants.  :func:`fingerprint` walks the code and the values
it reaches; a value it cannot describe stably (an arbitrary object) makes the digest
*volatile*: unique to this process, so that code is never reused from the cache -- with
one warning saying so.
"""

from __future__ import annotations

import enum
import hashlib
import inspect
import os
import types
import warnings
from collections.abc import Callable, Iterable

#: digests of functions that read something the cache cannot key on end with this and a
#: token of the process: never found again by a later process
VOLATILE = "~"
_PROCESS_TOKEN = os.urandom(6).hex()
_warned: set[str] = set()


class UncachedWarning(UserWarning):
    """A user function reads a value revbench cannot key its cache on."""


def fingerprint(fn: Callable, partials: Iterable[Callable] = ()) -> str:
    """A stable digest of ``fn`` and its ``partials`` with everything they read."""
    walk = _Walk()
    for f in (fn, *partials):
        walk.value(f, getattr(f, "__name__", "function"))
    digest = walk.hash.hexdigest()[:16]
    if not walk.volatile:
        return digest
    name = getattr(fn, "__qualname__", repr(fn))
    if name not in _warned:
        _warned.add(name)
        warnings.warn(
            f"revbench: {name} reads {walk.volatile[0]}, whose value the compile cache "
            "cannot key on: code calling it is compiled afresh in each process, not loaded "
            "from the cache (give it numbers, tuples or arrays, or functions of them)",
            UncachedWarning, stacklevel=3)
    return f"{digest}{VOLATILE}{_PROCESS_TOKEN}"


class _Walk:
    """One digest over functions and values, following references (each object once)."""

    def __init__(self) -> None:
        self.hash = hashlib.sha256()
        self.seen: set[int] = set()
        self.volatile: list[str] = []

    def put(self, *parts: object) -> None:
        for p in parts:
            self.hash.update(str(p).encode())
            self.hash.update(b"\0")

    def value(self, v: object, where: str) -> None:
        import numpy as np

        if v is None or isinstance(v, (bool, int, float, complex, str, bytes, np.generic,
                                       np.dtype, enum.Enum)):
            self.put(type(v).__name__, repr(v))
        elif isinstance(v, np.ndarray):
            self.put("ndarray", v.dtype, v.shape, hashlib.sha256(
                np.ascontiguousarray(v).tobytes()).hexdigest())
        elif isinstance(v, (tuple, list, frozenset)):
            if id(v) in self.seen:
                self.put("again")
                return
            self.seen.add(id(v))
            self.put(type(v).__name__, len(v))
            items = sorted(v, key=repr) if isinstance(v, frozenset) else v
            for k, item in enumerate(items):
                self.value(item, f"{where}[{k}]")
        elif hasattr(type(v), "__revbench_digest__"):  # a reversible function: its program
            self.put("revbench", v.__revbench_digest__())
        elif isinstance(v, types.ModuleType):
            self.put("module", v.__name__)
        elif hasattr(v, "py_func") and hasattr(v, "targetoptions"):  # a Numba dispatcher
            self.put("dispatcher", sorted((k, repr(o)) for k, o in v.targetoptions.items()
                                          if k != "cache"))
            self.value(v.py_func, where)
        elif isinstance(v, types.FunctionType):
            self.function(v)
        elif isinstance(v, (types.BuiltinFunctionType, np.ufunc, type)):
            # library code (math.sin, np.exp, np.float64): named by where it lives
            self.put("library", getattr(v, "__module__", None), getattr(v, "__qualname__",
                                                                          getattr(v, "__name__", v)))
        else:
            self.put("opaque", type(v).__qualname__)
            self.volatile.append(f"`{where}` (a {type(v).__name__})")

    def function(self, f: types.FunctionType) -> None:
        if id(f) in self.seen:
            self.put("again", f.__qualname__)
            return
        self.seen.add(id(f))
        self.put("function", f.__module__, f.__qualname__)
        try:
            self.put(inspect.getsource(f))
        except (OSError, TypeError):
            pass
        self.code(f.__code__)
        for k, d in enumerate(f.__defaults__ or ()):
            self.value(d, f"{f.__qualname__} default {k}")
        for name, cell in zip(f.__code__.co_freevars, f.__closure__ or ()):
            try:
                contents = cell.cell_contents
            except ValueError:  # not yet bound
                continue
            self.put("free", name)
            self.value(contents, name)
        g = f.__globals__
        for name in sorted(_global_names(f.__code__)):
            if name in g:
                self.put("global", name)
                self.value(g[name], name)

    def code(self, code: types.CodeType) -> None:
        self.put(code.co_code.hex(), code.co_names, code.co_varnames)
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                self.code(c)
            elif isinstance(c, frozenset):  # (`x in {"a", "b"}`: its order varies by process)
                self.put("frozenset", sorted(map(repr, c)))
            else:
                self.put(type(c).__name__, repr(c))


def _global_names(code: types.CodeType) -> set[str]:
    """Names ``code`` (and functions nested in it) may read as globals."""
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _global_names(c)
    return names
