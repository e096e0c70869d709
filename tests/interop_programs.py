"""The program both exports are tested on (``tests/test_interop_jax.py``,
``tests/test_interop_torch.py``): array and scalar outputs, an int loop bound and a bool
flag that pass through, a function of a scalar input, so that one text covers what the
exports must carry."""

RESID = """
    def resid(r, s, a, x, n, flag):
        for i in range(len(r)):
            r[i] += a[i] * x[i] * x[i] + sin(s)
        for i in range(n):
            s += x[i] * a[i]
        if flag:
            s += 1.0
"""

# an ancilla not back at its value when freed: revbench's own error must come through
DIRTY = """
    def bad(y, x):
        t = x * 2.0
        y += t
        t -= 1.0
        del t
"""
