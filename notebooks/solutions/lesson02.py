"""Reference solutions for notebooks/02_reversible_programming.ipynb (for teachers).

Each function is the answer to one exercise; ``tests/test_course_lesson02.py`` runs the
checks of :mod:`revbench.course.lesson02` on them.
"""

import math

from revbench import reversible, routine


# Exercise 2.1: every statement of scramble inverted, in the opposite order -- inside the
# loop body too.
@reversible
def unscramble(x, y, k):
    y /= 3.0
    k ^= 6
    x[0], x[1] = x[1], x[0]
    for i in range(len(x)):
        x[i] += 2.0 * y[i]
        y[i] -= x[i] * x[i]


# Exercise 2.2: compute s, use it, uncompute it (the routine undoes the loop and frees s).
@reversible
def rms_into(r, x):
    with routine:
        s = 0.0
        for i in range(len(x)):
            s += x[i] * x[i]
    r += math.sqrt(s / len(x))
    ~routine


# Exercise 2.3: the branch changes x, so x < 0.0 cannot tell afterwards whether it ran;
# the flag it sets can.
@reversible
def fold(x, flipped):
    if (x < 0.0, flipped):
        x *= -1.0
        flipped ^= True


# Exercise 2.4: years > 0 is False before the first iteration and True after each one.
@reversible
def grow(balance, target, years):
    while (balance < target, years > 0):
        balance *= 1.05
        years += 1
