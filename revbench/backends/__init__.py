"""Backends: turn typed IR into something that runs.

``codegen`` writes one Python source file per (function, direction,
signature); the Numba backend ``njit``s it, the Python backend runs it as is, and
the debugger's ``tracer`` runs the same code one statement at a time.  All therefore
execute the very same code.
"""
