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
from revbench.backends.loader import LOCK, load_module


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
            cache = bool(getattr(mod, "__rb_on_disk__", False)) and not simulated()
            fn = cuda.jit(cache=cache)(getattr(mod, name))
            mod.__rb_kernel__ = fn
        return fn
