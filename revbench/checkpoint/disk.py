"""The second storage level: a schedule's disk states, in memory-mapped files.

A strategy with a disk level (``TwoLevel``) keeps some states out of RAM: its compiled
schedule copies them to slots of a second store (``STORE``) and back (``LOAD``,
:mod:`revbench.checkpoint.actions`).  That store is one file per state variable in a
directory of its own, memory-mapped, so the compiled driver writes to it as to an array
and the operating system pages it to disk.

The files are allocated in full before the loop runs (``posix_fallocate``): a disk
without room refuses them then, with :class:`InsufficientDiskError`, instead of failing
half-way through a loop (a write to a memory-mapped page of a full disk kills the
process).  Each file is unlinked as soon as it is mapped (POSIX keeps its blocks while the
mapping lives): nothing is left on disk when the gradient is done, fails, or the process
is killed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from types import TracebackType

import numpy as np


class InsufficientDiskError(OSError, ValueError):
    """A strategy's disk states would not fit the free space (raised before the loop runs)."""


class DiskStore:
    """``n`` states like ``states`` on disk, for the length of a ``with`` block:
    ``arrays`` are the memory-mapped stores, one per state variable (``n`` slots each)."""

    def __init__(self, states: Sequence[np.ndarray], n: int, directory: str | None = None,
                 label: str = "the strategy"):
        self.states = list(states)
        self.n = int(n)
        self.directory = directory if directory is not None else tempfile.gettempdir()
        self.label = label
        self.path: str | None = None
        self.arrays: list[np.ndarray] = []
        #: the files, open while the store lives (unlinked once mapped: ``os.fstat`` them)
        self.fds: list[int] = []

    @property
    def nbytes(self) -> int:
        return self.n * sum(s.nbytes for s in self.states)

    def __enter__(self) -> DiskStore:
        if self.n == 0:
            self.arrays = [np.empty((0, *s.shape), s.dtype) for s in self.states]
            return self
        if not os.path.isdir(self.directory):
            raise InsufficientDiskError(f"{self.label} keeps states on disk in "
                                        f"{self.directory!r}, which is not a directory")
        free = shutil.disk_usage(self.directory).free
        if self.nbytes > free:
            raise InsufficientDiskError(
                f"{self.label} would keep {self.n} states of "
                f"{sum(s.nbytes for s in self.states):,} bytes on disk "
                f"({self.nbytes / 2**20:,.1f} MiB), more than the {free / 2**20:,.1f} MiB free in "
                f"{self.directory!r}: {_fewer_disk_states(self.label)}, or another directory "
                f"({self.label.split('(')[0]}(directory=...))")
        self.path = tempfile.mkdtemp(prefix="revbench-snapshots-", dir=self.directory)
        try:
            for k, s in enumerate(self.states):
                name = os.path.join(self.path, f"state{k}.bin")
                size = self.n * s.nbytes
                fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
                self.fds.append(fd)
                try:
                    os.posix_fallocate(fd, 0, size)
                except AttributeError:  # pragma: no cover - not on Linux
                    os.ftruncate(fd, size)
                # (a base-class view: Numba takes ndarrays, and it keeps the mapping alive)
                self.arrays.append(np.asarray(np.memmap(name, s.dtype, "r+",
                                                        shape=(self.n, *s.shape))))
                os.unlink(name)  # the mapping (and fd) keep the blocks; nothing is left behind
        except OSError as exc:
            self._remove()
            raise InsufficientDiskError(
                f"{self.label} could not allocate its {self.nbytes / 2**20:,.1f} MiB of disk "
                f"states in {self.directory!r}: {exc.strerror or exc}") from None
        os.rmdir(self.path)
        self.path = None
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._remove()

    def _remove(self) -> None:
        self.arrays = []
        for fd in self.fds:
            os.close(fd)
        self.fds = []
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            self.path = None


def mapped(n: int, like: np.ndarray, directory: str | None, label: str) -> np.ndarray:
    """``n`` states like ``like`` on disk, as one array whose mapping is all that keeps them
    (for a checkpointed loop's kernel, which calls it from compiled code): freed with it."""
    store = DiskStore([like], n, directory, label).__enter__()
    array = store.arrays[0]
    for fd in store.fds:  # (the file is unlinked: the mapping holds its blocks)
        os.close(fd)
    store.fds = []
    return array


def mapped_shaped(n: int, shape: tuple[int, ...], dtype: str, directory: str | None,
                  label: str) -> np.ndarray:
    """:func:`mapped` for states of ``shape`` and ``dtype``: what native code calls (it
    passes numbers and text, not an array object)."""
    return mapped(n, np.empty(shape, dtype), directory, label)


def _fewer_disk_states(label: str) -> str:
    """How a strategy keeps fewer states on disk, in its own knob's words."""
    name = label.split("(")[0]
    return {"TwoLevel": "choose a longer period (TwoLevel(period=...))",
            "Multistage": "choose fewer disk snapshots (Multistage(disk=...))"}.get(
                name, "keep fewer states on disk")
