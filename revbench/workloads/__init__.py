"""Workloads written in the reversible language, with their references and data.

Each module holds one problem: the reversible program, an independent
plain-NumPy reference of the same formulas (for testing gradients), a
hand-written ``@numba.njit`` objective (the speed reference of the
benchmarks), and readers/seeded generators for its data files.
"""
