"""Generated code as tests read it: one spelling for what the backends write two ways.

A real function is ``_rb_np.sin`` under Numba and ``_rb_libm.sin`` under Python (the C
library's function, as compiled code calls it: :mod:`revbench.backends.libm`).  Tests that
look for a statement in generated code ask for ``_rb_np.sin`` on both.
"""

from __future__ import annotations


def plain(source: str) -> str:
    """``source`` with the Python backend's libm calls spelled as NumPy's."""
    return source.replace("_rb_libm.", "_rb_np.")
