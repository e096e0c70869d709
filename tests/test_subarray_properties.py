"""Property tests of sub-arrays: random slices and rows against NumPy, on every variant.

For random bounds (negative, empty, out of range) and random row indices, a
statement on sub-arrays must either do exactly what the same NumPy statement
does, or raise a clear error with checks on (bounds NumPy would clip, overlapping
pieces, shapes that differ) and leave the data as it was.  The inverse must
give the inputs back, and the gradient must agree with central differences.
"""

from __future__ import annotations

import re

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import revbench

SRC = '''
def slices(y, x, a, b, c, d, w):
    y[a:b] += w * x[c:d]


def strided(y, x, a, b, c, d, w):
    y[a:b:2] += w * x[c:d:3]


def odd_even(x, a, b, c, d, w):
    x[a:b:2] += w * x[c:d:2]


def rows(A, B, i, j, k, w):
    A[i] += w * B[j] - np.max(B[k, 1:])
'''
NS = {b: revbench.define(SRC, backend=b) for b in ("numba", "python")}
UNCHECKED = revbench.define(SRC, check=False)

BOUND = st.integers(-7, 7)


def _numpy_slices(y, x, a, b, c, d, w):
    """What NumPy does, or None where revbench must refuse (clipped bounds, shapes)."""
    n, m = len(y), len(x)

    def norm(v, size):
        return v + size if v < 0 else v

    (a2, b2), (c2, d2) = (norm(a, n), norm(b, n)), (norm(c, m), norm(d, m))
    if not (0 <= a2 <= b2 <= n and 0 <= c2 <= d2 <= m) or b2 - a2 != d2 - c2:
        return None
    out = y.copy()
    out[a2:b2] += w * x[c2:d2]
    return out


@settings(max_examples=80, deadline=None)
@given(a=BOUND, b=BOUND, c=BOUND, d=BOUND, w=st.floats(-3, 3))
def test_slices_do_what_numpy_does_or_refuse(a, b, c, d, w):
    x = np.arange(1.0, 7.0)
    want = _numpy_slices(np.zeros(5), x, a, b, c, d, w)
    for backend, ns in NS.items():
        y = np.zeros(5)
        try:
            out = ns["slices"](y, x, a, b, c, d, w)
        except revbench.ReversibilityError as err:
            assert want is None, f"{backend} refused a valid statement: {err}"
            assert "out of range" in str(err) or "same shape" in str(err)
            np.testing.assert_array_equal(y, 0.0)  # nothing changed
            continue
        assert want is not None, f"{backend} accepted y[{a}:{b}] += w * x[{c}:{d}]"
        np.testing.assert_array_equal(out[0], want)
        back = (~ns["slices"])(*out)
        np.testing.assert_allclose(back[0], 0.0, atol=1e-12)
    if want is not None:  # unchecked code computes the same where the statement is valid
        np.testing.assert_array_equal(UNCHECKED["slices"](np.zeros(5), x, a, b, c, d, w)[0], want)


def _numpy_strided(y, x, a, b, c, d, w, same: bool):
    """NumPy's ``y[a:b:2] += w * x[c:d:3]`` (``x[a:b:2] += w * x[c:d:2]`` when ``same``), or
    None where revbench must refuse: clipped bounds, shapes that differ, or (one array) two
    views that share an element."""
    n, m = len(y), len(x)

    def norm(v, size):
        return v + size if v < 0 else v

    (a2, b2), (c2, d2) = (norm(a, n), norm(b, n)), (norm(c, m), norm(d, m))
    if not (0 <= a2 <= b2 <= n and 0 <= c2 <= d2 <= m):
        return None
    left, right = range(a2, b2, 2), range(c2, d2, 2 if same else 3)
    if len(left) != len(right) or (same and set(left) & set(right)):
        return None
    out = y.copy()
    if same:
        out[a2:b2:2] += w * out[c2:d2:2]
    else:
        out[a2:b2:2] += w * x[c2:d2:3]
    return out


@settings(max_examples=80, deadline=None)
@given(a=BOUND, b=BOUND, c=BOUND, d=BOUND, w=st.floats(-3, 3), same=st.booleans())
def test_strided_slices_do_what_numpy_does_or_refuse(a, b, c, d, w, same):
    """Steps: the elements each view covers, its length, bounds, and odd/even views of one
    array, which may update each other only where they share no element."""
    x = np.arange(1.0, 8.0)
    want = _numpy_strided(x if same else np.zeros(6), x, a, b, c, d, w, same)
    for backend, ns in NS.items():
        y = x.copy() if same else np.zeros(6)
        before = y.copy()
        args = (y, a, b, c, d, w) if same else (y, x, a, b, c, d, w)
        try:
            out = ns["odd_even" if same else "strided"](*args)
        except revbench.ReversibilityError as err:
            assert want is None, f"{backend} refused a valid statement: {err}"
            assert any(w_ in str(err) for w_ in ("out of range", "same shape", "overlap"))
            np.testing.assert_array_equal(y, before)  # nothing changed
            continue
        assert want is not None, f"{backend} accepted it (same={same}, {a}:{b}, {c}:{d})"
        np.testing.assert_array_equal(out[0], want)
        back = (~ns["odd_even" if same else "strided"])(*out)
        np.testing.assert_allclose(back[0], before, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(i=st.integers(-4, 3), j=st.integers(-4, 3), k=st.integers(-4, 3), w=st.floats(-3, 3),
       seed=st.integers(0, 2**16))
def test_rows_do_what_numpy_does_and_differentiate(i, j, k, w, seed):
    rng = np.random.default_rng(seed)
    A0, B = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    want = A0.copy()
    want[i] += w * B[j] - np.max(B[k, 1:])
    for ns in NS.values():
        A = A0.copy()
        out = ns["rows"](A, B, i, j, k, w)
        np.testing.assert_allclose(out[0], want, rtol=1e-15, atol=1e-15)
        back = (~ns["rows"])(*out)
        np.testing.assert_allclose(back[0], A0, rtol=1e-12, atol=1e-12)
    g = revbench.grad(NS["numba"]["rows"], loss=("A", (i % 4, 0)))(A0.copy(), B, i, j, k, w)
    # d A[i, 0] / d B[j, 0] = w (j, k refer to other rows or to columns 1:)
    assert g[1][j % 4, 0] == w
    assert g[5] == B[j % 4, 0]


CALLS = revbench.define('''
def axpy(y, w, x):
    y += w * x


def pieces(x, w, a, b, c, d):
    axpy(x[a:b], w, x[c:d])
''')


@settings(max_examples=80, deadline=None)
@given(a=st.integers(0, 6), b=st.integers(0, 6), c=st.integers(0, 6), d=st.integers(0, 6))
def test_two_pieces_of_one_array_in_a_call_must_not_overlap(a, b, c, d):
    x0 = np.arange(1.0, 7.0)
    x = x0.copy()
    valid = a <= b and c <= d and b - a == d - c
    overlap = max(a, c) < min(b, d)
    try:
        CALLS["pieces"](x, 2.0, a, b, c, d)
    except revbench.ReversibilityError as err:
        assert not valid or overlap, str(err)
        np.testing.assert_array_equal(x, x0)
        return
    assert valid and not overlap
    want = x0.copy()
    want[a:b] += 2.0 * x0[c:d]
    np.testing.assert_array_equal(x, want)


STRIDED = revbench.define('''
def strided(x, a, b, c, d):
    x[a:b:2] += x[c:d:3]
''')


@settings(max_examples=200, deadline=None)
@given(a=st.integers(0, 9), b=st.integers(0, 9), c=st.integers(0, 9), d=st.integers(0, 9))
def test_strided_views_are_refused_exactly_when_they_share_an_element(a, b, c, d):
    """Strided views overlap where their *elements* meet: ``x[1:2]`` and ``x[0:2:2]`` ({1}
    and {0}) are disjoint though their slices' bounds interleave.  Sharing an element is
    refused (with the caller's array unchanged); disjoint views run as NumPy."""
    x0 = np.arange(1.0, 10.0)
    x = x0.copy()
    target, read = range(9)[a:b:2], range(9)[c:d:3]
    shared = set(target) & set(read)
    try:
        STRIDED["strided"](x, a, b, c, d)
    except revbench.ReversibilityError as err:
        np.testing.assert_array_equal(x, x0)
        assert a > b or c > d or len(target) != len(read) or shared, str(err)
        if "overlap" in str(err):  # exactly when they share one, naming the first and last
            assert shared, str(err)
            found = re.search(r"index (-?\d+) to (-?\d+)|share index (-?\d+)", str(err)).groups()
            lo, hi = (int(found[0]), int(found[1])) if found[0] else (int(found[2]),) * 2
            assert (lo, hi) == (min(shared), max(shared)), str(err)
        return
    assert a <= b and c <= d and len(target) == len(read) and not shared
    want = x0.copy()
    want[a:b:2] += x0[c:d:3]
    np.testing.assert_array_equal(x, want)
