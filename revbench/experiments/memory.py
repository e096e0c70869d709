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
two (small allocations served from the heap) is noise, and the kernel's counts
are coarser still (see the floor, below).  Where ``clear_refs`` is
not available (not Linux), :func:`peak_during` falls back to ``ru_maxrss``,
which only reports growth beyond the process's previous peak.

**The floor.**  The kernel does not count resident pages exactly at every moment:
since Linux 6.2 the counters are per CPU and folded into the total in batches of
tens of pages (before, per thread, every 64 page faults), so a read of ``VmRSS`` or
``VmHWM`` can be off by a few hundred kB, more on machines with many CPUs.  A figure
below that cannot be told from noise: a gradient holding 9 kB of states reads
0.004 MB, one holding 4 kB reads 0.1 MB, and a 500 kB array can read 0.26 MB.
:func:`measurement_floor` estimates the floor of this machine once per process, by
measuring allocations of known size; the experiments report a measured figure below
it as below it, not as a number.

:func:`measure_call` times a call and measures its memory at once.  A call shorter
than :data:`MIN_SAMPLE_SECONDS` is repeated back to back until one sample lasts that
long (the timer's resolution and the noise of a busy machine are then small against
it), and its time is the sample's divided by the calls in it.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

_CLEAR_REFS = "/proc/self/clear_refs"
_STATUS = "/proc/self/status"
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
_MMAP_THRESHOLD = 64 * 1024
_libc: Any = None

#: the least time one timed sample of :func:`measure_call` lasts (seconds)
MIN_SAMPLE_SECONDS = 0.02
#: the most calls one sample repeats, however short a call is
MAX_CALLS_PER_SAMPLE = 100_000
#: the floor of :func:`measurement_floor` is never below this (bytes): 64 pages, one
#: batch of the kernel's resident-size counters on two CPUs
MIN_FLOOR_BYTES = 256 * 1024
_FLOOR_STEP = 128 * 1024
_CALIBRATION_BYTES = tuple(k * 1024 for k in (0, 100, 300, 500, 700, 1500, 3000))
_floor: list[int | None] = []
_clock = time.perf_counter  # (what measure_call times by; a test may replace it)


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


def measurement_floor(refresh: bool = False) -> int | None:
    """The smallest figure of :func:`peak_during` that can be told from noise on this
    machine, in bytes (``None`` where memory cannot be measured at all).

    Measured once per process (``refresh=True`` measures again, a few milliseconds):
    allocations of 0 to 3 MB, written by NumPy, are measured three times each; the
    floor is twice the largest error seen (a figure is the difference of two counts,
    each as far off), at least :data:`MIN_FLOOR_BYTES`, rounded up to 128 KiB.  It is an
    estimate, not a bound: on Linux 6.x with two CPUs the errors seen are up to about
    0.45 MB, and the floor comes out between 0.25 and 0.875 MiB from one process to the
    next (see the module's docstring).
    """
    if _floor and not refresh:
        return _floor[0]
    import numpy as np

    worst = 0
    for _ in range(3):
        for nbytes in _CALIBRATION_BYTES:
            n = nbytes // 8
            _, got = peak_during(lambda n=n: float(np.ones(n).sum()) if n else None)
            if got is None:
                _floor[:] = [None]
                return None
            worst = max(worst, abs(got - nbytes))
    floor = max(MIN_FLOOR_BYTES, 2 * worst)
    _floor[:] = [-(-floor // _FLOOR_STEP) * _FLOOR_STEP]
    return _floor[0]


def measure_call(call: Callable[[], Any], repeats: int = 1,
                 min_seconds: float = MIN_SAMPLE_SECONDS) -> tuple[Any, float, int | None, int]:
    """Time ``call`` and measure its memory: ``(result, seconds, peak_bytes, calls)``.

    The first call tells how long one takes.  If it lasts ``min_seconds`` or more it is
    the first of ``repeats`` samples of one call each; otherwise each of ``repeats``
    samples runs the call back to back as often as takes ``min_seconds`` (at most
    :data:`MAX_CALLS_PER_SAMPLE` times).  ``seconds`` is the median over the samples of
    a sample's time divided by its calls; ``peak_bytes`` the most memory any sample (or
    the first call) added (:func:`peak_during`; ``None`` where it cannot be measured);
    ``calls`` the number of timed calls, ``repeats`` times the calls per sample.  The
    clock runs inside :func:`peak_during`, so its own work is not timed.  ``call`` is
    called with the same arguments each time: it must not change them (a ``TimeLoop``'s
    gradient does not).
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
    peaks: list[int] = []

    def sample(n: int) -> tuple[Any, float]:
        def block():
            result = None
            t0 = _clock()
            for _ in range(n):
                result = call()
            return result, _clock() - t0

        (result, elapsed), peak = peak_during(block)
        if peak is not None:
            peaks.append(peak)
        return result, elapsed

    result, first = sample(1)
    if first >= min_seconds:
        n, times = 1, [first]
    else:
        n = min(MAX_CALLS_PER_SAMPLE, max(2, math.ceil(1.2 * min_seconds / max(first, 1e-9))))
        times = []
    while len(times) < repeats:
        result, elapsed = sample(n)
        times.append(elapsed / n)
    return result, statistics.median(times), (max(peaks) if peaks else None), n * repeats
