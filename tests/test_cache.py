"""The compile cache can be trusted: nothing stale, nothing damaged, nothing mixed up.

Issue 21: a kernel loaded from the cache linked another kernel's checked subtraction
for its addition (two helpers under one name); a registered function's constants more
than one call deep were not in the key; damaged or hand-edited cache files were run; a
read-only or full cache broke every call.  Cross-process behaviour is tested in fresh
interpreters on a cache folder of the test's own.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import types
import warnings
from pathlib import Path

import numpy as np
import pytest

import revbench
from revbench.backends import loader


def _script(script: str, folder: Path) -> str:
    """The script as a file (reversible functions are read from their source file)."""
    path = folder / "prog.py"
    path.write_text(textwrap.dedent(script))
    return str(path)


def _run(script: str, cache: Path, *args: str) -> subprocess.CompletedProcess:
    """``script`` in a fresh interpreter on the compile cache ``cache``."""
    env = {**os.environ, "REVBENCH_CACHE_DIR": str(cache), "PYTHONWARNINGS": "always"}
    return subprocess.run([sys.executable, _script(script, cache.parent), *args], env=env,
                          capture_output=True, text=True, timeout=300)


def _ok(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


@pytest.fixture(autouse=True)
def _numba_kernels(monkeypatch):
    """These tests are about Numba's cache of the kernels (which batched and checkpointed
    drivers, ``f.kernel`` and whatever the native path leaves to Numba use): the calls go
    to Numba's dispatcher, in this process and in the scripts it starts.  The native
    path's own cache: tests/test_native.py."""
    monkeypatch.setenv("REVBENCH_NATIVE", "0")


# -- item 0: every function compiled into cached code has a name of its own --------------
_UID = re.compile(r"B\d+v\d+")  # Numba's process-local counter in a mangled name


def _linked_definitions(dispatcher) -> dict[str, str]:
    """Every function defined in the libraries linked into ``dispatcher``'s code, by its
    mangled name without the process-local counter -> its LLVM text (counters removed)."""
    found: dict[str, str] = {}
    seen: set[int] = set()

    def visit(lib) -> None:
        if id(lib) in seen:
            return
        seen.add(id(lib))
        for fn in lib._final_module.functions:
            if not fn.is_declaration and fn.name.startswith("_ZN"):
                found[_UID.sub("", fn.name)] = _UID.sub("", str(fn))
        for sub in lib._linking_libraries:
            visit(sub)

    for cres in dispatcher.overloads.values():
        visit(cres.library)
    return found


def test_functions_linked_into_kernels_are_named_by_their_code(fresh_cache, monkeypatch):
    """Under one name (less Numba's per-process counter) there is one code: else a process
    loading two cached kernels links one's helper into the other (issue 21, item 0)."""
    from revbench.rules import functions as fn_rules

    monkeypatch.setattr(fn_rules, "USER_FUNCTIONS", dict(fn_rules.USER_FUNCTIONS))

    def scaled(k):
        def rb_test_scaled(x):
            return k * x
        return rb_test_scaled

    ns = {"np": np}
    source = """
        def fadd(y, n):
            y += n + 3
        def fsub(y, n):
            y += n - 3
        def fmul(y, n):
            y += n * 3
        def fg(y, x):
            y += rb_test_scaled(x)
    """
    revbench.register(scaled(1.0), [lambda x: 0.0])
    fns = revbench.define(textwrap.dedent(source), ns)
    kernels = []
    for name in ("fadd", "fsub", "fmul"):
        assert fns[name](0.0, 22)[0] == {"fadd": 25.0, "fsub": 19.0, "fmul": 66.0}[name]
        kernels.append(fns[name]._program._cache)
    for k in (2.0, 3.0):  # one qualified name, two functions (a closure, a re-run cell)
        revbench.register(scaled(k), [lambda x: 0.0])
        assert fns["fg"](0.0, 1.0)[0] == k
        kernels.append(fns["fg"]._program._cache)
    by_name: dict[str, set[str]] = {}
    for cache in kernels:
        for compiled in cache.values():
            for name, text in _linked_definitions(compiled.run).items():
                by_name.setdefault(name, set()).add(text)
    clashes = sorted(n for n, texts in by_name.items() if len(texts) > 1)
    assert not clashes, f"one name, several codes: {clashes}"
    assert any("rb_int_overflowed" in n for n in by_name)  # the out-of-line failure


# -- item 1: everything a registered function reads is in the key ------------------------
STALE = """
import sys, numba, numpy as np, revbench
V = float(sys.argv[1])
W = (V, 2.0)
@numba.njit
def deep2(x):
    return W[0] * x
@numba.njit
def deep1(x):
    return deep2(x)
def scale(x):
    return deep1(x)
def dscale(x):
    return deep1(1.0)
revbench.register(scale, [dscale])
def adj(y, x, ay, ax):
    return ay, ax + ay * deep1(1.0)
@revbench.reversible
def use_reg(y, x):
    y += scale(x)
@revbench.reversible
def use_adj(y, x):
    y += scale(x)
revbench.custom_adjoint(use_adj, adj)
print(use_reg(0.0, 3.0)[0], revbench.grad(use_reg, loss="y")(0.0, 3.0)[1],
      revbench.grad(use_adj, loss="y")(0.0, 3.0)[1])
"""


@pytest.mark.slow  # fresh Python processes sharing a cache folder
def test_values_read_two_calls_deep_are_in_the_cache_key(tmp_path):
    for v in ("1", "5", "1"):
        out = _ok(_run(STALE, tmp_path / "cache", v)).split()
        assert [float(x) for x in out] == [3.0 * float(v), float(v), float(v)], (v, out)


def test_a_value_without_a_stable_digest_is_never_reused_and_says_so():
    from revbench.rules.digest import VOLATILE, UncachedWarning, fingerprint

    cfg = types.SimpleNamespace(k=2.0)

    def scale(x):
        return cfg.k * x

    with pytest.warns(UncachedWarning, match="`cfg` .* compiled afresh in each process"):
        fp = fingerprint(scale)
    assert VOLATILE in fp


def test_the_digest_follows_helpers_and_containers_at_any_depth():
    from revbench.rules.digest import VOLATILE, fingerprint

    def make(v, table):
        inner = types.FunctionType(compile("def inner(x):\n    return W[0][1] * x * T[2]\n",
                                           "<m>", "exec").co_consts[0], {"W": ((0, v),), "T": table})

        def outer(x):
            return inner(x)

        return outer

    base = fingerprint(make(1.0, np.arange(3.0)))
    assert base == fingerprint(make(1.0, np.arange(3.0))) and VOLATILE not in base
    assert base != fingerprint(make(5.0, np.arange(3.0)))
    assert base != fingerprint(make(1.0, np.arange(3.0) * 2))


# -- item 2: damaged or edited cache files are never trusted ---------------------------------
DAMAGE = """
import revbench
fns = [revbench.define(f"def p{k}(y, x):\\n    y += {c} * x\\n", {})[f"p{k}"]
       for k, c in enumerate(("3.0", "5.0", "7.0", "9.0"), start=1)]
print(*(f(0.0, 2.0)[0] for f in fns))
"""


def _generated(cache: Path, constant: str) -> Path:
    (path,) = [p for p in cache.glob("*/rbgen_*.py") if f"{constant} * x" in p.read_text()]
    return path


@pytest.mark.slow  # fresh Python processes sharing a cache folder
def test_damaged_or_edited_cache_files_are_rewritten_and_recompiled(tmp_path):
    tmp_path = tmp_path / "cache"
    assert _ok(_run(DAMAGE, tmp_path)).split() == ["6.0", "10.0", "14.0", "18.0"]
    p1, p2, p3 = (_generated(tmp_path, c) for c in ("3.0", "5.0", "7.0"))
    p1.write_text(p1.read_text().replace("3.0 * x", "4.0 * x"))      # edited by hand
    p2.write_text(p2.read_text()[: len(p2.read_text()) // 2])      # truncated
    p3.write_bytes(b"\x00\xff garbage")                            # garbled
    pycache = next(tmp_path.glob("*/__pycache__"))
    index = next(i for i in pycache.glob("*.nbi") if "p4" in i.name)
    index.write_bytes(index.read_bytes()[:20])                     # Numba's index cut short
    for data in pycache.glob("*.nbc"):
        if "p1" not in data.name:
            data.write_bytes(b"not a pickle")                          # Numba's data garbled
    second = _run(DAMAGE, tmp_path)
    assert _ok(second).split() == ["6.0", "10.0", "14.0", "18.0"]
    assert "does not hold the code it is named for" in second.stderr
    assert "could not be read" in second.stderr
    assert "3.0 * x" in p1.read_text() and "5.0 * x" in p2.read_text()
    # and the repaired cache is a cache again: quiet, and still right
    third = _run(DAMAGE, tmp_path)
    assert _ok(third).split() == ["6.0", "10.0", "14.0", "18.0"]
    assert "revbench:" not in third.stderr


# -- item 4: a cache that cannot be written ------------------------------------------------
READ = """
import sys, revbench
from revbench.demo import poly  # y += 3 x^2 + x through an ancilla
print(poly(0.0, 2.0)[0], revbench.grad(poly, loss="y")(0.0, 2.0)[1])
import revbench.backends.loader as L
print(L.cache_dir(), L.cache_writable())
print(sum(len(c.run.stats.cache_hits) for c in poly._program._cache.values()))
if "new" in sys.argv:  # code the cache does not hold
    q = revbench.define("def q(y, x):\\n    y += 4.0 * x * x\\n", {})["q"]
    print(q(0.0, 2.0)[0], sum(len(c.run.stats.cache_hits) for c in q._program._cache.values()))
"""


def _read_only_command(folder: Path, script: str) -> list[str]:
    """A command running ``script`` with ``folder`` mounted read-only (a classroom image),
    in a mount namespace of its own (user namespaces: no root needed)."""
    probe = ["unshare", "--map-root-user", "--mount", "sh", "-c",
             'mount --bind -o ro "$0" "$0" && exec "$@"', str(folder)]
    try:
        ok = subprocess.run([*probe, "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if not ok:
        pytest.skip("no user and mount namespaces here to make a read-only folder")
    return [*probe, sys.executable, script]


@pytest.mark.slow  # fresh Python processes sharing a cache folder
def test_a_read_only_cache_is_read_and_nothing_breaks(tmp_path):
    cache = tmp_path / "cache"
    first = _ok(_run(READ, cache)).splitlines()
    assert first[0] == "14.0 13.0"
    version = Path(first[1].split()[0])
    before = sorted((p.name, p.stat().st_mtime_ns) for p in version.rglob("*"))
    cmd = _read_only_command(cache, _script(READ, tmp_path))
    env = {**os.environ, "REVBENCH_CACHE_DIR": str(cache), "PYTHONWARNINGS": "always"}
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    out = _ok(p).splitlines()
    assert out[0] == "14.0 13.0"
    assert out[1] == f"{version} False", "the read-only cache itself is used"
    assert first[2] == "0" and int(out[2]) >= 2, "its machine code is loaded, not compiled"
    assert "cannot be written" in p.stderr and "Traceback" not in p.stderr
    assert sorted((q.name, q.stat().st_mtime_ns) for q in version.rglob("*")) == before
    # what it did not find there is compiled in memory: a new function works too
    cmd = _read_only_command(cache, _script(READ, tmp_path))
    p = subprocess.run([*cmd, "new"], env=env, capture_output=True, text=True, timeout=300)
    assert _ok(p).splitlines()[3] == "16.0 0"


def test_a_cache_that_cannot_be_written_compiles_in_memory(fresh_cache, monkeypatch):
    """A full disk: writing any file fails (simulated at the write), every call works,
    with one warning, and nothing half-written is left behind."""
    monkeypatch.setattr(loader, "_warned", set())
    real_mkstemp = loader.tempfile.mkstemp

    def full_disk(*args, **kwargs):
        fd, name = real_mkstemp(*args, **kwargs)
        os.close(fd)
        os.unlink(name)
        raise OSError(28, "No space left on device")

    cache = fresh_cache
    monkeypatch.setattr(loader.tempfile, "mkstemp", full_disk)
    source = "def f(y, x):\n    y += 11.0 * x * x\n"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f = revbench.define(source, {})["f"]
        assert f(0.0, 2.0)[0] == 44.0
        assert revbench.grad(f, loss="y")(0.0, 2.0)[1] == 44.0
    messages = [str(w.message) for w in caught if issubclass(w.category, loader.CacheWarning)]
    assert len(messages) == 1 and "No space left" in messages[0], messages
    assert not list(cache.glob("*.tmp")) and not list(cache.glob("rbgen_*.py"))


def test_the_writability_probe_writes_content_under_a_name_of_its_own(tmp_path):
    assert loader._can_write(tmp_path)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o555)
    try:
        if os.geteuid() != 0:
            assert not loader._can_write(tmp_path / "ro")
    finally:
        (tmp_path / "ro").chmod(0o755)


# -- item 6: the cache on disk is bounded and can be tidied ---------------------------------
def test_info_prune_and_clear(fresh_cache):
    import revbench.cache

    fns = revbench.define("def a(y, x):\n    y += 2.0 * x\ndef b(y, x):\n    y += 3.0 * x\n", {})
    for f in fns.values():
        f(0.0, 1.0)
    info = revbench.cache.info()
    assert info["path"] == str(fresh_cache) and info["writable"] and info["entries"] == 2
    assert info["bytes"] > 0
    old = next(fresh_cache.glob("rbgen_*.py"))
    os.utime(old, (0, 0))  # used last in 1970
    freed = revbench.cache.prune(older_than_days=1)
    assert freed > 0 and not old.exists() and revbench.cache.info()["entries"] == 1
    assert not list((fresh_cache / "__pycache__").glob(f"{old.stem}.*"))
    assert fns["a"](0.0, 1.0)[0] + fns["b"](0.0, 1.0)[0] == 5.0  # running code is unaffected
    assert revbench.cache.clear() > 0 and revbench.cache.info()["entries"] == 0
    for bad in ({}, {"max_mb": -1}, {"older_than_days": "1"}):
        with pytest.raises(ValueError, match="prune"):
            revbench.cache.prune(**bad)


def test_a_cache_over_its_limit_is_pruned_least_recently_used_first(tmp_path, monkeypatch):
    from revbench.backends import cache_files

    folder = tmp_path / f"v{revbench.__version__}-py{sys.version_info[0]}{sys.version_info[1]}"
    (folder / "__pycache__").mkdir(parents=True)
    for k in range(10):  # ten entries of 1 MB each, entry k used at time k
        src = folder / f"rbgen_{k:032x}.py"
        src.write_text("# x\n")
        (folder / "__pycache__" / f"rbgen_{k:032x}.f-1.py311.1.nbc").write_bytes(b"\0" * 1_000_000)
        os.utime(src, (k, k))
    stale = folder / "rbgen_dead.tmp"
    stale.write_text("")
    os.utime(stale, (0, 0))
    monkeypatch.setattr(loader, "_state", loader._State())
    monkeypatch.setenv("REVBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("REVBENCH_CACHE_MAX_MB", "6")
    assert loader.cache_dir() == folder
    loader.wait_tidied(60)  # (in the background: a new process's first call does not wait)
    left = sorted(e.key for e in cache_files.entries(folder))
    assert left == [f"{k:032x}" for k in range(6, 10)]  # 4 MB <= 3/4 of 6 MB, newest kept
    assert not stale.exists()


def test_the_digest_is_the_same_in_every_process(tmp_path):
    """String hashing differs per process (PYTHONHASHSEED): a set constant in the code
    must not make the digest -- and so the cache key -- differ."""
    script = tmp_path / "fp.py"
    script.write_text(textwrap.dedent("""
        from revbench.rules.digest import fingerprint
        W = (1.0, "a")
        def f(x):
            return 1.0 if x in {"alpha", "beta", "gamma", "delta"} else W[0]
        print(fingerprint(f))
    """))
    digests = {subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}, check=True).stdout
               for seed in ("1", "2", "3")}
    assert len(digests) == 1, digests


def test_code_compiled_without_its_module_is_not_cached(fresh_cache):
    """A generated module released from ``sys.modules`` while its code compiles (a
    background compilation of a dropped cell's function, or at interpreter exit): Numba
    records the module as "<dynamic>", an entry no process can load (a later one would
    warn, discard it and compile again).  Such an entry is never saved."""
    from revbench.backends.kernel_cache import KernelCache, jit

    mod = loader.load_module("f" * 32, "def g(x):\n    return x * 3.0\n", "nb", {})
    compiled = jit(mod.g, cache=False)
    assert compiled(2.0) == 6.0
    ((sig, cres),) = compiled.overloads.items()
    cache = KernelCache(mod.g)
    index = Path(cache._cache_file._index_path)
    known, cres.fndesc.modname = cres.fndesc.modname, "<dynamic>"
    try:
        cache.save_overload(sig, cres)
    finally:
        cres.fndesc.modname = known
    assert not index.exists()
    cache.save_overload(sig, cres)  # its module known: saved
    assert index.exists()


def test_code_calling_a_callee_compiled_without_its_module_is_not_cached(fresh_cache):
    """The same for a caller whose callee was compiled while the callee's module was out
    of ``sys.modules``: the callee's environment, linked into the caller's entry, names
    "<dynamic>", which loading would try to import (CI saw the warning in a notebook)."""
    from revbench.backends.kernel_cache import KernelCache, jit

    callee_mod = loader.load_module("c" * 32, "def h(x):\n    return x + 1.0\n", "nb", {})
    name = callee_mod.__name__
    sys.modules.pop(name, None)  # released while it compiles
    try:
        callee = jit(callee_mod.h, cache=False)
        assert callee(1.0) == 2.0
    finally:
        sys.modules[name] = callee_mod
    mod = loader.load_module("d" * 32, "def g(x):\n    return _rb_h(x) * 3.0\n", "nb",
                             {"_rb_h": callee})
    compiled = jit(mod.g, cache=False)
    assert compiled(1.0) == 6.0
    ((sig, cres),) = compiled.overloads.items()
    cache = KernelCache(mod.g)
    cache.save_overload(sig, cres)
    assert not Path(cache._cache_file._index_path).exists()


# -- issue 22: each kernel's machine code made once ---------------------------------------
BIG_CALLEE = """
def big(y, x, n):
    for i in range(n):
        y[i] += x[i] * x[i]
        y[i] += math.sin(x[i])
        y[i] -= 0.5 * x[i]
        y[i] += x[i] / (1.0 + x[i] * x[i])
    for i in range(n):
        y[i] *= 2.0
        y[i] += math.cos(x[i])

def small(s, v):
    s += v

def caller(s, y, x, n):
    big(y, x, n)
    for i in range(n):
        small(s, y[i])
"""


def _kernels(fn) -> list:
    return [c.run for c in fn._program._cache.values()]


def test_a_large_callee_is_compiled_once_and_called_through_its_slot(fresh_cache):
    """A callee of some size is not linked (optimised and compiled again) into each caller:
    the caller calls it through its slot; a small callee is still linked, so LLVM can
    inline it.  Results, gradients and errors are those of the Python backend."""
    import math

    from revbench.backends import numba_linking

    ns = revbench.define(BIG_CALLEE, {"math": math})
    py = revbench.define(BIG_CALLEE, {"math": math}, backend="python")
    x = np.linspace(0.1, 1.0, 5)

    def args():  # (y changes in place)
        return 0.0, np.zeros(5), x, 5

    out = ns["caller"](*args())
    ref = py["caller"](*args())
    assert out[0] == pytest.approx(ref[0], rel=1e-14)
    np.testing.assert_allclose(out[1], ref[1], rtol=1e-14)

    (kernel,) = _kernels(ns["caller"])
    text = "\n".join(kernel.inspect_llvm().values())
    defined = [ln for ln in text.splitlines() if ln.startswith("define")]
    assert any("caller__forward" in ln for ln in defined)
    assert not any("big__forward" in ln for ln in defined), "the callee was linked in"
    slots = set(re.findall(re.escape(numba_linking.PREFIX) + r"(rbgen_\w+)\$", text))
    (big_kernel,) = _kernels(ns["big"])
    assert slots == {big_kernel.py_func.__module__}  # the small callee: linked (inlined)

    g = revbench.grad(ns["caller"], loss="s", wrt="x")(*args())[2]
    g_ref = revbench.grad(py["caller"], loss="s", wrt="x")(*args())[2]
    np.testing.assert_allclose(g, g_ref, rtol=1e-13)
    # d s / d x_i = 2 (2 x + cos x - 0.5 + (1 - x^2) / (1 + x^2)^2) - sin x
    hand = 2 * (2 * x + np.cos(x) - 0.5 + (1 - x * x) / (1 + x * x) ** 2) - np.sin(x)
    np.testing.assert_allclose(g, hand, rtol=1e-12)

    # a check failing inside the callee (called through its slot): the same error as the
    # Python backend's, and the caller's arrays restored
    bad = x.copy()
    bad[2] = 1e200
    y = np.zeros(5)
    for fn in (ns["caller"], py["caller"]):
        with pytest.raises(revbench.ReversibilityError, match=r"x\[i\] \* x\[i\]"):
            fn(0.0, y, bad, 5)
        assert not y.any()


CACHED_CALLEE = f"""
import math
import numpy as np
import revbench
fns = revbench.define({BIG_CALLEE!r}, {{"math": math}})
caller, big = fns["caller"], fns["big"]
x = np.linspace(0.1, 1.0, 5)
out = caller(0.0, np.zeros(5), x, 5)
g = revbench.grad(caller, loss="s", wrt="x")(0.0, np.zeros(5), x, 5)[2]
try:
    caller(0.0, np.zeros(5), np.array([1.0, 1e200]), 2)
except revbench.ReversibilityError as exc:
    failure = str(exc).splitlines()[0]
hits = sum(sum(k.stats.cache_hits.values()) for k in
           [c.run for f in (caller, big) for c in f._program._cache.values()])
print(repr((float(out[0]), out[1].tolist(), g.tolist(), failure)))
print("hits", hits)
"""


@pytest.mark.slow  # fresh Python processes sharing a cache folder
def test_a_caller_loaded_from_the_cache_loads_the_callees_it_calls(tmp_path):
    """In a fresh process, a caller whose machine code comes from the disk cache calls its
    large callees through their slots: loading it loads them too (else the call would
    find the slot empty), with the same results, gradients and errors as the process
    that compiled them."""
    cache = tmp_path / "cache"
    first = _ok(_run(CACHED_CALLEE, cache)).splitlines()
    second = _ok(_run(CACHED_CALLEE, cache)).splitlines()
    assert first[0] == second[0]
    assert "x[i] * x[i]" in first[0]
    assert first[1] == "hits 0" and second[1] != "hits 0"
