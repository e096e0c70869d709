"""Write generated source to the on-disk cache and load it as a module.

Files are named by a hash of their content, so a file never changes once
written: Numba's own cache (:mod:`revbench.backends.kernel_cache`), which is keyed
on the source file, then stays valid across processes, and a second process loads
the compiled machine code instead of compiling again.

The cache is a convenience, never a source of truth:

* the code that runs is always the text generated in this process (a file on disk
  that differs from it -- truncated, garbled, edited by hand -- is rewritten, with
  one warning, and never executed);
* a cache that cannot be written (a full disk, a read-only folder: a classroom image
  with a pre-warmed cache) is still read, and what is missing is compiled in memory,
  with one warning;
* loading is safe from any number of threads: one lock (:data:`LOCK`) serialises
  compilation, and a module is published in ``sys.modules`` only once it has run.
"""

from __future__ import annotations

import linecache
import os
import sys
import tempfile
import threading
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from revbench._version import __version__

#: One compilation at a time in a process: revbench's tables, the generated modules and
#: Numba's first import are shared (re-entrant: compiling a function compiles its callees).
LOCK = threading.RLock()


class CacheWarning(UserWarning):
    """The compile cache could not be used as it is (read-only, full, corrupted)."""


_warned: set[str] = set()


def warn_once(kind: str, message: str) -> None:
    """Warn about the cache once per process and kind of trouble."""
    if kind not in _warned:
        _warned.add(kind)
        warnings.warn(message, CacheWarning, stacklevel=3)


class _State:
    """Where the cache is, and whether this process may write to it."""

    path: Path | None = None
    writable: bool = True


_state = _State()


def cache_root() -> Path:
    """The folder of every revbench version's cache: ``$REVBENCH_CACHE_DIR`` if set, else
    ``$XDG_CACHE_HOME/revbench`` or ``~/.cache/revbench``."""
    base = os.environ.get("REVBENCH_CACHE_DIR")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "revbench"


def cache_dir() -> Path:
    """Where generated sources (and Numba's cache beside them) live: a per-version
    subfolder of :func:`cache_root`.

    A folder that exists but cannot be written is used read-only; one that cannot be
    made or read at all is replaced by a temporary folder for this process (both with
    one warning)."""
    with LOCK:
        if _state.path is None:
            _state.path, _state.writable = _resolve()
        return _state.path


def cache_writable() -> bool:
    """Whether this process writes new files to the cache (see :func:`cache_dir`)."""
    cache_dir()
    return _state.writable


def reset() -> None:
    """Forget the resolved cache folder (tests; a changed ``REVBENCH_CACHE_DIR``)."""
    with LOCK:
        _state.path = None
        _state.writable = True


def _resolve() -> tuple[Path, bool]:
    path = cache_root() / f"v{__version__}-py{sys.version_info[0]}{sys.version_info[1]}"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        pass
    if _can_write(path):
        # keep it within its size limit, and drop what crashed writers left -- in the
        # background: listing a cache of thousands of files took seconds of a new
        # process's first call, which needs none of it
        global _tidying
        _tidying = threading.Thread(target=_tidy, args=(path,), name="revbench-cache-tidy",
                                    daemon=True)
        _tidying.start()
        return path, True
    if path.is_dir() and os.access(path, os.R_OK | os.X_OK):
        warn_once("read-only", f"revbench: the compile cache {path} cannot be written to "
                  "(read-only, or the disk is full): compiled code found there is used, "
                  "anything else is compiled in memory for this process only")
        return path, False
    fallback = Path(tempfile.mkdtemp(prefix="revbench-cache-"))
    warn_once("unusable", f"revbench: the compile cache {path} cannot be used; this process "
              f"caches in {fallback} instead (set REVBENCH_CACHE_DIR to a writable folder)")
    return fallback, True


_tidying: threading.Thread | None = None


def _tidy(path: Path) -> None:
    from revbench.backends import cache_files

    try:
        cache_files.enforce_limit(path)
        cache_files.remove_stale_temporaries(path)
    except OSError:
        pass


def wait_tidied(timeout: float | None = None) -> None:
    """Wait for the background tidying of the cache this process started (tests)."""
    if _tidying is not None:
        _tidying.join(timeout)


def _can_write(folder: Path) -> bool:
    """Whether a file with content can be written to ``folder`` (an empty file can be
    made on a full disk).  The probe's name is unique: processes probe side by side."""
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".probe-", suffix=".tmp")
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(b"\0" * 4096)
            f.flush()
            os.fsync(f.fileno())
        return True
    except OSError:
        return False
    finally:
        try:
            os.unlink(probe)
        except OSError:
            pass


def source_path(key: str) -> Path:
    return cache_dir() / f"rbgen_{key}.py"


def write_source(key: str, source: str) -> Path | None:
    """Make sure the file of ``key`` holds exactly ``source``; its path, or ``None`` when
    it cannot be (the code is then compiled in memory, not cached).

    A file is written atomically (a temporary file, then a rename), so a reader never
    sees half of one; a file whose text differs from ``source`` was damaged or edited
    and is replaced."""
    path = source_path(key)
    try:
        existing = path.read_text()
    except FileNotFoundError:
        existing = None
    except (OSError, UnicodeDecodeError):
        existing = ""
    if existing == source:
        if _state.writable:  # its last use, for pruning (revbench.cache.prune)
            try:
                os.utime(path)
            except OSError:
                pass
        return path
    if existing is not None:
        warn_once(f"damaged:{path}", f"revbench: the cached file {path} does not hold the code "
                  "it is named for (damaged or edited): it is written again and recompiled")
    if not cache_writable():
        return None
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.stem, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(source)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        return path
    except OSError as exc:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        warn_once("write", f"revbench: cannot write to the compile cache {path.parent} "
                  f"({exc.strerror or exc}): compiling in memory, without caching")
        return None


class StaleKernelError(ImportError):
    """A Numba cache refers to a revbench kernel this process has not built."""


class _StaleKernelFinder:
    """Explains a stale Numba cache instead of failing on a module name.

    Numba keys the on-disk cache of a user's ``@njit(cache=True)`` function on its own
    source file only.  When that function calls revbench kernels and the kernels change
    (another revbench version, or an edited reversible function in another file), its
    cached machine code still holds the old kernels, and loading it imports their
    modules by name -- ``rbgen_<key>_nb``, which this process never built.  Loading old
    kernels would run stale code, so the import fails here, saying what to do."""

    @staticmethod
    def find_spec(name: str, path=None, target=None):
        if name.startswith("rbgen_") and name not in sys.modules:
            raise StaleKernelError(
                f"a Numba-cached function calls the revbench kernel {name}, which this process "
                "has not built: the kernels changed since that function was cached (a new "
                "revbench, or an edited reversible function). Numba does not track that: delete "
                "the function's cache (the .nbi/.nbc files in __pycache__ next to its source, or "
                "under NUMBA_CACHE_DIR) and it is compiled again against the current kernels",
                name=name)
        return None


if not any(isinstance(f, _StaleKernelFinder) for f in sys.meta_path):
    sys.meta_path.append(_StaleKernelFinder())


def load_module(key: str, source: str, flavour: str, injected: dict[str, object]) -> ModuleType:
    """Load generated code as module ``rbgen_<key>_<flavour>``, with ``injected`` globals.

    The code run is ``source`` itself; the file of that name in the cache (written if
    missing or different) is what Numba's cache is keyed on and what tracebacks show.
    ``module.__rb_on_disk__`` says whether the file holds it (else: compile without
    caching).  The module is registered in ``sys.modules`` -- once it has run -- because
    Numba's cache re-imports a cached function's module by name when loading it.
    """
    name = f"rbgen_{key}_{flavour}"
    mod = sys.modules.get(name)
    if mod is not None:
        return mod
    with LOCK:
        mod = sys.modules.get(name)
        if mod is not None:
            return mod
        path = write_source(key, source)
        filename = str(path if path is not None else source_path(key))
        if path is None:  # tracebacks and inspect still see the lines
            linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        mod = ModuleType(name)
        mod.__file__ = filename
        mod.__dict__.update(injected)
        mod.__rb_on_disk__ = path is not None
        exec(compile(source, filename, "exec"), mod.__dict__)
        sys.modules[name] = mod
        return mod


#: what live owners hold (a generated module, a check table) -> how many hold it
_holders: dict[object, int] = {}


def hold(owner: object, token: object, release: Callable[[], None]) -> None:
    """Keep what ``token`` names while ``owner`` lives; ``release()`` it when the last of
    its owners is garbage.

    A notebook redefines functions all day, and each definition compiles new modules.
    Code shared by several functions (the same text) is released once none uses it."""
    with LOCK:
        _holders[token] = _holders.get(token, 0) + 1
    weakref.finalize(owner, _release, token, release)


def hold_module(owner: object, name: str) -> None:
    """Keep the generated module ``name`` in ``sys.modules`` while ``owner`` lives (after
    that, nothing references its compiled code but the recently used few)."""
    hold(owner, ("module", name), lambda: sys.modules.pop(name, None))


def _release(token: object, release: Callable[[], None]) -> None:
    with LOCK:
        left = _holders.get(token, 0) - 1
        if left > 0:
            _holders[token] = left
            return
        _holders.pop(token, None)
        release()
