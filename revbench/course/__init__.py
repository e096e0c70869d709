"""The course: self-checking exercises for the teaching notebooks in ``notebooks/``.

Each lesson has a module (``revbench.course.lesson02`` for ``02_reversible_programming``,
...) with one check function per exercise.  A notebook's check cell calls it on the
student's answer, and the cell shows a :class:`~revbench.course.feedback.Feedback`: a
green success message, or a hint that names the input, the value and the rule that went
wrong.  A check never raises on a wrong answer (a notebook run top to bottom shows no
error output), and never modifies the student's data.

The reference solutions live apart, in ``notebooks/solutions/``; the test suite runs
every check on them (they must pass) and on typical wrong answers (they must fail with a
hint).  See ``docs/teaching.md`` for the lesson plan.
"""

from revbench.course.feedback import Feedback, hint, success

__all__ = ["Feedback", "hint", "success"]
