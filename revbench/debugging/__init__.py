"""Seeing a program run: its steps forward and backward, and what each line becomes.

================  ==========================================================================
:mod:`.tracing`   ``revbench.trace(f, *args)``: every step of a run forward and then backward
                  (the inverse, or the reverse sweep with its adjoints), and the state at any
                  step -- the model the debugger widget (``revbench.jupyter.debugger``) and
                  the static course pages step through; the steps are recorded by the tracer
                  engine in :mod:`revbench.backends.tracer`, which runs the generated code
:mod:`.explain`   ``f.explain()``: each source line beside its inverse and its adjoint
================  ==========================================================================

Nothing is imported here: ``explain`` sits below the function objects (which call it) and
``tracing`` above them, so each is imported from its own module.
"""
