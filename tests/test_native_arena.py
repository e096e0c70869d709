"""The native kernels' arena keeps its large blocks between calls (``runtime_ir.RUNTIME``).

A kernel's arrays are malloc'ed blocks released when it returns.  The C library hands a
freed block of a megabyte or more back to the system, so each call would fault every page
of its arrays in again; the arena keeps such blocks for the next call instead.  These
tests measure that with the process's own page-fault count (``getrusage``: what the
kernel sees, Numba's and NumPy's allocations included), and check that a reused block
changes no result: zeroed arrays are zero again, and threads that share a kernel --
batched runs on several workers -- get their own blocks.
"""

from __future__ import annotations

import resource
import textwrap
import threading

import numpy as np
import pytest
from test_native import same

import revbench

TEMPORARIES = textwrap.dedent("""
    def f(loss, x):
        with routine:
            A = np.zeros((x.shape[0], 64))
            B = np.zeros((x.shape[0], 64))
            for i in range(x.shape[0]):
                for j in range(64):
                    A[i, j] += x[i] * j
            B += np.tanh(A)
        loss += np.sum(B * B)
        ~routine
""")


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


@pytest.fixture
def f():
    return revbench.define(TEMPORARIES, {"np": np}, check=False)["f"]


def test_a_kernel_s_large_arrays_are_not_faulted_in_again_on_every_call(f):
    x = np.linspace(-1.0, 1.0, 4000)  # two 2 MB temporaries: 1,000 pages a call
    first = f(0.0, x)
    before = minor_faults()
    for _ in range(10):
        again = f(0.0, x)
    faults = minor_faults() - before
    assert same(again, first)
    pages_per_call = 2 * x.size * 64 * 8 // 4096
    assert faults < pages_per_call, (faults, pages_per_call)  # (10 calls: 10,000 without)


def test_a_reused_block_is_zeroed_again_and_changes_no_result(f):
    big, small = np.linspace(-1.0, 1.0, 3000), np.linspace(-0.5, 2.0, 2000)
    want_small = f(0.0, small)
    f(0.0, big)  # (its blocks are kept, then taken by the smaller call: at least half)
    assert same(f(0.0, small), want_small)
    g = revbench.value_and_grad(f, loss="loss", wrt="x")
    assert same(g(0.0, small), g(0.0, small))


def test_threads_sharing_a_kernel_get_the_same_bits(f):
    xs = [np.linspace(-1.0, 1.0, 1000 + 500 * k) for k in range(4)]
    want = [f(0.0, x) for x in xs]
    got: dict[int, list] = {}

    def work(k: int) -> None:
        got[k] = [f(0.0, xs[k]) for _ in range(20)]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(4):
        assert all(same(r, want[k]) for r in got[k]), k
    batched = revbench.grad(f, loss="loss", wrt="x", batch=[0, 1], workers=2)
    xb = np.stack([xs[0], xs[0][::-1]])
    one = revbench.grad(f, loss="loss", wrt="x")
    rows = batched(np.zeros(2), xb)[1]
    assert same(rows[0], one(0.0, xb[0])[1]) and same(rows[1], one(0.0, xb[1])[1])
