"""The instruction rule table: what each in-place update means and undoes.

An *update* ``y op= e`` changes ``y`` by a function of ``e`` that can be
undone.  The table states, once per instruction:

* ``inverse`` -- the instruction that undoes it;
* ``dtypes``  -- the target types it is defined for (``^=`` on a float is
  refused, ``+=`` on a bool is refused);
* the runtime guards it needs (``*=`` by zero is not invertible, integer
  ``/=`` must divide exactly).

Swap, allocation and calls have fixed, simple inverses that live in
:mod:`revbench.transforms.invert`; everything with choices lives here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class UpdateRule:
    op: str
    inverse: str
    python_op: str  # the Python operator used for float/complex targets
    int_op: str  # the Python operator used for int/bool targets
    dtypes: frozenset[str]
    nonzero_operand: bool = False  # the operand must not be 0 (else not invertible)
    exact_int_division: bool = False  # integer targets: the operand must divide exactly
    description: str = ""


UPDATES: dict[str, UpdateRule] = {
    "+=": UpdateRule("+=", "-=", "+", "+", frozenset({"int", "float", "complex"}),
                     description="add"),
    "-=": UpdateRule("-=", "+=", "-", "-", frozenset({"int", "float", "complex"}),
                     description="subtract"),
    "*=": UpdateRule("*=", "/=", "*", "*", frozenset({"int", "float", "complex"}),
                     nonzero_operand=True, description="multiply"),
    "/=": UpdateRule("/=", "*=", "/", "//", frozenset({"int", "float", "complex"}),
                     nonzero_operand=True, exact_int_division=True, description="divide"),
    "^=": UpdateRule("^=", "^=", "^", "^", frozenset({"int", "bool"}),
                     description="exclusive or"),
}

#: Python's augmented-assignment operators that are *not* reversible, with advice.
REFUSED_UPDATES: dict[str, str] = {
    "//=": "floor division loses the remainder, so it cannot be undone",
    "%=": "a remainder cannot be undone",
    "**=": "a power is not undone by a reversible update; compute into a new ancilla",
    "@=": "matrix products are not instructions; call a reversible function such as "
          "revbench.lib's matvec",
    "<<=": "shifts lose bits; use *= or /= by a power of two",
    ">>=": "shifts lose bits; use *= or /= by a power of two",
    "|=": "or loses information; use ^=",
    "&=": "and loses information; use ^= with an ancilla",
}


def inverse_op(op: str) -> str:
    """The instruction that undoes ``op``."""
    return UPDATES[op].inverse
