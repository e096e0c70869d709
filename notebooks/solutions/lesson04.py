"""Reference solutions for notebooks/04_debugger.ipynb (for teachers).

``tests/test_course_lesson04.py`` runs the checks of :mod:`revbench.course.lesson04` on
them.  Exercises 4.1 and 4.2 are answered with values read off the debugger; 4.3 with a
function.
"""

import numpy as np

from revbench import reversible

# Exercise 4.1: the debugger stops at the third particle (x[0] = x[1] = 0.0, so the first
# two iterations leave v unchanged and t comes back at 0.0).  There t = 0.5**2 - 0.35**2.
answer_1 = {"i": 2, "ancilla": "t", "value": 0.1275, "culprit": "v[i] -= dt * x[i]"}

# Exercise 4.2: the sweep runs the loop backwards (i = 1 first); y += x[1] * x[2] gives
# x[1] the adjoint x[2] = 3 and x[2] the adjoint x[1] = 2; then i = 0 adds x[1] = 2 to
# x[0] and x[0] = 1 to x[1].
answer_2 = {"first": 1, "after_first": np.array([0.0, 3.0, 2.0]),
            "final": np.array([2.0, 4.0, 2.0])}


# Exercise 4.3: free t before the velocity changes (the energy uses the old velocity).
@reversible
def kinetic_fixed(e, x, v, dt):
    for i in range(len(x)):
        t = 0.0
        t += v[i] * v[i]
        e += 0.5 * t
        t -= v[i] * v[i]
        del t
        v[i] -= dt * x[i]
