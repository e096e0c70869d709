"""Generated code as tests read it: one spelling for what the backends write two ways.

A real function is ``_rb_np.sin`` under Numba and ``_rb_libm.sin`` under Python (the C
library's function, as compiled code calls it: :mod:`revbench.backends.libm`).  Tests that
look for a statement in generated code ask for ``_rb_np.sin`` on both.

A checked float update ``t -= x * x`` is written as a call that computes it and tests the
result (``t = _rb_float_shift(t, (x * x), True, _RB_MODULE, 3)``); tests that ask which
updates a program makes read it as the update (``t -= (x * x)``).
"""

from __future__ import annotations

import re

_CHECKED_SHIFT = re.compile(
    r"^(?P<indent>\s*)(?P<target>\S.*?) = _rb_float_shift\((?P=target), (?P<value>.*), "
    r"(?P<subtract>True|False), _RB_MODULE, \d+\)$", re.MULTILINE)


def _as_update(m: re.Match) -> str:
    op = "-=" if m["subtract"] == "True" else "+="
    return f"{m['indent']}{m['target']} {op} {m['value']}"


def plain(source: str) -> str:
    """``source`` with the Python backend's libm calls spelled as NumPy's, and checked
    float shifts as the updates they make."""
    return _CHECKED_SHIFT.sub(_as_update, source.replace("_rb_libm.", "_rb_np."))
