"""Reference solutions for notebooks/01_tour.ipynb (for teachers).

``tests/test_course_lesson01.py`` runs the checks of :mod:`revbench.course.lesson01` on them.
"""

from revbench import grad, reversible


# Exercise 1.1: update y instead of overwriting it; the inverse subtracts the square again.
@reversible
def square_into(y, x):
    y += x * x


# Exercise 1.2: the tour's poly, and the derivative of its y with respect to x at x = -1.5.
@reversible
def poly(y, x):
    t = 0.0
    t += x * x
    y += 3.0 * t + x
    t -= x * x
    del t


dy_dx = grad(poly, loss="y")(0.0, -1.5)[1]
