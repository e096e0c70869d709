"""Write generated source to the on-disk cache and load it as a module.

Files are named by a hash of their content, so a file never changes once
written: Numba's own cache (``cache=True``), which is keyed on the source
file, then stays valid across processes, and a second process loads the
compiled machine code instead of compiling again.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType

from revbench._version import __version__

_cache_dir: Path | None = None


def cache_dir() -> Path:
    """Where generated sources (and Numba's cache beside them) live.

    ``$REVBENCH_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/revbench`` or
    ``~/.cache/revbench``; a per-version subfolder keeps versions apart.
    """
    global _cache_dir
    if _cache_dir is None:
        base = os.environ.get("REVBENCH_CACHE_DIR")
        if base:
            root = Path(base)
        else:
            xdg = os.environ.get("XDG_CACHE_HOME")
            root = (Path(xdg) if xdg else Path.home() / ".cache") / "revbench"
        path = root / f"v{__version__}-py{sys.version_info[0]}{sys.version_info[1]}"
        try:
            path.mkdir(parents=True, exist_ok=True)
            probe = path / ".write-test"
            probe.write_text("")
            probe.unlink()
        except OSError:
            path = Path(tempfile.mkdtemp(prefix="revbench-cache-"))
        _cache_dir = path
    return _cache_dir


def source_path(key: str) -> Path:
    return cache_dir() / f"rbgen_{key}.py"


def write_source(key: str, source: str) -> Path:
    """Write ``source`` under its content key, atomically, unless already there."""
    path = source_path(key)
    if not path.exists():
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    return path


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

    The module is registered in ``sys.modules`` because Numba's cache
    re-imports a cached function's module by name when loading it.
    """
    name = f"rbgen_{key}_{flavour}"
    mod = sys.modules.get(name)
    if mod is not None:
        return mod
    path = write_source(key, source)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    mod.__dict__.update(injected)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[name]
        raise
    return mod
