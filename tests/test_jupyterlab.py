"""The stepping debugger in a real browser: JupyterLab, driven with Playwright.

A fixture starts ``jupyter lab`` from this virtual environment on 127.0.0.1 (free port,
token, no browser) with its own empty config, data and runtime folders, so the settings of
whoever runs the tests cannot interfere; the venv's ``python3`` kernel and its
``jupyterlab_widgets`` extension are still found, through ``sys.prefix/share/jupyter``.
Debian's ``chromium`` (never a downloaded browser) opens a notebook with a
``%%reversible --debug`` cell, runs it, clicks the debugger's step buttons and reads what
the page shows -- the status line, a variable's value, an ancilla's state -- against values
computed here in plain Python for the same program.  The page follows the DOM contract of
``revbench/jupyter/debugger.py`` (classes ``rb-debugger``, ``rb-forward``, ``rb-status``,
``rb-vars``, ``rb-ancillas`` ...).

The tests skip, saying why, when chromium or Playwright is missing.  On a failure the
message carries the page's text and the tail of the server's log.  A screenshot of the
debugger is written to the test's temporary folder; with ``REVBENCH_UPDATE_SCREENSHOT=1``
it replaces ``docs/debugger-jupyterlab.png`` (shown in the README).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCREENSHOT = ROOT / "docs" / "debugger-jupyterlab.png"

SERVER_START_S = 180  # a cold JupyterLab start on two busy cores
CELL_RUN_S = 600  # kernel start + import + the first (cold) compilations of the notebook
STEP_S = 60  # one click: a comm round trip to the kernel and back
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _chromium() -> str | None:
    """Debian's chromium: the tests never download a browser."""
    if os.access("/usr/bin/chromium", os.X_OK):
        return "/usr/bin/chromium"
    return shutil.which("chromium")


def _missing() -> str:
    """Why the browser tests cannot run here ('' when they can)."""
    if _chromium() is None:
        return "no chromium browser (/usr/bin/chromium or `chromium` on PATH): apt-get install chromium"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed: pip install -e '.[test]'"
    try:
        import jupyterlab  # noqa: F401
    except ImportError:
        return "jupyterlab is not installed: pip install -e '.[notebook]'"
    return ""


pytestmark = [pytest.mark.slow, pytest.mark.skipif(bool(_missing()), reason=_missing() or "-")]


# --------------------------------------------------------------------------- the server


@dataclass
class LabServer:
    """A running JupyterLab: its address, token, notebook folder and log file."""

    url: str
    token: str
    root: Path
    log: Path
    proc: subprocess.Popen

    def page_url(self, notebook: str) -> str:
        """The notebook alone in a fresh workspace (``reset``: no tabs of earlier tests)."""
        return f"{self.url}/lab/tree/{notebook}?reset&token={self.token}"

    def api(self, path: str, method: str = "GET") -> object:
        request = urllib.request.Request(f"{self.url}/api/{path}", method=method,
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=30) as reply:
            body = reply.read()
        return json.loads(body) if body else None

    def set_theme(self, theme: str | None) -> None:
        """Choose JupyterLab's theme in the server's (isolated) user settings; None: the default.
        Pages opened afterwards load with it."""
        raw = json.dumps({"theme": theme} if theme else {})
        request = urllib.request.Request(
            f"{self.url}/lab/api/settings/@jupyterlab/apputils-extension:themes", method="PUT",
            data=json.dumps({"raw": raw}).encode(),
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as reply:
            reply.read()

    def shutdown_kernels(self) -> None:
        """End every kernel: each test starts its own, and the machine has few cores."""
        with contextlib.suppress(OSError):
            for kernel in self.api("kernels"):
                with contextlib.suppress(OSError):
                    self.api(f"kernels/{kernel['id']}", method="DELETE")

    def log_tail(self, n: int = 6000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError as e:
            return f"(no server log: {e})"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _lab_settings(config_dir: Path) -> None:
    """User settings for the isolated JupyterLab: no news or update checks (no network,
    no toast over the page), and every cell kept in the page (no windowing), so the
    tests can read cells that are scrolled out of view."""
    settings = {
        ("apputils-extension", "notification"): {"fetchNews": "false", "checkForUpdates": False},
        ("notebook-extension", "tracker"): {"windowingMode": "none"},
    }
    for (extension, name), values in settings.items():
        folder = config_dir / "lab" / "user-settings" / "@jupyterlab" / extension
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.jupyterlab-settings").write_text(json.dumps(values))


def _wait_until_up(server: LabServer) -> None:
    deadline = time.monotonic() + SERVER_START_S
    status = f"{server.url}/api/status?token={server.token}"
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with code {server.proc.returncode}:\n"
                               f"{server.log_tail()}")
        with contextlib.suppress(urllib.error.URLError, OSError):
            with urllib.request.urlopen(status, timeout=5) as reply:
                if reply.status == 200:
                    return
        time.sleep(0.5)
    raise RuntimeError(f"jupyter lab did not answer within {SERVER_START_S} s:\n{server.log_tail()}")


def _stop(proc: subprocess.Popen) -> None:
    """End the server and its kernels: the whole process group, gently then firmly."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=20)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    base = tmp_path_factory.mktemp("jupyterlab")
    root, home = base / "notebooks", base / "jupyter"
    root.mkdir()
    env = dict(os.environ)
    for name in ("config", "data", "runtime"):
        (home / name).mkdir(parents=True)
        env[f"JUPYTER_{name.upper()}_DIR"] = str(home / name)
    env.pop("JUPYTER_PATH", None)  # the venv's share/jupyter is on the default path
    env["JUPYTERLAB_SETTINGS_DIR"] = str(home / "config" / "lab" / "user-settings")
    env["JUPYTERLAB_WORKSPACES_DIR"] = str(home / "config" / "lab" / "workspaces")
    _lab_settings(home / "config")
    env.pop("JUPYTER_TOKEN", None)
    token = secrets.token_hex(16)
    port = _free_port()
    log = base / "server.log"
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1",
           f"--port={port}", "--port-retries=0", f"--ServerApp.root_dir={root}",
           f"--IdentityProvider.token={token}", "--LabApp.news_url=None",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if os.geteuid() == 0:  # CI runs as root, in a throwaway container
        cmd.append("--allow-root")
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    server = LabServer(f"http://127.0.0.1:{port}", token, root, log, proc)
    try:
        _wait_until_up(server)
        yield server
    finally:
        _stop(proc)


# --------------------------------------------------------------------------- the browser


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=_chromium(), headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(lab: LabServer, browser):
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    pg = context.new_page()
    try:
        yield pg
    finally:
        context.close()
        lab.shutdown_kernels()


def _page_text(page) -> str:
    try:
        return page.locator("body").inner_text(timeout=5000)[-6000:]
    except Exception as e:  # the page may be gone: say so, do not hide the first error
        return f"(page text unavailable: {e})"


@contextlib.contextmanager
def explained(page, server: LabServer, what: str, shot: Path | None = None) -> Iterator[None]:
    """Turn any failure inside into one message with the page's text and the server's log."""
    try:
        yield
    except Exception as e:
        if shot is not None:
            with contextlib.suppress(Exception):
                page.screenshot(path=str(shot), full_page=True)
        raise AssertionError(
            f"{what}: {type(e).__name__}: {e}\n"
            + (f"--- screenshot: {shot}\n" if shot is not None else "")
            + f"--- page text ---\n{_page_text(page)}\n--- server log ---\n{server.log_tail()}"
        ) from e


# --------------------------------------------------------------------------- notebooks


def write_notebook(folder: Path, name: str, cells: list[str]) -> str:
    """A notebook of code cells for the venv's ``python3`` kernel (no kernel dialog)."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                 "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    nbformat.write(nb, folder / name)
    return name


def _dismiss_kernel_dialog(page) -> None:
    """Accept a 'Select Kernel' dialog if JupyterLab shows one (it keeps the default)."""
    dialog = page.locator(".jp-Dialog")
    with contextlib.suppress(Exception):
        dialog.wait_for(state="visible", timeout=3000)
    if dialog.count():
        page.locator(".jp-Dialog .jp-mod-accept").first.click()


def open_and_run_all(page, server: LabServer, notebook: str) -> None:
    """Open ``notebook`` in JupyterLab, wait for its kernel, and run all cells from the menu."""
    page.goto(server.page_url(notebook), wait_until="domcontentloaded")
    page.locator(".jp-NotebookPanel .jp-Cell").first.wait_for(state="visible", timeout=SERVER_START_S * 1000)
    _dismiss_kernel_dialog(page)
    idle = page.locator(".jp-NotebookPanel .jp-Notebook-ExecutionIndicator[data-status='idle']")
    idle.first.wait_for(state="attached", timeout=SERVER_START_S * 1000)
    page.locator("#jp-MainMenu").get_by_text("Run", exact=True).click()
    page.get_by_role("menuitem", name=re.compile(r"^Run All Cells")).click()


def all_ran(page) -> bool:
    """Whether every code cell shows an execution count (``[n]:``, not ``[*]:`` or ``[ ]:``)."""
    texts = page.locator(".jp-NotebookPanel .jp-CodeCell .jp-InputPrompt").all_inner_texts()
    return bool(texts) and all(re.fullmatch(r"\s*\[\d+\]:\s*", t) for t in texts)


def wait_for_cells(page, selector: str) -> None:
    """Wait until ``selector`` appears, or every cell has run without producing it."""
    deadline = time.monotonic() + CELL_RUN_S
    target = page.locator(selector)
    while time.monotonic() < deadline:
        if target.count():
            break
        if all_ran(page):  # widget views render a moment after their output arrives
            deadline = min(deadline, time.monotonic() + STEP_S)
        time.sleep(0.5)
    try:
        target.first.wait_for(state="visible", timeout=max(1.0, deadline - time.monotonic()) * 1000)
    except Exception:
        errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
        raise AssertionError(f"{selector!r} did not appear; "
                             f"cell errors: {errors.all_inner_texts()}") from None


# --------------------------------------------------------------------------- tests


def test_widgets_render(lab: LabServer, page, tmp_path: Path) -> None:
    """The venv's jupyterlab_widgets extension is found: an ipywidget renders and answers;
    and the kernel is this venv's Python (the one that imports this revbench)."""
    nb = write_notebook(lab.root, "widgets.ipynb", [
        "import sys\n"
        "import ipywidgets as w\n"
        "w.HTML(sys.prefix).add_class('probe-prefix')",
        "import ipywidgets as w\n"
        "b = w.Button(description='press')\n"
        "b.add_class('probe-button')\n"
        "out = w.HTML('pressed 0')\n"
        "out.add_class('probe-out')\n"
        "n = [0]\n"
        "def on(_):\n"
        "    n[0] += 1\n"
        "    out.value = f'pressed {n[0]}'\n"
        "b.on_click(on)\n"
        "w.VBox([b, out])",
    ])
    from playwright.sync_api import expect

    with explained(page, lab, "an ipywidget did not render", tmp_path / "widgets.png"):
        open_and_run_all(page, lab, nb)
        wait_for_cells(page, ".probe-button")
        page.locator("button.probe-button, .probe-button button").first.click()
        expect(page.locator(".probe-out")).to_contain_text("pressed 1", timeout=STEP_S * 1000)
        assert page.locator(".probe-prefix").inner_text().strip() == sys.prefix


# --------------------------------------------------------------------------- the debugger

X0, Y0 = 2.0, 0.0
#: the debugged cell; with ``%%reversible`` as line 1, ``t = 0.0`` is line 2
DEBUG_CELL = """%%reversible --debug --loss y
t = 0.0
t += x * x
y += 3.0 * t + x
t -= x * x
del t"""
LINE_Y_UPDATE, LINE_UNCOMPUTE, LINE_DEL = 4, 5, 6
#: a cell that forgets to uncompute its ancilla: ``del t`` fails, t is dirty
DIRTY_CELL = """%%reversible --debug
t = 0.0
t += x
del t"""
DIRTY_DEL_LINE = 4
#: a function with a long commented line that calls another on sub-arrays, and the cell
#: that debugs it (the third debugger of the page): the layout test's program
LONG_COMMENT = "# " + "a comment that goes on and on, " * 6
LAYOUT_CELLS = [
    "import numpy as np\nv = np.zeros(3)\nw = np.ones(3)",
    "%%reversible --no-jit\n"
    "def axpy(p, q):\n"
    "    p += 2.0 * q\n"
    "\n"
    "def spread(p, q):  # (not y, x: DebuggerView reads those as the scalars of DEBUG_CELL)\n"
    "    t = 0.0\n"
    f"    t += q[0]  {LONG_COMMENT}\n"
    "    axpy(p[0:2], q[1:3])\n"
    "    p[0] += t\n"
    "    t -= q[0]\n"
    "    del t",
    "%%reversible --no-jit --debug --loss v[0]\nspread(v, w)",
]

_STATUS = re.compile(r"step (\d+) / (\d+) · (forward|backward) · line (\d+)")


@dataclass
class Shown:
    """What the debugger shows at one step, read from the page."""

    step: int
    steps: int
    direction: str
    line: int
    y: float | None  # None: not shown (not in scope)
    t_state: str | None  # None: no row for the ancilla t yet
    adjoint_x: str


class DebuggerView:
    """Reads and drives one ``.rb-debugger`` on the page through its DOM contract."""

    def __init__(self, root):
        self.root = root

    def button(self, cls: str):
        return self.root.locator(f"button.{cls}, .{cls} button").first

    def status(self) -> str:
        return self.root.locator(".rb-status").first.inner_text()

    def read(self) -> Shown:
        text = self.status()
        m = _STATUS.search(text)
        assert m is not None, f"status line {text!r} does not read 'step K / N · direction · line L'"
        y = self._cell("rb-vars", "y", "td.rb-value")
        adjoint = self._cell("rb-vars", "x", "td.rb-adjoint")
        t_row = self.root.locator("table.rb-ancillas tr[data-name='t']")
        return Shown(int(m[1]), int(m[2]), m[3], int(m[4]), None if y is None else float(y),
                     t_row.first.get_attribute("data-state") if t_row.count() else None,
                     adjoint or "")

    def _cell(self, table: str, name: str, td: str) -> str | None:
        cell = self.root.locator(f"table.{table} tr[data-name='{name}'] {td}")
        return cell.first.inner_text().strip() if cell.count() else None

    def click(self, cls: str, expect_step: int) -> Shown:
        """Click a button, wait until the kernel's answer shows step ``expect_step``."""
        from playwright.sync_api import expect

        before = self.status()
        assert f"step {expect_step} / " not in before, f"already at step {expect_step}: {before!r}"
        self.button(cls).click()
        expect(self.root.locator(".rb-status").first).to_contain_text(
            f"step {expect_step} / ", timeout=STEP_S * 1000)
        return self.read()


def _expected_forward(line: int) -> tuple[float, str | None]:
    """(y, the ancilla t's state) right after the forward run executed ``line``: plain Python."""
    x, y, t = X0, Y0, None
    state = None
    for n in range(2, line + 1):
        if n == 2:
            t, state = 0.0, "clean"
        elif n == 3:
            t += x * x
        elif n == 4:
            y += 3.0 * t + x
        elif n == 5:
            t -= x * x
        elif n == 6:
            t, state = None, "freed"
        if t is not None:
            state = "clean" if t == 0.0 else "allocated"
    return y, state


@pytest.fixture(scope="module")
def debugger_page(lab: LabServer, browser, tmp_path_factory: pytest.TempPathFactory):
    """JupyterLab showing a notebook with two ``%%reversible --debug`` cells, run."""
    shots = tmp_path_factory.mktemp("shots")
    nb = write_notebook(lab.root, "debugger.ipynb", [
        "%load_ext revbench",
        f"x = {X0!r}\ny = {Y0!r}",
        DEBUG_CELL,
        DIRTY_CELL,
        *LAYOUT_CELLS,
    ])
    context = browser.new_context(viewport={"width": 1400, "height": 1200})
    page = context.new_page()
    try:
        with explained(page, lab, "the notebook with the debugger did not run", shots / "run.png"):
            open_and_run_all(page, lab, nb)
            wait_for_cells(page, ".rb-debugger .rb-status")
            page.locator(".rb-debugger").nth(2).wait_for(state="visible", timeout=CELL_RUN_S * 1000)
        yield page, shots
    finally:
        context.close()
        lab.shutdown_kernels()


def test_debugger_steps_forward_and_back(lab: LabServer, debugger_page) -> None:
    page, shots = debugger_page
    dbg = DebuggerView(page.locator(".rb-debugger").first)
    with explained(page, lab, "the debugger in JupyterLab", shots / "debugger-failed.png"):
        first = dbg.read()
        assert (first.step, first.direction) == (1, "forward"), first
        n = first.steps
        # step forward through the whole trace, reading each step from the page
        seen = [first]
        for k in range(2, n + 1):
            seen.append(dbg.click("rb-forward", k))
        forward = [s for s in seen if s.direction == "forward"]
        backward = [s for s in seen if s.direction == "backward"]
        assert forward and backward and seen.index(backward[0]) == len(forward), (
            f"the forward steps come first, then the backward ones: {seen}")
        # the turning point stands where the backward run starts: `del t`, undone first
        assert backward[0].line == backward[1].line == LINE_DEL, backward[:2]
        for line in (LINE_Y_UPDATE, LINE_UNCOMPUTE, LINE_DEL):
            at = [s for s in forward if s.line == line]
            assert len(at) == 1, f"one forward step at line {line}: {forward}"
            y, state = _expected_forward(line)
            assert at[0].y == pytest.approx(y), at[0]
            assert at[0].t_state == state, (line, at[0])
        assert {s.line for s in backward} >= {LINE_Y_UPDATE, LINE_UNCOMPUTE, LINE_DEL}, backward
        last = seen[-1]
        # the backward run really executed the inverse: y is back, t freed again,
        # and the reverse sweep left d y / d x = 6 x + 1 as x's adjoint
        assert last.y == pytest.approx(Y0), last
        assert last.t_state == "freed", last
        assert float(last.adjoint_x) == pytest.approx(6.0 * X0 + 1.0), last
        # step back from the end: the page shows the earlier steps again
        undo_y = next(s.step for s in backward if s.line == LINE_Y_UPDATE)
        for k in range(n - 1, undo_y - 1, -1):
            shown = dbg.click("rb-back", k)
            assert shown == seen[k - 1], f"step {k} differs after stepping back: {shown} != {seen[k - 1]}"
        # now at the inverse's update of y: y is back, t still holds x * x
        assert shown.y == pytest.approx(Y0) and shown.t_state == "allocated", shown
        _save_screenshot(page, shots / "debugger-jupyterlab.png")


def test_debugger_shows_a_dirty_ancilla(lab: LabServer, debugger_page) -> None:
    page, shots = debugger_page
    dbg = DebuggerView(page.locator(".rb-debugger").nth(1))
    with explained(page, lab, "the failing cell's debugger", shots / "dirty-failed.png"):
        n = dbg.read().steps
        if n > 1:
            dbg.click("rb-end", n)
        last = dbg.read()
        assert (last.direction, last.line) == ("forward", DIRTY_DEL_LINE), last
        row = dbg.root.locator("table.rb-ancillas tr[data-name='t']").first
        assert row.get_attribute("data-state") == "dirty", row.evaluate("e => e.outerHTML")
        assert "rb-dirty" in (row.get_attribute("class") or "").split()
        assert "del t" in dbg.root.inner_text(), "the failed step names its statement"
        assert_error_told_once(dbg.root, "is not back at its allocated value")
        dbg.root.locator(".rb-error").first.screenshot(path=str(shots / "error-box.png"))


def assert_error_told_once(root, message: str) -> None:
    """One error box: its place on a line of its own, the message below it, and the message
    nowhere else in the debugger (before: a red box in the status line, then place and
    message run together in a second box)."""
    text = root.inner_text()
    assert text.count(message) == 1, f"the error is told {text.count(message)} times: {text}"
    boxes = root.locator(".rb-error")
    assert boxes.count() == 1, root.evaluate("e => e.outerHTML")[-3000:]
    where = boxes.first.locator(".rb-error-where").last.bounding_box()
    said = boxes.first.locator(".rb-error-message").first
    assert message in said.inner_text()
    assert said.bounding_box()["y"] >= where["y"] + where["height"] - 1, (where, said.bounding_box())
    assert boxes.first.evaluate("e => getComputedStyle(e).whiteSpace") == "pre-wrap"


#: the debugger's layout as chromium draws it: the source column's right edge, the side
#: column's edges, anything of the source column drawn past its right edge (an element's
#: box clipped by the scrolling boxes it sits in), and whether the code box scrolls
_LAYOUT_JS = """(root) => {
  const source = root.querySelector('.rb-source'), side = root.querySelector('.rb-side');
  const code = source.querySelector('.rb-code');
  const s = source.getBoundingClientRect(), d = side.getBoundingClientRect();
  const spill = [];
  for (const el of source.querySelectorAll('*')) {
    let right = el.getBoundingClientRect().right;
    for (let p = el.parentElement; p && p !== root; p = p.parentElement) {
      if (getComputedStyle(p).overflowX !== 'visible') {
        right = Math.min(right, p.getBoundingClientRect().right);
      }
    }
    if (right > s.right + 0.5) { spill.push(`${el.tagName}.${el.className}: ${right} > ${s.right}`); }
  }
  return {sourceRight: s.right, sideLeft: d.left, sideRight: d.right,
          rootRight: root.getBoundingClientRect().right, spill: spill.slice(0, 5),
          codeRight: code.getBoundingClientRect().right, codeScrollWidth: code.scrollWidth,
          codeClientWidth: code.clientWidth, codeOverflowX: getComputedStyle(code).overflowX,
          sideScrollWidth: side.scrollWidth, sideClientWidth: side.clientWidth};
}"""


def assert_laid_out(root, theme: str) -> dict:
    """The source column ends where the side column begins: a long line scrolls inside the
    source box (it is longer than the box, and the box scrolls) and nothing of it is drawn
    over the variables; the side column stays inside the debugger."""
    m = root.evaluate(_LAYOUT_JS)
    assert m["sourceRight"] <= m["sideLeft"] + 0.5, f"{theme}: the source runs into the side: {m}"
    assert not m["spill"], f"{theme}: drawn past the source column: {m}"
    assert m["codeRight"] <= m["sourceRight"] + 0.5, f"{theme}: {m}"
    assert m["codeScrollWidth"] > m["codeClientWidth"], f"{theme}: no line longer than the box? {m}"
    assert m["codeOverflowX"] in ("auto", "scroll"), f"{theme}: {m}"
    assert m["sideRight"] <= m["rootRight"] + 0.5, f"{theme}: the side column leaves the debugger: {m}"
    return m


def assert_play_labelled(root) -> None:
    """*▶ play* is a labelled, visible button, as on the static page."""
    play = root.locator("button.rb-play, .rb-play button")
    assert play.count() == 1 and play.first.is_visible()
    assert play.first.inner_text().strip() == "▶ play", play.first.inner_text()


def test_debugger_layout_in_the_light_theme(lab: LabServer, debugger_page) -> None:
    """A long commented line scrolls inside the source column, never over the variables;
    the ``↳ runs`` line does not repeat it; *▶ play* is labelled."""
    page, shots = debugger_page
    dbg = DebuggerView(page.locator(".rb-debugger").nth(2))
    with explained(page, lab, "the debugger's layout (light theme)", shots / "layout-failed.png"):
        shown = dbg.read()
        for _ in range(10):  # forward to the long line, inside spread
            if LONG_COMMENT.strip() in dbg.root.locator(".rb-current").first.inner_text():
                break
            shown = dbg.click("rb-forward", shown.step + 1)
        current = dbg.root.locator(".rb-current").first
        assert LONG_COMMENT.strip() in current.inner_text(), current.inner_text()
        assert_laid_out(dbg.root, "light")
        assert dbg.root.locator(".rb-executed").count() == 0, "the line is what runs: no ↳ line"
        dbg.root.screenshot(path=str(shots / "layout-light.png"))
        # the code box scrolls to show the end of the line, and still stays in its column
        dbg.root.locator(".rb-code").first.evaluate("e => { e.scrollLeft = e.scrollWidth; }")
        assert_laid_out(dbg.root, "light, scrolled")
        assert_play_labelled(dbg.root)
        # play runs to the end in the browser, saying "⏸ pause" meanwhile, then "▶ play"
        from playwright.sync_api import expect

        play = dbg.button("rb-play")
        play.click()
        expect(play).to_have_text("⏸ pause", timeout=STEP_S * 1000)
        expect(dbg.root.locator(".rb-status").first).to_contain_text(
            f"step {shown.steps} / {shown.steps}", timeout=STEP_S * 1000)
        expect(play).to_have_text("▶ play", timeout=STEP_S * 1000)


#: WCAG's minimum contrast for normal text
MIN_CONTRAST = 4.5
#: what must stay readable, inside a debugger root
READABLE = {
    "the debugger": None,
    "status": ".rb-status .rb-step",
    "direction": ".rb-status .rb-dir",
    "what ran": ".rb-status .rb-action",
    "a source line": ".rb-code .rb-line:not(.rb-current)",
    "the current line": ".rb-code .rb-current",
    "the executed statement": ".rb-executed-stmt",
    "an adjoint update": ".rb-executed-adj",
    "a table head": "table.rb-vars th",
    "a value": "table.rb-vars td.rb-value",
    "a changed value": "table.rb-vars tr.rb-changed td.rb-value",
    "an adjoint": "table.rb-vars td.rb-adjoint",
    "an ancilla state": "table.rb-ancillas td.rb-state",
}
#: the contrast of an element's text with what is really behind it (translucent
#: backgrounds composed over their ancestors'), per WCAG 2
_CONTRAST_JS = """(el) => {
  const parse = (c) => {
    const m = /rgba?\\(([^)]+)\\)/.exec(c);
    if (!m) { return null; }
    const p = m[1].split(/[\\s,\\/]+/).filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  };
  const over = (top, below) => [0, 1, 2].map((i) => top[i] * top[3] + below[i] * (1 - top[3])).concat([1]);
  const layers = [];
  for (let n = el; n && n.nodeType === 1; n = n.parentElement) {
    const c = parse(getComputedStyle(n).backgroundColor);
    if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) { break; } }
  }
  let bg = [255, 255, 255, 1];
  for (let i = layers.length - 1; i >= 0; i--) { bg = over(layers[i], bg); }
  const fg = over(parse(getComputedStyle(el).color), bg);
  const lum = (c) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
  };
  const a = lum(fg), b = lum(bg);
  return {ratio: (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05), background: b,
          fg: fg.map(Math.round), bg: bg.map(Math.round)};
}"""


def contrasts(root) -> dict[str, dict]:
    """Each READABLE element's text contrast (all of them must be on the page)."""
    out = {}
    for what, selector in READABLE.items():
        el = root if selector is None else root.locator(selector).first
        assert selector is None or root.locator(selector).count(), f"no {what} ({selector}) on the page"
        out[what] = el.evaluate(_CONTRAST_JS)
    return out


def step_until(dbg: DebuggerView, selector: str, limit: int = 30) -> Shown:
    """From the turning point, step forward until ``selector`` shows in the debugger."""
    from playwright.sync_api import expect

    dbg.button("rb-turn").click()
    expect(dbg.root.locator(".rb-status").first).to_contain_text("turning point", timeout=STEP_S * 1000)
    shown = dbg.read()
    for _ in range(limit):
        if dbg.root.locator(selector).count():
            return shown
        shown = dbg.click("rb-forward", shown.step + 1)
    raise AssertionError(f"{selector!r} never showed after the turning point")


def assert_readable(found: dict[str, dict], theme: str) -> None:
    bad = {what: c for what, c in found.items() if c["ratio"] < MIN_CONTRAST}
    assert not bad, f"text below contrast {MIN_CONTRAST} in the {theme} theme: {bad}"


def test_debugger_is_readable_in_the_light_theme(lab: LabServer, debugger_page) -> None:
    page, shots = debugger_page
    dbg = DebuggerView(page.locator(".rb-debugger").first)
    with explained(page, lab, "the debugger's contrast (light theme)", shots / "light-failed.png"):
        step_until(dbg, ".rb-executed-adj")
        if not dbg.root.locator("tr.rb-changed").count():  # a step that changes a variable
            dbg.click("rb-forward", dbg.read().step + 1)
        found = contrasts(dbg.root)
        assert found["the debugger"]["background"] > 0.8, found["the debugger"]  # light
        assert_readable(found, "light")


#: a cell program that calls a function, so the call-stack panel shows too
DARK_CELLS = [
    "%load_ext revbench",
    f"x = {X0!r}\ny = {Y0!r}",
    "%%reversible --no-jit\n"
    "def add_poly(y, x):\n"
    "    t = 0.0\n"
    f"    t += x * x  {LONG_COMMENT}\n"
    "    y += 3.0 * t + x\n"
    "    t -= x * x\n"
    "    del t",
    "%%reversible --no-jit --debug --loss y\nadd_poly(y, x)",
]


def test_debugger_is_readable_in_the_dark_theme(lab: LabServer, browser,
                                               tmp_path_factory: pytest.TempPathFactory) -> None:
    """JupyterLab Dark: the debugger takes the theme's colours (no white box, no white text
    on white), and its source lines, tables, highlights and stack stay readable."""
    shots = tmp_path_factory.mktemp("dark")
    nb = write_notebook(lab.root, "dark.ipynb", DARK_CELLS)
    lab.set_theme("JupyterLab Dark")
    context = browser.new_context(viewport={"width": 1400, "height": 1200})
    page = context.new_page()
    try:
        with explained(page, lab, "the debugger in the dark theme", shots / "dark-failed.png"):
            open_and_run_all(page, lab, nb)
            page.locator("body[data-jp-theme-name='JupyterLab Dark'][data-jp-theme-light='false']") \
                .wait_for(state="attached", timeout=STEP_S * 1000)
            wait_for_cells(page, ".rb-debugger .rb-status")
            dbg = DebuggerView(page.locator(".rb-debugger").first)
            step_until(dbg, ".rb-stack-panel tr.rb-frame + tr.rb-frame")  # inside add_poly
            step_until_more = dbg.read()
            for _ in range(10):  # on to a step that changes a value, with adjoint updates
                if dbg.root.locator("tr.rb-changed").count() and dbg.root.locator(".rb-executed-adj").count():
                    break
                step_until_more = dbg.click("rb-forward", step_until_more.step + 1)
            found = contrasts(dbg.root)
            frames = dbg.root.locator("table.rb-stack tr.rb-frame")
            assert frames.count() == 2, dbg.root.locator("table.rb-stack").inner_text()
            found["the call stack"] = frames.first.locator("td.rb-fn").evaluate(_CONTRAST_JS)
            assert found["the debugger"]["background"] < 0.05, found["the debugger"]  # dark
            assert_readable(found, "dark")
            assert_laid_out(dbg.root, "dark")  # add_poly's long commented line scrolls
            assert_play_labelled(dbg.root)
            cell = page.locator(".jp-Cell", has=page.locator(".rb-debugger")).first
            cell.scroll_into_view_if_needed()
            cell.screenshot(path=str(shots / "debugger-dark.png"))
    finally:
        context.close()
        lab.set_theme(None)
        lab.shutdown_kernels()


def _save_screenshot(page, path: Path) -> None:
    """The debugger's cell, as JupyterLab shows it (README: docs/debugger-jupyterlab.png)."""
    cell = page.locator(".jp-Cell", has=page.locator(".rb-debugger")).first
    cell.scroll_into_view_if_needed()
    cell.screenshot(path=str(path))
    if os.environ.get("REVBENCH_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(path, SCREENSHOT)


#: every notebook of the course, each run with "Run All Cells" by the test below
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_the_tour_runs_in_jupyterlab(lab: LabServer, page, tmp_path: Path, notebook: Path) -> None:
    """``make lab`` opens notebooks/01_tour.ipynb, and a class goes on to every lesson: in
    JupyterLab, *Run All Cells* runs each notebook through with no error output (no
    traceback, nothing on stderr), every debugger renders, and every exercise's check cell
    shows its feedback."""
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    debuggers = sum("--debug" in c.source.split("\n", 1)[0] or "revbench.debug(" in c.source for c in code)
    # check cells: a line that is just the call `check.exercise_k(...)`, whose Feedback shows
    checks = sum(re.search(r"^check\.exercise_\w*\(", c.source, re.MULTILINE) is not None for c in code)
    tagged = [i for i, c in enumerate(code) if "raises-exception" in c.metadata.get("tags", [])]
    assert not tagged, f"{notebook.name}: no cell may fail on purpose (raises-exception tags on {tagged})"
    shutil.copy(notebook, lab.root / notebook.name)
    try:
        with explained(page, lab, f"{notebook.name} in JupyterLab", tmp_path / f"{notebook.stem}.png"):
            open_and_run_all(page, lab, notebook.name)
            if debuggers:
                wait_for_cells(page, ".rb-debugger")
            stderr = ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
            deadline = time.monotonic() + CELL_RUN_S
            while not all_ran(page) and time.monotonic() < deadline:
                if page.locator(f".jp-NotebookPanel {stderr}").count():
                    break  # Run All stops at an error: report it now
                time.sleep(0.5)
            cells = page.locator(".jp-NotebookPanel .jp-CodeCell")
            errors = {i: cells.nth(i).locator(stderr).all_inner_texts() for i in range(cells.count())}
            errors = {i: e for i, e in errors.items() if e}
            assert not errors, f"cells with error output (0-based code cells): {errors}"
            assert all_ran(page), "Run All Cells did not run every cell"
            roots = page.locator(".rb-debugger")
            if debuggers:
                roots.nth(debuggers - 1).wait_for(state="visible", timeout=STEP_S * 1000)
            assert roots.count() == debuggers
            assert page.locator(".jp-NotebookPanel .rb-feedback").count() >= checks, (
                f"{checks} exercise checks, but fewer feedback boxes")
    finally:
        lab.shutdown_kernels()
