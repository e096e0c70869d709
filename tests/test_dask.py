"""Past one machine: experiment sweeps and batched derivatives on a Dask cluster.

A real ``LocalCluster`` of two worker processes (one thread each), a real IPython shell
for the ``%%reversible`` cell, worker processes killed with SIGKILL.  Compared with local
runs: the sweep's table (times aside), the batched gradients bit for bit.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

pytest.importorskip("distributed", reason="Dask is not installed: pip install 'revbench[dask]'")
import dask.array as da
from distributed import Client, LocalCluster

import revbench
from revbench import ReversibilityError
from revbench.checkpoint import Periodic, Revolve, StoreAll
from revbench.experiments import compare
from revbench.workloads.regression import data, model, summed_gradient

SAME = ["workload", "framework", "strategy", "knob", "n_steps", "forward_steps",
        "inverse_steps", "reverse_steps", "peak_states", "peak_bytes", "grad_error", "value",
        "error"]


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as c:
        yield c


# -- sweeps -------------------------------------------------------------------------------
STRATEGIES = [StoreAll(), Revolve(snapshots=3), Periodic(8)]


def test_a_sweep_on_the_cluster_is_the_local_sweep(client):
    """Every row, in the local order, with the same counts, values and gradients; the
    times measured in the workers; the cluster in the info."""
    kw = dict(n_steps=[50, 120], strategies=STRATEGIES, repeats=1, peers=False,
              progress=False)
    local = compare("heat", **kw)
    remote = compare("heat", client=client, **kw)
    assert remote.table[SAME].equals(local.table[SAME])
    assert (remote.table["seconds"] > 0).all() and (remote.table["model_seconds"] > 0).all()
    assert remote.info["cluster"]["workers"] == 2
    assert set(remote.info["step_seconds"]) == set(local.info["step_seconds"])


def test_a_client_that_is_not_one_is_refused_before_anything_runs():
    with pytest.raises(TypeError, match=r"client= takes a dask\.distributed\.Client") as e:
        compare("heat", n_steps=[10], strategies=[StoreAll()], client="tcp://127.0.0.1:8786",
                progress=False)
    assert "tcp://127.0.0.1:8786" in str(e.value)


def test_a_users_timeloop_from_a_define_reaches_the_workers(client):
    """A step defined from source text (as a notebook cell is: no file to import) is sent
    by value and rebuilt on the workers."""
    from revbench.checkpoint import TimeLoop

    fs = revbench.define(textwrap.dedent('''
        def decay(u_new, u, t, k):
            for i in range(len(u)):
                u_new[i] += u[i] - k * u[i] ** 3

        def energy(out, u, k):
            out += np.sum(u * u)
    '''), {"np": np})
    loop = TimeLoop(fs["decay"], 10, loss=fs["energy"])
    args = (np.linspace(0.1, 0.5, 6), 0.01)
    kw = dict(n_steps=[40], strategies=[StoreAll(), Revolve(snapshots=2)], repeats=1,
              progress=False, args=args)
    local, remote = compare(loop, **kw), compare(loop, client=client, **kw)
    assert remote.table[SAME].equals(local.table[SAME])


def test_the_command_line_runs_on_a_scheduler(client, tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "revbench.experiments", "heat", "--steps", "30,60",
         "--strategies", "storeall,revolve:3", "--repeats", "1", "--no-peers", "--no-progress",
         "--scheduler", client.scheduler.address, "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "Revolve" in out.stdout and (tmp_path / "heat.json").exists()
    bad = subprocess.run([sys.executable, "-m", "revbench.experiments", "heat", "--quick",
                          "--scheduler", "tcp://127.0.0.1:1"], capture_output=True, text=True,
                         timeout=120, env={**os.environ,
                                           "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s"})
    assert bad.returncode == 2 and "no Dask scheduler answers there" in bad.stderr


# -- batched derivatives over Dask arrays ------------------------------------------------------
def test_a_summed_gradient_over_dask_chunks_is_bit_identical_to_the_local_one(client):
    n = 40_000
    w, X, Y = data(n)
    g = revbench.grad(model, loss="loss", wrt="w", batch=("loss", "x", "y"), reduce="sum",
                      deterministic=True)
    chunks = n // 8
    on_dask = g(da.zeros(n, chunks=chunks), w, da.from_array(X, chunks=(chunks, 4)),
                da.from_array(Y, chunks=chunks))[1]
    # the local call over the same chunks: one thread per chunk, chunks summed in order
    local = revbench.grad(model, loss="loss", wrt="w", batch=("loss", "x", "y"), reduce="sum",
                          workers=8)(np.zeros(n), w, X, Y)[1]
    assert isinstance(on_dask, np.ndarray) and np.array_equal(on_dask, local)
    np.testing.assert_allclose(on_dask, summed_gradient(w, X, Y), rtol=1e-11)
    again = g(da.zeros(n, chunks=chunks), w, da.from_array(X, chunks=(chunks, 4)),
              da.from_array(Y, chunks=chunks))[1]
    assert np.array_equal(again, on_dask)
    tree = revbench.grad(model, loss="loss", wrt="w", batch=("loss", "x", "y"),
                         reduce="sum")(da.zeros(n, chunks=chunks), w,
                                       da.from_array(X, chunks=(chunks, 4)), Y)[1]
    np.testing.assert_allclose(tree, local, rtol=1e-12)  # (pairwise: other roundings)


def test_per_item_values_and_gradients_and_a_lazy_jacobian(client):
    n = 3000
    w, X, Y = data(n, 1)
    vg = revbench.value_and_grad(model, loss="loss", wrt=("w", "x"), batch=("loss", "x", "y"))
    (loss, w_out, _, _), (_, gw, gx, _) = vg(da.zeros(n, chunks=700), w,
                                                     da.from_array(X, chunks=(700, 4)), Y)
    (loss0, *_), (_, gw0, gx0, _) = vg(np.zeros(n), w, X, Y)
    assert np.array_equal(loss, loss0) and np.array_equal(gw, gw0) and np.array_equal(gx, gx0)
    assert w_out is w  # a shared argument the function does not change: as it was given
    J = revbench.jacobian(model, outputs="loss", wrt=("w", "x"),
                          batch=("loss", "x", "y"))(da.zeros(n, chunks=700), w,
                                                    da.from_array(X, chunks=(700, 4)), Y)
    assert all(isinstance(b, da.Array) and b.shape == (n, 1, 4) for b in J)
    J0 = revbench.jacobian(model, outputs="loss", wrt=("w", "x"),
                           batch=("loss", "x", "y"))(np.zeros(n), w, X, Y)
    assert all(np.array_equal(b.compute(), b0) for b, b0 in zip(J, J0))
    for reduce in (None, "sum"):  # a vjp: the outputs now, the pullback on the cluster
        outs, pull = revbench.vjp(model, da.zeros(n, chunks=600), w,
                                  da.from_array(X, chunks=(600, 4)), Y, outputs="loss",
                                  wrt=("w", "x"), batch=("loss", "x", "y"), reduce=reduce,
                                  deterministic=True)
        outs0, pull0 = revbench.vjp(model, np.zeros(n), w, X, Y, outputs="loss",
                                    wrt=("w", "x"), batch=("loss", "x", "y"), reduce=reduce,
                                    workers=5)  # (the local call over the same 5 chunks)
        assert np.array_equal(outs[0], outs0[0])
        ct = np.linspace(0.5, 1.5, n)
        got, want = pull(da.from_array(ct, chunks=1000)), pull0(ct)
        assert got[0].shape == want[0].shape and np.array_equal(got[0], want[0])
        assert np.array_equal(got[1], want[1])


def test_an_error_in_item_17_is_raised_with_its_own_message(client):
    """A failed check inside a task: the same error as a local call, the item numbered
    in the whole batch (17, in the chunk of items 16 to 23)."""
    n = 40
    w, X, Y = data(n, 2)
    X[17, 0] = np.nan
    g = revbench.grad(model, loss="loss", wrt="w", batch=("loss", "x", "y"), reduce="sum")
    with pytest.raises(ReversibilityError) as here:
        g(np.zeros(n), w, X, Y)
    with pytest.raises(ReversibilityError) as there:
        g(da.zeros(n, chunks=8), w, da.from_array(X, chunks=(8, 4)), Y)
    assert str(there.value) == str(here.value)
    assert any("in batch item 17 of" in note for note in there.value.__notes__), \
        there.value.__notes__


def test_chunks_of_any_shape_and_bad_batches(client):
    """Batched Dask arrays chunked differently, or across their other axes, are cut as the
    first one; a wrong length, an empty batch and float32 items get the local errors."""
    n = 1000
    w, X, Y = data(n, 4)
    g = revbench.grad(model, loss="loss", wrt=("w", "x"), batch=("loss", "x", "y"),
                      reduce="sum", deterministic=True)
    got = g(da.zeros(n, chunks=300), w, da.from_array(X, chunks=(170, 2)),
            da.from_array(Y, chunks=450))
    want = g(np.zeros(n), w, X, Y)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-13)
    assert np.array_equal(got[2], want[2])
    with pytest.raises(ValueError, match="disagree on the number of items"):
        g(da.zeros(n, chunks=300), w, da.from_array(X[:-1], chunks=(300, 4)), Y)
    with pytest.raises(ValueError, match="the batch is empty") as e:
        g(da.zeros(0, chunks=1), w, np.zeros((0, 4)), np.zeros(0))
    with pytest.raises(type(e.value), match="the batch is empty"):
        g(np.zeros(0), w, np.zeros((0, 4)), np.zeros(0))
    local_error = pytest.raises(Exception)
    with local_error as here:
        g(np.zeros(n), w, X.astype(np.float32), Y)
    with pytest.raises(type(here.value)) as there:
        g(da.zeros(n, chunks=300), w, da.from_array(X.astype(np.float32), chunks=(300, 4)), Y)
    assert str(there.value) == str(here.value)


# -- functions on the workers ---------------------------------------------------------------
def _worker_value(client, f, *args):
    return client.submit(lambda f, a: f(*a)[0], f, args, pure=False).result()


def test_a_reversible_cell_and_its_redefinition_reach_the_workers(client):
    """A ``%%reversible`` cell's function runs on a worker; run the cell again with other
    code and the worker runs the new one, never the old."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "revbench")
    try:
        for k in (2.0, 5.0):
            shell.run_cell(f"%%reversible\ndef cube(y, x):\n    y += {k} * x ** 3\n")
            cube = shell.user_ns["cube"]
            assert _worker_value(client, cube, 0.0, 2.0) == k * 8.0
    finally:
        shell.run_line_magic("unload_ext", "revbench")
        InteractiveShell.clear_instance()


def test_a_function_pickles_by_value_and_a_new_process_rebuilds_it(tmp_path):
    """No source file at the other end (a define'd function), its callee and the helper
    values it reads travel with it; what it reads that cannot pickle is a clear error."""
    fs = revbench.define(textwrap.dedent('''
        def sq(y, x):
            y += x * x

        def use(z, x):
            t = 0.0
            sq(t, x)
            z += np.sin(t)
            ~sq(t, x)
            del t
    '''), {"np": np})
    data = pickle.dumps(fs["use"])
    code = ("import pickle, sys; f = pickle.loads(sys.stdin.buffer.read()); "
            "print(repr(f(0.0, 1.5)[0]), repr((~f)(*f(0.0, 1.5))[0]))")
    out = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.decode().split() == [repr(fs["use"](0.0, 1.5)[0]), "0.0"]
    assert pickle.loads(data) is pickle.loads(data)  # (one rebuild per definition)
    inverse = pickle.loads(pickle.dumps(~fs["use"]))
    assert inverse.is_inverse

    def rb_test_doubled(x):  # a registered function holding what cannot pickle
        return 2.0 * x

    rb_test_doubled.lock = threading.Lock()
    revbench.register(rb_test_doubled, [lambda x: 2.0])
    ns = {"np": np, "rb_test_doubled": rb_test_doubled}
    bad = revbench.define("def bad(y, x):\n    y += rb_test_doubled(x)\n", ns)["bad"]
    with pytest.raises(TypeError, match="cannot be sent to another process") as e:
        pickle.dumps(bad)
    assert "bad" in str(e.value) and "pass that value as an argument" in str(e.value)


# -- faults ----------------------------------------------------------------------------------
def _kill_a_worker_soon(client, delay: float) -> tuple[threading.Thread, int, dict]:
    """A thread that SIGKILLs one worker ``delay`` s from now (and says when it did)."""
    pid = next(iter(client.run(os.getpid).values()))
    when: dict = {}

    def kill():
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
        when["killed"] = time.monotonic()

    t = threading.Thread(target=kill, daemon=True)
    t.start()
    return t, pid, when


def _gone(client, pid: int) -> bool:
    """The killed worker is gone and its nanny has started another (the scheduler may
    still list the dead one for a moment: asked again until it does not)."""
    from distributed.comm.core import CommClosedError

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            client.wait_for_workers(2, timeout=60)
            pids = client.run(os.getpid).values()
        except (CommClosedError, OSError):
            time.sleep(0.2)
            continue
        if pid not in pids:
            return True
        time.sleep(0.2)
    return False


@pytest.mark.slow  # (a worker is killed and restarted by its nanny)
def test_a_worker_killed_mid_sweep_costs_time_not_rows():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as c:
        kw = dict(n_steps=[400, 800], strategies=[StoreAll(), Revolve(snapshots=2),
                                                  Revolve(snapshots=4), Periodic(20)],
                  repeats=3, peers=False, progress=False)
        killer, pid, when = _kill_a_worker_soon(c, 1.5)
        remote = compare("heat", client=c, **kw)
        done = time.monotonic()
        killer.join()
        assert when["killed"] < done  # (in the middle of the sweep)
        assert _gone(c, pid)
        local = compare("heat", **kw)
        assert remote.table[SAME].equals(local.table[SAME])
        n = 1_600_000  # (about a second of work: the kill lands in the middle)
        w, X, Y = data(n, 3)
        g = revbench.grad(model, loss="loss", wrt="w", batch=("loss", "x", "y"),
                          reduce="sum", deterministic=True)
        killer, pid, when = _kill_a_worker_soon(c, 0.2)
        got = g(da.zeros(n, chunks=n // 16), w, da.from_array(X, chunks=(n // 16, 4)),
                da.from_array(Y, chunks=n // 16))[1]
        done = time.monotonic()
        killer.join()
        assert when["killed"] < done  # (in the middle of the gradient)
        assert _gone(c, pid)
        want = revbench.grad(model, loss="loss", wrt="w", batch=("loss", "x", "y"),
                             reduce="sum", workers=16)(np.zeros(n), w, X, Y)[1]
        assert np.array_equal(got, want)


@pytest.mark.slow  # (a Jupyter kernel starting a cluster of its own)
def test_in_a_notebook_the_sweep_shows_dasks_progress_widget():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.cells = [
        nbformat.v4.new_code_cell(
            "from distributed import Client, LocalCluster\n"
            "from revbench.checkpoint import Revolve, StoreAll\n"
            "from revbench.experiments import compare\n"
            "client = Client(LocalCluster(n_workers=2, threads_per_worker=1,"
            " dashboard_address=None))"),
        nbformat.v4.new_code_cell(
            "r = compare('heat', n_steps=[40], strategies=[StoreAll(), Revolve(snapshots=2)],"
            " repeats=1, peers=False, client=client)\n"
            "print(len(r.table), r.info['cluster']['workers'])"),
        nbformat.v4.new_code_cell("client.close()"),
    ]
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3").execute()
    outputs = nb.cells[1].outputs
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {})
               for o in outputs), outputs
    assert any(o.get("text", "").strip() == "2 2" for o in outputs), outputs
