"""What generated code needs at run time, and how its failures are reported.

Generated code raises :class:`CheckFailed` with small integers and the values
involved (Numba can raise exceptions with runtime arguments, not format
strings).  Each generated module registers a :class:`CheckTable` under its
key, and :func:`to_user_error` turns the raw exception into a
:class:`~revbench.lang.errors.ReversibilityError` whose message names the
variable, the expected and actual values, the function and the source line.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from revbench.lang.errors import ReversibilityError


class CheckFailed(Exception):
    """Raised by generated code: ``(module_key, check_index, expected, actual, *index)``."""


@dataclass(frozen=True)
class CheckInfo:
    kind: str  # see MESSAGES
    variable: str  # the user's text of the variable / condition / operand
    line: int
    detail: str = ""  # extra text (the other operand, the statement, ...)


@dataclass
class CheckTable:
    function: str
    filename: str
    direction: str
    checks: list[CheckInfo] = field(default_factory=list)
    linemap: dict[int, int] = field(default_factory=dict)  # generated line -> user line
    source_lines: dict[int, str] = field(default_factory=dict)  # user line -> text
    path: str = ""


#: module key -> its table (filled when a generated module is loaded)
TABLES: dict[int, CheckTable] = {}

MESSAGES = {
    "ancilla": "ancilla `{var}` is not back at its allocated value when deallocated",
    "ancilla-shape": "ancilla `{var}` does not have the shape its allocation expression gives now "
                     "(axis {axis})",
    "if-post": "postcondition `{var}` of the if statement does not agree with its condition "
               "`{detail}` (it must hold after the branch exactly when the condition held before)",
    "while-entry": "postcondition `{var}` of the while loop must be false when the loop starts",
    "while-iter": "postcondition `{var}` of the while loop must be true after every iteration",
    "for-bound": "the {detail} `{var}` of the for loop changed inside the loop",
    "for-step": "range() step `{var}` is zero",
    "alias": "`{var}` and `{detail}` are the same element at run time: an update cannot read "
             "its own target",
    "call-alias": "`{var}` and `{detail}` are the same element at run time: arguments of one "
                  "call must not alias",
    "zero": "`{detail}` by `{var}`: the operand is zero, which cannot be undone",
    "inexact": "integer `/=` by `{var}` must divide `{detail}` exactly",
    "shape": "`{var}` and `{detail}` must have the same shape for a whole-array statement",
}


def _fmt(v) -> str:
    if isinstance(v, bool):
        return str(v)
    if hasattr(v, "item"):
        v = v.item()
    return repr(v)


def to_user_error(exc: CheckFailed) -> ReversibilityError:
    """Turn a raw :class:`CheckFailed` into the user's :class:`ReversibilityError`."""
    key, k, expected, actual, *index = exc.args
    table = TABLES.get(key)
    if table is None:  # pragma: no cover - a module loaded without its table
        return ReversibilityError(f"a reversibility check failed: {exc.args}")
    info = table.checks[k]
    var = info.variable
    if index and info.kind == "ancilla":
        var = f"{var}[{', '.join(str(int(i)) for i in index)}]"
    what = MESSAGES[info.kind].format(var=var, detail=info.detail,
                                      axis=int(index[0]) if index else 0)
    if info.kind == "zero":
        values = f"got {_fmt(actual)}"
    elif info.kind in ("alias", "call-alias"):
        values = f"both are index {_fmt(expected)}"
    elif info.kind == "inexact":
        values = f"{_fmt(actual)} does not divide {_fmt(expected)}"
    elif info.kind == "shape":
        values = f"{_fmt(actual)} vs {_fmt(expected)} along axis {index[0] if index else 0}"
    else:
        values = f"expected {_fmt(expected)}, got {_fmt(actual)}"
    text = table.source_lines.get(info.line, "").strip()
    direction = "" if table.direction == "forward" else f" (running its {table.direction})"
    msg = (f"{what}: {values}\n  in reversible function {table.function}{direction}, "
           f"{table.filename}, line {info.line}: {text}")
    return ReversibilityError(msg, variable=var, expected=expected, actual=actual,
                              function=table.function, filename=table.filename, lineno=info.line)
