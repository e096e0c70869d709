"""``lstm``: ADBench's LSTM with diagonal weights over a text, one character a step, and
the gradient of its objective with respect to every parameter, by ``revbench.grad``.

Layer ``i`` has weights and biases for its four gates in rows ``2 i`` and ``2 i + 1`` of
``main_params`` (``[forget | ingate | outgate | change]``, ``b`` each) and its hidden
state and cell in rows ``2 i``, ``2 i + 1`` of ``state``; ``extra_params`` holds the input
weight, the output weight and the output bias.  Each step, as ADBench's model::

    forget = sigmoid(x * Wf + bf), ingate = sigmoid(h * Wi + bi),
    outgate = sigmoid(x * Wo + bo), change = tanh(h * Wc + bc),
    cell = cell * forget + ingate * change, h = outgate * tanh(cell)

(``x`` the layer's input: the character times the input weight, then the layer below's new
hidden state; ``h`` the layer's own previous one), and the prediction's log-probabilities
``y - log(sum(exp(y)) + 2)`` of the next character's bits.  The objective is minus their
mean.  Each step's states are new ancillas (a step does not undo itself), its gates
computed and uncomputed around it."""

from __future__ import annotations

from typing import Any

import numpy as np

from revbench import ad
from revbench.gradbench.evals.base import Eval, Steps, field, floats, program
from revbench.lang.markers import routine


def lstm_objective(loss, main_params, extra_params, state, sequence):
    c, b = sequence.shape
    layers = state.shape[0] // 2
    with routine as run:
        hidden = np.zeros((c, layers, b))
        cell = np.zeros((c, layers, b))
        for i in range(layers):
            hidden[0, i] += state[2 * i]
            cell[0, i] += state[2 * i + 1]
        for t in range(c - 1):
            for i in range(layers):
                with routine as gates:
                    x = np.zeros(b)
                    if i == 0:
                        x += sequence[t] * extra_params[0]
                    else:
                        x += hidden[t + 1, i - 1]
                    forget = np.zeros(b)
                    forget += 1.0 / (1.0 + np.exp(-(x * main_params[2 * i, :b]
                                                    + main_params[2 * i + 1, :b])))
                    ingate = np.zeros(b)
                    ingate += 1.0 / (1.0 + np.exp(-(hidden[t, i] * main_params[2 * i, b:2 * b]
                                                    + main_params[2 * i + 1, b:2 * b])))
                    outgate = np.zeros(b)
                    outgate += 1.0 / (1.0 + np.exp(-(x * main_params[2 * i, 2 * b:3 * b]
                                                     + main_params[2 * i + 1, 2 * b:3 * b])))
                    change = np.zeros(b)
                    change += np.tanh(hidden[t, i] * main_params[2 * i, 3 * b:]
                                      + main_params[2 * i + 1, 3 * b:])
                cell[t + 1, i] += cell[t, i] * forget + ingate * change
                hidden[t + 1, i] += outgate * np.tanh(cell[t + 1, i])
                ~gates
    for t in range(c - 1):
        with routine as predict:
            y = np.zeros(b)
            y += hidden[t + 1, layers - 1] * extra_params[1] + extra_params[2]
            lse = np.log(np.sum(np.exp(y)) + 2.0)
        loss -= np.sum(sequence[t + 1] * (y - lse)) / ((c - 1) * b)
        ~predict
    ~run


def _args(raw: Any) -> tuple:
    main = floats(field(raw, "main_params"), "main_params", 2)
    extra = floats(field(raw, "extra_params"), "extra_params", 2)
    state = floats(field(raw, "state"), "state", 2)
    sequence = floats(field(raw, "sequence"), "sequence", 2)
    c, b = sequence.shape
    layers = state.shape[0] // 2
    if (c < 2 or state.shape != (2 * layers, b) or layers < 1
            or main.shape != (2 * layers, 4 * b) or extra.shape != (3, b)):
        raise ValueError(f"lstm: sequence {sequence.shape} (c >= 2 characters of b bits), "
                         f"state {state.shape} (2 l x b), main_params {main.shape} (2 l x 4 b) "
                         f"and extra_params {extra.shape} (3 x b) do not fit")
    return main, extra, state, sequence


class Lstm(Eval):
    name = "lstm"

    def steps(self) -> dict[str, Steps]:
        f = program(lstm_objective, self.check)
        g = ad.grad(f, loss="loss", wrt=("main_params", "extra_params"))

        def jacobian(a):
            grads = g(0.0, *a)
            return np.concatenate([grads[1].ravel(), grads[2].ravel()])

        return {"objective": (_args, lambda a: f(0.0, *a)[0], float),
                "jacobian": (_args, jacobian, lambda v: v.tolist())}

    def sample(self) -> Any:
        rng = np.random.default_rng(0)
        return {"main_params": rng.random((4, 8)).tolist(),
                "extra_params": rng.random((3, 2)).tolist(), "state": rng.random((4, 2)).tolist(),
                "sequence": [[0.0, 1.0], [1.0, 1.0], [1.0, 0.0]]}
