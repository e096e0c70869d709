"""revbench as a GradBench tool (``python -m revbench.gradbench``): the protocol, spoken
to a real tool process by the driver that plays GradBench's eval side, every eval at its
smallest GradBench size checked against JAX with GradBench's comparison, and every error
path answered ``success: false`` with the tool still serving."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import numpy as np
import pytest

from revbench.gradbench import driver
from revbench.gradbench.protocol import Server, main

pytest.importorskip("jax", reason="the references are JAX's (pip install 'revbench[interop]')")

#: the evals whose compilation (and JAX's) takes seconds run in the slow suite
HEAVY = {"ba", "det", "gmm", "kmeans", "lstm", "ode"}
EVALS = [pytest.param(e, marks=pytest.mark.slow) if e in HEAVY else e
         for e in sorted(driver.FUNCTIONS)]


@pytest.fixture(scope="module")
def tool():
    with driver.Tool() as t:
        yield t


@pytest.mark.parametrize("module", EVALS)
def test_every_eval_at_its_smallest_size_matches_jax(tool, module):
    results = driver.run_eval(tool, module, min_runs=2)
    assert results and all(r.success for r in results), [r.problems for r in results]
    assert all(not r.problems for r in results), [r.problems for r in results]
    assert all(len(r.seconds) >= 2 for r in results if module != "hello")
    assert {r.function for r in results} == set(driver.FUNCTIONS[module])


@pytest.mark.slow
def test_checks_on_give_the_same_answers():
    with driver.Tool(check=True) as t:
        for module in ("lse", "det", "gmm", "ba", "lstm", "ht", "particle", "saddle"):
            results = driver.run_eval(t, module)
            assert all(r.success and not r.problems for r in results), [r.problems for r in results]


def test_the_protocol_run_of_a_session_by_hand():
    """start, define, evaluate with min_runs / min_seconds, analysis, an unknown kind,
    then the end of the input: the tool exits 0."""
    lines = [{"id": 0, "kind": "start", "eval": "lse", "config": {}},
             {"id": 1, "kind": "define", "module": "lse"},
             {"id": 2, "kind": "evaluate", "module": "lse", "function": "primal",
              "input": {"x": [0.0, 1.0], "min_runs": 3, "min_seconds": 0}, "description": "n=2"},
             {"id": 3, "kind": "analysis", "of": 2, "valid": True},
             {"id": 4, "kind": "evaluate", "module": "lse", "function": "gradient",
              "input": {"x": [0.0, 1.0], "min_runs": 1, "min_seconds": 0.05}},
             {"id": 5, "kind": "end"}]
    proc = subprocess.run([sys.executable, "-m", "revbench.gradbench"], capture_output=True,
                          text=True, timeout=300,
                          input="".join(json.dumps(m) + "\n" for m in lines))
    assert proc.returncode == 0, proc.stderr
    replies = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["id"] for r in replies] == [0, 1, 2, 3, 4, 5]
    assert replies[0]["tool"] == "revbench"
    assert replies[1]["success"] is True and replies[1]["timings"][0]["name"] == "compile"
    three = replies[2]
    assert three["success"] and three["output"] == pytest.approx(np.log(1 + np.e), rel=1e-15)
    assert len(three["timings"]) == 3 and all(t["name"] == "evaluate" and
                                              isinstance(t["nanoseconds"], int)
                                              for t in three["timings"])
    assert replies[3] == {"id": 3} and replies[5] == {"id": 5}
    assert sum(t["nanoseconds"] for t in replies[4]["timings"]) >= 0.05e9
    np.testing.assert_allclose(replies[4]["output"], [1 / (1 + np.e), np.e / (1 + np.e)])


def _answers(*messages) -> list[dict]:
    out = io.StringIO()
    Server().serve([m if isinstance(m, str) else json.dumps(m) for m in messages], out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_errors_are_answered_and_the_tool_keeps_serving():
    replies = _answers(
        "this is not json",
        "[1, 2]",
        {"id": 1, "kind": "define", "module": "nonesuch"},
        {"id": 2, "kind": "evaluate", "module": "lse", "function": "primal", "input": {"x": [1.0]}},
        {"id": 3, "kind": "define", "module": "lse"},
        {"id": 4, "kind": "evaluate", "module": "lse", "function": "hessian", "input": {"x": [1.0]}},
        {"id": 5, "kind": "evaluate", "module": "lse", "function": "primal", "input": {"y": [1.0]}},
        {"id": 6, "kind": "evaluate", "module": "lse", "function": "primal",
         "input": {"x": [[1.0]]}},
        {"id": 7, "kind": "evaluate", "module": "lse", "function": "primal",
         "input": {"x": [1.0], "min_runs": 0}},
        {"id": 8, "kind": "evaluate", "module": "lse", "function": "primal"},
        {"id": 9, "kind": "evaluate", "module": "lse", "function": "primal", "input": {"x": []}},
        {"id": 10, "kind": "evaluate", "module": "lse", "function": "primal",
         "input": {"x": [1.0, 2.0]}},
    )
    by_id = {r["id"]: r for r in replies if r["id"] is not None}
    nulls = [r for r in replies if r["id"] is None]
    assert len(nulls) == 2 and all(not r["success"] for r in nulls)
    assert "not JSON" in nulls[0]["error"] and "object with an `id`" in nulls[1]["error"]
    expect = {1: "no eval 'nonesuch'", 2: "was not defined", 4: "no function 'hessian'",
              5: "with `x`", 6: "1-dimensional", 7: "min_runs must be an integer >= 1",
              8: "needs an `input`", 9: "at least one element"}
    for mid, text in expect.items():
        assert by_id[mid]["success"] is False and text in by_id[mid]["error"], by_id[mid]
        assert "output" not in by_id[mid]
    assert by_id[3]["success"] is True
    assert by_id[10]["success"] is True
    assert by_id[10]["output"] == pytest.approx(np.log(np.exp(1.0) + np.exp(2.0)), rel=1e-15)


@pytest.mark.slow
def test_adbenchs_gmm_form_is_answered_in_its_own_form():
    rng = np.random.default_rng(3)
    d, k, n = 3, 2, 20
    raw = {"d": d, "k": k, "n": n, "alpha": rng.normal(size=k).tolist(),
           "means": rng.uniform(size=(k, d)).tolist(),
           "icf": rng.normal(size=(k, d + d * (d - 1) // 2)).tolist(),
           "x": rng.normal(size=(n, d)).tolist(), "gamma": 1.0, "m": 0}
    replies = _answers({"id": 0, "kind": "define", "module": "gmm"},
                       {"id": 1, "kind": "evaluate", "module": "gmm", "function": "objective",
                        "input": raw},
                       {"id": 2, "kind": "evaluate", "module": "gmm", "function": "jacobian",
                        "input": raw})
    assert not driver.mismatches(driver.reference("gmm", "objective", raw), replies[1]["output"])
    flat = replies[2]["output"]
    assert isinstance(flat, list) and len(flat) == k + k * d + k * d * (d + 1) // 2
    assert not driver.mismatches(driver.reference("gmm", "jacobian", raw), flat)


def test_gradbenchs_comparison_catches_what_it_should():
    m = driver.mismatches
    assert m({"a": [1.0, 2.0]}, {"a": [1.0, 2.00001]}) == []
    assert m(1000.0, 1000.1) == [] and m(1000.0, 1000.5) != []  # (relative for large numbers)
    assert m(0.001, 0.00109) == []  # (absolute 1e-4 for small ones)
    assert m(0.001, 0.0012) != []
    assert m([1.0, 2.0], [1.0]) and m({"a": 1.0}, {"b": 1.0}) and m(1.0, "1.0")
    assert m(3, 3.0) == [] and m(3, 4) != []


def test_the_tool_has_all_twelve_evals_and_names_them():
    """GradBench's twelve evals are defined; one it does not list (an older name) is
    answered with the twelve."""
    from revbench.gradbench.evals import EVALS

    assert sorted(EVALS) == sorted(driver.FUNCTIONS) == sorted(
        ["hello", "lse", "llsq", "det", "kmeans", "ode", "gmm", "lstm", "ba", "ht", "particle",
         "saddle"])
    (reply,) = _answers({"id": 0, "kind": "define", "module": "an_ode"})
    assert reply["success"] is False and "has no eval 'an_ode'" in reply["error"]
    assert all(f"'{e}'" in reply["error"] for e in EVALS)


def test_bad_inputs_of_the_nested_evals_and_of_ht_are_answered():
    hand = driver.ht_input(3, 20, complicated=True)
    short = {**hand, "theta": hand["theta"][:5]}
    no_us = {**hand, "us": [[0.1, 0.2]]}
    wild = {**hand, "data": {**hand["data"], "correspondences": [0, 1, 99]}}
    replies = _answers(
        {"id": 0, "kind": "define", "module": "particle"},
        {"id": 1, "kind": "evaluate", "module": "particle", "function": "rr",
         "input": {"w": "zero"}},
        {"id": 2, "kind": "evaluate", "module": "particle", "function": "rr", "input": {}},
        {"id": 3, "kind": "define", "module": "saddle"},
        {"id": 4, "kind": "evaluate", "module": "saddle", "function": "ff",
         "input": {"start": [1.0, 1.0, 1.0]}},
        {"id": 5, "kind": "evaluate", "module": "saddle", "function": "rb",
         "input": {"start": [1.0, 1.0]}},
        {"id": 6, "kind": "define", "module": "ht"},
        {"id": 7, "kind": "evaluate", "module": "ht", "function": "objective", "input": short},
        {"id": 8, "kind": "evaluate", "module": "ht", "function": "jacobian", "input": no_us},
        {"id": 9, "kind": "evaluate", "module": "ht", "function": "objective", "input": wild},
        {"id": 10, "kind": "evaluate", "module": "ht", "function": "jacobian", "input": hand},
    )
    by_id = {r["id"]: r for r in replies}
    assert all(by_id[k]["success"] for k in (0, 3, 6, 10))
    expect = {1: "`w` must be a finite number", 2: "object with `w`", 4: "must have 2 numbers",
              5: "no function 'rb'", 7: "`theta` must have 26 numbers",
              8: "`us` must have two numbers per point",
              9: "`correspondences` must index the triangles"}
    for mid, text in expect.items():
        assert by_id[mid]["success"] is False and text in by_id[mid]["error"], by_id[mid]
    J = np.array(by_id[10]["output"])
    assert J.shape == (9, 28)
    assert not driver.mismatches(driver.reference("ht", "jacobian", hand), J.tolist())


@pytest.mark.slow
def test_ht_at_every_workload_matches_jax():
    """Simple and complicated, the small and the big model, both point counts."""
    with driver.Tool() as t:
        results = driver.run_eval(t, "ht", driver.SIZES["ht"])
    assert len(results) == 16 and all(r.success and not r.problems for r in results), [
        r.problems for r in results]


def test_the_nested_evals_reach_gradbenchs_answers_from_other_starts():
    """particle and saddle from inputs GradBench does not send: every mode the same
    answer as JAX's descent (each a lax.while_loop, the outer gradient by jax.jvp)."""
    from revbench.gradbench import reference
    from revbench.gradbench.evals import particle, saddle

    p, s = particle.Particle(), saddle.Saddle()
    for raw, e, module in (({"w": 0.3}, p, "particle"), ({"start": [0.5, -1.0]}, s, "saddle")):
        want = reference.reference(module, "rr", raw)
        assert reference.reference(module, "rr", {"w": 0.0} if module == "particle" else
                                   {"start": [1.0, 1.0]}) == reference.STORED[
            (module, 0.0) if module == "particle" else (module, (1.0, 1.0))]
        for name, (prepare, compute, output) in e.functions.items():
            got = output(compute(prepare(raw)))
            assert not driver.mismatches(want, got, tolerance=1e-9), (module, name, got, want)


def test_main_serves_standard_input():
    out = io.StringIO()
    assert main([], io.StringIO('{"id": 7, "kind": "start"}\n\n'), out) == 0
    assert json.loads(out.getvalue()) == {"id": 7, "tool": "revbench", "config": {"check": False}}
