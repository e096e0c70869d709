"""Peak memory of a call, as the operating system sees it.

``tracemalloc`` sees only allocations made through Python's allocator; the
arrays Numba's compiled code allocates (and anything a C library mallocs) are
invisible to it.  The resident set size is not: on Linux, writing ``5`` to
``/proc/self/clear_refs`` resets the process's high-water mark ``VmHWM`` to its
current resident size, so ``VmHWM`` read after the call, minus the resident size
before it, is the most memory the call added at any moment -- Numba's
allocations, NumPy's and the driver's included.

Memory freed by an earlier call must not be reused unseen by the next one, or
back-to-back measurements in one process would read zero.  glibc's allocator
would do exactly that: after a large block is freed it raises its ``mmap``
threshold, and later arrays come from heap pages that are already resident.  So,
with glibc, the threshold is pinned (``mallopt``: blocks of 64 kB and more are
``mmap``-ed, and given back when freed) and freed heap memory is returned to the
system (``malloc_trim``) before each measurement.  What remains below a page or
two (small allocations served from the heap) is noise.  Where ``clear_refs`` is
not available (not Linux), :func:`peak_during` falls back to ``ru_maxrss``,
which only reports growth beyond the process's previous peak.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_CLEAR_REFS = "/proc/self/clear_refs"
_STATUS = "/proc/self/status"
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
_MMAP_THRESHOLD = 64 * 1024
_libc: Any = None


def _glibc():
    """glibc, with its mmap threshold pinned (see the module's docstring); None elsewhere."""
    global _libc
    if _libc is None:
        _libc = False
        try:
            import ctypes

            libc = ctypes.CDLL("libc.so.6")
            if libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD) and \
                    libc.mallopt(_M_TRIM_THRESHOLD, 2 * _MMAP_THRESHOLD):
                _libc = libc
        except (OSError, AttributeError):
            pass
    return _libc or None


def _status() -> dict[str, int]:
    out = {}
    with open(_STATUS) as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":")
                out[key] = int(value.split()[0]) * 1024
    return out


def can_reset_peak() -> bool:
    """Whether this system lets a process reset its peak resident size (Linux)."""
    try:
        with open(_CLEAR_REFS, "w") as f:
            f.write("5")
        _status()
        return True
    except OSError:
        return False


def peak_during(fn: Callable[[], Any]) -> tuple[Any, int | None]:
    """``(fn(), bytes)``: run ``fn`` and return the most memory it added at any moment
    above the resident size it started from (``None`` if it cannot be measured)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)  # give freed heap memory back, so reusing it is seen
    if can_reset_peak():
        before = _status()["VmRSS"]
        result = fn()
        peak = _status()["VmHWM"]
        return result, max(peak - before, 0)
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return fn(), None
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = fn()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return result, max(after - before, 0) * 1024
