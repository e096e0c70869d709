"""The compile cache on disk, as files: its size, what was used last, and pruning.

Every compiled module is one entry: its generated source ``rbgen_<key>.py`` and Numba's
files for it in ``__pycache__`` (``rbgen_<key>.<function>-<line>.py311.nbi`` and its
``.nbc`` data); each module the native code generator compiled is one more, its object
file in ``native/``.  Each use of an entry touches its source file
(:func:`revbench.backends.loader.write_source`), so the file's modification time is
the entry's last use, and pruning removes the least recently used entries first.

The cache is bounded: ``REVBENCH_CACHE_MAX_MB`` (default :data:`DEFAULT_MAX_MB`)
megabytes per revbench version; the first process to find it larger prunes it to
three quarters of that, in a background thread (:func:`revbench.backends.loader.cache_dir`:
listing thousands of files must not delay a first call).  Public API: :mod:`revbench.cache`.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MAX_MB = 1024

#: the native code generator's machine code (:mod:`revbench.backends.native.engine`): one
#: object file per compiled module, ``native/<digest of its LLVM IR>.o``, touched when used
NATIVE_FOLDER = "native"


@dataclass
class Entry:
    """One compiled module in the cache: its files, their size, its last use."""

    key: str
    files: list[Path]
    size: int
    last_used: float


def entries(folder: Path) -> list[Entry]:
    """The cache's entries, least recently used first."""
    found: dict[str, Entry] = {}
    for path in folder.glob("rbgen_*.py"):
        key = path.stem[len("rbgen_"):]
        try:
            st = path.stat()
        except OSError:
            continue
        found[key] = Entry(key, [path], st.st_size, st.st_mtime)
    pycache = folder / "__pycache__"
    if pycache.is_dir():
        for path in pycache.iterdir():
            if not path.name.startswith("rbgen_"):
                continue
            key = path.name[len("rbgen_"):].split(".", 1)[0]
            try:
                size = path.stat().st_size
            except OSError:
                continue
            entry = found.setdefault(key, Entry(key, [], 0, 0.0))
            entry.files.append(path)
            entry.size += size
    native = folder / NATIVE_FOLDER
    if native.is_dir():
        for path in native.glob("*.o"):
            try:
                st = path.stat()
            except OSError:
                continue
            found["native:" + path.stem] = Entry(path.stem, [path], st.st_size, st.st_mtime)
    return sorted(found.values(), key=lambda e: e.last_used)


def total_size(folder: Path) -> int:
    return sum(e.size for e in entries(folder))


def prune(folder: Path, max_bytes: int | None = None, older_than_s: float | None = None) -> int:
    """Remove entries used longest ago until the cache holds at most ``max_bytes`` (and
    every entry not used for ``older_than_s`` seconds); returns the bytes freed.  A
    process still running a removed module keeps it in memory; a later one compiles it
    again."""
    listed = entries(folder)
    total = sum(e.size for e in listed)
    now = time.time()
    freed = 0
    for entry in listed:
        too_big = max_bytes is not None and total - freed > max_bytes
        too_old = older_than_s is not None and now - entry.last_used > older_than_s
        if not (too_big or too_old):
            continue
        for path in entry.files:
            try:
                path.unlink()
            except OSError:
                pass
        freed += entry.size
    return freed


def clear(folder: Path) -> int:
    """Remove every entry (and stray temporary files); returns the bytes freed."""
    freed = total_size(folder)
    for path in [*folder.glob("rbgen_*"), *folder.glob("*.tmp")]:
        try:
            path.unlink()
        except OSError:
            pass
    shutil.rmtree(folder / "__pycache__", ignore_errors=True)
    shutil.rmtree(folder / NATIVE_FOLDER, ignore_errors=True)
    return freed


def max_bytes() -> int:
    """The size limit: ``REVBENCH_CACHE_MAX_MB`` megabytes (a bad value: the default)."""
    try:
        mb = float(os.environ.get("REVBENCH_CACHE_MAX_MB", DEFAULT_MAX_MB))
    except ValueError:
        mb = DEFAULT_MAX_MB
    return int(max(mb, 0) * 1e6)


def enforce_limit(folder: Path) -> None:
    """Prune to three quarters of the limit if the cache is over it (once per process)."""
    limit = max_bytes()
    if total_size(folder) > limit:
        prune(folder, max_bytes=limit * 3 // 4)


def remove_stale_temporaries(folder: Path, age_s: float = 3600.0) -> None:
    """Remove temporary files a process killed while writing left behind (a live writer
    renames its file within seconds)."""
    now = time.time()
    for path in [*folder.glob("*.tmp"), *folder.glob("__pycache__/*.tmp.*"),
                 *folder.glob(f"{NATIVE_FOLDER}/*.tmp")]:
        try:
            if now - path.stat().st_mtime > age_s:
                path.unlink()
        except OSError:
            pass
