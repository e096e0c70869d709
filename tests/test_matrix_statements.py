"""A model written as a model reads: transposes, broadcast biases, outer products, a
product of products, elementwise functions of 2-D arrays, sums along an axis of them.

``Z += X @ W.T + b``, ``H += np.tanh(Z)``, ``C += np.outer(u, v)``, ``y += (A @ B) @ x``:
lowered once types are known (:mod:`revbench.lang.products`).  Checked on both backends
against NumPy for values, by round trips through the inverse, against central
differences and hand-derived formulas for gradients, and for the message of every
misuse (a shape mismatch is located at its line).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import revbench
from revbench import ReversibilityTypeError

MODELS = '''
@reversible
def mlp(loss, W1, b1, W2, b2, X, Y):
    """A two-layer tanh network's squared error, as the formula reads."""
    with routine as hidden:
        H = np.zeros((X.shape[0], W1.shape[0]))
        H += np.tanh(X @ W1.T + b1)
    loss += np.sum((H @ W2.T + b2 - Y) ** 2)
    ~hidden

@reversible
def affine(Z, X, W, b):
    Z += X @ W.T + b

@reversible
def bias(Z, b, c):
    Z += b
    Z -= 2.0 * c * b

@reversible
def outer(C, u, v, A):
    C += np.outer(u, v) + A.T

@reversible
def chain(y, D, A, B, x):
    y += (A @ B) @ x
    D += A.T @ (A @ B)

@reversible
def attention(loss, Wq, Wk, Wv, X):
    """One attention head without the softmax: ((X Wq^T)(X Wk^T)^T)(X Wv^T)."""
    with routine as proj:
        Q = np.zeros((X.shape[0], Wq.shape[0]))
        K = np.zeros((X.shape[0], Wk.shape[0]))
        V = np.zeros((X.shape[0], Wv.shape[0]))
        Q += X @ Wq.T
        K += X @ Wk.T
        V += X @ Wv.T
    with routine as scores:
        S = np.zeros((X.shape[0], X.shape[0]))
        S += np.tanh(Q @ K.T)
    loss += np.sum((S @ V) ** 2)
    ~scores
    ~proj

@reversible
def columns(t, s, A, b):
    t += np.sum(A.T * b, axis=1)
    s += np.sum(A.T * b) + np.sum(np.tanh(A.T))
'''


def _data(seed=0, n=6, d=4, h=5, o=3):
    rng = np.random.default_rng(seed)
    return dict(W1=rng.normal(size=(h, d)), b1=rng.normal(size=h), W2=rng.normal(size=(o, h)),
                b2=rng.normal(size=o), X=rng.normal(size=(n, d)), Y=rng.normal(size=(n, o)))


def _mlp_numpy(W1, b1, W2, b2, X, Y):
    """The loss and its gradients, derived by hand."""
    H = np.tanh(X @ W1.T + b1)
    R = H @ W2.T + b2 - Y
    dR = 2.0 * R
    dH = dR @ W2 * (1.0 - H * H)
    return np.sum(R ** 2), dH.T @ X, dH.sum(axis=0), dR.T @ H, dR.sum(axis=0)


@pytest.fixture
def models(make):
    return make(MODELS, all=True)


def test_mlp_as_a_model_reads(models):
    d = _data()
    f = models["mlp"]
    loss, *grads = _mlp_numpy(**d)
    out = f(0.0, *d.values())
    assert out[0] == pytest.approx(loss, rel=1e-13)
    g = revbench.grad(f, loss="loss", wrt=("W1", "b1", "W2", "b2"))(0.0, *d.values())
    for got, want in zip(g[1:5], grads):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12)
    revbench.check_grad(f, 0.0, *d.values(), loss="loss", wrt=("W1", "b1", "W2", "b2"))
    back = (~f)(*out)
    assert abs(back[0]) < 1e-12 and all(np.array_equal(a, b) for a, b in
                                         zip(back[1:], d.values()))


def test_bias_is_added_to_every_row(models):
    rng = np.random.default_rng(1)
    X, W, b = rng.normal(size=(7, 3)), rng.normal(size=(4, 3)), rng.normal(size=4)
    Z0 = rng.normal(size=(7, 4))
    Z = models["affine"](Z0.copy(), X, W, b)[0]
    np.testing.assert_allclose(Z, Z0 + (X @ W.T + b), rtol=1e-14, atol=1e-14)
    # the same bits as the element-by-element formula the docs give
    want = np.array([[Z0[i, j] + (sum(X[i, k] * W[j, k] for k in range(3)) + b[j])
                      for j in range(4)] for i in range(7)])
    assert np.array_equal(Z, want)
    back = (~models["affine"])(Z, X, W, b)[0]
    np.testing.assert_allclose(back, Z0, rtol=0, atol=1e-14)
    got = models["bias"](Z0.copy(), b, 0.25)[0]
    assert np.array_equal(got, (Z0 + b) - 2.0 * 0.25 * b)


def test_outer_transpose_and_products_of_products(models):
    rng = np.random.default_rng(2)
    u, v, A = rng.normal(size=3), rng.normal(size=4), rng.normal(size=(4, 3))
    C = models["outer"](np.zeros((3, 4)), u, v, A)[0]
    np.testing.assert_allclose(C, np.outer(u, v) + A.T, rtol=1e-15)
    B, x = rng.normal(size=(3, 5)), rng.normal(size=5)
    y, D, *_ = models["chain"](np.zeros(4), np.zeros((3, 5)), A, B, x)
    np.testing.assert_allclose(y, (A @ B) @ x, rtol=1e-13)
    np.testing.assert_allclose(D, A.T @ (A @ B), rtol=1e-13)
    # the ancilla holding A @ B is uncomputed exactly: the inverse gives zeros back
    back = (~models["chain"])(y, D, A, B, x)
    assert np.abs(back[0]).max() < 1e-14 and np.abs(back[1]).max() < 1e-14
    g = revbench.grad(models["chain"], loss=("y", 1), wrt=("A", "B", "x"))(
        np.zeros(4), np.zeros((3, 5)), A, B, x)
    # d y[1] / d A[i, j] = delta(i, 1) (B x)[j]
    want = np.zeros_like(A)
    want[1] = B @ x
    np.testing.assert_allclose(g[2], want, rtol=1e-13)
    np.testing.assert_allclose(g[3], np.outer(A[1], x), rtol=1e-13)
    np.testing.assert_allclose(g[4], A[1] @ B, rtol=1e-13)
    revbench.check_grad(models["chain"], np.zeros(4), np.zeros((3, 5)), A, B, x,
                        loss=("D", (2, 1)))


def test_attention_head_gradient(models):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(6, 4))
    W = [0.5 * rng.normal(size=(3, 4)) for _ in range(3)]
    f = models["attention"]
    Q, K, V = (X @ w.T for w in W)
    want = np.sum((np.tanh(Q @ K.T) @ V) ** 2)
    assert f(0.0, *W, X)[0] == pytest.approx(want, rel=1e-13)
    revbench.check_grad(f, 0.0, *W, X, loss="loss", wrt=("Wq", "Wk", "Wv"))


def test_sums_along_axes_of_transposes_and_broadcasts(models):
    rng = np.random.default_rng(4)
    A, b = rng.normal(size=(3, 4)), rng.normal(size=3)
    t, s, *_ = models["columns"](np.zeros(4), 0.0, A, b)
    np.testing.assert_allclose(t, np.sum(A.T * b, axis=1), rtol=1e-14)
    assert s == pytest.approx(np.sum(A.T * b) + np.sum(np.tanh(A.T)), rel=1e-14)
    revbench.check_grad(models["columns"], np.zeros(4), 0.0, A, b, loss="s")


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4), st.booleans(), st.booleans(),
       st.integers(0, 2**32 - 1))
def test_products_with_transposes_match_numpy(m, n, k, ta, tb, seed):
    """``C += op(A) @ op(B) + b`` for every placement of transposes, on small integer values
    (exact in floating point), forward and back."""
    rng = np.random.default_rng(seed)
    A = rng.integers(-3, 4, size=(k, m) if ta else (m, k)).astype(float)
    B = rng.integers(-3, 4, size=(n, k) if tb else (k, n)).astype(float)
    b = rng.integers(-3, 4, size=n).astype(float)
    left, right = ("A.T" if ta else "A"), ("B.T" if tb else "B")
    f = revbench.define(f"@reversible\ndef f(C, A, B, b):\n    C += {left} @ {right} + b\n",
                        {"np": np})["f"]
    C0 = rng.integers(-3, 4, size=(m, n)).astype(float)
    C = f(C0.copy(), A, B, b)[0]
    assert np.array_equal(C, C0 + ((A.T if ta else A) @ (B.T if tb else B) + b))
    assert np.array_equal((~f)(C, A, B, b)[0], C0)


@pytest.mark.parametrize("source, args, words", [
    ("Z += X @ W.T + b", ((2, 3), (2, 4), (3, 4), (2,)),
     "`b` must have the shape of `Z` (axis 0; axis 1 of `Z`: broadcasting aligns the last axes)"),
    ("Z += X @ W.T", ((2, 3), (2, 4), (3, 5), (3,)),
     "`X @ W.T`: `W.T` must have as many rows as `X` has columns"),
    ("Z += np.outer(b, b)", ((2, 3), (2, 4), (3, 4), (3,)),
     "`np.outer(b, b)` must have the shape of `Z` (axis 0)"),
])
def test_shape_mismatches_are_located(source, args, words):
    f = revbench.define(f"@reversible\ndef f(Z, X, W, b):\n    {source}\n", {"np": np})["f"]
    with pytest.raises(revbench.ShapeMismatchError) as info:
        f(*(np.ones(s) for s in args))
    assert words in str(info.value) and "line 3" in str(info.value)
    assert isinstance(info.value, AssertionError) and isinstance(info.value, revbench.ReversibilityError)


@pytest.mark.parametrize("source, words", [
    ("Z += T.T", "of a 3-D array is not supported"),
    ("Z += s.T", "only arrays have a transpose"),
    ("Z += np.outer(T[0], b)", "np.outer() takes 1-D array expressions"),
    ("b += Z", "the right-hand side cannot have more"),
    ("s += np.outer(b, b)", "is an array (float64[:, :]) but a scalar is needed"),
])
def test_misuses_say_what_to_write(source, words):
    src = f"@reversible\ndef f(Z, T, b, s):\n    {source}\n"
    with pytest.raises(ReversibilityTypeError) as info:
        f = revbench.define(src, {"np": np})["f"]
        f(np.ones((2, 3)), np.ones((2, 2, 2)), np.ones(3), 0.0)
    assert words in str(info.value) and "line 3" in str(info.value)
