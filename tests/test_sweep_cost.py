"""What a reverse sweep computes: each value once, nothing for checks that are off, no
adjoint of data (issue 48).

Each test reads the generated code to see that the work is really gone, and compares the
results with the same program compiled without the pass: the passes may only make the
code cheaper, never change a bit of what it computes.
"""

from __future__ import annotations

import math
import re

import numpy as np
import program_gen
import pytest
from generated_text import plain
from hypothesis import given, settings
from test_property import build, show, stable
from test_property_grad import SETTINGS

import revbench
from revbench.transforms import pipeline

LOGREG = """
def logreg(loss, w, X, y):
    for i in range(X.shape[0]):
        with routine:
            z = 0.0
            z += np.dot(X[i], w)
        loss += np.log1p(np.exp(z)) - y[i] * z
        ~routine
"""

MLP = """
def mlp(loss, W1, b1, W2, b2, X, Y):
    for s in range(X.shape[0]):
        with routine as hidden:
            h = np.zeros(len(b1))
            h += np.tanh(W1 @ X[s] + b1)
        loss += np.sum((W2 @ h + b2 - Y[s]) ** 2)
        ~hidden
"""


def define(source: str, **options):
    return list(revbench.define(source, {"np": np, "math": math}, **options).values())[-1]


def bits(values) -> list[bytes]:
    return [np.asarray(v, dtype=float).tobytes() for v in values if v is not None]


@pytest.fixture
def without_cse(monkeypatch):
    """Programs compiled after this, without the ``cse`` pass (a reference)."""
    def off():
        monkeypatch.setitem(pipeline.PASSES, "cse", lambda typed, host, req, d: typed)
    return off


def logreg_args(n=50, d=4, seed=0):
    rng = np.random.default_rng(seed)
    return 0.0, rng.normal(size=d), rng.normal(size=(n, d)), (rng.random(n) < 0.5) * 1.0


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_each_value_of_a_sweep_step_is_computed_once(backend):
    f = define(LOGREG, backend=backend, check=False)
    src = plain(f.source("adjoint", *logreg_args(), wrt="w"))
    assert src.count("_rb_np.exp(") == 1, src  # the undo's, and both partials', shared
    assert src.count("_rb_cse") >= 2, src
    # the loss is not restored (nothing reads it with checks off), and the data has no adjoint
    assert not re.search(r"^\s*loss -=", src, re.M), src
    assert "_rb_adj_X" not in src and "_rb_adj_y" not in src, src
    # the checked sweep restores the loss, with the same single exp
    checked = plain(define(LOGREG, backend=backend).source("adjoint", *logreg_args(), wrt="w"))
    assert re.search(r"^\s*loss -= .*_rb_cse", checked, re.M) and checked.count("exp(") == 1


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_the_sum_inside_a_partial_is_summed_once(backend):
    f = define(MLP, backend=backend, check=False)
    rng = np.random.default_rng(1)
    args = (0.0, rng.normal(size=(5, 3)), rng.normal(size=5), rng.normal(size=(2, 5)),
            rng.normal(size=2), rng.normal(size=(4, 3)), rng.normal(size=(4, 2)))
    src = f.source("adjoint", *args, wrt=("W1", "b1", "W2", "b2"))
    # one sum for the hidden layer's replay and one for the output layer, whose partials
    # share it; the hidden layer's adjoint reads tanh's value from h, where the replay left
    # it (h is a fresh ancilla: transforms/fresh.py), and sums nothing again
    # (the products of whole arrays are BLAS calls: no sum of them is written out)
    assert "_rb_matmul_update(" in src and "np.dot" not in src, src


MLP_MATRIX = """
def mlp(loss, W1, b1, W2, b2, X, Y):
    with routine as hidden:
        H = np.zeros((X.shape[0], W1.shape[0]))
        H += np.tanh(X @ W1.T + b1)
    loss += np.sum((H @ W2.T + b2 - Y) ** 2)
    ~hidden
"""


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_a_replayed_product_carries_no_adjoint_products(backend):
    """In the sweep, the replay of ``hidden`` and the products' ancillas start with zero
    adjoints: a product whose factor is a zero adjoint is no work (transforms/prune.py),
    so the sweep makes the two products of the replay and the three of the gradient
    (``X`` is not in ``wrt``: it has none) -- not the 10 calls it made when products of
    zero adjoints were kept."""
    rng = np.random.default_rng(4)
    args = (0.0, rng.normal(size=(5, 3)), rng.normal(size=5), rng.normal(size=(2, 5)),
            rng.normal(size=2), rng.normal(size=(4, 3)), rng.normal(size=(4, 2)))
    wrt = ("W1", "b1", "W2", "b2")
    f = define(MLP_MATRIX, backend=backend, check=False)
    src = plain(f.source("adjoint", *args, wrt=wrt))
    assert src.count("_rb_matmul_update(") == 5, src
    assert "_rb_adj_X" not in src, src
    g = revbench.grad(f, loss="loss", wrt=wrt)(*args)
    H = np.tanh(args[5] @ args[1].T + args[2])
    R = 2 * (H @ args[3].T + args[4] - args[6])
    np.testing.assert_allclose(g[3], R.T @ H, rtol=1e-12)
    np.testing.assert_allclose(g[1], ((R @ args[3]) * (1 - H * H)).T @ args[5], rtol=1e-12)


@pytest.mark.parametrize("backend", ["python", "numba"])
@pytest.mark.parametrize("check", [True, False])
def test_sharing_changes_no_bit_of_a_gradient(backend, check, without_cse):
    mlp_args = (0.0, *(np.random.default_rng(2).normal(size=s)
                       for s in ((5, 3), 5, (2, 5), 2, (4, 3), (4, 2))))
    got = {}
    for name in ("shared", "reference"):
        if name == "reference":
            without_cse()
        for source, args, wrt in ((LOGREG, logreg_args(), ("w",)),
                                  (MLP, mlp_args, ("W1", "b1", "W2", "b2"))):
            f = define(source, backend=backend, check=check)
            out, g = revbench.value_and_grad(f, loss="loss", wrt=wrt)(*args)
            got.setdefault(name, []).append(bits((out[0], *g)))
    assert got["shared"] == got["reference"]


def test_a_branch_not_taken_is_not_evaluated():
    """``sin(x) / x`` under ``x != 0`` is shared with nothing outside it: at x == 0 the
    sweep must not divide."""
    f = define("""
def f(y, x):
    y += (math.sin(x) / x if x != 0.0 else 1.0) + math.sin(x) / x * 0.0 * 0.0
""", backend="python", check=False)
    g = define("""
def g(y, x):
    y += math.sin(x) / x if x != 0.0 else 1.0
    y += math.exp(x) * math.exp(x)
""", backend="python", check=False)
    assert revbench.grad(g, loss="y")(0.0, 0.0) == (1.0, 2.0)
    with pytest.raises(ZeroDivisionError):  # (the unconditional quotient still divides)
        revbench.grad(f, loss="y")(0.0, 0.0)


def test_a_value_whose_operand_changes_is_computed_again():
    f = define("""
def f(y, x, c):
    y += math.exp(x) * c
    x += 1.0
    y += math.exp(x) * c
""", backend="python", check=False)
    x, c = 0.3, 2.0
    out, g = revbench.value_and_grad(f, loss="y")(0.0, x, c)
    assert out[0] == math.exp(x) * c + math.exp(x + 1.0) * c
    assert g[1] == pytest.approx(2 * c * math.exp(x + 1.0) - c * math.exp(x + 1.0)
                                 + c * math.exp(x), rel=1e-14)
    assert g[2] == pytest.approx(math.exp(x) + math.exp(x + 1.0), rel=1e-14)
    src = f.source("adjoint", 0.0, x, c)
    assert src.count("_rb_np.exp(x)") + src.count("_rb_libm.exp(x)") >= 2, src


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_the_kernel_for_your_own_loops_still_restores_the_arguments(backend):
    """``f.kernel("backward")`` returns the restored arguments (ad.md section 8), checks
    off too: only the sweeps of grad and the like skip restoring."""
    f = define(LOGREG, backend=backend, check=False)
    loss, w, X, y = logreg_args()
    out = f(loss, w, X, y)
    k = f.kernel("backward", *out, wrt="w")
    res = k(*out, 1.0, np.zeros_like(w), 1e-8, 1e-8)
    assert res[0] == pytest.approx(0.0, abs=1e-12)  # the loss, back at its entry value
    np.testing.assert_allclose(res[5], revbench.grad(f, loss="loss", wrt="w")(
        loss, w, X, y)[1], rtol=1e-14)


def test_kernel_and_source_take_wrt_as_grad_does():
    f = define(LOGREG, backend="python", check=False)
    args = logreg_args()
    for wrt in ("w", 1, ("w",), ["w"]):
        assert "_rb_adj_X" not in f.source("adjoint", *args, wrt=wrt)
        f.kernel("backward", *args, wrt=wrt)
    with pytest.raises(ValueError, match="wrt 'v' is not an argument"):
        f.source("adjoint", *args, wrt="v")
    with pytest.raises(ValueError, match="only the adjoint takes wrt"):
        f.source("forward", *args, wrt="w")
    assert "_rb_adj_X" in f.source("adjoint", *args)  # (every argument, as grad's default)


@settings(max_examples=30, **SETTINGS)
@given(program_gen.programs(mode="float"))
def test_generated_programs_same_gradient_bits_with_and_without_sharing(p):
    show(p)
    backend = "python"
    shared = build(p, backend, check=False)
    g1 = stable("grad (shared)", lambda: revbench.grad(shared, loss="a0")(*p.fresh_args()))
    saved = pipeline.PASSES["cse"]
    pipeline.PASSES["cse"] = lambda typed, host, req, d: typed
    try:
        plain_ = build(p, backend, check=False)
        g2 = stable("grad (reference)",
                    lambda: revbench.grad(plain_, loss="a0")(*p.fresh_args()))
    finally:
        pipeline.PASSES["cse"] = saved
    assert bits(g1) == bits(g2)


FRESH = """
def f(loss, w, x):
    for i in range(x.shape[0]):
        with routine:
            h = np.zeros(len(w))
            h += np.tanh(w * x[i])
            e = 0.0
            e += np.exp(np.dot(h, w))
            r = np.zeros(len(w))
            r += np.sqrt(w * w * x[i])
        loss += e * np.sum(r) + np.sum(h * h)
        ~routine
    with routine:
        m = 0.0
        m += np.max(w * x[0])
        z = 0.0
        z += np.sum(np.exp(w * x[0] - m))
        q = np.zeros(len(w))
        q += w * x[1] / z
        mm = np.max(w * x[3])
    loss += np.sum(q * q) + m + mm * mm
    ~routine
"""


@pytest.mark.parametrize("backend", ["python", "numba"])
@pytest.mark.parametrize("check", [True, False])
def test_reading_a_result_where_it_is_held_changes_no_bit(backend, check, monkeypatch):
    """tanh, exp, sqrt, a quotient and maxima held in fresh ancillas (updated once from
    zero, or allocated from the value and never changed): their partials read from the
    ancilla give the bits that computing them again gives (with x == 0 in the data: sqrt's
    guard)."""
    rng = np.random.default_rng(5)
    x = np.abs(rng.normal(size=(6, 3)))
    x[2, 1] = 0.0
    args = (0.0, rng.normal(size=3), x)
    f = define(FRESH, backend=backend, check=check)
    src = f.source("adjoint", *args)
    assert len(re.findall(r"tanh\w*\(", src)) == (2 if check else 1), src  # (checked: the exact undo)
    assert check or re.search(r"(\w+) = m\n", src), src  # the maximum, read from m
    assert re.search(r"(\w+) = mm\n", src), src  # (an allocated one: mm, even checked)
    got = bits(revbench.value_and_grad(f, loss="loss")(*args)[1])
    import revbench.transforms.adjoint as adjoint_module
    monkeypatch.setattr(adjoint_module, "fresh_updates", lambda body: {})
    again = define(FRESH, backend=backend, check=check)
    assert len(re.findall(r"tanh\w*\(", again.source("adjoint", *args))) == 2
    assert bits(revbench.value_and_grad(again, loss="loss")(*args)[1]) == got


def test_a_second_write_or_a_wrapping_index_is_not_fresh():
    from revbench.transforms.fresh import fresh_updates

    def fresh(src: str) -> int:
        return len(fresh_updates(define(src)._program.ir.body))

    assert fresh("def f(y, x):\n    t = 0.0\n    t += np.exp(x)\n    y += t\n    t -= np.exp(x)\n"
                 "    del t\n") == 0  # (written twice: the explicit uncompute)
    assert fresh("def f(y, x):\n    with routine:\n        t = 0.0\n        t += np.exp(x)\n"
                 "    y += t\n    ~routine\n") == 1
    assert fresh("def f(y, x):\n    with routine:\n        h = np.zeros(3)\n"
                 "        for i in range(-1, 2):\n            h[i] += np.exp(x)\n"
                 "    y += h[0]\n    ~routine\n") == 0  # h[-1] is h[2]: a negative index
    assert fresh("def f(y, x):\n    with routine:\n        h = np.zeros(3)\n"
                 "        for i in range(3):\n            h[0] += np.exp(x)\n"
                 "    y += h[0]\n    ~routine\n") == 0  # every iteration writes h[0]


def test_freshness_is_a_property_of_the_statement_itself_not_of_a_reused_id():
    """A regression: the sweep kept *ids* of fresh statements, and added the id of each
    element update it built from a fresh whole-array update.  That element statement was
    then dropped, and a later, unrelated statement allocated at the same address counted as
    fresh: its adjoint read a target that did not hold its value, and the gradient depended
    on the allocator's history (both backends, one run in five of the test suite)."""
    from dataclasses import replace

    from revbench.lang.types import VarType
    from revbench.transforms.adjoint import AdjointContext
    from revbench.transforms.fresh import fresh_updates

    f = define(FRESH)
    found = fresh_updates(f._program.ir.body)
    assert found and all(id(s) == k for k, s in found.items())
    ctx = AdjointContext(f._program.typed(pipeline.FORWARD, (VarType("float"), VarType("float", 1),
                                                      VarType("float", 2)), 1))
    one = next(iter(ctx.fresh.values()))
    assert ctx.is_fresh(one)
    assert not ctx.is_fresh(replace(one))  # (equal, but another statement: not fresh)
    # the gradient of a program with whole-array fresh updates, defined again and again
    # while other statements come and go: always the Python backend's, bit for bit
    rng = np.random.default_rng(3)
    args = (0.0, rng.normal(size=3), np.abs(rng.normal(size=(6, 3))))
    want = bits(revbench.value_and_grad(define(FRESH, backend="python"), loss="loss")(*args)[1])
    for _ in range(8):
        g = define(FRESH)
        assert bits(revbench.value_and_grad(g, loss="loss")(*args)[1]) == want


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_a_dirty_fresh_ancilla_still_fails_the_checked_gradient(backend):
    f = define("""
def f(y, x):
    t = 0.0
    t += np.tanh(x)
    y += t
    t -= np.tanh(x) * 0.5
    del t
""", backend=backend)
    with pytest.raises(revbench.ReversibilityError, match="ancilla `t`"):
        revbench.grad(f, loss="y")(0.0, 0.7)


@pytest.mark.parametrize("check", [True, False])
def test_data_the_program_only_reads_is_neither_copied_nor_changed(check):
    """A data matrix outside ``wrt=`` is passed to the kernels as it is: no copy of it and
    no adjoint of its shape (tracemalloc sees NumPy's allocations), and it comes back
    unchanged, after a gradient and after a failed one."""
    import tracemalloc

    f = define(LOGREG, check=check)
    loss, w, X, y = logreg_args(n=20_000, d=16)  # X: 2.5 MB
    before = X.copy()
    vg = revbench.value_and_grad(f, loss="loss", wrt="w")
    vg(loss, w, X, y)  # (compiled)
    tracemalloc.start()
    try:
        vg(loss, w, X, y)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < X.nbytes / 4, peak
    assert np.array_equal(X, before)
    bad = define(LOGREG.replace("loss += np.log1p(np.exp(z))", "loss += 1.0 / (z - z) + np.log1p(np.exp(z))"),
                 check=check)
    with pytest.raises((ZeroDivisionError, revbench.ReversibilityError)):
        revbench.value_and_grad(bad, loss="loss", wrt="w")(loss, w, X, y)
    assert np.array_equal(X, before)
