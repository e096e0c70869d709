"""The compiled call wrapper of native kernels (revbench.backends.native.pycall).

After a kernel's first call, later calls with the same argument types go through a
CPython function compiled with the kernel: it checks every argument's type itself and
hands anything else back to the type dispatch.  These tests call each function at least
twice -- the second call is the wrapper's -- and compare with the Numba-compiled kernel
(``REVBENCH_NATIVE=0``), and with the first call.
"""

from __future__ import annotations

import sys
import textwrap
import threading

import numpy as np
import pytest

import revbench
from revbench.backends.native import engine


def define(source: str, **options):
    fns = revbench.define(textwrap.dedent(source), {"np": np}, **options)
    return list(fns.values())[-1]


SCALE = define("""
    def scale(y, x, k, flag, a):
        if flag:
            y += x * k
        else:
            y -= x * k
        for i in range(len(a)):
            a[i] += x * i
""")


def copy(a):
    """A copy of an argument, an array's layout kept (a strided one stays strided)."""
    if not isinstance(a, np.ndarray) or a.flags.c_contiguous:
        return a.copy() if isinstance(a, np.ndarray) else a
    b = np.zeros(2 * a.size, a.dtype)[::2].reshape(a.shape)
    b[...] = a
    assert not b.flags.c_contiguous
    return b


def call(fn, *args):
    """``fn`` on copies of ``args``: its results, or its error's type and message."""
    args = tuple(copy(a) for a in args)
    try:
        return fn(*args)
    except Exception as exc:
        return type(exc).__name__, str(exc)


def same(a, b) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and a.tobytes() == b.tobytes()
    return type(a) is type(b) and (a == b or (a != a and b != b))


def through_both(monkeypatch, fn, *args):
    """Each call twice natively (the second through the wrapper) and once by Numba."""
    first, second = call(fn, *args), call(fn, *args)
    monkeypatch.setenv("REVBENCH_NATIVE", "0")
    numba = call(fn, *args)
    monkeypatch.setenv("REVBENCH_NATIVE", "1")
    return first, second, numba


def runner_of(fn, *args):
    sig = fn.signature_of(args)
    return engine.runner(fn._code_for_call(sig).run)


def test_the_second_call_goes_through_the_wrapper_and_gives_the_same_results(monkeypatch):
    if not engine._fast_layout():
        pytest.skip("the call wrapper is off here (another CPython or NumPy layout)")
    args = (0.5, 1.25, 3, True, np.arange(4.0))
    first, second, numba = through_both(monkeypatch, SCALE, *args)
    assert same(first, second) and same(first, numba)
    r = runner_of(SCALE, *args)
    assert r.last is not None and r.last.fast is not None
    out = r.last.fast(0.5, 1.25, 3, True, np.arange(4.0), 1e-9, 1e-9)
    assert isinstance(out, tuple) and out[0] == 0.5 + 1.25 * 3


ROTATE = define("""
    def rotate(z, w, x, a):
        z += w * x
        for i in range(len(a)):
            a[i] += z * 1j
""")


@pytest.mark.parametrize("args", [
    (0.5 - 1j, 2j, 0.25, np.zeros(3, dtype=complex)),
    (complex(-0.0, 0.0), complex(1e308, -1e308), 2.0, np.ones(3, dtype=complex)),
    (complex(float("nan"), 1.0), -0.0j, 1.0, np.zeros(2, dtype=complex)[::1]),
])
def test_complex_numbers_go_through_the_wrapper_too(monkeypatch, args):
    """Complex scalars are read from the complex objects and built anew by the wrapper; a
    complex128 array is taken as any other."""
    if not engine._fast_layout():
        pytest.skip("the call wrapper is off here (another CPython or NumPy layout)")
    first, second, numba = through_both(monkeypatch, ROTATE, *args)
    assert same(first, second) and same(first, numba), (first, second, numba)
    r = runner_of(ROTATE, *args)
    assert r.last is not None and r.last.fast is not None
    out = r.last.fast(*(a.copy() if isinstance(a, np.ndarray) else a for a in args), 1e-9, 1e-9)
    if isinstance(first, tuple) and len(first) == 4:  # (returned: the wrapper built z)
        assert isinstance(out, tuple) and same(out[0], first[0]) and type(out[0]) is complex
    else:  # (a failed check: the wrapper hands back the failure record)
        assert first[0] == "ReversibilityError" and isinstance(out, bytes), (first, out)
    # another type -- a NumPy complex scalar, a float where the complex was -- goes on to
    # the type dispatch, and agrees
    for other in ((np.complex128(args[0]), *args[1:]), (1.5, *args[1:])):
        a, b, c = through_both(monkeypatch, ROTATE, *other)
        assert same(a, b) and same(a, c), (a, b, c)


@pytest.mark.parametrize("other", [
    (0.5, 1.25, 3, False, np.arange(4.0)),                    # the other bool
    (0.5, 1.25, -1, True, np.arange(4.0)),                    # -1: PyLong_AsLongLong's error value
    (0.5, 1.25, 2**62, True, np.arange(4.0)),                 # a large int
    (0.5, 1.25, 3, np.True_, np.arange(4.0)),                 # a NumPy bool: another type
    (0.5, 1.25, 3.0, True, np.arange(4.0)),                   # a float where an int was
    (0.5, np.float64(1.25), 3, True, np.arange(4.0)),         # a NumPy float (a float subclass)
    (0.5, 1.25, 3, True, np.arange(8.0)[::2]),                # strided, not contiguous
    (0.5, 1.25, 3, True, np.arange(4.0).reshape(1, 4)[0]),    # a view: contiguous all the same
    (0.5, 1.25, 3, True, np.arange(4, dtype=np.int64)),       # another dtype
    (0.5, 1.25, 3, True, np.arange(4.0).astype(">f8")),       # big-endian
    (0.5, 1.25, 3, True, np.arange(4.0).view(np.recarray)),   # an ndarray subclass
])
def test_any_other_argument_goes_to_the_type_dispatch_and_agrees_with_numba(monkeypatch, other):
    """After calls of one type, a call of another: the wrapper declines it, and the
    result is the one the type dispatch (and Numba) gives."""
    base = (0.5, 1.25, 3, True, np.arange(4.0))
    call(SCALE, *base), call(SCALE, *base)
    first, second, numba = through_both(monkeypatch, SCALE, *other)
    assert same(first, numba), (first, numba)
    assert same(second, numba)
    assert same(call(SCALE, *base), call(SCALE, *base))  # and back


def test_a_failed_check_through_the_wrapper_raises_as_the_dispatch_does(monkeypatch):
    f = define("""
        def checked(y, x):
            y += x * x
    """)
    ok = (0.0, 2.0)
    call(f, *ok), call(f, *ok)  # the wrapper is ready
    bad = (1.0, 1e300)           # x * x is infinite: a check fails
    first, second, numba = through_both(monkeypatch, f, *bad)
    assert first[0] == "ReversibilityError" and "infinite or nan" in first[1], first
    assert "line 3" in first[1]
    assert first == second == numba


def test_an_index_error_through_the_wrapper(monkeypatch):
    f = define("""
        def pick(y, a, i):
            y += a[i]
    """)
    a = np.arange(3.0)
    call(f, 0.0, a, 1), call(f, 0.0, a, 1)
    first, second, numba = through_both(monkeypatch, f, 0.0, a, 7)
    assert first[0] == "IndexError" and first == second == numba


def test_the_wrapper_keeps_reference_counts():
    """Arrays come back as the same objects; nothing gains or loses a reference."""
    f = define("""
        def flip(y, a, flag):
            if flag:
                y += a[0]
    """)
    a = np.arange(4.0)
    f(0.0, a, True)
    before = sys.getrefcount(a), sys.getrefcount(True), sys.getrefcount(False)
    for _ in range(20_000):
        out = f(0.0, a, True)
        assert out[1] is a and out[2] is True
        out = f(0.0, a, False)
    del out
    assert sys.getrefcount(a) == before[0]
    # (True and False are shared by everything, and other threads move their counts by a
    # few hundred: a reference leaked, or one too few, would show as 20,000)
    assert abs(sys.getrefcount(True) - before[1]) < 5_000
    assert abs(sys.getrefcount(False) - before[2]) < 5_000


def test_calls_from_threads_at_once_each_get_their_own_results():
    f = define("""
        def poly(y, x, n):
            for i in range(n):
                y += x * i
    """)
    f(0.0, 1.0, 3)
    want = {k: f(0.0, float(k), 1000)[0] for k in range(8)}
    errors = []

    def work(k):
        for _ in range(300):
            got = f(0.0, float(k), 1000)[0]
            if got != want[k]:
                errors.append((k, got))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
