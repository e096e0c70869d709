"""A second storage level: ``TwoLevel(period=k, snapshots=c)`` keeps every k-th state on
disk, in memory-mapped files, and reverses each segment by Revolve in RAM;
``Multistage(snapshots=c, disk=d)`` is checkpoint_schedules' multistage binomial schedule,
c snapshots in RAM and d on disk (``docs/checkpointing.md``, "Memory beyond RAM").

The schedules on symbols (their exact counts, their RAM peak, one load per disk state;
Multistage's action for action the library's own); the
``TimeLoop`` gradient against ``StoreAll`` on both backends, in place and out of place;
the files: really on disk while the loop runs, gone after it, and after a failure; a disk
without room (measured, not mocked) refused before anything runs; and the same inside
reversible code, whose loop kernel maps its store in object mode.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

import revbench
from revbench import ReversibilityError
from revbench.checkpoint import (
    InsufficientDiskError,
    Multistage,
    StoreAll,
    TimeLoop,
    TwoLevel,
    actions,
    checkpointed,
)
from revbench.checkpoint.disk import DiskStore

cs = pytest.importorskip("checkpoint_schedules")
optimal_steps_binomial = cs.optimal_steps_binomial

SOURCE = """
def step(y1, y0, t, h):
    for i in range(len(y0)):
        y1[i] += y0[i] + h * np.sin(y0[(i + 1) % len(y0)] + 0.01 * t)

def loss(out, y, h):
    for i in range(len(y)):
        out += y[i] * y[i]

def step_in_place(y, t, h):
    for i in range(len(y)):
        y[i] += h * np.sin(0.01 * t + i) * (1.0 + 0.1 * y[(i + 1) % len(y)])
"""

Y0 = np.linspace(-1.0, 1.0, 8)


@pytest.mark.parametrize("k", [1, 2, 3, 5, 10])
@pytest.mark.parametrize("c", [1, 2, 4])
def test_two_level_schedule_on_symbols(k, c):
    for n in [*range(1, 40), 100, 257]:
        counts = actions.simulate(actions.two_level_actions(n, (k, c)), n,
                                  actions.two_level_slots(n, (k, c)))
        assert counts["forward_steps"] == actions.two_level_bound(n, (k, c))
        assert counts["reverse_steps"] == n
        assert counts["peak_states"] <= actions.two_level_peak(n, (k, c)) <= c + 4
        assert counts["loads"] == actions.two_level_disk(n, (k, c)) == (n - 1) // k


def test_the_disk_level_trades_ram_for_forward_steps():
    """More disk states (a shorter period), fewer forward steps, at the same RAM."""
    n = 10**4
    steps = [actions.two_level_bound(n, (k, 4)) for k in (10, 100, 1000, n)]
    assert steps == sorted(steps)
    # a period of n: no disk state; after the forward sweep, Revolve with c + 1 snapshots
    # from s[0] to the final state, which it holds already
    assert steps[-1] == n + (n - 1) + actions.extra_steps(n, 5)


def _library_schedule(n, ram, disk):
    """checkpoint_schedules' ``MultistageCheckpointSchedule``, as (op, step) pairs of
    revbench's actions: each forward range step by step, a write to disk a STORE, a copy or
    move from disk a LOAD (RAM snapshots keep their slots: no action)."""
    out = []
    for a in cs.MultistageCheckpointSchedule(n, ram, disk):
        if isinstance(a, cs.Forward):
            if a.write_ics and a.storage == cs.StorageType.DISK:
                out.append((actions.STORE, a.n0))
            out += [(actions.FWD, i) for i in range(a.n0, a.n1)]
        elif isinstance(a, cs.Reverse):
            out += [(actions.REV, i) for i in range(a.n1 - 1, a.n0 - 1, -1)]
        elif isinstance(a, (cs.Copy, cs.Move)):
            if a.from_storage == cs.StorageType.DISK:
                out.append((actions.LOAD, a.n))
        elif isinstance(a, cs.EndForward):
            out.append((actions.SEED, n))
        elif isinstance(a, cs.EndReverse):
            return out
    raise AssertionError("the library's schedule did not end")


@pytest.mark.parametrize("ram", [0, 1, 2, 5])
@pytest.mark.parametrize("disk", [1, 2, 4, 9])
def test_multistage_is_the_librarys_schedule(ram, disk):
    """Action for action checkpoint_schedules' multistage schedule -- the same steps, the
    same snapshots on disk (the busiest in RAM) -- on slots that every action finds where
    it says, with Revolve's optimal forward count and at most ``ram + 2`` states in RAM."""
    knob = (ram, disk)
    for n in [*range(1, 30), 57, 100, 233]:
        acts = list(actions.multistage_actions(n, knob))
        assert [(op, i) for op, i, _, _ in acts] == _library_schedule(n, ram, disk), n
        counts = actions.simulate(acts, n, actions.multistage_slots(n, knob))
        assert counts["forward_steps"] == optimal_steps_binomial(n, min(ram + disk, n - 1))
        assert counts["reverse_steps"] == n
        assert counts["peak_states"] <= actions.multistage_peak(n, knob) <= ram + 2
        on_disk = actions.multistage_disk(n, knob)
        assert on_disk <= disk and counts["loads"] >= on_disk
        assert len({b for op, _, _, b in acts if op == actions.STORE}) == on_disk


def test_multistage_trades_disk_for_forward_steps_at_the_same_ram():
    """More snapshots on disk, fewer forward steps; the RAM stays ``snapshots + 2``."""
    n = 10**4
    steps = [actions.simulate(actions.multistage_actions(n, (4, d)), n,
                              actions.multistage_slots(n, (4, d)))["forward_steps"]
             for d in (1, 4, 16, 64)]
    assert steps == sorted(steps, reverse=True) and steps[0] > steps[-1]
    assert {actions.multistage_slots(n, (4, d)) for d in (1, 4, 16, 64)} == {7}


@pytest.fixture
def loops(make):
    fns = make(SOURCE, all=True)
    out_of_place = TimeLoop(fns["step"], 123, loss=fns["loss"])
    in_place = TimeLoop(fns["step_in_place"], 123, loss=fns["loss"], inplace=True)
    return out_of_place, in_place


def _forward_steps(strategy, n):
    """The exact forward count: TwoLevel's bound, or for Multistage the binomial optimum
    with all its snapshots (checkpoint_schedules' own count)."""
    if isinstance(strategy, TwoLevel):
        return actions.two_level_bound(n, (strategy.period, strategy.snapshots))
    return optimal_steps_binomial(n, min(strategy.snapshots + strategy.disk, n - 1))


@pytest.mark.parametrize("strategy", [TwoLevel(period=5, snapshots=2),
                                      TwoLevel(period=1, snapshots=1),
                                      TwoLevel(period=50, snapshots=3),
                                      TwoLevel(period=500, snapshots=2),
                                      Multistage(snapshots=2, disk=5),
                                      Multistage(snapshots=0, disk=3),
                                      Multistage(snapshots=3, disk=1),
                                      Multistage(snapshots=1, disk=200)])
def test_gradient_is_store_alls(loops, strategy):
    for loop in loops:
        ref = loop.value_and_grad(Y0.copy(), 0.1, strategy=StoreAll())
        got = loop.value_and_grad(Y0.copy(), 0.1, strategy=strategy)
        assert got[0] == pytest.approx(ref[0], rel=1e-14)
        np.testing.assert_allclose(got[1][0], ref[1][0], rtol=1e-12)
        assert got[1][1] == pytest.approx(ref[1][1], rel=1e-12)
        assert loop.stats.forward_steps == _forward_steps(strategy, 123)
        assert loop.stats.disk_bytes == strategy.disk_states(123) * Y0.nbytes
        assert loop.stats.disk_bytes > 0 or strategy.disk_states(123) == 0


def test_the_states_are_on_disk_while_the_loop_runs_and_gone_after(tmp_path):
    with DiskStore([Y0, np.zeros((3, 2))], 7, str(tmp_path), "TwoLevel") as disk:
        info = [os.fstat(fd) for fd in disk.fds]
        assert [i.st_size for i in info] == [7 * Y0.nbytes, 7 * 48]
        # the blocks are allocated on the disk, not a sparse promise
        assert all(i.st_blocks * 512 >= i.st_size for i in info)
        # and unlinked once mapped: a killed process leaves nothing behind
        assert os.listdir(tmp_path) == []
        disk.arrays[0][3] = Y0
        assert os.pread(disk.fds[0], Y0.nbytes, 3 * Y0.nbytes) == Y0.tobytes()
    assert os.listdir(tmp_path) == []


def test_a_failing_gradient_removes_its_files(make, tmp_path):
    fns = make(SOURCE + """
def blows_up(y1, y0, t, h):
    for i in range(len(y0)):
        y1[i] += y0[i] * h
    assert t < 60
""", all=True)
    loop = TimeLoop(fns["blows_up"], 100, loss=fns["loss"])
    with pytest.raises((AssertionError, ReversibilityError)):
        loop.value_and_grad(Y0.copy(), 0.5, strategy=TwoLevel(period=10, directory=str(tmp_path)))
    assert os.listdir(tmp_path) == []


def test_a_disk_without_room_is_refused_before_the_loop_runs(tmp_path):
    free = shutil.disk_usage(tmp_path).free
    big = np.zeros(1 << 20)  # 8 MiB a state
    n = free // big.nbytes + 10
    with pytest.raises(InsufficientDiskError, match=r"more than the .* MiB free") as err:
        with DiskStore([big], n, str(tmp_path), "TwoLevel(period=1, snapshots=4)"):
            pass
    assert "choose a longer period" in str(err.value)
    assert os.listdir(tmp_path) == []
    with pytest.raises(InsufficientDiskError) as err:  # (each strategy's own knob)
        with DiskStore([big], n, tmp_path, "Multistage(disk=9, snapshots=2)"):
            pass
    assert "fewer disk snapshots (Multistage(disk=...))" in str(err.value)
    assert "period" not in str(err.value) and "Multistage(directory=...)" in str(err.value)
    with pytest.raises(InsufficientDiskError, match="not a directory"):
        with DiskStore([big], 3, str(tmp_path / "missing"), "TwoLevel"):
            pass


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="snapshots"):
        TwoLevel(period=3, snapshots=0)
    with pytest.raises(ValueError, match="period"):
        TwoLevel(period=0)
    with pytest.raises(ValueError, match="directory"):
        TwoLevel(directory=3)
    assert TwoLevel(period=7).label == "TwoLevel(period=7, snapshots=4)"
    with pytest.raises(ValueError, match=r"Multistage\(disk=\.\.\.\) must be an int >= 1"):
        Multistage(disk=0)
    with pytest.raises(ValueError, match=r"Multistage\(snapshots=\.\.\.\) must be an int >= 0"):
        Multistage(snapshots=-1)
    with pytest.raises(ValueError, match="directory"):
        Multistage(directory=3)
    assert Multistage(disk=9).label == "Multistage(disk=9, snapshots=4)"


@pytest.fixture(scope="module")
def disk_folder(tmp_path_factory):
    """One folder for the module's loops on disk: the folder is part of the loop's source,
    so each length reuses the kernels compiled for the first (Numba's object mode compiles
    them: a few seconds each)."""
    return tmp_path_factory.mktemp("disk")


_DISK_LOOPS = ["TwoLevel(period=4, snapshots=2", "Multistage(disk=3, snapshots=1"]


# (each loop length compiles its kernels in object mode, seconds each: the empty loop in
# the quick suite, the others in the slow suite)
@pytest.mark.parametrize(("n", "strategy"), [
    pytest.param(n, st, id=f"{st.split('(')[0]}-{n}",
                 marks=[pytest.mark.slow] if n in (1, 5, 37) else [])
    for st in _DISK_LOOPS for n in (0, 1, 5, 37)])
def test_a_checkpointed_loop_keeps_its_states_on_disk_too(make, n, strategy, disk_folder):
    """Inside reversible code: the store is mapped in object mode by the loop's kernel, its
    file unlinked at once (nothing is left in the directory), the gradient StoreAll's."""
    tmp_path = disk_folder
    loop = """
def solve(out, yT, y0, h, n):
    for t in checkpointed(range(n), {}, new=yT, old=y0):
        step(yT, y0, t, h)
    for i in range(len(yT)):
        out += yT[i] * yT[i]
"""
    ns = {"TwoLevel": TwoLevel, "Multistage": Multistage, "StoreAll": StoreAll,
          "checkpointed": checkpointed}
    f = make(SOURCE + loop.format(f"{strategy}, directory={str(tmp_path)!r})"), namespace=ns)
    g = make(SOURCE + loop.format("StoreAll()"), namespace=ns)
    args = (0.0, np.zeros(8), Y0.copy(), 0.1, n)
    a = revbench.value_and_grad(f, loss="out")(*args)
    b = revbench.value_and_grad(g, loss="out")(*args)
    assert a[0][0] == pytest.approx(b[0][0], rel=1e-14)
    np.testing.assert_allclose(a[1][2], b[1][2], rtol=1e-12)
    assert a[1][3] == pytest.approx(b[1][3], rel=1e-12, abs=1e-300)
    assert os.listdir(tmp_path) == []


def test_a_checkpointed_loop_refuses_a_disk_it_cannot_use(make, tmp_path):
    """(A disk without room is refused by the same DiskStore check as above.)"""
    missing = str(tmp_path / "missing")
    f = make(SOURCE + f"""
def solve(out, yT, y0, h, n):
    for t in checkpointed(range(n), TwoLevel(period=2, directory={missing!r}),
                          new=yT, old=y0):
        step(yT, y0, t, h)
""", namespace={"TwoLevel": TwoLevel, "checkpointed": checkpointed})
    yT = np.zeros(8)
    with pytest.raises(InsufficientDiskError, match="not a directory"):
        revbench.grad(f, loss="out")(0.0, yT, Y0.copy(), 0.1, 9)
    np.testing.assert_array_equal(yT, 0.0)
    assert os.listdir(tmp_path) == []


def test_a_directory_may_be_a_path_object(tmp_path):
    for cls in (TwoLevel, Multistage):
        s = cls(directory=tmp_path)
        assert s.directory == str(tmp_path) and s == cls(directory=str(tmp_path))
    with pytest.raises(ValueError, match=r"a str or a pathlib.Path\), got 3"):
        TwoLevel(directory=3)
