"""A loss summed over a data set: one item's squared error of a tanh of a linear model,
``(tanh(w . x_i) - y_i)^2``, and the gradient of the sum by ``w`` in plain NumPy.

The item's program is what ``batch=`` maps over the items (``docs/scale.md``: the
gradient summed over a data set, on a Dask cluster); :func:`summed_gradient` is the
independent reference of its gradient, and :func:`data` seeded items."""

from __future__ import annotations

import numpy as np

from revbench.function import reversible
from revbench.lang.markers import routine


@reversible
def model(loss, w, x, y):
    """One item's loss: a squared error of a tanh of a linear model."""
    with routine:
        p = 0.0
        p += np.dot(w, x)
    loss += (np.tanh(p) - y) ** 2
    ~routine


def summed_gradient(w: np.ndarray, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """d sum_i loss_i / d w, by hand: 2 (tanh(p) - y) (1 - tanh(p)^2) x per item."""
    t = np.tanh(X @ w)
    return (2.0 * (t - Y) * (1.0 - t * t)) @ X


def data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(w, X, Y)``: 4 weights, ``n`` items of 4 features, ``n`` targets (seeded)."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=4), rng.normal(size=(n, 4)), rng.normal(size=n)
