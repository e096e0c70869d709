"""Numba's on-disk cache of revbench's compiled code, made safe to trust.

Numba's own ``cache=True`` looks for a writable folder (and silently caches
somewhere else, or not at all, when there is none), and lets a damaged index or
data file fail every later call with an ``UnpicklingError`` or ``EOFError`` that does
not mention the cache.  revbench's generated modules live in its own cache folder
(:mod:`revbench.backends.loader`), so their machine code goes beside them, in
``__pycache__`` there, through :class:`KernelCache`, which

* reads a folder it cannot write (a pre-warmed, read-only classroom cache),
* treats a file it cannot read as missing: discards it, compiles again, warns once,
* keeps what it cannot save (a full disk) in memory, warning once.

Imported by the Numba backend only (it imports Numba).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from numba.core.caching import (
    CompileResultCacheImpl,
    FunctionCache,
    _CacheLocator,
    _SourceFileBackedLocatorMixin,
)
from numba.core.registry import CPUDispatcher

from revbench.backends import numba_linking
from revbench.backends.loader import cache_writable, warn_once


class _BesideSource(_SourceFileBackedLocatorMixin, _CacheLocator):
    """Machine code in ``__pycache__`` beside the generated file, whether or not this
    process may write there."""

    def __init__(self, py_func, py_file):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = os.path.join(os.path.dirname(os.path.abspath(py_file)), "__pycache__")

    def get_cache_path(self) -> str:
        return self._cache_path

    def ensure_cache_path(self) -> None:
        if cache_writable():
            os.makedirs(self._cache_path, exist_ok=True)
        elif not os.path.isdir(self._cache_path):
            raise OSError(f"no cached machine code in {self._cache_path}")

    @classmethod
    def from_function(cls, py_func, py_file):
        if not os.path.exists(py_file):
            return None
        return cls(py_func, py_file)


class _KernelCacheImpl(CompileResultCacheImpl):
    """A compile result saved with the callee kernels it calls through their slots
    (:mod:`revbench.backends.numba_linking`), which loading it loads first."""

    _locator_classes = [_BesideSource]

    def reduce(self, cres):
        return super().reduce(cres), numba_linking.callees_of(cres.library)

    def rebuild(self, target_context, payload):
        reduced, callees = payload
        numba_linking.prepare(callees)
        cres = super().rebuild(target_context, reduced)
        numba_linking.load_callees(callees)
        return cres


#: the module name Numba records for a function whose module is not in ``sys.modules``
DYNAMIC = "<dynamic>"


def _refers_to_dynamic(data: Any) -> bool:
    """Whether a compile result refers to Numba's "<dynamic>" module: its own, or the
    environment of a callee linked into it (which unpickling would try to import)."""
    if getattr(getattr(data, "fndesc", None), "modname", "") == DYNAMIC:
        return True
    try:
        envs = [data.environment, *data._find_referenced_environments()]
    except Exception:  # (a result without a library: nothing linked in)
        return False
    return any(getattr(env, "globals", {}).get("__name__") == DYNAMIC
               for env in envs if env is not None)


class KernelCache(FunctionCache):
    """Numba's function cache for one generated module's function, failing soft."""

    _impl_class = _KernelCacheImpl

    def load_overload(self, sig, target_context):
        try:
            return super().load_overload(sig, target_context)
        except numba_linking.CalleeMissing:
            return None  # (compiled again, with its callees)
        except Exception as exc:
            if not (isinstance(exc, ModuleNotFoundError) and exc.name == DYNAMIC):
                # a damaged index or data file: unpickling fails
                warn_once("numba-load", f"revbench: Numba's cached machine code for "
                          f"{self._name} could not be read ({type(exc).__name__}: {exc}); it "
                          "is discarded and compiled again")
            # (an entry that refers to "<dynamic>", saved before save_overload refused
            # them, is discarded quietly: it is compiled again, nothing is lost)
            self._discard()
            return None

    def save_overload(self, sig, data) -> None:
        if not cache_writable():
            return
        if _refers_to_dynamic(data):
            # compiled while its generated module (or a callee's) was not in sys.modules
            # (released, or the interpreter shutting down): Numba then records the module
            # as "<dynamic>", and no process could load the entry
            return
        try:
            super().save_overload(sig, data)
        except Exception as exc:  # a full disk, a folder gone read-only
            warn_once("numba-save", f"revbench: Numba's machine code for {self._name} could "
                      f"not be saved in the compile cache ({type(exc).__name__}: {exc}); it is "
                      "kept in memory for this process")

    def _discard(self) -> None:
        """Remove this function's index, so the next save starts afresh (no-op where
        the folder is read-only)."""
        try:
            os.unlink(self._cache_file._index_path)
        except OSError:
            pass


class KernelDispatcher(CPUDispatcher):
    """Numba's dispatcher of a generated kernel, which publishes each compiled version for
    other kernels to call (:func:`revbench.backends.numba_linking.publish`)."""

    def add_overload(self, cres):
        super().add_overload(cres)
        numba_linking.publish(self, cres)


def jit(fn: Callable, cache: bool = True, **options) -> Callable:
    """``numba.njit(**options)(fn)``, cached on disk through :class:`KernelCache` when
    ``cache`` is set and ``fn`` comes from a generated file written to the cache (a module
    compiled in memory -- the cache full or read-only -- is not cached)."""
    dispatcher = KernelDispatcher(py_func=fn, locals={},
                                  targetoptions={"nopython": True, **options})
    if cache and getattr(fn, "__globals__", {}).get("__rb_on_disk__", False):
        try:
            dispatcher._cache = KernelCache(fn)
        except Exception as exc:  # no usable locator: compile without caching
            warn_once("numba-locate", f"revbench: compiled code cannot be cached ({exc})")
    return dispatcher


def is_cached(dispatcher, signature: tuple) -> bool:
    """Whether the disk cache holds ``dispatcher``'s machine code for ``signature`` (Numba
    argument types): a call would load it in milliseconds rather than compile it."""
    cache = getattr(dispatcher, "_cache", None)
    if not isinstance(cache, KernelCache):
        return False
    try:
        key = cache._index_key(signature, dispatcher.targetctx.codegen())
        return key in cache._cache_file._load_index()
    except Exception:  # unreadable: the call's own load decides (and warns)
        return False
