"""Reference solutions for notebooks/03_ad_by_uncomputation.ipynb (for teachers).

``tests/test_course_lesson03.py`` runs the checks of :mod:`revbench.course.lesson03` on
them.
"""

import math

import numpy as np

from revbench import reversible, routine

# Exercise 3.1: y = sin(t) + a*t with t = a*b.  Backwards from y (adjoint 1):
#   t's adjoint: cos(t) + a;  a's: t (from a*t) + b * (cos(t) + a);  b's: a * (cos(t) + a).
a, b = 0.5, 2.0
dy_da = b * math.cos(a * b) + 2.0 * a * b
dy_db = a * math.cos(a * b) + a * a


# Exercise 3.2: each step overwrites n elements of p, n of q, and E.
def tape_floats(T, n):
    return T * (2 * n + 1)


# Exercise 3.3: s is computed, used and uncomputed; nothing is overwritten.
@reversible
def soft_norm(L, x):
    with routine:
        s = 0.0
        for i in range(len(x)):
            s += x[i] * x[i]
        r = math.sqrt(s)
    L += r / (1.0 + r)
    ~routine


# Exercise 3.4: L = Re(z^2) = x^2 - y^2, so dL/dx + i dL/dy = 2x - 2iy = 2 conj(z).
z = 1.0 + 2.0j
g = 2.0 * np.conj(z)
