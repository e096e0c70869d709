"""Backends: turn typed IR into something that runs.

``codegen`` writes one Python source file per (function, direction,
signature); the Numba backend ``njit``s it, the Python backend runs it as is.
Both therefore execute the very same code.
"""
