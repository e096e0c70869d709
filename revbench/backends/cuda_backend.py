"""The CUDA backend: generated device functions and kernels, compiled by numba-cuda.

numba-cuda (the maintained CUDA target of Numba, ``pip install revbench[cuda]``) is
imported only here, the first time something runs with ``device="cuda"``.  Without a GPU,
``NUMBA_ENABLE_CUDASIM=1`` runs the same kernels in Numba's CUDA simulator (Python
threads): how the tests run everywhere.

Device functions are compiled into the kernel that calls them, so the disk cache is the
kernel's (``cache=True``, beside its generated file in revbench's cache folder).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from revbench.backends.codegen import Generated
from revbench.backends.loader import LOCK, cache_writable, load_module


def cuda_module() -> Any:
    """``numba.cuda``, or a clear error saying how to get it."""
    import numpy as np

    if not hasattr(np, "row_stack"):  # numba-cuda 0.30 still reads it; NumPy 2.5 removed it
        np.row_stack = np.vstack
    try:
        from numba import cuda
    except ImportError as exc:  # pragma: no cover - the test extra installs it
        raise RuntimeError("device='cuda' needs numba-cuda: pip install 'revbench[cuda]'") from exc
    return cuda


def simulated() -> bool:
    """Whether kernels run in Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``)."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def require_gpu() -> None:
    """Raise a clear error when there is neither a usable GPU nor the simulator."""
    cuda = cuda_module()
    if simulated():
        return
    try:
        ok = cuda.is_available()
    except Exception:  # a broken driver says so in many ways
        ok = False
    if not ok:
        raise RuntimeError(
            "device='cuda': no usable CUDA GPU (numba.cuda.is_available() is false; "
            "cuda.detect() says why). Without a GPU, set NUMBA_ENABLE_CUDASIM=1 to run the "
            "same kernels in Numba's CUDA simulator (slow, for testing)")


def compile_device(gen: Generated, injected: dict[str, object]) -> Callable:
    """A generated module's function as a CUDA device function."""
    cuda = cuda_module()
    mod = load_module(gen.key, gen.source, "cu", injected)
    with LOCK:
        fn = getattr(mod, "__rb_device__", None)
        if fn is None:
            fn = cuda.jit(device=True)(getattr(mod, gen.function_name))
            mod.__rb_device__ = fn
        return fn


def compile_kernel(key: str, source: str, name: str, injected: dict[str, object]) -> Callable:
    """A generated kernel (a driver over items), cached on disk with the device functions
    it calls compiled in."""
    cuda = cuda_module()
    mod = load_module(key, source, "cu", injected)
    with LOCK:
        fn = getattr(mod, "__rb_kernel__", None)
        if fn is None:
            fn = cuda.jit(getattr(mod, name))
            if getattr(mod, "__rb_on_disk__", False) and not simulated():
                try:
                    fn._cache = _kernel_cache_class()(fn.py_func)  # what cache=True sets
                except RuntimeError:  # no folder to cache in: compiled in each process
                    pass
            mod.__rb_kernel__ = fn
        return fn


_KERNEL_CACHE: list[type] = []


def _kernel_cache_class() -> type:
    """numba-cuda's kernel cache, keyed on the generated file's *text*.

    numba-cuda (0.30) takes a source file's modification time and size as its stamp: an
    index saved under another stamp is ignored.  revbench touches a generated file each
    time it uses it (its last use decides what ``revbench.cache.prune`` removes), so every
    new process found the index stale and compiled the kernel again (measured on an H200:
    9.3 s for a BA Jacobian's first call from the "cache", 9.7 s cold).  The file's name
    is already the digest of its text; the stamp here is a digest of the text too, as
    Numba's own CPU cache does, and the machine code lives beside the file, in revbench's
    cache folder, like the CPU kernels'."""
    if _KERNEL_CACHE:
        return _KERNEL_CACHE[0]
    import hashlib

    from numba.cuda.core.caching import _CacheLocator
    from numba.cuda.dispatcher import CUDACache, CUDACacheImpl

    class BesideSource(_CacheLocator):
        def __init__(self, py_func, py_file):
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            self._cache_path = os.path.join(os.path.dirname(os.path.abspath(py_file)),
                                            "__pycache__")

        def ensure_cache_path(self) -> None:
            if cache_writable():
                os.makedirs(self._cache_path, exist_ok=True)
            elif not os.path.isdir(self._cache_path):
                raise OSError(f"no cached machine code in {self._cache_path}")

        def get_cache_path(self) -> str:
            return self._cache_path

        def get_source_stamp(self) -> str:
            with open(self._py_file, "rb") as f:
                return hashlib.sha256(f.read()).hexdigest()

        def get_disambiguator(self) -> str:
            return str(self._lineno)

        @classmethod
        def from_function(cls, py_func, py_file):
            if not os.path.exists(py_file):
                return None
            self = cls(py_func, py_file)
            try:
                self.ensure_cache_path()
            except OSError:  # a read-only cache folder without machine code
                return None
            return self

    class KernelCacheImpl(CUDACacheImpl):
        _locator_classes = [BesideSource]

    class KernelCache(CUDACache):
        _impl_class = KernelCacheImpl

    _KERNEL_CACHE.append(KernelCache)
    return KernelCache
