"""Checks for ``notebooks/06_workloads.ipynb``.

Two exercises on natural programs for real workloads: :func:`exercise_1` (``s += |A x|^2``
for a CSR matrix, written with loops; its value and its gradient with respect to ``x``
and the stored values are compared with the closed forms ``2 A^T A x`` and
``2 (A x)[row] x[col]``) and :func:`exercise_2` (the bundle-adjustment Jacobian of every
observation in one batched call, compared with
:func:`revbench.workloads.ba.jacobian_numpy`, forward-mode derivatives written by hand).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from revbench.ad import grad
from revbench.course import Feedback
from revbench.course.feedback import attempt, close, fail, need_function, run_answer, show, success
from revbench.workloads import ba as ba_ref


# --------------------------------------------------------------------------------------
# Exercise 1: |A x|^2 for a CSR matrix
# --------------------------------------------------------------------------------------
def csr_problems() -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray, tuple]]:
    """``(name, x, data, indices, indptr, shape)`` of the matrices exercise 6.1 is tried on:
    a tiny one to read by hand, a non-square one with an empty row, and a random one."""
    out = []
    # [[2, 0, 1], [0, 3, 0]]
    out.append(("the 2 x 3 matrix [[2, 0, 1], [0, 3, 0]]", np.array([1.0, -1.0, 2.0]),
                np.array([2.0, 1.0, 3.0]), np.array([0, 2, 1]), np.array([0, 2, 3]), (2, 3)))
    # 4 x 5, row 2 empty
    out.append(("a 4 x 5 matrix whose row 2 is empty", np.array([0.5, -2.0, 1.0, 3.0, -1.5]),
                np.array([1.0, -2.0, 0.5, 4.0, 1.5, -1.0]), np.array([0, 3, 1, 0, 2, 4]),
                np.array([0, 2, 3, 3, 6]), (4, 5)))
    rng = np.random.default_rng(6)
    n, nnz_row = 30, 4
    indices = np.concatenate([np.sort(rng.choice(n, nnz_row, replace=False)) for _ in range(n)])
    out.append(("a random 30 x 30 matrix", rng.standard_normal(n), rng.standard_normal(n * nnz_row),
                indices.astype(np.int64), np.arange(0, n * nnz_row + 1, nnz_row, dtype=np.int64),
                (n, n)))
    return out


def _dense(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, shape: tuple) -> np.ndarray:
    A = np.zeros(shape)
    for i in range(shape[0]):
        for p in range(indptr[i], indptr[i + 1]):
            A[i, indices[p]] += data[p]
    return A


def exercise_1(csr_sqnorm: Any) -> Feedback:
    """``csr_sqnorm(s, x, data, indices, indptr)`` must add ``|A x|^2`` to ``s`` (``A`` in
    CSR), leave the other arguments as they were, and have the gradient of the formula."""
    ex = "Exercise 6.1"

    def check() -> Feedback:
        f = need_function(ex, csr_sqnorm, "csr_sqnorm")
        if f.params != ("s", "x", "data", "indices", "indptr"):
            fail(ex, f"csr_sqnorm takes ({', '.join(f.params)}), it should take "
                     "(s, x, data, indices, indptr)", "Keep the signature of the skeleton.")
        for name, x, data, indices, indptr, shape in csr_problems():
            A = _dense(data, indices, indptr, shape)
            ax = A @ x
            want = float(ax @ ax)
            got = run_answer(ex, f, (1.0, x, data, indices, indptr), f"on {name}",
                             "Compute the row's sum into the ancilla, add its square to s, then "
                             "uncompute it (the same inner loop with -=), or let `with routine:` "
                             "... `~routine` do it.")
            for arg, g, w in zip(f.params[1:], got[1:], (x, data, indices, indptr)):
                if not close(g, w):
                    fail(ex, f"on {name}: csr_sqnorm changes `{arg}` (to {show(g)})",
                         "Only s is an output; the matrix and x are read, never written.")
            s = got[0] - 1.0
            if not close(s, want):
                products = float(np.sum((data * x[indices]) ** 2))
                if close(s, float(np.sum(ax))):
                    why = "that is the sum of A x, not of its squares: square each row's sum."
                elif close(s, products):
                    why = ("that squares each product A[i, j] x[j] before summing: square each "
                           "ROW's sum, (Σ_j A[i, j] x[j])², instead.")
                else:
                    why = (f"A x = {show(ax)} here; |A x|^2 is the sum of the squares of its "
                           "entries. Row i's entries are data[p] at column indices[p], for p in "
                           "range(indptr[i], indptr[i + 1]).")
                fail(ex, f"on {name} with x = {show(x)}: s grows by {show(s)}, expected "
                         f"|A x|^2 = {show(want)}", why)
        # the gradient, against the closed forms (one problem is enough)
        name, x, data, indices, indptr, shape = csr_problems()[1]
        A = _dense(data, indices, indptr, shape)
        ax = A @ x
        rows = np.repeat(np.arange(shape[0]), np.diff(indptr))
        g = grad(f, loss="s", wrt=("x", "data"))(0.0, x.copy(), data.copy(), indices, indptr)
        for arg, got_g, want_g in (("x", g[1], 2.0 * A.T @ ax), ("data", g[2], 2.0 * ax[rows] * x[indices])):
            if not close(got_g, want_g):
                fail(ex, f"on {name}: ∂s/∂{arg} is {show(got_g)}, the formula gives {show(want_g)}")
        return success(ex, "csr_sqnorm adds |A x|² on every matrix, and its gradient is "
                           "2 Aᵀ A x for x and 2 (A x)[row] x[col] for the stored values.",
                       "No formula for the gradient was written: the reverse sweep of your loops "
                       "computed it.")

    return attempt(ex, check)


# --------------------------------------------------------------------------------------
# Exercise 2: the BA Jacobian of every observation, batched
# --------------------------------------------------------------------------------------
def ba_problem(p: int = 300) -> ba_ref.BAData:
    """The problem exercise 6.2 is checked on: 5 cameras, 40 points, ``p`` observations,
    each drawn on its own (no two observations alike)."""
    return ba_ref.generate_ba(5, 40, p, seed=6, replicate=False)


def reference_blocks(data: ba_ref.BAData) -> np.ndarray:
    """``[p, 2, 15]``: each observation's 2 x 15 Jacobian block (11 camera, 3 point and 1
    weight columns) from :func:`revbench.workloads.ba.jacobian_numpy`."""
    J = ba_ref.jacobian_numpy(data)
    return np.asarray(J.data[:30 * data.p]).reshape(data.p, 2, 15)


def exercise_2(ba_jacobians: Any, loop_seconds_per_obs: float | None = None) -> Feedback:
    """``ba_jacobians(cams, X, w, feats, obs)`` must return ``(J_cam, J_X, J_w)``, the
    Jacobians of every observation's residual with respect to its camera ``[p, 2, 11]``,
    its point ``[p, 2, 3]`` and its weight (``[p, 2]`` or ``[p, 2, 1]``), without changing
    its arguments.  With ``loop_seconds_per_obs`` (the notebook's loop of single
    ``jacobian`` calls), the success message says how much faster it is."""
    ex = "Exercise 6.2"

    def check() -> Feedback:
        if not callable(ba_jacobians):
            fail(ex, f"ba_jacobians should be a Python function, got {type(ba_jacobians).__name__}")
        data = ba_problem()
        args = (data.cams, data.X, data.w, data.feats, data.obs)
        copies = tuple(a.copy() for a in args)
        got = ba_jacobians(*copies)           # the first call may compile
        if loop_seconds_per_obs:
            start = time.perf_counter()
            ba_jacobians(*(a.copy() for a in args))
            seconds = time.perf_counter() - start
        for name, a, c in zip(("cams", "X", "w", "feats", "obs"), args, copies):
            if not np.array_equal(a, c):
                fail(ex, f"ba_jacobians changed its argument `{name}`",
                     "Work on gathered copies (cams[obs[:, 0]] is a copy), never on the inputs.")
        if got is None:
            fail(ex, "ba_jacobians returns None: return (J_cam, J_X, J_w)")
        if not isinstance(got, tuple) or len(got) != 3:
            fail(ex, "ba_jacobians should return three arrays: (J_cam, J_X, J_w)")
        p = data.p
        J_cam, J_X, J_w = (np.asarray(j, dtype=float) for j in got)
        J_w = J_w.reshape(J_w.shape[:2]) if J_w.ndim == 3 and J_w.shape[2:] == (1,) else J_w
        for name, j, shape in (("J_cam", J_cam, (p, 2, 11)), ("J_X", J_X, (p, 2, 3)),
                               ("J_w", J_w, (p, 2))):
            if j.shape != shape:
                fail(ex, f"{name} has shape {j.shape}, expected {shape} for p = {p} observations",
                     "batch= adds a leading axis of items: (items, outputs, wrt) — "
                     "(p, 2, 11) for the camera. Pass every per-observation argument (r, cam, X, "
                     "w, feat) in batch=.")
        want = reference_blocks(data)
        blocks = np.concatenate([J_cam, J_X, J_w[:, :, None]], axis=2)
        if not blocks.any():
            fail(ex, "every Jacobian block is zero: compute them with revbench.jacobian",
                 "jacobian(ba_residual, outputs=\"r\", wrt=(\"cam\", \"X\", \"w\"), "
                 "batch=(...)) returns a function; call it once, with the per-observation "
                 "arguments stacked along a first axis.")
        scale = np.abs(want).max(axis=(1, 2))
        err = np.abs(blocks - want).max(axis=(1, 2)) / scale
        if not (err < 1e-8).all():
            i = int(np.argmax(err > 1e-8))
            cam, pt = int(data.obs[i, 0]), int(data.obs[i, 1])
            why = (f"Observation {i} uses camera obs[{i}, 0] = {cam} and point obs[{i}, 1] = {pt}: "
                   "gather cams[obs[:, 0]] and X[obs[:, 1]] before the call.")
            fail(ex, f"the Jacobian of observation {i} differs from the reference (largest "
                     f"relative difference {err[i]:.2g})", why)
        faster = ""
        if loop_seconds_per_obs:
            faster = (f" {p} observations took {seconds * 1e3:.1f} ms: "
                      f"{loop_seconds_per_obs * p / seconds:.0f} times faster than the loop of "
                      "single calls.")
        return success(ex, "every observation's Jacobian block matches the hand-derived "
                           "reference." + faster,
                       "One batched call runs every item's forward run and reverse sweeps in one "
                       "compiled loop: no Python work per observation.")

    return attempt(ex, check)
