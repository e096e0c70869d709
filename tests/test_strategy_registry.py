"""The checkpoint strategies' registry (``docs/architecture.md``, "How to add a checkpoint
strategy"): every registered strategy says all that its readers need, and a strategy
defined here -- one class, nothing else touched -- reaches the command line, the plots,
the default lists, :func:`fitting` and ``revbench.checkpoint``'s exports."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

import revbench.checkpoint as checkpoint
from revbench.checkpoint import plan as plans
from revbench.checkpoint.actions import simulate
from revbench.checkpoint.strategies import INPLACE, OUT_OF_PLACE, STRATEGIES, Strategy, fitting
from revbench.course.lesson05 import plan_counts
from revbench.experiments.__main__ import build_parser, parse_strategy, strategy_usage
from revbench.experiments.compare import default_strategies
from revbench.experiments.plot import PEER_MARKER, marker_of

DOCS = Path(__file__).resolve().parent.parent / "docs"
BUILT_IN = list(STRATEGIES)  # at collection: the strategies of strategies.py


@pytest.fixture
def registry():
    """Restores :data:`STRATEGIES` after the test, whatever it registered."""
    before = dict(STRATEGIES)
    try:
        yield STRATEGIES
    finally:
        STRATEGIES.clear()
        STRATEGIES.update(before)


@pytest.fixture
def thinned(registry):
    """A strategy as a newcomer adds one: a class, registered when it is defined."""

    @dataclasses.dataclass(frozen=True, repr=False)
    class Thinned(Strategy):
        """Keep every ``every``-th state (Periodic's schedule), out-of-place loops only."""

        every: int = 3
        cli_name = "thinned"
        knob_name = "every"
        knob_letter = "K"
        marker = "P"
        kinds = (OUT_OF_PLACE,)
        fit_reason = "it is only a test"

        @classmethod
        def defaults(cls, n_steps):
            return [cls(every=2), cls(every=n_steps)]

        def slots(self, n_steps, inplace):
            return len(range(0, n_steps, self.every)) + min(self.every, n_steps) + 2

        def schedule(self, builder, n_steps):
            plans.periodic(builder, n_steps, self.every)

    return Thinned


def test_a_new_strategy_reaches_every_reader(thinned):
    assert STRATEGIES["Thinned"] is thinned
    assert fitting(False) == ["StoreAll", "Periodic", "Revolve", "Bennett", "Online",
                              "TwoLevel", "Multistage", "Thinned"]
    assert fitting(True) == ["StoreAll", "Periodic", "Revolve", "Online", "TwoLevel",
                             "Multistage", "Reverse"]
    # the command line
    assert parse_strategy("thinned:4") == thinned(every=4)
    assert parse_strategy("Thinned(every=5)") == thinned(every=5)
    assert parse_strategy("thinned") == thinned()
    assert strategy_usage() == (
        "storeall, periodic:K, revolve:C, bennett:K, online:C, twolevel:K, multistage:D, "
        "reverse, thinned:K")
    assert "thinned:K" in build_parser().format_help()
    with pytest.raises(ValueError, match=r"use one of .*thinned:K"):
        parse_strategy("thin:2")
    with pytest.raises(ValueError, match=r"Thinned\(every=\.\.\.\) must be an int >= 1"):
        parse_strategy("thinned:0")
    # the plots
    assert marker_of("Thinned") == "P" and marker_of("lax.scan") == PEER_MARKER
    # the default lists: after the built-in ones, where it fits
    out = default_strategies(False, 100)
    assert out[-2:] == [thinned(every=2), thinned(every=100)]
    assert not any(isinstance(s, thinned) for s in out[:-2])
    assert not any(isinstance(s, thinned) for s in default_strategies(True, 100))
    # the schedule runs as the built-in ones do
    assert plan_counts(thinned(every=3), 10) == plan_counts(checkpoint.Periodic(every=3), 10)


def test_a_new_strategy_runs_in_an_experiment_and_its_plot(thinned):
    pytest.importorskip("pandas")
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from revbench.experiments import compare

    result = compare("heat", n_steps=[4, 6], repeats=1, progress=False, peers=False)
    rows = result.table[result.table["strategy"] == "Thinned"]
    assert sorted(rows["knob"]) == ["every=2", "every=2", "every=6", "every=6"]
    assert (rows["error"] == "").all() and (rows["grad_error"] < 1e-12).all()
    fig = result.plot()
    try:
        lines = {line.get_label(): line for line in fig.axes[1].get_lines()}
        assert lines["Thinned(every=2)"].get_marker() == "P"
        assert lines["Thinned(every=2)"].get_linestyle() == "-"
        assert lines["Revolve(snapshots=1)"].get_marker() == "o"
    finally:
        plt.close(fig)


def test_lesson_5_lists_the_registered_strategies(thinned):
    from revbench.course.lesson05 import exercise_3

    fb = exercise_3(checkpoint.Reverse())
    assert "Reverse() needs an in-place step" in str(fb)
    assert "Thinned(every=...)" in str(exercise_3(3))  # the list of what fits reads the registry


def test_registration_refuses_what_its_readers_could_not_use(registry):
    before = dict(STRATEGIES)

    def define(name, **attrs):
        attrs.setdefault("__doc__", "A strategy.")
        return type(name, (Strategy,), attrs)

    with pytest.raises(TypeError, match="needs a plot marker"):
        define("NoMarker", cli_name="nomarker")
    with pytest.raises(TypeError, match="cli_name 'revolve' is Revolve's"):
        define("Again", cli_name="revolve", marker="h")
    with pytest.raises(TypeError, match="marker 'o' is Revolve's"):
        define("Again", cli_name="again", marker="o")
    with pytest.raises(TypeError, match="lower-case letters"):
        define("Dashed", cli_name="da-shed", marker="h")
    with pytest.raises(TypeError, match="needs a knob_letter"):
        define("Knobbed", cli_name="knobbed", marker="h", knob_name="c")
    with pytest.raises(TypeError, match="kinds must be"):
        define("Kindless", cli_name="kindless", marker="h", kinds=())
    with pytest.raises(TypeError, match="docstring"):
        define("Mute", cli_name="mute", marker="h", __doc__=None)
    assert STRATEGIES == before
    # a subclass without a cli_name of its own is not registered (a variant, or a helper base)
    define("Variant", __doc__=None)
    type("RevolveVariant", (checkpoint.Revolve,), {})
    assert STRATEGIES == before


def test_every_strategy_has_distinct_names_and_markers():
    for attr in ("cli_name", "marker"):
        values = [getattr(cls, attr) for cls in STRATEGIES.values()]
        assert len(set(values)) == len(values), attr
    mpl_markers = pytest.importorskip("matplotlib.markers")
    for cls in STRATEGIES.values():
        mpl_markers.MarkerStyle(cls.marker)  # a marker matplotlib draws


@pytest.mark.parametrize("name", BUILT_IN)
def test_every_strategy_has_its_metadata(name):
    cls = STRATEGIES[name]
    assert cls.__name__ == name and (cls.__doc__ or "").strip()
    assert re.fullmatch(r"[a-z]+", cls.cli_name) and cls.marker
    assert cls.kinds and set(cls.kinds) <= {INPLACE, OUT_OF_PLACE}
    if set(cls.kinds) != {INPLACE, OUT_OF_PLACE}:
        assert cls.fit_reason  # said to whoever gives it a loop of the other kind
    # its knob is its first field, an int with a default: the command line sets it by
    # name; other fields have defaults too
    fields = dataclasses.fields(cls)
    assert [f.name for f in fields[:1]] == ([] if cls.knob_name is None else [cls.knob_name])
    assert all(f.default is not dataclasses.MISSING for f in fields)
    obj = cls()
    assert parse_strategy(cls.cli_name) == obj and parse_strategy(cls.cli_name.upper()) == obj
    assert parse_strategy(obj.label) == obj
    assert obj.label == f"{name}({obj.knob})" and repr(obj) == obj.label
    if cls.knob_name is not None:
        assert cls.knob_letter and getattr(obj, cls.knob_name) >= cls.knob_min
        low = cls.knob_min
        assert parse_strategy(f"{cls.cli_name}:{low}") == cls(**{cls.knob_name: low})
        with pytest.raises(ValueError, match=rf"{name}\({cls.knob_name}=\.\.\.\) must be an int "
                                             rf">= {low}"):
            cls(**{cls.knob_name: low - 1})
    assert cls.spelling() == f"{name}({'' if cls.knob_name is None else cls.knob_name + '=...'})"
    # its default settings, and the schedule of each on a short loop of each kind it fits
    for n in (1, 2, 10, 1000, 10**6):
        assert all(type(s) is cls for s in cls.defaults(n))
    assert cls.defaults(1000)
    for inplace in (False, True):
        if cls.fits(inplace):
            for s in cls.defaults(10):
                if hasattr(s, "disk_states"):  # (runs compiled only: on symbols here)
                    sched = s.loop_schedule()
                    counts = simulate(sched.actions(10, sched.knob), 10,
                                      sched.slots(10, sched.knob))
                    assert counts["reverse_steps"] == 10
                else:
                    assert plan_counts(s, 10, inplace).reverse_steps == 10
    # exported by revbench.checkpoint, and documented
    assert getattr(checkpoint, name) is cls and name in checkpoint.__all__
    assert f"`{name}(" in (DOCS / "checkpointing.md").read_text()


def test_the_statements_messages_list_every_strategy_it_runs():
    """The loop statement's refusals list the strategies it takes (lang cannot import the
    registry, which lives above it): every registered out-of-place strategy, by name."""
    from revbench.lang.parse import STATEMENT_STRATEGIES

    for name, cls in STRATEGIES.items():
        if OUT_OF_PLACE in cls.kinds and name in BUILT_IN:
            assert f"{name}(" in STATEMENT_STRATEGIES, name
