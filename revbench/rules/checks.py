"""The runtime-check table: per kind of check, what must hold and what the user is told.

Generated code checks what the static checker cannot know (:mod:`revbench.backends.codegen`
emits the conditions); a failed check raises ``CheckFailed(module, k, expected, actual,
*index)`` with the number ``k`` of its :class:`~revbench.backends.runtime.CheckInfo`, and
:func:`revbench.backends.runtime.to_user_error` words it from this table: the headline
(:attr:`CheckKind.message`, with the variable, the detail and the axis), then the values
(:attr:`CheckKind.values`).  The CPU, the GPU (which records the number instead of
raising) and the debugger (which runs the same generated code) all report through it.

A new check is one entry here and its condition in the code generator;
``tests/test_rules_tables.py`` fails when the generators use a kind without an entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: the smallest positive normal float64: a product or quotient below it may have lost
#: digits (see ``runtime.FLOAT_TINY``)
FLOAT_TINY = 2.2250738585072014e-308


def fmt(v: Any) -> str:
    """A value as the messages show it: Python's repr of the plain number."""
    if isinstance(v, bool):
        return str(v)
    if hasattr(v, "item"):
        v = v.item()
    return repr(v)


@dataclass(frozen=True)
class Failure:
    """One failed check, as a message sees it."""

    var: str  # the user's text of the variable, condition or operand
    detail: str  # the check's extra text (the other operand, the statement, ...)
    expected: Any
    actual: Any
    index: tuple  # the element (ancilla), the axis and length (shape, slice)


def _shared(f: Failure) -> str:
    """The indices two sub-arrays share: the first and the last (strided ones share some
    of those between, not all)."""
    if f.expected == f.actual:
        return f"they share index {fmt(f.expected)}"
    return (f"they share elements from index {fmt(f.expected)} to {fmt(f.actual)} (the "
            "first and the last they share)")


def _same_element(f: Failure) -> str:
    """Where two elements met: the index (of every axis: the first is the failure's
    value, the others its index)."""
    if not f.index:
        return f"both are index {fmt(f.expected)}"
    return f"both are index ({', '.join(fmt(i) for i in (f.expected, *f.index))})"


def _expected_got(f: Failure) -> str:
    return f"expected {fmt(f.expected)}, got {fmt(f.actual)}"


def _overflow_headline(f: Failure) -> str:
    _, _, text = f.detail.partition("\t")
    return CHECKS["overflow"].message.format(detail=text or f.var)


def _overflow_values(f: Failure) -> str:
    op = f.detail.partition("\t")[0]
    e, a = fmt(f.expected), fmt(f.actual)
    exact = f"-({e})" if op == "neg" else f"abs({e})" if op == "abs" else f"{e} {op} {a}"
    return f"the exact result of {exact} does not fit in int64 (use floats for larger numbers)"


def _result_headline(f: Failure) -> str:
    r = complex(f.actual)
    why = ("is nan" if r != r else "overflows to infinity" if abs(r) == float("inf")
           else "underflows to zero" if r == 0 else "underflows (it is subnormal, so digits "
           "are lost)" if abs(r) < FLOAT_TINY else "is so close to the largest float that "
           "its inverse would overflow")
    return CHECKS["result"].message.format(detail=f.detail, why=why)


def _adjoint_count_headline(f: Failure) -> str:
    return CHECKS["adjoint-count"].message.format(detail=f.detail.split("\t")[0])


@dataclass(frozen=True)
class CheckKind:
    """One kind of runtime check.

    ``condition``: what must hold (prose, for the documentation and the tests).
    ``message``: the headline, formatted with ``var``, ``detail``, ``axis`` and ``why``.
    ``values``: the sentence after it, from the failure's values.  ``headline``: a
    headline that needs more than ``message.format`` (None: the format).
    ``stops_thread``: a GPU thread cannot go on after it fails (its code would index out
    of bounds or divide by zero): it leaves the item there (``cuda_codegen``)."""

    condition: str
    message: str
    values: Callable[[Failure], str] = _expected_got
    headline: Callable[[Failure], str] | None = None
    stops_thread: bool = False


#: every kind of runtime check, by the name generated code's check tables use
CHECKS: dict[str, CheckKind] = {
    "ancilla": CheckKind(
        "a deallocated ancilla equals its allocation expression again (within the tolerance)",
        "ancilla `{var}` is not back at its allocated value when deallocated"),
    "alloc-size": CheckKind(
        "an array ancilla is allocated with sizes that are not negative",
        "`{var}` cannot be allocated with a negative size: `{detail}` (axis {axis}) is "
        "negative", values=lambda f: f"it is {fmt(f.actual)}", stops_thread=True),
    "ancilla-shape": CheckKind(
        "a deallocated array ancilla has the shape its allocation expression gives now",
        "ancilla `{var}` does not have the shape its allocation expression gives now "
        "(axis {axis})", stops_thread=True),
    "if-post": CheckKind(
        "an if's postcondition holds after the branch exactly when its condition held before",
        "postcondition `{var}` of the if statement does not agree with its condition "
        "`{detail}` (it must hold after the branch exactly when the condition held before)"),
    "while-entry": CheckKind(
        "a while loop's postcondition is false when the loop starts",
        "postcondition `{var}` of the while loop must be false when the loop starts"),
    "while-iter": CheckKind(
        "a while loop's postcondition is true after every iteration",
        "postcondition `{var}` of the while loop must be true after every iteration"),
    "for-bound": CheckKind(
        "a for loop's start, stop and step do not change inside the loop",
        "the {detail} `{var}` of the for loop changed inside the loop"),
    "for-step": CheckKind("a range() step is not zero", "range() step `{var}` is zero",
                          stops_thread=True),
    "alias": CheckKind(
        "an update does not read the element it writes through another index",
        "`{var}` and `{detail}` are the same element at run time: an update cannot read "
        "its own target", values=_same_element),
    "call-alias": CheckKind(
        "element arguments of one call are different elements",
        "`{var}` and `{detail}` are the same element at run time: arguments of one "
        "call must not alias", values=_same_element),
    "overlap": CheckKind(
        "a whole-array update does not read a sub-array overlapping its target",
        "`{var}` and `{detail}` overlap at run time: an update cannot read its own target",
        values=lambda f: _shared(f)),
    "call-overlap": CheckKind(
        "sub-array arguments of one call do not overlap",
        "`{var}` and `{detail}` overlap at run time: arguments of one call must not alias",
        values=lambda f: _shared(f)),
    "slice": CheckKind(
        "a sub-array's bounds satisfy 0 <= a <= b <= len",
        "the sub-array `{var}` is out of range along axis {axis}",
        values=lambda f: (f"its bounds, a negative one counted from the end (len(x) + a), are "
                          f"{fmt(f.expected)}:{fmt(f.actual)}, but the axis has length "
                          f"{fmt(f.index[1])}; a sub-array `x[a:b]` needs 0 <= a <= b <= len(x)"),
        stops_thread=True),
    "empty": CheckKind(
        "a maximum or minimum is taken over a non-empty array",
        "`{var}` of an empty array has no value",
        values=lambda f: "the array has no elements (NumPy raises here too)", stops_thread=True),
    "zero": CheckKind(
        "the operand of *= and /= is not zero",
        "`{detail}` by `{var}`: the operand is zero, which cannot be undone",
        values=lambda f: f"got {fmt(f.actual)}", stops_thread=True),
    "inexact": CheckKind(
        "an integer /= divides its target exactly",
        "integer `/=` by `{var}` must divide `{detail}` exactly",
        values=lambda f: f"{fmt(f.actual)} does not divide {fmt(f.expected)}"),
    "shape": CheckKind(
        "the arrays of a whole-array statement have the same shape",
        "`{var}` and `{detail}` must have the same shape for a whole-array statement",
        values=lambda f: (f"{fmt(f.actual)} vs {fmt(f.expected)} along axis "
                          f"{f.index[0] if f.index else 0}"), stops_thread=True),
    "overflow": CheckKind(
        "the exact result of an integer update fits in int64",
        "integer overflow in `{detail}`: revbench integers are 64-bit and never wrap around",
        values=_overflow_values, headline=_overflow_headline),
    "nonfinite": CheckKind(
        "the operand of a float update is finite",
        "`{detail}` by `{var}`: the operand is infinite or nan, which cannot be undone",
        values=lambda f: f"got {fmt(f.actual)}"),
    "result": CheckKind(
        "a float update's result can be undone: finite, not nan, not subnormal, not within "
        "a factor 2 of the largest float",
        "`{detail}` cannot be undone: the result {why}",
        values=lambda f: f"`{f.var}` was {fmt(f.expected)}, the result is {fmt(f.actual)}",
        headline=_result_headline),
    "adjoint-shape": CheckKind(
        "a custom adjoint returns each adjoint with its argument's shape",
        "the custom adjoint {detail} returned an adjoint of `{var}` whose shape is not "
        "`{var}`'s",
        values=lambda f: ("it must return the adjoint of every float argument with that "
                          f"argument's shape (the adjoint of `{f.var}` at entry)")),
    "adjoint-count": CheckKind(
        "a custom adjoint returns one adjoint per float or complex argument",
        "the custom adjoint {detail} returned the wrong number of adjoints",
        values=lambda f: (f"it returned {fmt(f.actual)}, but {f.var} has {fmt(f.expected)} "
                          "float or complex argument(s): return their adjoints at entry, in "
                          "order (a tuple)"),
        headline=_adjoint_count_headline),
    "external-shape": CheckKind(
        "an external function returns a value of its output's shape",
        "the external function {detail} returned a value whose shape is not `{var}`'s",
        values=lambda f: f"its value is added into `{f.var}`, so it must have `{f.var}`'s shape"),
    "external-nonfinite": CheckKind(
        "an external function returns a finite value",
        "the external function {detail} returned an infinite or nan value, which cannot be "
        "subtracted from `{var}` again",
        values=lambda f: "revbench runs it backwards by subtracting its value"),
    "loop-state-shape": CheckKind(
        "a checkpointed loop's new and old state have the same shape",
        "the checkpointed loop's new state `{var}` and old state `{detail}` have different "
        "shapes",
        values=lambda f: ("each step adds the state after it into the new state from the state "
                          "before it, so the two must have the same shape")),
    "loop-not-recovered": CheckKind(
        "the reverse sweep of a checkpointed loop's step brings the state after it back to zero",
        "the reverse sweep of the checkpointed loop's step (under {detail}) did not bring the "
        "new state `{var}` back to zero",
        values=lambda f: (f"at step t={fmt(f.expected)} its largest remaining value is "
                          f"{fmt(f.actual)}: the step is not undone by running it backwards, "
                          "so the gradient would come from a wrong trajectory (make the step add "
                          "each element of the new state in one update, or loosen the tolerance "
                          "with @reversible(atol=..., rtol=...) if this is round-off)")),
    "loop-not-uncomputed": CheckKind(
        "the inverse of a checkpointed loop's step brings the state after it back to zero",
        "the inverse of the checkpointed loop's step (under {detail}) did not bring the new "
        "state `{var}` back to zero",
        values=lambda f: (f"at step t={fmt(f.expected)} its largest remaining value is "
                          f"{fmt(f.actual)}: the step is not undone by its inverse, so the "
                          "gradient would come from a wrong trajectory (make the step add each "
                          "element of the new state in one update, use a strategy that does not "
                          "uncompute such as Revolve(snapshots=...), or loosen the tolerance "
                          "with @reversible(atol=..., rtol=...) if this is round-off)")),
    "loop-not-restored": CheckKind(
        "the reverse sweep of an in-place step recovers the state before it",
        "the reverse sweep of the loop's in-place step (under {detail}) did not recover the "
        "stored state `{var}` it started from",
        values=lambda f: (f"at step t={fmt(f.expected)} it differs from the stored state by "
                          f"{fmt(f.actual)}: the step is not undone by running it backwards, so "
                          "its adjoint would be computed on a wrong state (loosen the tolerance "
                          "with @reversible(atol=..., rtol=...) if this is round-off)")),
    "loop-step-limit": CheckKind(
        "a checkpointed while loop ends within its max_steps",
        "the checkpointed while loop under {var} reached its max_steps with its condition "
        "still true (`{detail}`)",
        values=lambda f: (f"it stopped after {fmt(f.actual)} steps (max_steps={fmt(f.expected)}); "
                          "if the loop is meant to run longer, raise the limit with "
                          "`max_steps=` in checkpointed(...), else check that the condition "
                          "becomes false")),
    "loop-max-steps": CheckKind(
        "a checkpointed while loop's max_steps is an int >= 0",
        "the max_steps of the checkpointed while loop under {var} must be an int >= 0 "
        "(`{detail}`)",
        values=lambda f: f"got {fmt(f.actual)}"),
    # (checks only the GPU makes: Python and Numba raise their own errors there)
    "index": CheckKind("an index is within its axis", "an index of `{detail}` is out of bounds "
                       "for `{var}`"),
    "division": CheckKind("a divisor is not zero", "division by zero in `{detail}` (`{var}` is 0)"),
    "assert": CheckKind("an assert's condition holds", "assertion failed: `{var}`"),
    "gpu-product": CheckKind(
        "a matrix product on the GPU has fewer multiply-adds than the size from which the CPU "
        "calls BLAS (blas.MATMUL_THRESHOLD): below it both compute the same loop",
        "`{var}` is too large for the GPU, which has no BLAS yet: it must have fewer than "
        "{detail} multiply-adds (run it on the CPU, device='cpu', where it runs on BLAS)",
        values=lambda f: f"it has {fmt(f.actual)}", stops_thread=True),
}
#: checks that fail on the GPU only, by design (not from its arithmetic)
GPU_ONLY = frozenset({"gpu-product"})


def headline(kind: str, f: Failure) -> str:
    """The first part of a failed check's message."""
    entry = CHECKS[kind]
    if entry.headline is not None:
        return entry.headline(f)
    return entry.message.format(var=f.var, detail=f.detail,
                                axis=int(f.index[0]) if f.index else 0, why="")


#: the kinds after whose failure a GPU thread stops (:attr:`CheckKind.stops_thread`)
STOPPING = frozenset(k for k, c in CHECKS.items() if c.stops_thread)
