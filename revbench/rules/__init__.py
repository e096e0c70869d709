"""Rule tables: one entry per instruction and per pure function.

Every stage (checker, type inference, inverse, code generation and, later, the
adjoint) reads these tables instead of carrying its own copy of the rules, so
adding a function or an instruction is one entry in one place.
"""
