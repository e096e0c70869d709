"""Checks for ``notebooks/04_debugger.ipynb``.

Three exercises, each checked against a recorded run (:func:`revbench.trace`), never
against numbers typed into this module: :func:`exercise_1` (where does ``kinetic`` fail,
which ancilla is dirty, and which statement made it so), :func:`exercise_2` (reading
adjoints during the reverse sweep of a loop) and :func:`exercise_3` (fix ``kinetic`` so
that it runs clean and still computes what it should).
"""

from __future__ import annotations

import ast
from typing import Any

import numpy as np

from revbench.backends.tracer import ADJOINT
from revbench.course import Feedback
from revbench.course.feedback import attempt, call, close, fail, need_function, run_answer, show, success
from revbench.debugging.tracing import Trace, trace
from revbench.function import ReversibleFunction, define

#: The program of exercises 4.1 and 4.3 (the notebook defines the same text).  It adds the
#: kinetic energy ``0.5 * v[i]**2`` of every particle to ``e``, then moves ``v`` one step,
#: and frees its ancilla ``t`` too late: ``v[i]`` has changed in between.
KINETIC_SOURCE = '''\
def kinetic(e, x, v, dt):
    for i in range(len(x)):
        t = 0.0
        t += v[i] * v[i]
        e += 0.5 * t
        v[i] -= dt * x[i]
        t -= v[i] * v[i]
        del t
'''

#: The inputs of exercise 4.1 (and of the notebook's debugger cell).
KINETIC_ARGS = (0.0, np.array([0.0, 0.0, 1.5, 2.0]), np.array([1.0, -2.0, 0.5, 1.0]), 0.1)

#: The program of exercise 4.2.
CHAIN_SOURCE = '''\
def chain(y, x):
    for i in range(len(x) - 1):
        y += x[i] * x[i + 1]
'''

#: The input of exercise 4.2 (loss: ``y``).
CHAIN_ARGS = (0.0, np.array([1.0, 2.0, 3.0]))

_reference: dict[str, ReversibleFunction] = {}


def _program(name: str) -> ReversibleFunction:
    """The check's own copy of a lesson program: a student who edits theirs changes nothing."""
    if name not in _reference:
        source = {"kinetic": KINETIC_SOURCE, "chain": CHAIN_SOURCE}[name]
        _reference.update(define(source, {"np": np}, filename=f"<lesson04: {name}>",
                                 backend="python"))
    return _reference[name]


def _statement(text: str) -> str:
    """A statement in a canonical spelling (``v[i]-=dt*x[i]`` == ``v[i] -= dt * x[i]``)."""
    try:
        return ast.unparse(ast.parse(text.strip()))
    except SyntaxError:
        return " ".join(text.split())


def _need_keys(ex: str, answer: Any, keys: tuple[str, ...]) -> dict:
    if not isinstance(answer, dict):
        fail(ex, f"the answer should be a dict with the keys {', '.join(keys)}; got "
                 f"{type(answer).__name__}", "Keep the cell's `answer = {...}` and fill in its values.")
    missing = [k for k in keys if k not in answer]
    if missing:
        fail(ex, f"the answer has no key {missing[0]!r}", "Keep the keys of the skeleton.")
    empty = [k for k in keys if answer[k] is None]
    if empty:
        fail(ex, f"{empty[0]!r} is still None: fill it in from what the debugger shows",
             "Every key gets a value read off the debugger (or off revbench.trace).")
    return answer


# --------------------------------------------------------------------------------------
# Exercise 1: find the failure
# --------------------------------------------------------------------------------------
def failure_facts(t: Trace) -> dict[str, Any]:
    """What exercise 4.1 asks, read off a failed trace: the loop index ``i`` at the
    failure, the dirty ``ancilla`` and its ``value``, and the ``culprit``: the statement
    between the ancilla's allocation and its ``del`` that changed a variable the
    ancilla's computation reads."""
    if t.error is None or t.error_step is None:
        raise ValueError("this trace ran clean: there is no failure to describe")
    last = t[t.error_step]
    dirty = [name for name, state in last.ancillas.items() if state == "dirty"]
    ancilla = dirty[0]
    values = t.values_at(last.index)
    start = max(s.index for s in t[:last.index]
                if s.kind == "alloc" and s.function == last.function and s.action.startswith(ancilla))
    body = t[start + 1:last.index]
    reads: set[str] = set()
    for s in body:
        if ancilla in s.changes:
            reads |= {n.id for n in ast.walk(ast.parse(s.action.strip()))
                      if isinstance(n, ast.Name) and n.id != ancilla}
    culprit = next(s.action for s in body if ancilla not in s.changes and any(
        k.split("[")[0] in reads for k in s.changes))
    return {"i": int(values["i"]), "ancilla": ancilla, "value": float(values[ancilla]),
            "culprit": culprit}


def exercise_1(answer: Any) -> Feedback:
    """``answer`` says where ``kinetic(*KINETIC_ARGS)`` fails: the loop index ``i``, the
    dirty ``ancilla``, its ``value`` there, and the ``culprit`` statement (as text)."""
    ex = "Exercise 4.1"

    def check() -> Feedback:
        a = _need_keys(ex, answer, ("i", "ancilla", "value", "culprit"))
        want = failure_facts(trace(_program("kinetic"), *KINETIC_ARGS))
        x = KINETIC_ARGS[1]
        if a["i"] != want["i"]:
            jump = ("Jump to the end of the run in the debugger: the variables panel shows the "
                    "loop index at the failing step.")
            got_i = a["i"]
            if isinstance(got_i, (int, np.integer)) and 0 <= got_i < want["i"]:
                fail(ex, f"at i = {got_i} the run does not fail yet",
                     f"x[{got_i}] = {show(x[got_i])}, so `v[i] -= dt * x[i]` leaves v[{got_i}] "
                     "as it was, and the uncompute gives t back at 0.0. " + jump)
            if isinstance(got_i, (int, np.integer)) and got_i > want["i"]:
                fail(ex, f"the run never reaches i = {got_i}",
                     "It stops at the first failing check. " + jump)
            fail(ex, f"the run does not fail at i = {got_i!r}",
                 f"i is a loop index: 0 to {len(x) - 1} here. " + jump)
        if str(a["ancilla"]).strip() != want["ancilla"]:
            fail(ex, f"{a['ancilla']!r} is not the dirty ancilla",
                 "The ancillas panel marks it *dirty* at the failing step; it is the variable "
                 "the failing `del` frees.")
        if not close(a["value"], want["value"], rtol=1e-6, atol=1e-9):
            fail(ex, f"{want['ancilla']} is not {show(a['value'])} when it is freed",
                 f"Read its value at the failing step. By hand: {want['ancilla']} = v[i]**2 "
                 f"before the update minus v[i]**2 after it, with x[i] = {show(x[want['i']])}.")
        if _statement(str(a["culprit"])) != _statement(want["culprit"]):
            fail(ex, f"`{a['culprit']}` is not what made {want['ancilla']} dirty",
                 f"{want['ancilla']} is computed by `t += v[i] * v[i]` and uncomputed by "
                 "`t -= v[i] * v[i]`; the uncompute gives it back only if v[i] has not changed "
                 "in between. Which statement between them writes v[i]?")
        return success(ex, f"kinetic fails at i = {want['i']}: `del {want['ancilla']}` finds "
                           f"{want['ancilla']} = {show(want['value'])}, dirtied by "
                           f"`{want['culprit']}`.",
                       "An uncompute undoes its compute only if everything it reads is as it was: "
                       "a write between the two is the usual cause of a dirty ancilla.")

    return attempt(ex, check)


# --------------------------------------------------------------------------------------
# Exercise 2: read the adjoints
# --------------------------------------------------------------------------------------
def adjoint_facts(t: Trace) -> dict[str, Any]:
    """What exercise 4.2 asks, read off a gradient trace of ``chain``: the loop index
    the reverse sweep visits ``first``, the adjoint of ``x`` ``after_first`` (after the
    backward step of the loop body with that index) and the ``final`` adjoint."""
    backward = [s for s in t if s.direction == "backward"]
    first_for = next(s for s in backward if s.kind == "for")
    first_i = int(t.values_at(first_for.index)["i"])
    body = next(s for s in backward if s.index > first_for.index and s.kind == "update")
    after = np.array(t.values_at(body.index)[ADJOINT + "x"], dtype=float)
    return {"first": first_i, "after_first": after, "final": np.asarray(t.gradients[1], dtype=float)}


def exercise_2(answer: Any) -> Feedback:
    """``answer`` reads the reverse sweep of ``chain(*CHAIN_ARGS)`` (loss ``y``): the loop
    index it visits ``first``, the adjoint of ``x`` ``after_first`` step of the body,
    and the ``final`` adjoint of ``x`` (the gradient)."""
    ex = "Exercise 4.2"

    def check() -> Feedback:
        a = _need_keys(ex, answer, ("first", "after_first", "final"))
        want = adjoint_facts(trace(_program("chain"), *CHAIN_ARGS, loss="y"))
        x = CHAIN_ARGS[1]
        i = want["first"]
        if a["first"] != i:
            fail(ex, f"the reverse sweep does not start at i = {show(a['first'])}",
                 "The reverse sweep runs the inverse: the statements in the opposite order, and "
                 f"the loop from its last index down. Here range(len(x) - 1) ends at i = {i}.")
        for key, what in (("after_first", f"after the backward step of i = {i}"),
                          ("final", "at the end of the sweep")):
            got = np.asarray(a[key], dtype=float)
            if got.shape != want[key].shape:
                fail(ex, f"{key!r} should be an array of {len(x)} numbers (one adjoint per "
                         f"element of x), got shape {got.shape}")
            if not close(got, want[key]):
                if key == "after_first":
                    why = (f"One statement has run backwards: y += x[{i}] * x[{i + 1}], with "
                           "∂y/∂y = 1. It adds ∂y/∂y · x[i+1] to the adjoint of x[i] and "
                           "∂y/∂y · x[i] to that of x[i+1]; the others are still 0.")
                else:
                    why = ("Adjoints accumulate (+=): an element used in two iterations gets a "
                           "contribution from each. x[1] appears in both.")
                fail(ex, f"the adjoint of x {what} is not {show(got)}", why)
        return success(ex, f"the sweep starts at i = {i}, and ∂y/∂x = {show(want['final'])}.",
                       "The adjoint column is the gradient being built, one backward step at a "
                       "time; at the end it is what revbench.grad returns.")

    return attempt(ex, check)


# --------------------------------------------------------------------------------------
# Exercise 3: make it run clean
# --------------------------------------------------------------------------------------
FIX_INPUTS = (
    KINETIC_ARGS,
    (1.0, np.array([2.0, -1.0, 0.5]), np.array([0.5, 3.0, -2.0]), 0.25),
    (0.0, np.array([-3.0]), np.array([4.0]), 1.0),
)


def _kinetic_want(e: float, x: np.ndarray, v: np.ndarray, dt: float) -> tuple:
    return e + 0.5 * float(np.sum(v * v)), x, v - dt * x, dt


def exercise_3(kinetic_fixed: Any) -> Feedback:
    """``kinetic_fixed(e, x, v, dt)`` must add ``0.5 * v[i]**2`` (the velocity before
    the step) to ``e``, move ``v[i] -= dt * x[i]``, and free its ancilla clean; its
    inverse must undo it."""
    ex = "Exercise 4.3"

    def check() -> Feedback:
        f = need_function(ex, kinetic_fixed, "kinetic_fixed")
        if f.params != ("e", "x", "v", "dt"):
            fail(ex, f"kinetic_fixed takes ({', '.join(f.params)}), it should take (e, x, v, dt)",
                 "Keep the signature of the skeleton.")
        for args in FIX_INPUTS:
            inputs = f"x={show(args[1])}, v={show(args[2])}, dt={show(args[3])}"
            def loop_index(args: tuple = args) -> str:
                t = trace(f, *args)
                return f" at i = {int(t.values_at(t.error_step)['i'])}" if (
                    t.error is not None and "i" in t.values_at(t.error_step)) else ""

            got = run_answer(ex, f, args, f"on {inputs}",
                             "Between `t += v[i] * v[i]` and `t -= v[i] * v[i]` nothing may change "
                             "v[i]. Move the velocity update after `del t` (or uncompute t before "
                             "it).", at=loop_index)
            want = _kinetic_want(*args)
            for name, g, w in zip(f.params, got, want):
                if not close(g, w):
                    rule = ("e must gain 0.5 * v[i]**2 with the velocity BEFORE the update."
                            if name == "e" else
                            "v must still move: v[i] -= dt * x[i], once per particle.")
                    fail(ex, f"on {inputs}: `{name}` ends as {show(g)}, expected {show(w)}", rule)
            back = call(f.inverse, *got)
            if not close(back, tuple(args)):
                fail(ex, f"on {inputs}: ~kinetic_fixed does not give the inputs back",
                     f"got {show(back)}")
        return success(ex, "kinetic_fixed runs clean, computes the energy of the old velocities, "
                           "and ~kinetic_fixed undoes it.",
                       "Step through it with revbench.debug: every `del t` now finds t = 0.0.")

    return attempt(ex, check)
