"""Arrays in, arrays out on the GPU: where each kind of array lives, and results back as
the kind that came in.

One table, :data:`KINDS`, says for every kind of array a user may pass to
``device="cuda"`` how it reaches the kernel and how a result goes back:

========================  ===============================  ================================
kind                      in                               out
========================  ===============================  ================================
NumPy                     copied to the GPU                copied back: NumPy
Numba device array        used where it is                 a Numba device array
``__cuda_array_interface__``  used where it is (no copy)   the same library's array
(CuPy, PyTorch CUDA)
JAX array on a GPU        used where it is, via DLPack     a JAX array on its device
JAX array on the CPU      copied to the GPU, like NumPy    a JAX array on its device
========================  ===============================  ================================

JAX exports device memory only through DLPack (no CUDA array interface). NVIDIA's
``cuda.core`` (a dependency of numba-cuda) reads the DLPack capsule
(:class:`cuda.core.utils.StridedMemoryView`); its pointer, shape and strides become a CUDA
array interface that Numba wraps without a copy, kept alive by the JAX array.  Results go
back through JAX's own import of the CUDA array interface (``jnp.array``, a copy on the
GPU: JAX owns its buffers).

This module knows nothing of kernels; :mod:`revbench.ad.gpu` calls it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from revbench.backends import cuda_backend

#: DLPack's device types (``__dlpack_device__()[0]``)
DLPACK_CPU, DLPACK_CUDA = 1, 2


def kind_of(a: Any) -> str:
    """Which row of the table ``a`` belongs to: ``"numpy"``, ``"device"`` (Numba),
    ``"torch"``, ``"cupy"``, ``"jax"``, ``"jax-host"`` (a JAX array on the CPU), or ``""``
    (not an array this table knows)."""
    if isinstance(a, np.ndarray):
        return "numpy"
    if is_jax(a):
        return "jax" if a.__dlpack_device__()[0] == DLPACK_CUDA else "jax-host"
    cuda = cuda_backend.cuda_module()
    if cuda.devicearray.is_cuda_ndarray(a):  # the simulator's have no CUDA array interface
        return "device"
    if hasattr(a, "__cuda_array_interface__"):
        mod = type(a).__module__.split(".")[0]
        return mod if mod in ("torch", "cupy") else "device"
    return ""


def is_jax(a: Any) -> bool:
    """A JAX array (checked by its type's module: JAX is not imported here)."""
    return type(a).__module__.split(".")[0] in ("jax", "jaxlib") and hasattr(a, "__dlpack__")


def on_device(a: Any) -> bool:
    """Is ``a`` GPU memory that a kernel can read where it is?"""
    return kind_of(a) in ("device", "torch", "cupy", "jax")


def to_device(a: Any) -> Any:
    """``a`` as an array a kernel takes: GPU memory used where it is, host memory copied."""
    cuda = cuda_backend.cuda_module()
    kind = kind_of(a)
    if kind == "numpy":  # (not np.ascontiguousarray: it makes a 0-d array 1-d)
        return cuda.to_device(a if a.flags.c_contiguous else a.copy(order="C"))
    if kind == "jax-host":
        return cuda.to_device(np.array(a))  # a host copy JAX does not own
    if kind == "jax":
        return cuda.from_cuda_array_interface(dlpack_interface(a), owner=a)
    if kind == "device" and cuda.devicearray.is_cuda_ndarray(a):
        return a
    return cuda.as_cuda_array(a)  # zero-copy


def dlpack_interface(a: Any) -> dict:
    """The CUDA array interface (version 3) of a JAX array's memory, read from its DLPack
    capsule.  JAX computes asynchronously: wait for ``a`` first, so that the kernel reads
    its final values."""
    from cuda.core.utils import StridedMemoryView

    a.block_until_ready()
    view = StridedMemoryView.from_dlpack(a, stream_ptr=-1)
    item = np.dtype(view.dtype).itemsize
    strides = None if view.strides is None else tuple(s * item for s in view.strides)
    return {"shape": tuple(view.shape), "strides": strides, "typestr": np.dtype(view.dtype).str,
            "data": (view.ptr, True), "version": 3, "stream": None}


def device_span(a: Any) -> tuple[int, int] | None:
    """The device addresses ``[lo, hi)`` of an array used where it is (``None``: empty,
    or not GPU memory with an address: the simulator's arrays)."""
    if is_jax(a):
        if kind_of(a) != "jax":
            return None
        cai = dlpack_interface(a)
    elif hasattr(a, "__cuda_array_interface__"):
        cai = a.__cuda_array_interface__
    else:
        return None
    size = np.dtype(cai["typestr"]).itemsize * int(np.prod(cai["shape"]))
    lo = cai["data"][0]
    return (lo, lo + size) if size else None


def give_back(d: Any, kind: str, like: Any = None) -> Any:
    """A result ``d`` on the device as ``kind`` (from :func:`kind_of`); ``like``: an input
    of that kind, whose device a JAX result goes to."""
    if kind == "numpy":
        return d.copy_to_host()
    if kind == "torch":
        import torch

        return torch.as_tensor(d, device="cuda")
    if kind == "cupy":
        import cupy

        return cupy.asarray(d)
    if kind in ("jax", "jax-host"):
        import jax

        device = next(iter(like.devices()))
        if kind == "jax-host" or cuda_backend.simulated():
            return jax.device_put(d.copy_to_host(), device)
        with jax.default_device(device):
            return jax.numpy.array(d)  # JAX's import of the CUDA array interface: a copy
    return d
