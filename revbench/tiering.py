"""Tiered execution: results at once, compiled code as soon as it is ready.

Numba takes seconds to compile a real program (its type inference and lowering grow with
the generated code), and a notebook user edits and runs a cell dozens of times an hour.
With tiering on, a call whose compiled code is neither in memory nor in the disk cache

1. starts Numba compiling it in a background thread, and
2. runs *this* call on the Python backend: the very same generated code, whose real
   functions are the C library's (:mod:`revbench.backends.libm`), so the results are
   bit for bit those of the compiled code;
3. if the compiled code becomes ready while the interpreted run is still going, that run
   stops at its next loop poll, the arguments are restored from snapshots, and the
   compiled code runs the call instead: a large first call never waits much longer than
   compiling would have taken.

Later calls run compiled as soon as the background compilation has finished.  Numba
caches what it compiled on disk as usual, so the next process starts warm.

Tiering is on by default in IPython and Jupyter (``REVBENCH_TIERED=auto``), where a
person waits for each result; plain scripts compile first, as before.  Set
``REVBENCH_TIERED=1`` (or :func:`set_tiered`) to tier everywhere, ``0`` to never tier.
Code that Numba may fail to compile where Python succeeds -- registered user functions,
external functions, custom adjoints -- and ``fastmath`` code (whose results legitimately
differ) is never tiered; nor is a program that prints or asserts (an interrupted run
would repeat its output).
"""

from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from revbench.backends import runtime

_MODES = ("auto", "on", "off")
_ENV = {"auto": "auto", "1": "on", "on": "on", "true": "on", "yes": "on",
        "0": "off", "off": "off", "false": "off", "no": "off"}


def _mode_from_env() -> str:
    raw = os.environ.get("REVBENCH_TIERED", "auto").strip().lower()
    return _ENV.get(raw, "auto")


_state = {"mode": _mode_from_env()}


def set_tiered(mode: bool | str) -> None:
    """Tier calls (``True``/``"on"``), never (``False``/``"off"``), or only in IPython and
    Jupyter (``"auto"``, the default; also ``REVBENCH_TIERED``)."""
    if mode is True:
        mode = "on"
    elif mode is False:
        mode = "off"
    if mode not in _MODES:
        raise ValueError(f"tiered must be True, False or one of {_MODES}, got {mode!r}")
    _state["mode"] = mode


def tiered_mode() -> str:
    """The current mode: ``"auto"``, ``"on"`` or ``"off"``."""
    return _state["mode"]


def enabled() -> bool:
    mode = _state["mode"]
    if mode != "auto":
        return mode == "on"
    ipython = sys.modules.get("IPython")
    return ipython is not None and ipython.get_ipython() is not None


# --------------------------------------------------------------------------------------
# Background compilation
# --------------------------------------------------------------------------------------


@dataclass(eq=False)  # jobs are compared by identity
class Job:
    """One specialisation being compiled in the background."""

    dispatcher: Any
    signature: tuple
    #: the Compiled whose code this is (weakly): while it lives its generated module stays
    #: loaded, which Numba needs to compile -- and cache -- the code as a module's function
    owner: Callable[[], Any]
    ready: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    #: what is compiled, for people: ``"gmm (forward)"``
    label: str = ""
    #: seconds the calls run interpreted while this compiled have taken
    interpreted: float = 0.0
    #: seconds the compilation took (set when it ends)
    seconds: float = 0.0


#: (id of the dispatcher, Numba argument types) -> its job; the dispatcher is kept alive
#: by the job, so the id is not reused while the entry exists
_jobs: dict[tuple[int, tuple], Job] = {}
_queue: list[Job] = []
_wake = threading.Condition()
_worker: list[threading.Thread] = []
#: listeners told when a background compilation is queued (``"queued"``, in the calling
#: thread) and when it ends (``"done"``, in the compiling thread): the notebook's status
_listeners: list[Callable[[str, Job], None]] = []
#: what tiering did in this process (for tests and the curious)
stats = {"interpreted": 0, "promoted": 0, "waited": 0, "compiled": 0}


def add_listener(listener: Callable[[str, Job], None]) -> None:
    """Call ``listener(event, job)`` when a background compilation is queued or done."""
    if listener not in _listeners:
        _listeners.append(listener)


def remove_listener(listener: Callable[[str, Job], None]) -> None:
    if listener in _listeners:
        _listeners.remove(listener)


def _work() -> None:
    while True:
        with _wake:
            while not _queue:
                _wake.wait()
            job = _queue.pop(0)
        owner = job.owner()  # held until compiled
        if owner is None:  # its function is gone (a notebook cell run again): moot
            _finish(job)
            continue
        start = time.perf_counter()
        try:
            job.dispatcher.compile(job.signature)
        except BaseException as exc:  # reported by the call that runs it next
            job.error = exc
        finally:
            job.seconds = time.perf_counter() - start
            stats["compiled"] += 1
            _finish(job)
            _notify("done", job)
            del owner


def _finish(job: Job) -> None:
    """Mark ``job`` done.  A compiled job is forgotten (its dispatcher now holds the code;
    the job must not keep the dispatcher alive); a failed one is kept, so the calls after
    it compile in their own thread and raise its error rather than run interpreted again."""
    with _wake:
        if job.error is None:
            _jobs.pop((id(job.dispatcher), job.signature), None)
        job.ready.set()


def _notify(event: str, job: Job) -> None:
    for listener in list(_listeners):
        try:
            listener(event, job)
        except Exception:  # a status display must never break compilation
            pass


def _submit(compiled, signature: tuple, label: str, dispatcher: Any = None) -> Job:
    """The background job compiling ``dispatcher`` (``compiled.run`` unless given: Numba's,
    or the native path's :class:`~revbench.backends.native.engine.NativeRunner`; both
    have ``compile(signature)``) for ``signature`` (started if new).

    One worker thread compiles one job at a time: Numba compiles under one global lock
    anyway, and its type registries are not built to be changed by two threads at once.
    The thread is a daemon: a script that got its result leaves without waiting for it."""
    if dispatcher is None:
        dispatcher = compiled.run
    key = (id(dispatcher), signature)
    with _wake:
        job = _jobs.get(key)
        if job is None:
            job = _jobs[key] = Job(dispatcher, signature, weakref.ref(compiled), label=label)
            _queue.append(job)
            if not _worker:
                thread = threading.Thread(target=_work, name="revbench-compile", daemon=True)
                thread.start()
                _worker.append(thread)
            _wake.notify()
        else:
            return job
    _notify("queued", job)
    return job


def _wait_for(job: Job) -> None:
    """Wait for ``job``, compiled next if it is still queued (a caller waits for it; the
    jobs queued before it only might be needed later)."""
    with _wake:
        if job in _queue and _queue[0] is not job:
            _queue.remove(job)
            _queue.insert(0, job)
    job.ready.wait()


def pending() -> int:
    """How many background compilations have not finished."""
    with _wake:
        return sum(1 for job in _jobs.values() if not job.ready.is_set())


def wait(timeout: float | None = None) -> bool:
    """Wait until every background compilation has finished; False on timeout."""
    with _wake:
        jobs = list(_jobs.values())
    return all(job.ready.wait(timeout) for job in jobs)


# --------------------------------------------------------------------------------------
# Choosing the tier of a call
# --------------------------------------------------------------------------------------


@dataclass
class Tiered:
    """A call's code under tiering: the compiled version, and how to get the
    interpreted one (built only when a call needs it)."""

    compiled: Any  # revbench.compiler.Compiled, Numba backend
    interpreted: Callable[[], Any]  # -> revbench.compiler.Compiled, Python backend
    label: str = ""

    def choose(self, call_args: list) -> tuple[Any, Job | None]:
        """The code to run ``call_args`` now, and the background job whose end should
        stop it (None: it is the compiled code)."""
        dispatcher = self.compiled.run
        job = self._native_job(dispatcher, call_args)
        if job is None:  # (Numba's typing only where Numba runs the call)
            from numba import typeof

            signature = tuple(typeof(a) for a in call_args)
            if signature in dispatcher.overloads:
                return self.compiled, None
            job = _jobs.get((id(dispatcher), signature))
        if job is None:
            from revbench.backends.kernel_cache import is_cached

            if is_cached(dispatcher, signature):
                return self.compiled, None  # loading it takes milliseconds
            job = _submit(self.compiled, signature, self.label)
        elif job is _READY:
            return self.compiled, None
        if job.interpreted >= INTERPRETED_BUDGET and not job.ready.is_set():
            # The calls run interpreted have had their time (the first results are out):
            # more would keep taking the interpreter lock from the compiling thread -- a
            # loop of interpreted calls slows compilation several times over -- so wait.
            stats["waited"] += 1
            _wait_for(job)
        if job.ready.is_set():
            # done (or failed: the call compiles again in this thread and raises its error)
            return self.compiled, None
        stats["interpreted"] += 1
        return self.interpreted(), job


    def _native_job(self, dispatcher: Any, call_args: list) -> Job | None:
        """Where the native path (:mod:`revbench.backends.native`) runs this call: its
        background job, or ``_READY`` when its code is in memory or on disk; None where
        the call goes to Numba."""
        from revbench.backends.native import engine

        native = engine.runner(dispatcher)
        if native is None:
            return None
        types = native.signature(tuple(call_args))
        if types is None or not native.lowerable(types):
            return None
        if native.has(types) or native.is_cached(types):
            return _READY
        job = _jobs.get((id(native), types))
        return job if job is not None else _submit(self.compiled, types, self.label, native)


#: :meth:`Tiered._native_job`'s "compiled already"
_READY = Job(None, (), lambda: None)


class Promote(Exception):
    """Raised inside an interpreted run when its compiled code has become ready."""


#: how long (seconds, all calls together) code may run interpreted while it compiles;
#: past that a run stops and waits for the compiled code: the interpreter is 10-1000x
#: slower than compiled code, and while it runs it slows the compiling thread down (they
#: share the interpreter lock)
INTERPRETED_BUDGET = 2.0

_watch = threading.local()


def _poll() -> bool:
    job = getattr(_watch, "job", None)
    if job is not None:
        if not job.ready.is_set() and time.perf_counter() > _watch.deadline:
            stats["waited"] += 1
            _wait_for(job)
        if job.ready.is_set() and job.error is None:
            stats["promoted"] += 1
            raise Promote()
    return False


runtime.register_poll(_poll)


class watching:
    """While the interpreted run of a call goes on, its loop polls ask whether ``job``
    has finished (and stop the run if it has)."""

    def __init__(self, job: Job | None):
        self.job = job

    def __enter__(self):
        self.saved = getattr(_watch, "job", None), getattr(_watch, "deadline", 0.0)
        _watch.job = self.job
        if self.job is not None:
            self.start = time.perf_counter()
            _watch.deadline = self.start + max(0.0, INTERPRETED_BUDGET - self.job.interpreted)
        return self

    def __exit__(self, *exc) -> None:
        _watch.job, _watch.deadline = self.saved
        if self.job is not None:
            self.job.interpreted += time.perf_counter() - self.start
