"""The native code generator: revbench's generated kernels compiled straight to LLVM IR.

Numba compiles the generated source of a kernel by typing it again, lowering every
statement through its generic machinery (reference counts, exception objects, array
structures) and handing LLVM about ten times the code the kernel needs.  That is most
of a first call's time (issue 22: type inference and lowering were 60% of a first
gradient, LLVM the rest).  The generated source is a small, fully typed language --
scalars, arrays indexed element by element, ``for``/``while``/``if``, checked helpers,
calls of other generated kernels -- so this package lowers it to LLVM IR itself:

* :mod:`~revbench.backends.native.lower` -- generated source (the same text Numba and the
  Python backend run) to LLVM IR, with the types of the call's arguments; raises
  :class:`~revbench.backends.native.lower.Unsupported` for anything outside the subset;
* :mod:`~revbench.backends.native.engine` -- compiles that IR with Numba's own LLVM code
  generator (one optimiser, one JIT, and its object-code cache format), calls it from
  Python, and falls back to the Numba dispatcher for whatever the subset does not cover.

The semantics are Numba's, operation by operation (its integer division, power by
squaring, ``min``/``max`` order, bounds checks when checks are on), so results are the
same to the bit; the test suite runs every Numba-backend test through it.
"""
