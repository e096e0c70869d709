"""``device="cuda"``: batched derivatives as CUDA kernels.

Run in Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, set by ``conftest.py`` unless
the environment says otherwise): the same generated kernels, in Python threads.  Every
result is compared with the CPU's ``batch=`` path and with finite differences; every
failure with the CPU's error.  ``test_kernels_compile_for_a_real_gpu`` compiles the
kernels to PTX with NVIDIA's NVVM (no GPU needed), which the simulator cannot vouch for.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from test_batch import FIT, _data  # _data: the items of test_batch's projection

import revbench

SRC = '''
def project(r, cam, X, w, feat):
    with routine:
        p = np.zeros(3)
        for j in range(3):
            p[j] += X[j] - cam[3 + j]
        u = p[0] / p[2] + cam[0] * p[1]
        v = p[1] / p[2] - cam[1] * p[0]
        d = math.sqrt(1.0 + cam[4] * cam[4])
    r[0] += w * (cam[2] * u * d - feat[0])
    r[1] += w * (cam[2] * v * d - feat[1])
    ~routine


def energy(e, x, k, c):
    e += k * np.sum(x * x) + c * x[0] + math.exp(0.1 * x[1])
    x[1] += c * 0.5


def divide(y, x, a):
    x /= a
    y += x * x


def pick(y, x, k):
    y += x[k] * x[k]


def observe(r, cams, ci, X, feat):
    for j in range(2):
        r[j] += cams[ci, j] * X[j] + cams[ci, 2] * X[2] - feat[j]


def special(y, x, k):
    y += np.sign(x[0]) * math.lgamma(x[1] * x[1] + 0.5) + np.sign(x[0] - x[1]) * x[2]
    y += np.sign(k) * x[2]
    y += np.fmax(x[2], 0.0) + np.minimum(k, 2) * x[2] + np.maximum(x[0], x[2])


def sized(y, x, n):
    t = np.zeros(n)
    t[0] += x[0]
    y += t[0] * t[0]
    t[0] -= x[0]
    del t
''' + FIT


@pytest.fixture(scope="module", params=[True, False], ids=["checked", "unchecked"])
def ns(request):
    return revbench.define(SRC, check=request.param)


BATCH = ("r", "cam", "X", "w", "feat")


def test_batched_jacobian_on_the_gpu_is_the_cpus(ns):
    f = ns["project"]
    args = _data(37)
    saved = [a.copy() for a in args]
    cpu = revbench.jacobian(f, outputs="r", wrt=("cam", "X", "w"), batch=BATCH)(*args)
    gpu = revbench.jacobian(f, outputs="r", wrt=("cam", "X", "w"), batch=BATCH,
                            device="cuda")(*args)
    for a, b in zip(cpu, gpu):
        assert isinstance(b, np.ndarray) and b.shape == a.shape
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-300)
    for a, s in zip(args, saved):  # the caller's arrays are unchanged
        assert np.array_equal(a, s)


def test_jacobian_against_finite_differences(ns):
    f = ns["project"]
    r, cam, X, w, feat = _data(5, seed=1)
    (J,) = [revbench.jacobian(f, outputs="r", wrt="cam", batch=BATCH, device="cuda")(
        r, cam, X, w, feat)]
    eps = 1e-6
    for i in range(5):
        for j in range(6):
            cp, cm = cam.copy(), cam.copy()
            cp[i, j] += eps
            cm[i, j] -= eps
            rp, rm = np.zeros((5, 2)), np.zeros((5, 2))
            for k in range(5):
                f(rp[k], cp[k], X[k], w[k], feat[k])
                f(rm[k], cm[k], X[k], w[k], feat[k])
            np.testing.assert_allclose(J[i, :, j], (rp[i] - rm[i]) / (2 * eps), rtol=1e-5,
                                       atol=1e-7)


def test_value_and_grad_and_grad_with_shared_arguments(ns):
    f = ns["energy"]
    rng = np.random.default_rng(2)
    n = 19
    e, x, k, c = np.zeros(n), rng.normal(size=(n, 4)), rng.uniform(1, 2, n), 0.7
    cpu = revbench.value_and_grad(f, "e", batch=("e", "x", "k"))(e, x, k, c)
    gpu = revbench.value_and_grad(f, "e", batch=("e", "x", "k"), device="cuda")(e, x, k, c)
    for a, b in zip(cpu[0], gpu[0]):  # outputs: per item; the shared c as it is
        np.testing.assert_allclose(b, a, rtol=1e-12)
    for a, b in zip(cpu[1], gpu[1]):
        assert (a is None) == (b is None)
        if a is not None:
            assert np.shape(b) == np.shape(a)
            np.testing.assert_allclose(b, a, rtol=1e-12)
    # hand-derived: de/dx = 2 k x + c e_0 + 0.1 exp(0.1 x_1) e_1; de/dk = sum x^2
    gx = 2 * k[:, None] * x
    gx[:, 0] += c
    gx[:, 1] += 0.1 * np.exp(0.1 * x[:, 1])
    grads = revbench.grad(f, "e", batch=("e", "x", "k"), device="cuda")(e, x, k, c)
    np.testing.assert_allclose(grads[1], gx, rtol=1e-12)
    np.testing.assert_allclose(grads[2], np.sum(x * x, axis=1), rtol=1e-12)


def test_summed_gradients_of_shared_parameters(ns):
    """reduce="sum": the gradient of the total loss; shared parameters summed over the
    items (by a tree per block and atomic adds, or in a fixed order), data per item."""
    f = ns["fit"]
    rng = np.random.default_rng(3)
    n, d = 300, 6
    theta, x, y = rng.normal(size=d), rng.normal(size=(n, d)), rng.normal(size=n)
    args = (np.zeros(n), theta, x, y)
    per_item = revbench.grad(f, "l", batch=("l", "x", "y"))(*args)
    cpu = revbench.grad(f, "l", batch=("l", "x", "y"), reduce="sum")(*args)
    assert cpu[1].shape == (d,) and cpu[2].shape == (n, d)
    np.testing.assert_allclose(cpu[1], per_item[1].sum(axis=0), rtol=1e-12)
    # hand-derived: dl/dtheta = sum_i 2 (tanh(theta.x_i) - y_i) (1 - tanh^2) x_i
    t = np.tanh(x @ theta)
    np.testing.assert_allclose(cpu[1], ((2 * (t - y) * (1 - t * t))[:, None] * x).sum(0),
                               rtol=1e-10)
    runs = []
    # A GPU's tanh may differ from the C library's in the last digit, and both 1 - t^2
    # (near |t| = 1) and t - y (near t = y) cancel, so the per-item gradient
    # 2 (t - y)(1 - t^2) theta is compared to rounding of its factors, not of itself (on an
    # H200, an entry differed by more than 1e-10 of the largest in its row); the sum, to
    # rounding of its terms.  (In the simulator, which calls Python's math, they are equal.)
    factors = (2 * np.abs(t - y) + 2)[:, None]  # bounds |2 (t - y)| + |2 (1 - t^2)|
    item_bound = 1e-12 * (factors * np.abs(theta) + np.abs(cpu[2]))  # (dl/dx_i ~ theta)
    sum_bound = 1e-12 * (factors * np.abs(x) + np.abs(per_item[1])).sum(axis=0)
    for deterministic in (False, True, True):
        g = revbench.grad(f, "l", batch=("l", "x", "y"), reduce="sum", device="cuda",
                          deterministic=deterministic)(*args)
        assert np.all(np.abs(g[1] - cpu[1]) <= sum_bound)
        assert np.all(np.abs(g[2] - cpu[2]) <= item_bound)
        runs.append(g[1])
    assert np.array_equal(runs[1], runs[2])  # deterministic: bit-identical run to run
    vg = revbench.value_and_grad(f, "l", batch=("l", "x", "y"), reduce="sum",
                                 device="cuda")(*args)
    np.testing.assert_allclose(vg[0][0], (t - y) ** 2, rtol=1e-12)
    with pytest.raises(ValueError, match="reduce"):
        revbench.grad(f, "l", batch=("l", "x", "y"), reduce="mean")


@pytest.mark.parametrize("n", [1, 2])
def test_a_sum_over_one_item_is_that_items_gradient(ns, n):
    """A batch of one item runs the kernel on one item, as the re-run of a failing item
    does; its sum must still be added (it was lost, all zeros, before the re-run got a flag
    of its own).  Both modes, and the pullback's sums."""
    f = ns["fit"]
    rng = np.random.default_rng(11)
    theta, x, y = rng.normal(size=3), rng.normal(size=(n, 3)), rng.normal(size=n)
    cpu = revbench.grad(f, "l", batch=("l", "x", "y"), reduce="sum")(np.zeros(n), theta, x, y)
    assert np.any(cpu[1] != 0.0)
    for deterministic in (False, True):
        g = revbench.grad(f, "l", batch=("l", "x", "y"), reduce="sum", device="cuda",
                          deterministic=deterministic)(np.zeros(n), theta, x, y)
        np.testing.assert_allclose(g[1], cpu[1], rtol=1e-12)
        _, pb = revbench.vjp(f, np.zeros(n), theta, x, y, outputs="l", wrt="theta",
                             batch=("l", "x", "y"), reduce="sum", device="cuda",
                             deterministic=deterministic)
        np.testing.assert_allclose(pb(np.ones(n))[0], cpu[1], rtol=1e-12)


def test_a_failing_item_of_a_summed_gradient_raises_the_cpus_error():
    f = revbench.define("def scaled(y, w, a):\n    y += w * w / a\n")["scaled"]
    for n in (1, 5):
        a = np.linspace(1.0, 2.0, n)
        a[n - 1] = 0.0
        with pytest.raises((ZeroDivisionError, revbench.ReversibilityError)) as gpu:
            revbench.grad(f, "y", batch=("y", "a"), reduce="sum", device="cuda")(
                np.zeros(n), 1.5, a)
        assert any(f"batch item {n - 1}" in note for note in gpu.value.__notes__)


def test_index_arrays_read_shared_tables(ns):
    """Observations share cameras through an index array, as in bundle adjustment."""
    f = ns["observe"]
    rng = np.random.default_rng(4)
    n, ncams = 50, 4
    cams, ci = rng.normal(size=(ncams, 3)), rng.integers(0, ncams, n)
    X, feat = rng.normal(size=(n, 3)), rng.normal(size=(n, 2))
    batch = ("r", "ci", "X", "feat")
    cpu = revbench.jacobian(f, outputs="r", wrt=("cams", "X"), batch=batch)(
        np.zeros((n, 2)), cams, ci, X, feat)
    gpu = revbench.jacobian(f, outputs="r", wrt=("cams", "X"), batch=batch, device="cuda")(
        np.zeros((n, 2)), cams, ci, X, feat)
    for a, b in zip(cpu, gpu):
        np.testing.assert_allclose(b, a, rtol=1e-12)
    assert gpu[1][7, 1, 1] == cams[ci[7], 1]
    tot = revbench.grad(f, ("r", 0), batch=batch, reduce="sum", device="cuda",
                        deterministic=True)(np.zeros((n, 2)), cams, ci, X, feat)
    expect = np.zeros((ncams, 3))
    np.add.at(expect[:, 0], ci, X[:, 0])
    np.add.at(expect[:, 2], ci, X[:, 2])
    np.testing.assert_allclose(tot[1], expect, rtol=1e-12)


def test_functions_cudas_math_library_lacks(ns):
    """``np.sign`` (floats and ints: CUDA's math has none), ``lgamma``, whose derivative
    digamma is revbench's own Python (:mod:`revbench.rules.special`), and NumPy's extremes
    (the same module's, for ints and floats), compiled for the device as for the CPU."""
    f = ns["special"]
    x = np.array([[1.0, -2.0, 0.5], [-3.0, 0.25, 2.0], [0.0, 1.5, -1.0], [2.0, 2.0, 1.0]])
    k = np.array([3, -1, 0, 7])
    cpu = revbench.value_and_grad(f, "y", batch=("y", "x", "k"))(np.zeros(4), x, k)
    gpu = revbench.value_and_grad(f, "y", batch=("y", "x", "k"), device="cuda")(
        np.zeros(4), x, k)
    np.testing.assert_allclose(gpu[0][0], cpu[0][0], rtol=1e-13)
    np.testing.assert_allclose(gpu[1][1], cpu[1][1], rtol=1e-13)
    # hand-derived: d/dx1 of sign(x0) lgamma(x1^2 + 1/2) = sign(x0) digamma(x1^2 + 1/2) 2 x1
    from scipy.special import digamma
    np.testing.assert_allclose(gpu[1][1][:, 1],
                               np.sign(x[:, 0]) * digamma(x[:, 1] ** 2 + 0.5) * 2 * x[:, 1],
                               rtol=1e-12)


def test_a_failing_item_raises_the_cpus_error_naming_the_item():
    f = revbench.define(SRC)["divide"]
    n = 9
    y, x, a = np.zeros(n), np.linspace(1, 2, n), np.linspace(1, 2, n)
    a[6] = 0.0
    saved = [v.copy() for v in (y, x, a)]
    with pytest.raises(revbench.ReversibilityError) as cpu:
        revbench.grad(f, "y", batch=("y", "x", "a"))(y, x, a)
    with pytest.raises(revbench.ReversibilityError) as gpu:
        revbench.grad(f, "y", batch=("y", "x", "a"), device="cuda")(y, x, a)
    assert str(gpu.value) == str(cpu.value)
    assert "line" in str(gpu.value) and "`a`" in str(gpu.value)
    assert any("batch item 6" in note and "GPU" in note for note in gpu.value.__notes__)
    for v, s in zip((y, x, a), saved):
        assert np.array_equal(v, s)


def test_an_index_out_of_range_is_reported_not_read():
    f = revbench.define(SRC)["pick"]
    n = 6
    y, x, k = np.zeros(n), np.ones((n, 4)), np.array([0, 1, 2, 3, 7, 1])
    with pytest.raises(IndexError) as gpu:
        revbench.grad(f, "y", batch=("y", "x", "k"), device="cuda")(y, x, k)
    assert any("batch item 4" in note for note in gpu.value.__notes__)
    k[4] = -2  # negative indices count from the end, as on the CPU
    g = revbench.grad(f, "y", batch=("y", "x", "k"), device="cuda")(y, x, k)
    assert g[1][4, 2] == 2.0


def test_without_checks_nothing_is_checked_on_the_gpu_either():
    f = revbench.define(SRC, check=False)["divide"]
    y, x, a = np.zeros(3), np.ones(3), np.array([1.0, 2.0, 4.0])
    g = revbench.grad(f, "y", batch=("y", "x", "a"), device="cuda")(y, x, a)
    np.testing.assert_allclose(g[1], 2 * x / a / a)


def test_a_size_that_depends_on_data_is_refused_at_its_line():
    f = revbench.define(SRC)["sized"]
    with pytest.raises(revbench.ReversibilityTypeError) as exc:
        revbench.grad(f, "y", batch=("y", "x"), device="cuda")(np.zeros(2), np.ones((2, 3)), 3)
    msg = str(exc.value)
    assert "`n`" in msg and "depends on data" in msg and "t = np.zeros(n)" in msg
    assert exc.value.lineno is not None


def test_device_arrays_in_device_arrays_out(ns):
    from numba import cuda

    f = ns["project"]
    args = _data(11)
    cpu = revbench.jacobian(f, outputs="r", wrt="X", batch=BATCH)(*args)
    dev = [cuda.to_device(a) for a in args]
    J = revbench.jacobian(f, outputs="r", wrt="X", batch=BATCH, device="cuda")(*dev)
    assert cuda.devicearray.is_cuda_ndarray(J) and not isinstance(J, np.ndarray)
    np.testing.assert_allclose(J.copy_to_host(), cpu, rtol=1e-12)
    assert np.array_equal(dev[1].copy_to_host(), args[1])  # inputs unchanged


@pytest.mark.parametrize("case", ["dtype", "items", "no-batch", "device", "list", "aliased"])
def test_bad_input_gets_a_clear_error(case):
    f = revbench.define(SRC)["energy"]
    e, x, k = np.zeros(4), np.ones((4, 3)), np.ones(4)
    api = revbench.grad
    if case == "dtype":
        with pytest.raises(TypeError, match="float32"):
            api(f, "e", batch=("e", "x", "k"), device="cuda")(e, x.astype(np.float32), k, 1.0)
    elif case == "items":
        with pytest.raises(ValueError, match="disagree on the number of items"):
            api(f, "e", batch=("e", "x", "k"), device="cuda")(e, x, np.ones(5), 1.0)
    elif case == "no-batch":
        with pytest.raises(ValueError, match="batch="):
            api(f, "e", device="cuda")
    elif case == "device":
        with pytest.raises(ValueError, match="device must be one of"):
            api(f, "e", batch="e", device="tpu")
    elif case == "aliased":  # as on the CPU: an update of one would change the other
        both = np.ones((4, 4))
        with pytest.raises(revbench.ReversibilityError, match="share memory"):
            api(f, "e", batch=("e", "x", "k"), device="cuda")(both[:, 0], both[:, 1:], k, 1.0)
    else:
        with pytest.raises(TypeError, match="`x` is a list"):
            api(f, "e", batch=("e", "x", "k"), device="cuda")(e, x.tolist(), k, 1.0)


@pytest.mark.parametrize("what", ["print", "complex", "complex-constant", "custom-adjoint"])
def test_what_the_gpu_cannot_run_is_refused_before_running(what):
    """(``complex-constant``: no variable is complex, an intermediate value is: it was run,
    with the imaginary part dropped -- a wrong gradient.)"""
    body = {"print": "    y += x\n    print(y)\n",
            "complex": "    z += x * 1j\n    y += x\n",
            "complex-constant": "    z += x\n    y += abs(x * (1.0 + 2j))\n",
            "custom-adjoint": "    y += x * x\n"}[what]
    f = revbench.define(f"def g(y, x, z):\n{body}")["g"]
    if what == "custom-adjoint":
        revbench.custom_adjoint(f)(lambda y, x, z, gy, gx, gz: (gy, gx + 2 * x * gy, gz))
    args = (np.zeros(3), np.ones(3), np.zeros(3, dtype=complex if what == "complex" else float))
    try:
        with pytest.raises(revbench.ReversibilityTypeError, match="on the GPU") as exc:
            revbench.grad(f, "y", wrt="x", batch=("y", "x", "z"), device="cuda")(*args)
    finally:  # adjoints are registered by (module, name): leave none for later tests
        if what == "custom-adjoint":
            revbench.remove_adjoint(f)
    assert {"print": "print", "complex": "complex", "complex-constant": "complex",
            "custom-adjoint": "custom adjoint"}[what] in str(exc.value)
    if what == "complex":  # the line that sets it (not the decorator's)
        assert "line 2: z += x * 1j" in str(exc.value)
    if what == "complex-constant":
        assert "`x * (1.0 + 2j)` is complex" in str(exc.value)
        assert "line 3: y += abs(x * (1.0 + 2j))" in str(exc.value)


PTX_SCRIPT = textwrap.dedent('''
    import sys, types
    import numpy as np
    from revbench.backends import cuda_backend
    cuda = cuda_backend.cuda_module()
    import numba.cuda.dispatcher as dispatcher
    # no GPU here: tell numba-cuda which one to compile for (an H100's sm_90)
    dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=(9, 0))
    import revbench
    from revbench.ad import gpu
    src = open(sys.argv[1]).read()
    ns = revbench.define(src, check=sys.argv[2] == "1")
    compiled = []

    class OnHost(gpu.Arguments):  # the arguments' types, without copying to a GPU
        def __init__(self, args, batch, params, api):
            self.host, self.device, self.kind = list(args), list(args), "numpy"
            self.batch, self.params, self.api = batch, params, api
            self.n = args[batch[0]].shape[0]

    def to_ptx(bat, lay, args, item, rows, block_shapes, value_shapes, tolerance,
               cotangents=()):
        from numba import typeof
        drv = gpu.Driver(bat, lay, tuple(tuple(np.shape(a)) for a in item))
        seeds = [np.zeros(len(rows), np.int64)] * 3
        blocks = [np.zeros(s) for s in block_shapes]
        values = [np.zeros(s, dt) for s, dt in value_shapes]
        partials = [np.zeros((2, block_shapes[i][2])) for i, w in enumerate(lay.wrt)
                    if lay.summed and lay.summed[w]]
        argv = [*args.device, *seeds, *blocks, *values, *cotangents, *partials,
                np.zeros(3, np.int64), 0, 1, 0, 0.0, 0.0, 0.0, 0.0]
        ptx, _ = cuda.compile_ptx(drv.kernel.py_func, tuple(typeof(a) for a in argv),
                                  cc=(9, 0))
        assert ".target sm_90" in ptx
        compiled.append(len(ptx))
        return blocks, values

    gpu.Arguments, gpu.run = OnHost, to_ptx
    cuda_backend.require_gpu = lambda: None
    n = 4
    rng = np.random.default_rng(0)
    args = (np.zeros((n, 2)), rng.normal(size=(n, 6)), rng.normal(size=(n, 3)), np.ones(n),
            np.ones((n, 2)))
    revbench.jacobian(ns["project"], outputs="r", wrt=("cam", "X", "w"),
                      batch=("r", "cam", "X", "w", "feat"), device="cuda")(*args)
    revbench.value_and_grad(ns["energy"], "e", batch=("e", "x", "k"), device="cuda")(
        np.zeros(n), np.ones((n, 3)), np.ones(n), 0.5)
    revbench.grad(ns["special"], "y", batch=("y", "x", "k"), device="cuda")(
        np.zeros(n), np.ones((n, 3)), np.ones(n, np.int64))
    for deterministic in (False, True):  # shared parameters' gradients summed
        revbench.grad(ns["fit"], "l", batch=("l", "x", "y"), reduce="sum", device="cuda",
                      deterministic=deterministic)(np.zeros(n), np.ones(3), np.ones((n, 3)),
                                                   np.ones(n))
    cuda.to_device = lambda a: a  # (the pullback's cotangents, for their types)
    outs, pullback = revbench.vjp(ns["project"], *args, outputs="r", wrt=("cam", "X"),
                                  batch=("r", "cam", "X", "w", "feat"), device="cuda")
    pullback(np.ones((n, 2)))  # (the forward run's kernel, then the pullback's)
    print("PTX", compiled)
''')


def _nvvm_available() -> bool:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    probe = ("from numba.cuda.cudadrv import nvvm; nvvm.NVVM(); print('ok')")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env,
                       timeout=120)
    return r.stdout.strip().endswith("ok")


@pytest.mark.slow  # PTX for a real GPU, in a process of its own (15 s)
@pytest.mark.parametrize("check", ["1", "0"], ids=["checked", "unchecked"])
def test_kernels_compile_for_a_real_gpu(check, tmp_path: Path):
    """The simulator runs Python; a GPU runs what NVVM makes of Numba's lowering.  Compile
    the kernels (forward, reverse sweep, driver) to PTX for sm_90, without a GPU."""
    if not _nvvm_available():
        pytest.skip("NVIDIA's NVVM is not installed (pip install 'numba-cuda[cu12]')")
    src = tmp_path / "src.py"
    src.write_text(SRC)
    script = tmp_path / "ptx.py"
    script.write_text(PTX_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, str(script), str(src), check], capture_output=True,
                       text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "PTX [" in r.stdout


CACHE_SCRIPT = textwrap.dedent('''
    import os
    from revbench.backends import cuda_backend, loader
    cuda_backend.cuda_module()
    src = "def kernel(a):\\n    a[0] = 1.0\\n"
    fn = cuda_backend.compile_kernel("c" * 32, src, "kernel", {})
    cache = fn._cache
    locator = cache._impl.locator
    path = locator._py_file
    assert type(cache).__name__ == "KernelCache", type(cache)
    assert os.path.dirname(locator.get_cache_path()) == os.path.dirname(path)
    before = locator.get_source_stamp()
    loader.write_source("c" * 32, src)  # the next process's load: the same text, touched
    os.utime(path, (1, 1))
    assert locator.get_source_stamp() == before, "a touched file must keep its cache"
    with open(path, "a") as f:
        f.write("# edited\\n")
    assert locator.get_source_stamp() != before, "an edited file must not"
    print("stamp ok")
''')


def test_a_cached_gpu_kernel_is_keyed_on_its_text_not_its_file_time(tmp_path: Path):
    """numba-cuda stamps a cache with the source file's time and size; revbench touches a
    generated file whenever it is used (for pruning), so each new process found the GPU
    kernels' cache stale and compiled again (9.3 s for a BA Jacobian's first call "from
    the cache" on an H200, 1.5 s once fixed).  The stamp is now the file's digest, as Numba's
    CPU cache does.  (Without the simulator: no GPU is needed to build the cache object.)"""
    script = tmp_path / "cache.py"
    script.write_text(CACHE_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["REVBENCH_CACHE_DIR"] = str(tmp_path / "cache")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "stamp ok" in r.stdout


def test_a_batched_vjp_on_the_gpu_is_the_cpus(ns):
    """vjp(batch=, device="cuda"): the outputs and the pullback of every item, as the CPU
    computes them; device arrays in, device arrays out; summed shared gradients."""
    f = ns["project"]
    args = _data(29, seed=8)
    ct = np.random.default_rng(9).normal(size=(29, 2))
    cpu_outs, cpu_pb = revbench.vjp(f, *args, outputs="r", wrt=("cam", "X", "w"), batch=BATCH)
    outs, pb = revbench.vjp(f, *args, outputs="r", wrt=("cam", "X", "w"), batch=BATCH,
                            device="cuda")
    np.testing.assert_allclose(outs[0], cpu_outs[0], rtol=1e-12)
    for a, b in zip(cpu_pb(ct), pb(ct)):
        assert isinstance(b, np.ndarray) and b.shape == a.shape
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-300)
    from revbench.backends import cuda_backend

    cuda = cuda_backend.cuda_module()
    dev = [cuda.to_device(a) for a in args]
    _, dpb = revbench.vjp(f, *dev, outputs="r", wrt="cam", batch=BATCH, device="cuda")
    (g_cam,) = dpb(cuda.to_device(ct))
    assert cuda.devicearray.is_cuda_ndarray(g_cam)
    np.testing.assert_allclose(g_cam.copy_to_host(), cpu_pb(ct)[0], rtol=1e-12)
    with pytest.raises(TypeError, match="float64"):
        dpb(cuda.to_device(ct.astype(np.float32)))

    fit = ns["fit"]
    rng = np.random.default_rng(10)
    n, d = 64, 4
    theta, x, y, w = rng.normal(size=d), rng.normal(size=(n, d)), rng.normal(size=n), \
        rng.uniform(0.5, 2.0, n)
    for deterministic in (False, True):
        _, gpb = revbench.vjp(fit, np.zeros(n), theta, x, y, outputs="l", wrt="theta",
                              batch=("l", "x", "y"), reduce="sum", device="cuda",
                              deterministic=deterministic)
        _, cpb = revbench.vjp(fit, np.zeros(n), theta, x, y, outputs="l", wrt="theta",
                              batch=("l", "x", "y"), reduce="sum")
        np.testing.assert_allclose(gpb(w)[0], cpb(w)[0], rtol=1e-11)


def test_a_failing_item_of_a_gpu_vjp_raises_the_cpus_error():
    f = revbench.define(SRC)["divide"]
    x, a = np.linspace(1.0, 2.0, 6), np.linspace(1.0, 2.0, 6)
    a[4] = 0.0
    with pytest.raises(revbench.ReversibilityError) as cpu:
        revbench.vjp(f, np.zeros(6), x, a, outputs="y", batch=("y", "x", "a"))
    with pytest.raises(revbench.ReversibilityError) as gpu:
        revbench.vjp(f, np.zeros(6), x, a, outputs="y", batch=("y", "x", "a"), device="cuda")
    assert str(gpu.value) == str(cpu.value) and "`a`" in str(gpu.value)
    assert any("batch item 4" in note and "GPU" in note for note in gpu.value.__notes__)


def test_jax_arrays_in_jax_arrays_out(ns):
    """JAX arrays (here on the CPU: the simulator's GPU memory is the host's) go in and the
    results come back as JAX arrays on the device the inputs were on; the pullback of a vjp
    takes JAX cotangents.  JAX's default float32 is refused with the switch that fixes it."""
    jax = pytest.importorskip("jax")
    f = ns["project"]
    args = _data(13, seed=4)
    cpu = revbench.jacobian(f, outputs="r", wrt=("cam", "X"), batch=BATCH)(*args)
    ct = np.random.default_rng(5).normal(size=(13, 2))
    _, cpu_pb = revbench.vjp(f, *args, outputs="r", wrt="cam", batch=BATCH)
    with jax.enable_x64(True):
        jargs = [jax.numpy.asarray(a) for a in args]
        J = revbench.jacobian(f, outputs="r", wrt=("cam", "X"), batch=BATCH, device="cuda")(*jargs)
        for a, b in zip(cpu, J):
            assert isinstance(b, jax.Array) and b.dtype == np.float64
            assert b.devices() == jargs[0].devices()
            np.testing.assert_allclose(np.asarray(b), a, rtol=1e-12, atol=1e-300)
        _, pb = revbench.vjp(f, *jargs, outputs="r", wrt="cam", batch=BATCH, device="cuda")
        (g,) = pb(jax.numpy.asarray(ct))
        assert isinstance(g, jax.Array)
        np.testing.assert_allclose(np.asarray(g), cpu_pb(ct)[0], rtol=1e-12)
        for a, ja in zip(args, jargs):  # the caller's arrays are unchanged
            assert np.array_equal(np.asarray(ja), a)
    single = [jax.numpy.asarray(a, dtype=np.float32) for a in args]
    with pytest.raises(TypeError, match=r"float32.*jax_enable_x64"):
        revbench.jacobian(f, outputs="r", wrt="X", batch=BATCH, device="cuda")(*single)


def test_a_jax_array_is_read_through_dlpack():
    """The CUDA array interface revbench builds from a JAX array's DLPack capsule (what a
    kernel reads on a real GPU) names the array's own memory, shape, strides and dtype."""
    jax = pytest.importorskip("jax")
    pytest.importorskip("cuda.core")
    from revbench.backends import cuda_arrays

    with jax.enable_x64(True):
        a = jax.numpy.arange(12.0).reshape(3, 4)
        cai = cuda_arrays.dlpack_interface(a)
        assert cai["data"][0] == a.unsafe_buffer_pointer()
        assert cai["shape"] == (3, 4) and cai["typestr"] == "<f8"
        assert cai["strides"] in (None, (32, 8)) and cai["version"] == 3
        view = np.ctypeslib.as_array(  # the same numbers, read at that address
            (ctypes.c_double * 12).from_address(cai["data"][0])).reshape(3, 4)
        assert np.array_equal(view, np.asarray(a))
    assert cuda_arrays.kind_of(a) == "jax-host" and not cuda_arrays.on_device(a)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_batched_calls_refuse_what_plain_calls_refuse(device):
    """Batched, on either device, as unbatched: an int named in wrt= is an error (never a
    silent None); loss=(name, -1) is the last element; a 0-d array cannot carry items; a
    float32 (or int32) array of items is refused, not converted item by item."""
    ns = revbench.define(SRC + "\ndef res(r, x, k):\n    for i in range(len(r)):\n"
                               "        r[i] += x[i] * x[i] * k\n")
    res = ns["res"]
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    k = np.array([2, 3])
    with pytest.raises(revbench.ReversibilityTypeError, match="`k` is named in wrt="):
        revbench.grad(res, ("r", 0), ("x", "k"), batch=("r", "x", "k"), device=device)(
            np.zeros((2, 3)), x, k)
    last = revbench.grad(res, ("r", -1), "x", batch=("r", "x", "k"), device=device)(
        np.zeros((2, 3)), x, k)
    np.testing.assert_array_equal(last[1], [[0.0, 0.0, 12.0], [0.0, 0.0, 36.0]])
    e = revbench.define(SRC)["energy"]
    with pytest.raises(TypeError, match="batch argument `k` must be an array"):
        revbench.grad(e, "e", batch=("e", "x", "k"), device=device)(
            np.zeros(2), np.ones((2, 3)), np.array(1.0), 0.5)
    for bad in ("float32", "int32"):
        with pytest.raises(TypeError, match=f"`k` has dtype {bad}"):
            revbench.grad(e, "e", batch=("e", "x", "k"), device=device)(
                np.zeros(2), np.ones((2, 3)), np.ones(2, dtype=bad), 0.5)


def test_the_simulators_math_errors_become_the_cpus_error():
    """Python's math (the simulator's) raises on sqrt(-1) where a GPU gives nan: the item
    the CPU fails on is found and its checked error raised, as for a failing check."""
    f = revbench.define("def root(y, x):\n    y += math.sqrt(x)\n")["root"]
    x = np.array([1.0, -1.0, 4.0])
    with pytest.raises(revbench.ReversibilityError, match="infinite or nan") as err:
        revbench.grad(f, "y", batch=("y", "x"), device="cuda")(np.zeros(3), x)
    assert any("batch item 1" in note and "simulator" in note for note in err.value.__notes__)


NO_GPU_SCRIPT = textwrap.dedent('''
    import numpy as np, revbench
    from numba import cuda
    if cuda.is_available():
        print("HAS-GPU")
        raise SystemExit
    f = revbench.define("def f(y, x):\\n    y += x * x\\n")["f"]
    x = np.ones(3)
    try:
        revbench.grad(f, "y", batch=("y", "x"), device="cuda")(np.zeros(3), x)
    except RuntimeError as exc:
        print(type(exc).__name__, exc, (x == 1).all())
''')


def test_without_a_gpu_or_the_simulator_the_error_says_what_to_do():
    """(The first copy of an argument used to reach the CUDA driver first: Numba's
    CudaSupportError, "CUDA driver library cannot be found".)"""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, "-c", NO_GPU_SCRIPT], capture_output=True, text=True,
                       env=env, timeout=300)
    if "HAS-GPU" in r.stdout:
        pytest.skip("this machine has a GPU")
    assert "RuntimeError device='cuda': no usable CUDA GPU" in r.stdout, r.stdout + r.stderr
    assert "NUMBA_ENABLE_CUDASIM=1" in r.stdout and r.stdout.strip().endswith("True")


def test_a_jacobian_of_several_outputs_is_the_cpus():
    """(One block per wrt was allocated, not one per output and wrt: the kernel call failed.)"""
    f = revbench.define("def two(r, s, x, a):\n    for i in range(len(x)):\n"
                        "        r[i] += a * x[i] * x[i]\n    s += np.sum(x) * a\n",
                        {"np": np})["two"]
    n = 4
    args = (np.zeros((n, 2)), np.zeros(n), np.arange(1.0, 1.0 + 2 * n).reshape(n, 2),
            np.linspace(0.5, 1.5, n))
    api = revbench.jacobian(f, outputs=("r", "s"), wrt=("x", "a"), batch=("r", "s", "x", "a"))
    gpu = revbench.jacobian(f, outputs=("r", "s"), wrt=("x", "a"), batch=("r", "s", "x", "a"),
                            device="cuda")
    for row_c, row_g in zip(api(*args), gpu(*args)):
        for c, g in zip(row_c, row_g):
            np.testing.assert_array_equal(g, c)
