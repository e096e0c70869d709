"""The line a notebook shows while tiered execution compiles in the background.

:mod:`revbench.tiering` runs a first call interpreted while Numba compiles it; a person
should see that something is happening -- and that the results are already the compiled
code's -- rather than wonder why the next call waits.  The line appears under the cell
that started the compilation and, in Jupyter, is updated in place when it ends.  Outside
IPython nothing is shown; a terminal IPython shows the first line only.
"""

from __future__ import annotations

import threading

from revbench import tiering

#: id of a job -> its display handle
_shown: dict[int, object] = {}
_lock = threading.Lock()


def _text(job: tiering.Job) -> str:
    if not job.ready.is_set():
        return (f"revbench: compiling {job.label} in the background; meanwhile calls run "
                "interpreted, with the same results")
    if job.error is not None:
        return (f"revbench: compiling {job.label} failed after {job.seconds:.1f} s; the next "
                "call shows why")
    return f"revbench: compiled {job.label} in {job.seconds:.1f} s"


def on_event(event: str, job: tiering.Job) -> None:
    """A :func:`revbench.tiering.add_listener` listener."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        return
    if get_ipython() is None:
        return
    if event == "queued":
        handle = display({"text/plain": _text(job)}, raw=True, display_id=True)
        with _lock:
            _shown[id(job)] = handle
    elif event == "done":
        with _lock:
            handle = _shown.pop(id(job), None)
        # Jupyter updates the line in place; a terminal would print it into the prompt
        if handle is not None and type(get_ipython()).__name__ == "ZMQInteractiveShell":
            handle.update({"text/plain": _text(job)}, raw=True)


def install() -> None:
    tiering.add_listener(on_event)
