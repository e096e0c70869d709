"""Generated code as tests read it: one spelling for what the backends write two ways.

A checked float shift is ``t = _rb_fadd(t, v, _RB_MODULE, k)`` under Numba (the update and
its check in one helper) and ``t += v`` plus an inline check under Python; a real function
is ``_rb_np.sin`` under Numba and ``_rb_libm.sin`` under Python.  Tests that look for a
statement in generated code ask for ``t += v`` and ``_rb_np.sin`` on both.
"""

from __future__ import annotations

import re

_SHIFT = re.compile(r"^(?P<indent>\s*)(?P<target>.+?) = _rb_f(?P<op>add|sub)\((?P<same>.+?), "
                    r"(?P<value>.*), _RB_MODULE, \d+\)$")


def _line(line: str) -> str:
    m = _SHIFT.match(line)
    if m and m["target"] == m["same"]:
        op = "+=" if m["op"] == "add" else "-="
        line = f"{m['indent']}{m['target']} {op} {m['value']}"
    return line.replace("_rb_libm.", "_rb_np.")


def plain(source: str) -> str:
    """``source`` with helper-call shifts as ``+=`` / ``-=`` and libm calls as NumPy's."""
    return "\n".join(_line(ln) for ln in source.splitlines())
