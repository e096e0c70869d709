"""The compile cache: where compiled code is kept between processes, and its upkeep.

revbench writes each compiled module's generated source, and Numba its machine code,
to a folder (``REVBENCH_CACHE_DIR``, else ``~/.cache/revbench``), so a later process
loads instead of compiling.  The folder is bounded (``REVBENCH_CACHE_MAX_MB``, 1024 MB
by default: the least recently used entries go first); these functions show and tidy
it by hand::

    import revbench.cache
    revbench.cache.info()                 # {'path': ..., 'entries': 412, 'bytes': ..., ...}
    revbench.cache.prune(max_mb=200)      # keep the 200 MB used last
    revbench.cache.prune(older_than_days=30)
    revbench.cache.clear()                # everything (code running now is not affected)

See ``docs/performance.md`` ("The compile cache").
"""

from __future__ import annotations

from typing import Any

from revbench.backends import cache_files
from revbench.backends.loader import cache_dir, cache_writable

__all__ = ["clear", "info", "prune"]


def info() -> dict[str, Any]:
    """The cache folder of this revbench version, whether this process writes to it, how
    many compiled modules it holds and their size in bytes, and the size limit."""
    folder = cache_dir()
    listed = cache_files.entries(folder)
    return {"path": str(folder), "writable": cache_writable(), "entries": len(listed),
            "bytes": sum(e.size for e in listed), "max_bytes": cache_files.max_bytes()}


def prune(max_mb: float | None = None, older_than_days: float | None = None) -> int:
    """Remove the entries used longest ago until the cache holds at most ``max_mb``
    megabytes, and those not used for ``older_than_days`` days; returns the bytes freed."""
    for name, v in (("max_mb", max_mb), ("older_than_days", older_than_days)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0):
            raise ValueError(f"revbench.cache.prune: {name} must be a number >= 0, got {v!r}")
    if max_mb is None and older_than_days is None:
        raise ValueError("revbench.cache.prune: give max_mb, older_than_days or both "
                         "(revbench.cache.clear() empties the cache)")
    return cache_files.prune(cache_dir(), None if max_mb is None else int(max_mb * 1e6),
                             None if older_than_days is None else older_than_days * 86400.0)


def clear() -> int:
    """Empty the cache of this revbench version; returns the bytes freed.  Functions
    already compiled in this process keep running; later processes compile again."""
    return cache_files.clear(cache_dir())
