"""The native code generator (revbench.backends.native): generated kernels compiled to
LLVM IR by revbench itself, with Numba's dispatcher as the fallback.

Every Numba-backend test of the suite runs through the native path already (it is the
default); these tests compare it with the Numba-compiled kernels directly
(``REVBENCH_NATIVE=0`` on the same function), bit for bit, for values, gradients and
errors, and check what it covers, what it refuses, and its disk cache.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import program_gen
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import revbench
from revbench.backends.native import engine, lower

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def define(source: str, **options):
    fns = revbench.define(textwrap.dedent(source), {"np": np, "math": math}, backend="numba",
                          **options)
    return list(fns.values())[-1]


def copies(args):
    return tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)


def outcome(fn, args):
    """What ``fn(*args)`` gives: its results, or its error's type and message, and the
    arguments afterwards (a failed call must leave them as they were)."""
    args = copies(args)
    try:
        out = fn(*args)
    except Exception as exc:
        return ("raised", type(exc).__name__, str(exc), args)
    return ("returned", out, args)


def same(a, b) -> bool:
    """Bit-for-bit equality of nested results (nan equal to nan)."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return (isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
                and a.tobytes() == b.tobytes())
    if isinstance(a, float) and isinstance(b, float):
        return np.float64(a).tobytes() == np.float64(b).tobytes()
    return type(a) is type(b) and a == b


def both_paths(monkeypatch, fn, args):
    """``fn(*args)`` through the native path and through Numba's own compiled kernel.
    The native call is made twice: the second goes through the module's compiled call
    wrapper (``backends/native/pycall.py``), the first through the type dispatch."""
    monkeypatch.setenv("REVBENCH_NATIVE", "1")
    native = outcome(fn, args)
    again = outcome(fn, args)
    assert same_outcome(native, again), (native, again)
    monkeypatch.setenv("REVBENCH_NATIVE", "0")
    numba = outcome(fn, args)
    monkeypatch.setenv("REVBENCH_NATIVE", "1")
    return native, numba


def same_outcome(a, b) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] == "raised":
        return a[1:3] == b[1:3] and same(a[3], b[3])
    return same(a[1], b[1]) and same(a[2], b[2])


@pytest.fixture
def counted():
    """engine.stats and engine.refused as this test changes them."""
    before = dict(engine.stats), dict(engine.refused)

    def delta():
        stats = {k: engine.stats[k] - before[0].get(k, 0) for k in engine.stats}
        refused = {k: v - before[1].get(k, 0) for k, v in engine.refused.items()
                   if v != before[1].get(k, 0)}
        return stats, refused

    return delta


# --------------------------------------------------------------------------------------
# what it covers: values and gradients, bit for bit with Numba's kernels
# --------------------------------------------------------------------------------------
PROGRAM = """
def norm_rows(r, x, w):
    n, d = x.shape
    for i in range(n):
        with routine:
            t = np.zeros(d)
            t += x[i] * w              # a row: a view, no copy
            s = 0.0
            for j in range(d):
                s += t[j] * t[j]
        r[i] += math.sqrt(s) + np.tanh(x[i, 0]) ** 2 - min(s, 1.5)
        ~routine

def model(loss, r, x, w, k):
    norm_rows(r, x, w)
    for i in range(r.shape[0] - 1, -1, -1):
        loss += r[i] * r[i] / (1.0 + i)
    r[0], r[1] = r[1], r[0]
    k += 3
"""


def test_a_program_with_views_callees_and_checks_runs_natively(monkeypatch, counted):
    f = define(PROGRAM)
    rng = np.random.default_rng(1)
    args = (0.0, np.zeros(5), rng.normal(size=(5, 3)), rng.normal(size=3), 4)
    native, numba = both_paths(monkeypatch, f, args)
    stats, refused = counted()
    assert native[0] == "returned" and same(native, numba)
    assert stats["compiled"] + stats["loaded"] + stats["reused"] >= 1 and not refused, \
        (stats, refused)
    assert native[1][4] == 7  # ints come back as Python ints

    vg = revbench.value_and_grad(f, loss="loss", wrt=("x", "w"))
    native, numba = both_paths(monkeypatch, vg, args)
    assert native[0] == "returned" and same(native, numba)
    # and against finite differences
    (_, grads) = native[1]
    gw = grads[3]
    e = np.zeros(3)
    e[1] = 1e-6
    lo = f(0.0, np.zeros(5), args[2], args[3] - e, 4)[0]
    hi = f(0.0, np.zeros(5), args[2], args[3] + e, 4)[0]
    assert gw[1] == pytest.approx((hi - lo) / 2e-6, rel=1e-5)


def test_inverse_and_unchecked_code_agree_with_numba(monkeypatch):
    for check in (True, False):
        f = define(PROGRAM, check=check)
        rng = np.random.default_rng(2)
        args = (0.5, np.zeros(4), rng.normal(size=(4, 2)), rng.normal(size=2), -3)
        fwd = outcome(f, args)
        assert fwd[0] == "returned"
        native, numba = both_paths(monkeypatch, ~f, fwd[1])
        assert native[0] == "returned" and same(native, numba)
        assert same(native[1], copies(args)[:1] + native[1][1:]) or check is False


def test_sign_real_and_imag_of_real_numbers(monkeypatch, counted):
    f = define("""
        def f(y, x, k, m):
            for i in range(x.shape[0]):
                y += np.sign(x[i]) + np.real(x[i]) * 2.0 - np.imag(x[i])
            k += np.sign(m - 3)
    """)
    args = (0.0, np.array([2.5, -0.0, 0.0, -1.5]), 1, 1)
    native, numba = both_paths(monkeypatch, f, args)
    assert native[0] == "returned" and same(native, numba)
    assert native[1][0] == (1.0 + 5.0) + (-1.0 - 3.0) and native[1][2] == 0
    # sign(nan) is nan (the operand check then fails, the same way on both paths)
    native, numba = both_paths(monkeypatch, f, (0.0, np.array([np.nan]), 1, 1))
    assert native[0] == "raised" and native[1:3] == numba[1:3]
    assert not counted()[1]  # nothing refused


@pytest.mark.parametrize("divisor", [2.5, -2.5, 0.1, -1e-300, 3.0, 0.0])
def test_float_floor_division_and_modulo(monkeypatch, counted, divisor):
    f = define("""
        def f(y, x, d):
            for i in range(x.shape[0]):
                y[i] += x[i] // d + (x[i] % d) * 1000.0
    """)
    x = np.array([7.0, -7.0, 0.0, -0.0, 5.0, -2.5, 1e300, -1e-300, 0.3])
    native, numba = both_paths(monkeypatch, f, (np.zeros(x.size), x, divisor))
    assert native[0] == numba[0] and same(native, numba), (native, numba)
    assert not counted()[1]


def test_strided_arguments_and_negative_indices(monkeypatch):
    f = define("""
        def g(y, x, A):
            for i in range(x.shape[0]):
                y[i] += x[-1 - i] * A[i, -1]
    """)
    A = np.arange(24.0).reshape(4, 6)
    args = (np.zeros(3), A[1:, ::2][:, 0].copy(), A[:, ::2])  # a strided 2-D argument
    assert not args[2].flags.c_contiguous
    native, numba = both_paths(monkeypatch, f, args)
    assert native[0] == "returned" and same(native, numba)


# --------------------------------------------------------------------------------------
# errors: the same error as Numba's kernel, the arguments restored
# --------------------------------------------------------------------------------------
ERRORS = {
    "dirty ancilla": ("""
        def f(y, x):
            t = 0.0
            t += x[0]
            y += t
            del t
    """, (0.0, np.array([2.0]))),
    "float overflow": ("""
        def f(y, x):
            for i in range(x.shape[0]):
                y += x[i] * 1e308
    """, (0.0, np.array([1.5, 1.5, 1.0]))),
    "int overflow": ("""
        def f(n, k):
            n += k * 4
    """, (1, 2**62)),
    "index": ("""
        def f(y, x, i):
            y += x[i]
    """, (0.0, np.ones(3), 3)),
    "zero division": ("""
        def f(y, x):
            y += 1.0 / x[1]
    """, (0.0, np.array([1.0, 0.0]))),
    "assert": ("""
        def f(y, x):
            assert x[0] > 0, "x must be positive"
            y += x[0]
    """, (0.0, np.array([-1.0]))),
    "element postcondition": ("""
        def f(x, n):
            for i in range(n):
                x[i] += 1.0
            for i in range(n):
                x[i] -= 2.0
            t = np.zeros(n)
            t += x
            t -= x
            t += 1.0
            del t
    """, (np.zeros(3), 3)),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_a_failing_check_raises_what_numba_raises(monkeypatch, case):
    source, args = ERRORS[case]
    f = define(source)
    native, numba = both_paths(monkeypatch, f, args)
    assert native[0] == "raised", native
    assert native[1:3] == numba[1:3]
    assert same(native[3], copies(args)), "the arguments were not restored"


def test_gradient_errors_agree(monkeypatch):
    f = define("""
        def f(y, x):
            t = 0.0
            t += x[0] * x[0]
            y += t
            t -= x[0]
            del t
    """)
    g = revbench.grad(f, loss="y", wrt="x")
    native, numba = both_paths(monkeypatch, g, (0.0, np.array([3.0])))
    assert native[0] == numba[0] == "raised" and native[1:3] == numba[1:3]


# --------------------------------------------------------------------------------------
# generated programs: the native path against Numba's kernels
# --------------------------------------------------------------------------------------
COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                    HealthCheck.data_too_large,
                                                    HealthCheck.filter_too_much])


def check_generated(p: program_gen.GeneratedProgram, monkeypatch) -> None:
    note(f"program ({p.mode}):\n{p.source}\nargs = {p.args!r}")
    fns = revbench.define(p.source, {"np": np, "math": math}, backend="numba",
                          filename=f"<native-{abs(hash(p.source))}>")
    f = fns[p.name]
    native, numba = both_paths(monkeypatch, f, p.fresh_args())
    assert native[0] == numba[0], (native, numba)
    if native[0] == "raised":
        assert native[1:3] == numba[1:3]
        return
    assert same(native, numba), (native, numba)
    back_native, back_numba = both_paths(monkeypatch, ~f, native[1])
    assert same(back_native, back_numba)


@pytest.mark.slow  # (its 60-example twin below is slow too; the other native tests stay quick)
@settings(max_examples=4, **COMMON)
@given(program_gen.programs())
def test_generated_programs_agree_with_numba_bit_for_bit(p):
    with pytest.MonkeyPatch.context() as mp:
        check_generated(p, mp)


@pytest.mark.slow
@settings(max_examples=60, **COMMON)
@given(program_gen.programs())
def test_many_generated_programs_agree_with_numba(p):
    with pytest.MonkeyPatch.context() as mp:
        check_generated(p, mp)


# --------------------------------------------------------------------------------------
# what it leaves to Numba, and the disk cache
# --------------------------------------------------------------------------------------
def test_what_the_lowering_refuses_runs_on_numba(monkeypatch, counted):
    def cube_plus(v):
        return v * v * v + 1.0

    revbench.register(cube_plus, [lambda v: 3.0 * v * v])
    f = define("""
        def f(y, x):
            y += cube_plus(x)
    """)
    native, numba = both_paths(monkeypatch, f, (0.0, 2.0))
    assert native[0] == "returned" and native[1][0] == 9.0 and same(native, numba)
    _, refused = counted()
    assert any("cube_plus" in reason for reason in refused), refused


@pytest.mark.native_refusal("an argument of type ndarray")
def test_arguments_it_does_not_take_go_to_numba(monkeypatch, counted):
    f = define("""
        def f(y, x):
            for i in range(x.shape[0]):
                y[i] += x[i]
    """)
    x = np.frombuffer(bytearray(8 * 3 + 1), dtype=np.float64, offset=1, count=3)
    x[:] = [1.0, 2.0, -1.0]  # (an unaligned array: Numba's)
    monkeypatch.setenv("REVBENCH_NATIVE", "1")
    y, _ = f(np.zeros(3), x)
    assert same(y, np.array([1.0, 2.0, -1.0]))
    stats, refused = counted()
    assert stats["fallbacks"] >= 1 and refused == {"an argument of type ndarray": 1}, refused


def test_read_only_arrays_run_natively_and_a_write_into_one_goes_to_numba(monkeypatch, counted):
    reads = define("""
        def f(y, x):
            for i in range(x.shape[0]):
                y[i] += x[i]
    """)
    x = np.array([1.0, 2.0, -1.0])
    x.flags.writeable = False  # (np.broadcast_to's arrays, a read-only memory map)
    monkeypatch.setenv("REVBENCH_NATIVE", "1")
    y, _ = reads(np.zeros(3), x)
    assert same(y, x)
    stats, refused = counted()
    assert stats["fallbacks"] == 0 and not refused, (stats, refused)
    k = lower.Kernel("def g(x):\n    x[0] = 1.0\n    return (x,)\n", "g", 1, lambda s: None)
    with pytest.raises(lower.Unsupported, match="a write into a read-only array"):
        lower.lower_module(k, (lower.Arr(lower.F64, 1, True, writeable=False),))


def test_complex_numbers_run_natively(monkeypatch, counted):
    f = define("""
        def f(y, z, x):
            for i in range(x.shape[0]):
                y[i] += x[i] * z / (z + 1j) + np.exp(z) ** 2
            z += np.log(x[0]) - abs(x[1])
    """)
    args = (np.zeros(3, dtype=complex), 0.5 - 2j, np.array([1.0, 2j, -1 + 1j]))
    native, numba = both_paths(monkeypatch, f, args)
    assert native[0] == "returned" and same(native, numba)
    stats, refused = counted()
    assert stats["fallbacks"] == 0 and not refused, (stats, refused)
    assert stats["compiled"] + stats["loaded"] >= 1, stats


def test_lowering_takes_the_types_of_the_typed_ir():
    from revbench.lang.types import VarType

    src = "def g(y, x):\n    t = x * 2\n    y += t\n    return (y, x)\n"
    ints = {"y": VarType("int"), "x": VarType("int"), "t": VarType("int")}
    k = lower.Kernel(src, "g", 1, lambda s: None, declared=ints)
    lower.lower_module(k, (lower.I64, lower.I64))  # (the types agree)
    k = lower.Kernel(src, "g", 1, lambda s: None, declared={**ints, "t": VarType("float")})
    with pytest.raises(lower.Unsupported, match="t: i64, where the typed IR has float64"):
        lower.lower_module(k, (lower.I64, lower.I64))
    k = lower.Kernel(src, "g", 1, lambda s: None, declared={**ints, "x": VarType("int", 1)})
    with pytest.raises(lower.Unsupported, match=r"x: i64, where the typed IR has int64\[:\]"):
        lower.lower_module(k, (lower.I64, lower.I64))


def test_lowering_names_what_it_refuses():
    k = lower.Kernel("def g(x):\n    print(x)\n    return (x,)\n", "g", 1, lambda s: None)
    with pytest.raises(lower.Unsupported, match="print of an array"):
        lower.lower_module(k, (lower.Arr(lower.F64, 1, True),))


PRINTS = """
def f(y, x, n, flag):
    print("x is", x, "and n", n, flag, "é")
    y += x
"""


def test_print_of_text_and_numbers_runs_natively_with_pythons_text(monkeypatch, counted,
                                                                    capfd):
    """``print`` in native code calls Python's own print with the values boxed: the same
    text as the Python backend's, on the same stdout; nothing goes to Numba."""
    outs = []
    for backend in ("python", "numba"):
        f = revbench.define(PRINTS, {}, backend=backend)["f"]
        for args in ((0.0, 0.1, -(2**63), True), (0.0, -0.0, 7, False), (0.0, 1e300, 0, True)):
            f(*args)
        outs.append(capfd.readouterr().out)
    assert outs[0] == outs[1] and outs[0].count("\n") == 3, outs
    assert "x is 0.1 and n -9223372036854775808 True é" in outs[0]
    stats, refused = counted()
    assert stats["compiled"] + stats["loaded"] >= 1 and not refused, (stats, refused)


CACHED_RUN = """
import json, sys, numpy as np, revbench
from revbench.backends.native import engine
f = revbench.define('''
def f(y, x):
    for i in range(x.shape[0]):
        y += x[i] * x[i]
''', {"np": np})["f"]
g = revbench.grad(f, loss="y", wrt="x")
gx = g(0.0, np.arange(4.0))
gx = gx[1] if isinstance(gx, tuple) else gx
print(json.dumps({"value": f(0.0, np.arange(4.0))[0], "grad": gx.tolist(),
                  "stats": engine.stats}))
"""


def test_a_second_process_loads_the_machine_code_from_disk(tmp_path):
    env = dict(os.environ, REVBENCH_CACHE_DIR=str(tmp_path), REVBENCH_TIERED="0",
               NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    runs = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", CACHED_RUN], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["stats"]["compiled"] >= 2 and first["stats"]["loaded"] == 0
    assert second["stats"]["compiled"] == 0 and second["stats"]["loaded"] >= 2
    assert first["value"] == second["value"] == 14.0
    assert first["grad"] == second["grad"] == [0.0, 2.0, 4.0, 6.0]
    assert list(tmp_path.rglob("native/*.o"))


def test_a_damaged_object_file_is_compiled_again_with_a_warning(tmp_path):
    env = dict(os.environ, REVBENCH_CACHE_DIR=str(tmp_path), REVBENCH_TIERED="0",
               NUMBA_CACHE_DIR=str(tmp_path / "numba"), PYTHONWARNINGS="always")

    def run():
        proc = subprocess.run([sys.executable, "-c", CACHED_RUN], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr

    first, _ = run()
    for path in tmp_path.rglob("native/*.o"):
        data = bytearray(path.read_bytes())
        data[-40] ^= 0xFF  # one flipped byte in the machine code
        path.write_bytes(bytes(data))
    again, err = run()
    assert "damaged" in err and again["stats"]["compiled"] >= 1
    assert (again["value"], again["grad"]) == (first["value"], first["grad"])
    third, err = run()  # rewritten: loaded again
    assert third["stats"]["compiled"] == 0 and "damaged" not in err


def test_the_cache_counts_prunes_and_clears_native_code(fresh_cache):
    import time

    import revbench.cache

    f = define(f"""
        def f(y, x):
            y += x * x + {time.time_ns() % 1_000_003} * 0.0
    """)  # (new code: compiled into this cache, not found in memory)
    f(0.0, 3.0)
    files = list(fresh_cache.rglob("native/*.o"))
    assert files
    assert revbench.cache.info()["entries"] >= len(files)
    assert revbench.cache.clear() > 0
    assert not list(fresh_cache.rglob("native/*.o"))
    assert f(0.0, 3.0)[0] == 9.0  # still running from memory


BA_LIKE = """
def residual(r, cam, X, w, feat):
    with routine:
        xc = np.zeros(3)
        xc += X - cam[3:6]
        s = 0.0
        s += cam[0] * xc[0] + cam[1] * xc[1] + cam[2] * xc[2]
        r[0] += w * (xc[0] / (1.0 + s * s) - feat[0])
        r[1] += w * (xc[1] * np.exp(cam[6] * 0.1) - feat[1])
    ~routine
"""


@pytest.mark.slow  # (ten seconds: the native driver of a batch, compiled)
@pytest.mark.parametrize("workers", [1, 2])
def test_a_batched_driver_compiles_natively_and_agrees_with_numba(monkeypatch, counted,
                                                                   workers):
    """`batch=` drivers (Numba-compiled loops that call the kernels) are lowered too, with
    their kernels in one module, and run item chunks on threads (without the GIL)."""
    import revbench.ad.batch as batch_module

    monkeypatch.setattr(batch_module, "MIN_CHUNK", 4)  # (so two workers share 50 items)
    f = define(BA_LIKE.replace("0.1", f"0.1{workers}"))  # (new code: compiled in this test)
    rng = np.random.default_rng(3)
    n = 50
    args = (np.zeros((n, 2)), rng.normal(size=(n, 7)), rng.normal(size=(n, 3)),
            rng.uniform(0.5, 1.5, n), rng.normal(size=(n, 2)))
    batched = ("r", "cam", "X", "w", "feat")
    results = {}
    for native in ("1", "0"):
        monkeypatch.setenv("REVBENCH_NATIVE", native)
        jac = revbench.jacobian(f, "r", ("cam", "X"), batch=batched, workers=workers)
        grad = revbench.grad(f, ("r", 0), batch=("r", "X", "w", "feat"), reduce="sum",
                             workers=workers)
        results[native] = (outcome(jac, args),
                           outcome(grad, (args[0], args[1][0], *args[2:])))
    stats, refused = counted()
    assert not refused and stats["compiled"] + stats["loaded"] + stats["reused"] >= 2, \
        (stats, refused)
    assert results["1"][0][0] == "returned" and same(results["1"][0], results["0"][0])
    # a summed gradient: the same chunks in the same order, so the same bits
    assert results["1"][1][0] == "returned" and same(results["1"][1], results["0"][1])


# --------------------------------------------------------------------------------------
# checkpointed loops: their schedules lowered inline, their kernels and TimeLoop's drivers
# --------------------------------------------------------------------------------------
RECORD = """
def record(out, n, knob):
    k = 0
    for op, i, a, b in _rb_sched(n, knob):
        out[k, 0] = op
        out[k, 1] = i
        out[k, 2] = a
        out[k, 3] = b
        k += 1
    out[k, 0] = -1
    return (out,)
"""


def _not_numba(*args):
    raise AssertionError("the schedule went to Numba")


def _native_actions(generator, n, knob) -> list[tuple[int, ...]]:
    """The actions of ``generator(n, knob)`` as the native lowering runs it, inline in a
    kernel that writes them down."""
    class Dispatcher:  # (the fallback a runner would call: never, here)
        __call__ = staticmethod(_not_numba)

    d = Dispatcher()
    key = hashlib.sha256(generator.__name__.encode()).hexdigest()[:32]
    engine.register(d, engine.DriverSource(RECORD, key, "record"), {"_rb_sched": generator},
                    check=True, fastmath=False)
    run = engine.runner(d)
    size = sum(1 for _ in generator(n, knob)) + 1
    out = run(np.zeros((size, 4), np.int64), n, knob)[0]
    rows = [tuple(int(v) for v in r) for r in out]
    assert rows[-1][0] == -1  # (the end mark: no action was lost)
    return rows[:-1]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(0, 60), c=st.integers(1, 9),
       kind=st.sampled_from(
           ["store_all", "periodic", "revolve", "online_known", "bennett", "two_level"]))
def test_schedules_inline_make_the_python_generators_actions(n, c, kind):
    """Every schedule of :mod:`revbench.checkpoint.actions`, lowered inline (its nested
    generators and helper functions too), yields exactly the actions Python's does."""
    from revbench.checkpoint import actions

    gen = getattr(actions, kind if kind == "online_known" else f"{kind}_actions")
    least = {"bennett": 2, "online_known": 3}.get(kind, 1)  # (the strategies' least knobs)
    knob = (max(1, c // 2), c) if kind == "two_level" else max(c, least)
    want = [tuple(int(v) for v in a) for a in gen(n, knob)]
    assert _native_actions(gen, n, knob) == want


LOOP = """
def step(y_new, y, t, h):
    for i in range(len(y)):
        y_new[i] += y[i] + h * np.sin(y[i] + 0.1 * t)

def solve(out, yT, y0, h, n):
    for t in checkpointed(range(n), STRATEGY, new=yT, old=y0):
        step(yT, y0, t, h)
    for i in range(len(yT)):
        out += yT[i] * yT[i]
"""


@pytest.mark.parametrize("strategy", [
    "Revolve(3)",
    # (the schedules themselves are compared with Python's above: these differ in nothing else)
    *(pytest.param(s, marks=pytest.mark.slow)
      for s in ("StoreAll()", "Periodic(3)", "Bennett(2)", "Online(snapshots=3)"))])
def test_a_checkpointed_loop_runs_natively_and_agrees_with_numba(monkeypatch, counted,
                                                                  strategy):
    from revbench.checkpoint import Bennett, Online, Periodic, Revolve, StoreAll, checkpointed

    ns = {"np": np, "checkpointed": checkpointed, "StoreAll": StoreAll, "Periodic": Periodic,
          "Revolve": Revolve, "Bennett": Bennett, "Online": Online}
    solve = revbench.define(LOOP.replace("STRATEGY", strategy), ns, backend="numba")["solve"]
    g = revbench.grad(solve, loss="out", wrt=("y0", "h"))
    args = (0.0, np.zeros(4), np.array([0.3, -0.5, 1.0, 0.25]), 0.1, 11)
    for fn in (solve, g):
        native, numba = both_paths(monkeypatch, fn, args)
        assert native[0] == "returned" and same(native, numba), (native, numba)
    stats, refused = counted()
    assert not refused and stats["compiled"] + stats["loaded"] + stats["reused"] >= 2, \
        (stats, refused)


def test_a_loop_that_does_not_come_back_fails_as_on_numba(monkeypatch):
    """The recovery check inside the schedule's loop: the same error, the same values."""
    from revbench.checkpoint import Revolve, checkpointed

    source = LOOP.replace("STRATEGY", "Revolve(2)").replace(
        "y_new[i] += y[i] + h * np.sin(y[i] + 0.1 * t)",
        "y_new[i] += y[i] * 1e30 + h * np.sin(y[i] + 0.1 * t)")
    solve = revbench.define(source, {"np": np, "checkpointed": checkpointed, "Revolve": Revolve},
                            backend="numba")["solve"]
    g = revbench.grad(solve, loss="out", wrt="y0")
    native, numba = both_paths(monkeypatch, g, (0.0, np.zeros(3), np.array([1.0, 2.0, 3.0]),
                                                0.1, 40))
    assert native[0] == "raised" and "not" in native[2] and same(native, numba), \
        (native[:3], numba[:3])


@pytest.mark.parametrize("strategy", ["StoreAll", "Revolve", "Bennett"])
def test_time_loop_drivers_run_natively_and_agree_with_numba(monkeypatch, counted, strategy):
    from revbench.checkpoint import Bennett, Revolve, StoreAll, TimeLoop

    f = revbench.define("""
def oop_step(y_new, y, t, h):
    for i in range(len(y)):
        y_new[i] += y[i] + h * np.tanh(y[(i + 1) % len(y)] + 0.01 * t)

def oop_loss(e, y, h):
    for i in range(len(y)):
        e += y[i] * y[i]
""", {"np": np}, backend="numba")
    chosen = {"StoreAll": StoreAll(), "Revolve": Revolve(4), "Bennett": Bennett(2)}[strategy]
    y0 = np.array([0.3, -0.5, 1.0, 0.25, 0.7])
    results = {}
    for native in ("1", "0"):
        monkeypatch.setenv("REVBENCH_NATIVE", native)
        loop = TimeLoop(f["oop_step"], 30, loss=f["oop_loss"])
        results[native] = outcome(
            lambda loop=loop: loop.value_and_grad(y0.copy(), 0.05, strategy=chosen), ())
    assert results["1"][0] == "returned", results["1"]
    assert same(results["1"][1], results["0"][1])
    stats, refused = counted()
    assert not refused and stats["compiled"] + stats["loaded"] + stats["reused"] >= 1, \
        (stats, refused)


def test_lgamma_derivatives_inline_agree_with_numba_bit_for_bit(monkeypatch, counted):
    """digamma and trigamma (``revbench.rules.special``, revbench's own Python) are lowered
    inline too: the gradient and second derivative of lgamma, and (unchecked, where a value
    may be nan) digamma itself at poles, negative numbers, both sides of the series'
    threshold, infinities and nan."""
    f = define("""
        def f(y, x):
            for i in range(len(x)):
                y += math.lgamma(x[i]) * x[i]
    """)
    x = np.array([0.3, 2.5, -1.5, -2.5, 9.999, 10.0, 37.5, 1e-300, -1e-9])
    native, numba = both_paths(monkeypatch, revbench.grad(f, loss="y", wrt="x"), (0.0, x))
    assert native[0] == "returned" and same(native, numba), (native, numba)
    h = revbench.hessian(f, loss="y", wrt="x")
    native, numba = both_paths(monkeypatch, h, (0.0, np.array([0.7, -0.4, 11.0])))
    assert native[0] == "returned" and same(native, numba), (native, numba)
    psi = define("""
        def psi(y, x):
            for i in range(len(x)):
                y[i] += digamma(x[i])
    """, check=False)
    edges = np.array([0.0, -2.0, -1e300, math.inf, -math.inf, math.nan, 0.5, -3.25, 10.0])
    native, numba = both_paths(monkeypatch, psi, (np.zeros(len(edges)), edges))
    assert native[0] == "returned" and same(native, numba), (native, numba)
    stats, refused = counted()
    assert not refused and stats["compiled"] + stats["loaded"] + stats["reused"] >= 3, \
        (stats, refused)


def test_numpys_extremes_inline_agree_with_numba(monkeypatch, counted):
    """``np.maximum`` and its kin are ``revbench.rules.special``'s Python too: lowered
    inline, with NumPy's nan rules, for floats and ints, with their gradients."""
    f = define("""
        def f(y, x, k):
            for i in range(len(x)):
                y[i] += np.maximum(x[i], 0.0) + np.fmin(x[i], 0.5) - np.minimum(k, 2) * np.fmax(x[i], -1.0)
    """, check=False)
    x = np.array([-2.0, 0.0, 0.25, 3.0, math.nan])
    native, numba = both_paths(monkeypatch, f, (np.zeros(5), x, 3))
    assert native[0] == "returned" and same(native, numba), (native, numba)
    assert np.isnan(native[1][0][4])  # (np.maximum's nan; np.fmin's and np.fmax's would not be)
    g = define("""
        def g(y, x):
            for i in range(len(x)):
                y += np.maximum(x[i], 0.0) * x[i]
    """)
    native, numba = both_paths(monkeypatch, revbench.grad(g, loss="y", wrt="x"),
                               (0.0, np.array([-1.0, 2.0, 0.5])))
    assert native[0] == "returned" and same(native, numba), (native, numba)
    stats, refused = counted()
    assert not refused and stats["compiled"] + stats["loaded"] + stats["reused"] >= 2, \
        (stats, refused)
