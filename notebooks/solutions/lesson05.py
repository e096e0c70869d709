"""Reference solutions for notebooks/05_space_time.ipynb (for teachers).

``tests/test_course_lesson05.py`` runs the checks of :mod:`revbench.course.lesson05` on
them.
"""

from revbench.checkpoint import Revolve

# Exercise 5.1 (T = 100): StoreAll keeps s_0 ... s_100 and steps forward once; Periodic(10)
# keeps s_0, s_10, ..., s_90 plus the 10 other states of the segment it reverses, and
# recomputes 9 steps of each of the 10 segments after the first sweep.
prediction = {
    "StoreAll states": 101,
    "StoreAll forward steps": 100,
    "Periodic states": 20,
    "Periodic forward steps": 190,
}


# Exercise 5.2: the first sweep (T steps), then s_t recomputed from s_0 for t = T-1 ... 1.
def one_snapshot_forward(T):
    return T * (T + 1) // 2


# Exercise 5.3: 12 states = 10 snapshots + the 2 working states; Revolve is optimal for a
# given number of snapshots.
strategy = Revolve(snapshots=10)
