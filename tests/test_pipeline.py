"""Directions as values, and the one table of passes per direction
(:mod:`revbench.transforms.pipeline`)."""

from __future__ import annotations

import numpy as np
import pytest

import revbench
from revbench.transforms import pipeline
from revbench.transforms.pipeline import (
    ALL,
    BACKWARD,
    BACKWARD_INVERSE,
    FORWARD,
    HVP,
    HVP_INVERSE,
    INVERSE,
    PASSES,
    Direction,
)

NAMES = ["forward", "inverse", "backward", "backward-inverse", "tangent-forward",
         "tangent-inverse", "tangent-backward", "tangent-backward-inverse", "hvp", "hvp-inverse",
         "forward-before-sweep", "inverse-before-sweep", "backward-adjoints",
         "backward-inverse-adjoints"]


def test_every_direction_has_one_name_and_parses_back():
    assert sorted(d.name for d in ALL) == sorted(NAMES)
    for d in ALL:
        assert Direction.parse(d.name) is d or Direction.parse(d.name) == d
        assert str(d) == d.name and d.name in repr(d)
    with pytest.raises(ValueError, match="unknown direction 'sideways'"):
        Direction.parse("sideways")


def test_relations_between_directions():
    assert FORWARD.flipped() == INVERSE and INVERSE.flipped() == FORWARD
    assert FORWARD.backward() == BACKWARD and INVERSE.backward() == BACKWARD_INVERSE
    assert BACKWARD.program == FORWARD and BACKWARD_INVERSE.program == INVERSE
    assert HVP.program == FORWARD and HVP_INVERSE.program == INVERSE
    assert FORWARD.hvp_of() == HVP and INVERSE.hvp_of() == HVP_INVERSE
    assert BACKWARD.with_tangent().name == "tangent-backward"
    assert BACKWARD.with_tangent().without_tangent() == BACKWARD
    assert all(d.second_order for d in (HVP, FORWARD.with_tangent()))
    assert FORWARD.is_run and INVERSE.is_run and not BACKWARD.is_run
    with pytest.raises(ValueError):
        HVP.with_tangent()
    with pytest.raises(ValueError):
        Direction(sweep=True, hvp=True)
    lean = FORWARD.before_its_sweep()
    assert lean.is_run and lean.program == FORWARD and lean.backward() == BACKWARD
    assert lean.flipped() == INVERSE.before_its_sweep()
    with pytest.raises(ValueError):
        BACKWARD.before_its_sweep()
    with pytest.raises(ValueError):
        Direction(sweep=True, before_sweep=True)
    only = FORWARD.backward(adjoints_only=True)
    assert only.sweep and only.adjoints_only and only.restoring() == BACKWARD
    assert only.name == "backward-adjoints" and only.program == FORWARD
    with pytest.raises(ValueError):
        Direction(adjoints_only=True)  # (a plain run restores nothing: only sweeps)
    with pytest.raises(ValueError):
        Direction(sweep=True, tangent=True, adjoints_only=True)


@pytest.mark.parametrize("view", [FORWARD, INVERSE])
def test_a_views_kinds_are_relative_to_it(view):
    assert view.relative("forward") == view
    assert view.relative("inverse") == view.flipped()
    assert view.relative("backward") == view.relative("adjoint") == view.backward()
    with pytest.raises(ValueError):
        view.relative("sideways")


def test_the_pass_table_names_only_known_passes_and_keeps_their_order():
    for d in ALL:
        for check in (True, False):
            meaning, optimising = pipeline.passes(d, check)
            assert set(meaning) | set(optimising) <= set(PASSES), (d, meaning, optimising)
            assert optimising[-1] == "hoist"  # types again after everything
            # (a jvp's tangent run is pruned as a run is; sweeps' tangents and hvps are not)
            assert ("prune" in optimising) == (not check and not (
                d.second_order and (d.sweep or d.hvp)))
            assert ("prune-before-sweep" in optimising) == (check and d.before_sweep)
            if "tangent" in meaning:
                assert meaning[-1] == "tangent"  # the tangent of the finished program
    assert pipeline.passes(BACKWARD, True) == (
        ("adjoint",), ("drop-zero-adjoints", "prune-replays", "cse", "hoist"))
    assert pipeline.passes(HVP, True)[0] == ("adjoint", "drop-zero-adjoints", "prepend-run",
                                             "tangent")


SOURCE = """
def f(y, x):
    t = 0.0
    t += x * x
    y += t * x
    t -= x * x
    del t
"""


@pytest.mark.parametrize("name", NAMES)
def test_every_direction_compiles_and_its_header_names_it(name):
    f = revbench.define(SOURCE, {"np": np}, backend="python")["f"]
    d = Direction.parse(name)
    sig = f.signature_of((0.0, 2.0))
    gen, _ = f._program.generate(d, "python", True, sig, compile_callees=False)
    assert f"# revbench {name} code for f" in gen.source


def test_second_order_directions_give_the_known_derivatives():
    """y += x**3: dy/dx = 3x^2, d2y/dx2 = 6x, through the hvp program."""
    f = revbench.define(SOURCE, {"np": np}, backend="python")["f"]
    x = 2.0
    assert revbench.grad(f, loss="y")(0.0, x)[1] == pytest.approx(3 * x**2)
    assert np.asarray(revbench.hvp(f, loss="y", wrt="x")(0.0, x, 1.0)) == pytest.approx(6 * x)
