"""Batched derivatives (``batch=``): the same numbers as the unbatched call per item.

The reference is the unbatched ``jacobian`` / ``value_and_grad`` run item by
item; the batched call runs one compiled loop, so every test compares the two,
on both backends and with checks off, then bad input and failing items.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from test_ad_roundtrip import CHAOS

import revbench
from revbench.ad import batch as batch_module

SRC = '''
def project(r, cam, X, w, feat):
    with routine:
        p = np.zeros(3)
        for j in range(3):
            p[j] += X[j] - cam[3 + j]
        u = p[0] / p[2] + cam[0] * p[1]
        v = p[1] / p[2] - cam[1] * p[0]
    r[0] += w * (cam[2] * u - feat[0])
    r[1] += w * (cam[2] * v - feat[1])
    ~routine


def energy(e, x, k, c, z):
    e += k * np.sum(x * x) + c * x[0] + abs(z) * x[1]
    x[1] += c * 0.5
'''

#: a loss of shared parameters theta over items (x, y), for reduce="sum"
FIT = '''
def fit(l, theta, x, y):
    with routine:
        z = 0.0
        for j in range(len(theta)):
            z += theta[j] * x[j]
        t = math.tanh(z)
    l += (t - y) * (t - y)
    ~routine
'''

#: a function whose item fails where s = 0
SCALED = '''
def scaled(y, x, s):
    y += x
    y *= s
'''

VARIANTS = [("numba", True), ("python", True), ("numba", False)]
IDS = ["numba", "python", "numba-unchecked"]


def _data(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    cams = rng.normal(size=(n, 6))
    cams[:, 5] = -5.0  # the points lie in front of the cameras
    return (np.zeros((n, 2)), cams, rng.normal(size=(n, 3)), rng.uniform(0.5, 2.0, n),
            rng.normal(size=(n, 2)))


@pytest.fixture(params=VARIANTS, ids=IDS)
def ns(request):
    backend, check = request.param
    return revbench.define(SRC, backend=backend, check=check)


def test_batched_jacobian_is_the_jacobian_of_each_item(ns):
    f = ns["project"]
    args = _data(7)
    saved = [a.copy() for a in args]
    jb = revbench.jacobian(f, outputs="r", wrt=("cam", "X", "w"),
                           batch=("r", "cam", "X", "w", "feat"))(*args)
    one = revbench.jacobian(f, outputs="r", wrt=("cam", "X", "w"))
    for i in range(7):
        ji = one(*(a[i] for a in args))
        for blk, ref in zip(jb, ji):
            np.testing.assert_array_equal(blk[i], ref)
    assert [b.shape for b in jb] == [(7, 2, 6), (7, 2, 3), (7, 2, 1)]
    for a, s in zip(args, saved):
        np.testing.assert_array_equal(a, s)  # the caller's arrays are untouched


def test_shared_arguments_and_a_single_block(ns):
    f = ns["project"]
    r, cams, X, _w, feat = _data(5)
    # one camera and one weight for every point
    jb = revbench.jacobian(f, outputs="r", wrt="X", batch=("r", "X", "feat"))(
        r, cams[0], X, 1.5, feat)
    one = revbench.jacobian(f, outputs="r", wrt="X")
    for i in range(5):
        np.testing.assert_array_equal(jb[i], one(r[i], cams[0], X[i], 1.5, feat[i]))


def test_many_rows_take_several_sweeps():
    # 12 outputs: more than the 8 seeds of one reverse sweep
    ns = revbench.define('''
def outer(y, a, b):
    for i in range(len(y)):
        y[i] += a[i % len(a)] * b[i % len(b)] * a[0]
''')
    rng = np.random.default_rng(1)
    y, a, b = np.zeros((4, 12)), rng.normal(size=(4, 3)), rng.normal(size=(4, 2))
    ja, jb = revbench.jacobian(ns["outer"], outputs="y", wrt=("a", "b"), batch=(0, 1, 2))(y, a, b)
    one = revbench.jacobian(ns["outer"], outputs="y", wrt=("a", "b"))
    for i in range(4):
        ra, rb = one(y[i], a[i], b[i])
        np.testing.assert_array_equal(ja[i], ra)
        np.testing.assert_array_equal(jb[i], rb)


def test_batched_value_and_grad_per_item(ns):
    f = ns["energy"]
    rng = np.random.default_rng(2)
    x, c, z = rng.normal(size=(6, 3)), rng.normal(size=6), rng.normal(size=6) + 1j
    e = np.zeros(6)
    outs, grads = revbench.value_and_grad(f, loss="e", batch=("e", "x", "c", "z"))(e, x, 0.7, c, z)
    vg = revbench.value_and_grad(f, loss="e")
    for i in range(6):
        o, g = vg(e[i], x[i], 0.7, c[i], z[i])
        assert outs[0][i] == o[0]
        np.testing.assert_array_equal(outs[1][i], o[1])
        assert outs[2] == 0.7  # shared, read-only: returned as given
        assert grads[0][i] == g[0] and grads[2][i] == g[2] and grads[3][i] == g[3]
        np.testing.assert_array_equal(grads[1][i], g[1])
        assert grads[4][i] == g[4]
    assert grads[1].shape == (6, 3) and grads[4].dtype == np.complex128
    np.testing.assert_array_equal(x[:, 1], x[:, 1])  # not modified (x is written by energy)
    g = revbench.grad(f, loss="e", batch=("e", "x", "c", "z"), wrt="x")(e, x, 0.7, c, z)
    np.testing.assert_array_equal(g[1], grads[1])


def test_loss_element_of_a_batched_array():
    ns = revbench.define('''
def two(y, x):
    y[0] += x * x
    y[1] += 3.0 * x
''')
    y, x = np.zeros((3, 2)), np.array([1.0, 2.0, 3.0])
    g = revbench.grad(ns["two"], loss=("y", 1), batch=("y", "x"))(y, x)
    np.testing.assert_array_equal(g[1], [3.0, 3.0, 3.0])
    g = revbench.grad(ns["two"], loss=("y", 0), batch=("y", "x"))(y, x)
    np.testing.assert_array_equal(g[1], 2 * x)


def test_input_is_not_changed_by_a_batched_written_argument():
    ns = revbench.define("def inc(y, x):\n    y += x\n    x *= 2.0\n")
    y, x = np.zeros(4), np.arange(1.0, 5.0)
    outs, g = revbench.value_and_grad(ns["inc"], loss="y", batch=(0, 1))(y, x)
    np.testing.assert_array_equal(outs[1], 2 * np.arange(1.0, 5.0))
    np.testing.assert_array_equal(x, np.arange(1.0, 5.0))
    np.testing.assert_array_equal(y, 0.0)
    np.testing.assert_array_equal(g[1], 1.0)


# -- bad input -------------------------------------------------------------------------
def test_batch_arguments_must_agree(ns):
    f = ns["project"]
    r, cams, X, w, feat = _data(4)
    jac = revbench.jacobian(f, outputs="r", wrt="X", batch=("r", "cam", "X", "w", "feat"))
    with pytest.raises(ValueError, match="disagree on the number of items: `r` has 4, `X` has 3"):
        jac(r, cams, X[:3], w, feat)
    with pytest.raises(TypeError, match="batch argument `w` must be an array"):
        jac(r, cams, X, 1.0, feat)
    with pytest.raises(ValueError, match="the batch is empty"):
        jac(r[:0], cams[:0], X[:0], w[:0], feat[:0])
    with pytest.raises(ValueError, match="is not an argument"):
        revbench.jacobian(f, outputs="r", wrt="X", batch=("nope",))
    with pytest.raises(ValueError, match="names an argument twice"):
        revbench.grad(f, loss="w", batch=("X", "X"))
    with pytest.raises(revbench.ReversibilityError, match="share memory"):
        jac(r, cams, X, w, X[:, :2])


def test_a_failing_item_raises_its_own_error_naming_it():
    ns = revbench.define(SCALED)
    y, x, s = np.zeros(5), np.ones(5), np.array([1.0, 2.0, 0.0, 3.0, 0.0])
    g = revbench.grad(ns["scaled"], loss="y", batch=(0, 1, 2))
    with pytest.raises(revbench.ReversibilityError, match="the operand is zero") as err:
        g(y, x, s)
    assert "batch item 2" in "".join(getattr(err.value, "__notes__", []))
    np.testing.assert_array_equal(y, 0.0)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_an_item_whose_sweep_does_not_recover_it_raises():
    # the standard map: item 0 (k = 0) moves in straight lines and comes back; item 1
    # (k = 6) is chaotic, and running it backwards does not recover its start
    ns = revbench.define(textwrap.dedent(CHAOS))
    x = np.array([[0.1, 0.7, 1.3, 2.9]] * 2)
    p = np.array([[0.0, 0.2, -0.3, 0.5]] * 2)
    g = revbench.grad(ns["chaos"], loss="L", batch=("L", "x", "p", "k"))
    with pytest.raises(revbench.ReversibilityError, match="did not recover the value of argument") \
            as err:
        g(np.zeros(2), x, p, np.array([0.0, 6.0]), 2000)
    assert "batch item 1" in str(err.value) + "".join(getattr(err.value, "__notes__", []))
    ok = g(np.zeros(1), x[:1], p[:1], np.array([0.0]), 2000)
    assert ok[1][0][0] == 1.0


@pytest.mark.parametrize("native", ["0", "1"], ids=["numba", "native"])
def test_driver_loads_from_the_cache_in_a_new_process(tmp_path, native):
    """The driver and its kernels, compiled by Numba (REVBENCH_NATIVE=0) or by the native
    code generator (one module for all three), are loaded by the next process."""
    code = textwrap.dedent('''
        import sys
        import numpy as np
        import revbench
        ns = revbench.define("def sq(y, x):\\n    y += x * x\\n")
        g = revbench.grad(ns["sq"], loss="y", batch=(0, 1))(np.zeros(3), np.arange(3.0))
        assert list(g[1]) == [0.0, 2.0, 4.0]
        from revbench.backends.native import engine
        from revbench.backends.numba_backend import _dispatchers
        hits = sum(sum(d.stats.cache_hits.values()) for name, d in list(_dispatchers.items())
                   if d.py_func.__name__ == "driver")
        print("hits", hits, "native", engine.stats["compiled"], engine.stats["loaded"])
    ''')
    env = {**os.environ, "REVBENCH_CACHE_DIR": str(tmp_path), "REVBENCH_NATIVE": native}
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                           timeout=300) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    if native == "0":
        assert "hits 0 native 0 0" in runs[0].stdout
        assert "hits 1 native 0 0" in runs[1].stdout
    else:  # (the driver's module holds its kernels: nothing else compiles)
        assert "hits 0 native 1 0" in runs[0].stdout, runs[0].stdout
        assert "hits 0 native 0 1" in runs[1].stdout, runs[1].stdout


#: docs/ad.md section 8: a user's driver of a kernel `fwd`, at module level, cached by Numba
USER_DRIVER = textwrap.dedent('''
    @numba.njit(cache=True)
    def driver(xs):
        out = 0.0
        for i in range(len(xs)):
            out += fwd(0.0, xs[i], 1e-8, 1e-8)[0]
        return out
''')
SQ_KERNEL = ("@revbench.reversible\ndef sq(y, x):\n    y += x * x\n\n"
             "fwd = sq.kernel('forward', 0.0, 1.0)\n")


def run_script(folder, script: str) -> subprocess.CompletedProcess:
    """``script`` (a file in ``folder``) in a fresh process, with the folder's own cache
    (Numba's too: its cache of the user's driver beside the script, in ``__pycache__``)."""
    env = {**os.environ, "REVBENCH_CACHE_DIR": str(folder / "cache")}
    env.pop("NUMBA_CACHE_DIR", None)
    return subprocess.run([sys.executable, script], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=300)


#: every kernel called through its slot by generated code (revbench.backends.numba_linking)
ALL_SLOTS = "import revbench.backends.numba_linking as L\nL.LINK_BELOW = 0\n"


@pytest.mark.slow  # a user's @njit driver, compiled by Numba in fresh processes
@pytest.mark.parametrize("slots", ["", ALL_SLOTS], ids=["small", "slotted"])
def test_a_users_module_level_driver_is_cached_across_processes(tmp_path, slots):
    """A kernel that generated code calls through its slot is linked into a user's driver
    all the same: Numba's cache of the driver has nothing to fill a slot with."""
    (tmp_path / "user_driver.py").write_text(
        "import numba\nimport numpy as np\nimport revbench\n\n" + slots + SQ_KERNEL + USER_DRIVER
        + "\nassert driver(np.arange(4.0)) == 14.0\n"
        "print('hits', sum(driver.stats.cache_hits.values()))\n")
    runs = [run_script(tmp_path, "user_driver.py") for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    assert "hits 0" in runs[0].stdout and "hits 1" in runs[1].stdout


@pytest.mark.slow  # a user's @njit driver, compiled by Numba in fresh processes
def test_a_driver_of_a_kernel_calling_through_slots_is_compiled_in_each_process(tmp_path):
    """A kernel whose function calls another through its slot, linked into a user's driver:
    Numba's cache of the driver would be loaded in another process with nothing to fill
    that slot (and LLVM would end the process).  The driver is not cached -- Numba warns --
    and is compiled again: correct results in every process, and no crash."""
    (tmp_path / "user_driver.py").write_text(
        "import numba\nimport numpy as np\nimport revbench\n\n" + ALL_SLOTS
        + SQ_KERNEL.replace("fwd = sq.kernel", "@revbench.reversible\ndef sq2(y, x):\n"
                            "    sq(y, x)\n\nfwd = sq2.kernel") + USER_DRIVER
        + "\nassert driver(np.arange(4.0)) == 14.0\n"
        "print('hits', sum(driver.stats.cache_hits.values()))\n")
    runs = [run_script(tmp_path, "user_driver.py") for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
        assert "hits 0" in r.stdout
    assert "Cannot cache compiled function \"driver\"" in runs[0].stderr, runs[0].stderr


@pytest.mark.slow  # a user's @njit driver, compiled by Numba in fresh processes
@pytest.mark.parametrize("slots", ["", ALL_SLOTS], ids=["small", "slotted"])
def test_a_stale_cached_driver_says_how_to_fix_it(tmp_path, slots):
    """Numba keys a cached driver on its own file only: after the kernels it calls change
    (here: the reversible function, edited in another file), loading it must not run the
    old kernels, and must say what to do rather than fail on a module name."""
    kern = tmp_path / "kern.py"
    kern.write_text("import revbench\n\n" + slots + SQ_KERNEL)
    (tmp_path / "drv.py").write_text("import numba\nimport numpy as np\nfrom kern import fwd\n"
                                     + USER_DRIVER + "\nprint('total', driver(np.arange(4.0)))\n")
    first = run_script(tmp_path, "drv.py")
    assert first.returncode == 0 and "total 14.0" in first.stdout, first.stderr
    kern.write_text(kern.read_text().replace("x * x", "2.0 * x * x"))
    stale = run_script(tmp_path, "drv.py")
    assert stale.returncode != 0 and "total" not in stale.stdout
    assert "StaleKernelError" in stale.stderr and "delete" in stale.stderr, stale.stderr
    for f in (tmp_path / "__pycache__").glob("drv.*.nb*"):
        f.unlink()
    fresh = run_script(tmp_path, "drv.py")
    assert fresh.returncode == 0 and "total 28.0" in fresh.stdout, fresh.stderr


def test_workers_run_chunks_of_items_with_the_same_results(ns):
    """workers=: chunks of items on CPU threads (the compiled driver releases the GIL):
    per-item results identical to one worker's, summed gradients equal to rounding."""
    f = ns["project"]
    n = 3 * batch_module.MIN_CHUNK + 7
    args = _data(n)
    batch = ("r", "cam", "X", "w", "feat")
    one = revbench.jacobian(f, outputs="r", wrt=("cam", "X"), batch=batch, workers=1)(*args)
    three = revbench.jacobian(f, outputs="r", wrt=("cam", "X"), batch=batch, workers=3)(*args)
    for a, b in zip(one, three):
        np.testing.assert_array_equal(a, b)
    g1 = revbench.grad(f, ("r", 0), batch=("r", "X", "w", "feat"), reduce="sum", workers=1)(
        args[0], args[1][0], *args[2:])
    g3 = revbench.grad(f, ("r", 0), batch=("r", "X", "w", "feat"), reduce="sum", workers=3)(
        args[0], args[1][0], *args[2:])
    assert g1[1].shape == (6,)
    np.testing.assert_allclose(g3[1], g1[1], rtol=1e-12)
    np.testing.assert_array_equal(g3[2], g1[2])


def test_chunks_split_items_evenly():
    assert batch_module.chunks(10, 4) == [(0, 10)]  # too few items to share
    m = batch_module.MIN_CHUNK
    assert batch_module.chunks(3 * m, 8) == [(0, m), (m, 2 * m), (2 * m, 3 * m)]
    assert batch_module.chunks(5 * m + 1, 2) == [(0, 5 * m // 2), (5 * m // 2, 5 * m + 1)]


def test_a_failing_item_in_a_later_chunk_is_found():
    f = revbench.define('''
def divide(y, x, a):
    x /= a
    y += x * x
''')["divide"]
    n = 4 * batch_module.MIN_CHUNK
    y, x, a = np.zeros(n), np.ones(n), np.ones(n)
    a[3 * batch_module.MIN_CHUNK + 5] = 0.0
    with pytest.raises(revbench.ReversibilityError) as exc:
        revbench.grad(f, "y", batch=("y", "x", "a"), workers=4)(y, x, a)
    assert any(f"batch item {3 * batch_module.MIN_CHUNK + 5}" in note
               for note in exc.value.__notes__)


@pytest.mark.parametrize("workers", [0, -1, 1.5, True])
def test_workers_must_be_a_positive_int(workers):
    f = revbench.define(SRC)["energy"]
    with pytest.raises(ValueError, match="workers"):
        revbench.grad(f, "e", batch=("e", "x"), workers=workers)
    with pytest.raises(ValueError, match="workers"):
        revbench.grad(f, "e", workers=2)


def test_a_batched_vjp_is_each_items_vjp(ns):
    """vjp(batch=): the outputs per item, and a pullback per item -- bit for bit the
    unbatched vjp's, and the cotangents times the batched Jacobian."""
    f = ns["project"]
    args = _data(23, seed=5)
    saved = [a.copy() for a in args]
    batch = ("r", "cam", "X", "w", "feat")
    outs, pullback = revbench.vjp(f, *args, outputs="r", wrt=("cam", "X", "w"), batch=batch)
    assert len(outs) == 1 and outs[0].shape == (23, 2)
    ct = np.random.default_rng(6).normal(size=(23, 2))
    ct_saved = ct.copy()
    g = pullback(ct)
    assert [a.shape for a in g] == [(23, 6), (23, 3), (23,)]
    for i in (0, 11, 22):
        item = (args[0][i].copy(), args[1][i], args[2][i], args[3][i].item(), args[4][i])
        o1, p1 = revbench.vjp(f, *item, outputs="r", wrt=("cam", "X", "w"))
        np.testing.assert_array_equal(outs[0][i], o1[0])
        gi = p1(ct[i])
        np.testing.assert_array_equal(g[0][i], gi[0])
        np.testing.assert_array_equal(g[1][i], gi[1])
        assert g[2][i] == gi[2]
    J = revbench.jacobian(f, "r", ("cam", "X", "w"), batch=batch)(*args)
    for a, jac in zip(g, J):
        np.testing.assert_allclose(a.reshape(23, -1), np.einsum("no,noc->nc", ct, jac),
                                   rtol=1e-12, atol=1e-14)
    assert np.array_equal(pullback(ct)[0], g[0])  # a pullback can be called again
    args[2][:] += 1.0  # the arguments changed after vjp: the pullback is vjp's own
    assert np.array_equal(pullback(ct)[0], g[0])
    args[2][:] = saved[2]
    assert not np.any(pullback(None)[0])  # None: a zero cotangent
    for a, s in zip((*args, ct), (*saved, ct_saved)):  # nothing the caller passed changed
        assert np.array_equal(a, s)
    # wrt=None: every float argument, aligned with all of them
    every = revbench.vjp(f, *args, outputs="r", batch=batch)[1](ct)
    assert len(every) == 5 and np.array_equal(every[1], g[0]) and every[3].shape == (23,)


def test_a_batched_vjp_sums_shared_gradients_and_refuses_bad_cotangents():
    f = revbench.define(FIT)["fit"]
    rng = np.random.default_rng(7)
    n, d = 40, 5
    theta, x, y = rng.normal(size=d), rng.normal(size=(n, d)), rng.normal(size=n)
    ct = rng.uniform(0.5, 2.0, size=n)
    _, pb = revbench.vjp(f, np.zeros(n), theta, x, y, outputs="l", wrt=("theta", "x"),
                         batch=("l", "x", "y"), reduce="sum")
    g_theta, g_x = pb(ct)
    t = np.tanh(x @ theta)
    per_item = (ct * 2 * (t - y) * (1 - t * t))[:, None]
    np.testing.assert_allclose(g_theta, (per_item * x).sum(axis=0), rtol=1e-11)  # hand-derived
    np.testing.assert_allclose(g_x, per_item * theta, rtol=1e-11)
    with pytest.raises(ValueError, match=r"cotangents of `l` have shape \(3,\); expected \(40,\)"):
        pb(np.ones(3))
    with pytest.raises(TypeError, match="one cotangent per output"):
        pb(ct, ct)
    with pytest.raises(TypeError, match="complex"):
        pb(ct + 1j)
    with pytest.raises(revbench.ReversibilityTypeError, match="must be float"):
        revbench.vjp(f, np.zeros(n), theta, x, np.arange(n), outputs="l", wrt="y",
                     batch=("l", "x", "y"))


def test_a_failing_item_of_a_batched_pullback_raises_its_own_error():
    ns = revbench.define(SCALED)
    y, x, s = np.zeros(5), np.ones(5), np.array([1.0, 2.0, 0.0, 3.0, 0.0])
    with pytest.raises(revbench.ReversibilityError, match="the operand is zero") as err:
        revbench.vjp(ns["scaled"], y, x, s, outputs="y", batch=(0, 1, 2))
    assert "batch item 2" in "".join(getattr(err.value, "__notes__", []))
    np.testing.assert_array_equal(y, 0.0)


TWO_OUTPUTS = """
def two(r, s, x, a):
    for i in range(len(x)):
        r[i] += a * x[i] * x[i]
    s += np.sum(x) * a
"""


@pytest.mark.parametrize("workers", [1, 2])
def test_batched_jacobian_of_several_outputs(ns, workers):
    """Blocks ``J[output][wrt]`` for two outputs and two wrt, item by item as the unbatched
    Jacobian (several outputs used to fail inside the driver call: one block per wrt was
    passed, not one per output and wrt)."""
    backend = ns["project"].backend
    f = revbench.define(TWO_OUTPUTS, {"np": np}, backend=backend)["two"]
    n = 5
    X = np.arange(1.0, 1.0 + 2 * n).reshape(n, 2)
    A = np.linspace(0.5, 1.5, n)
    J = revbench.jacobian(f, outputs=("r", "s"), wrt=("x", "a"), batch=("r", "s", "x", "a"),
                          workers=workers)(np.zeros((n, 2)), np.zeros(n), X, A)
    one = revbench.jacobian(f, outputs=("r", "s"), wrt=("x", "a"))
    assert [[b.shape for b in row] for row in J] == [[(n, 2, 2), (n, 2, 1)], [(n, 1, 2), (n, 1, 1)]]
    for i in range(n):
        ji = one(np.zeros(2), 0.0, X[i], A[i])
        for row, ref_row in zip(J, ji):
            for blk, ref in zip(row, ref_row):
                np.testing.assert_array_equal(blk[i], ref)


def test_workers_takes_numpy_integers_and_refuses_what_is_not_a_count():
    f = revbench.define("def en(e, x):\n    for i in range(len(x)):\n        e += x[i] * x[i]\n")["en"]
    args = (np.zeros(4), np.ones((4, 3)))
    want = revbench.grad(f, "e", batch=("e", "x"), workers=2)(*args)
    got = revbench.grad(f, "e", batch=("e", "x"), workers=np.int64(2))(*args)
    np.testing.assert_array_equal(got[1], want[1])
    for bad in (0, -1, 2.0, True, "2"):
        with pytest.raises(ValueError, match="workers must be a positive int"):
            revbench.grad(f, "e", batch=("e", "x"), workers=bad)(*args)
