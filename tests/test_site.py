"""The course website (``make site``: ``python -m revbench.course.site``).

Quick tests check the pieces on synthetic notebooks: which outputs lose their widget view
before the export, the lesson's title and subtitle, the choice of lessons, and that an
exported page carries the debugger's static iframe and no widget.  The slow test builds the
site for the tour (executed for real, with ``REVBENCH_STATIC_DEBUGGER=1``), opens the page
in Debian's chromium (never a downloaded browser; the CDN scripts nbconvert links are
blocked: the debugger must not need them) and steps a debugger inside its iframe.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from revbench.course import site

ROOT = Path(__file__).resolve().parent.parent
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed: pip install -e '.[test]'")


def _widget_output(extra: dict) -> dict:
    data = {WIDGET_VIEW: {"model_id": "abc", "version_major": 2, "version_minor": 0}, **extra}
    return nbformat.v4.new_output("display_data", data=data)


LESSON_HEAD = "# 3. A lesson\n\n*Lesson 3 of the course: things.*\n\nMore."


def _notebook(outputs: list, title: str = LESSON_HEAD) -> object:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(title), nbformat.v4.new_code_cell("x", outputs=outputs)]
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    return nb


def test_outputs_with_another_representation_lose_their_widget_view() -> None:
    both = _widget_output({"text/plain": "Debugger(...)", "text/html": "<iframe class='rb-static-debugger'>"})
    bar = _widget_output({"text/plain": "100%|##########| 3/3"})
    alone = nbformat.v4.new_output("display_data", data={WIDGET_VIEW: {"model_id": "z"}})
    nb = _notebook([both, bar, alone])
    static = site.for_static_page(nb)
    got = [set(o["data"]) for o in static.cells[1].outputs]
    assert got == [{"text/plain", "text/html"}, {"text/plain"}, {WIDGET_VIEW}]
    assert "widgets" not in static.metadata, "no widget manager on a page without a kernel"
    assert WIDGET_VIEW in nb.cells[1].outputs[0]["data"] and "widgets" in nb.metadata, "the input is kept"


def test_a_lesson_is_described_by_its_heading_and_first_line() -> None:
    title, subtitle = site.describe(_notebook([]), "fallback")
    assert (title, subtitle) == ("3. A lesson", "Lesson 3 of the course: things.")
    assert site.describe(nbformat.v4.new_notebook(), "03_x") == ("03_x", "")


def test_lessons_are_the_numbered_notebooks_in_order(tmp_path: Path) -> None:
    for name in ("02_b.ipynb", "01_a.ipynb", "notes.ipynb", "1_c.ipynb"):
        (tmp_path / name).write_text("{}")
    assert [p.name for p in site.find_lessons(tmp_path)] == ["01_a.ipynb", "02_b.ipynb"]
    chosen = site.find_lessons(tmp_path, ["02_b", "01_a.ipynb"])
    assert [p.name for p in chosen] == ["02_b.ipynb", "01_a.ipynb"]
    with pytest.raises(site.SiteError, match=r"no lesson '07_z'.*01_a, 02_b"):
        site.find_lessons(tmp_path, ["07_z"])
    with pytest.raises(site.SiteError, match="no lesson notebooks"):
        site.find_lessons(tmp_path / "notes.ipynb")


def test_the_page_shows_the_static_debugger_not_a_widget(monkeypatch: pytest.MonkeyPatch) -> None:
    """A debugger displayed with REVBENCH_STATIC_DEBUGGER=1, exported: the iframe, with the
    debugger's page (its buttons and status), and no widget view left to render."""
    pytest.importorskip("nbconvert", reason="nbconvert is not installed: pip install -e '.[test]'")
    import revbench

    monkeypatch.setenv("REVBENCH_STATIC_DEBUGGER", "1")
    f = revbench.define("def f(y, x):\n    y += x * x\n", backend="python")["f"]
    bundle = revbench.debug(f, 0.0, 3.0)._repr_mimebundle_()
    assert {"text/html", WIDGET_VIEW} <= set(bundle)
    nb = _notebook([nbformat.v4.new_output("display_data", data=bundle)])
    # as nbclient stores it: with the widget's state, nbconvert would render the widget view
    model = {"model_name": "VBoxModel", "model_module": "@jupyter-widgets/controls",
             "model_module_version": "2.0.0", "state": {}}
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {
        "state": {bundle[WIDGET_VIEW]["model_id"]: model}, "version_major": 2, "version_minor": 0}}
    page = site.export(nb, "3. A lesson")
    assert '<iframe class="rb-static-debugger"' in page
    assert "rb-forward" in page and "rb-status" in page  # inside the escaped srcdoc
    assert WIDGET_VIEW not in page
    assert "<title>3. A lesson</title>" in page


def test_the_index_lists_the_lessons_in_order() -> None:
    lessons = [site.Lesson(Path("01_tour.ipynb"), "1. A tour", "Lesson 1: ten minutes.", "01_tour.html"),
               site.Lesson(Path("02_x.ipynb"), "2. <Reversible>", "", "02_x.html")]
    page = site.index_html(lessons)
    first = page.index('href="01_tour.html">1. A tour</a>')
    assert first < page.index('href="02_x.html">2. &lt;Reversible&gt;</a>')
    assert "Lesson 1: ten minutes." in page


def test_links_point_at_the_pages_of_the_site() -> None:
    """A lesson's links to other lessons and to the docs go to their HTML pages, anchors kept;
    the docs' headings get GitHub's anchors, so those links still land."""
    md = ("See [lesson 2](02_reversible_programming.ipynb), [the rules](../docs/language.md#11-errors), "
          "[the code](../revbench/lang) and [a site](https://example.org/a.md).")
    assert site.site_links(md) == (
        "See [lesson 2](02_reversible_programming.html), [the rules](docs/language.html#11-errors), "
        "[the code](../revbench/lang) and [a site](https://example.org/a.md).")
    assert site.slug("7. The stepping debugger: <code>--debug</code>") == "7-the-stepping-debugger---debug"
    page = site.doc_page("# AD\n\n## 11. Errors\n\nSee [the tour](../notebooks/01_tour.ipynb) "
                         "and [the language](language.md#2-types).\n", "AD")
    assert '<h2 id="11-errors">11. Errors</h2>' in page
    assert 'href="../01_tour.html"' in page and 'href="language.html#2-types"' in page


def test_make_site_builds_into_an_ignored_folder() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "\nsite:" in makefile and "-m revbench.course.site" in makefile
    assert "/site/" in (ROOT / ".gitignore").read_text().splitlines()


def _chromium() -> str | None:
    if os.access("/usr/bin/chromium", os.X_OK):
        return "/usr/bin/chromium"
    return shutil.which("chromium")


@pytest.mark.slow
def test_the_tour_page_steps_in_a_browser(tmp_path: Path) -> None:
    """``python -m revbench.course.site --only 01_tour``: the page opens in chromium without
    a kernel or the network, shows one static debugger per debugger cell, and the forward
    button inside a debugger's iframe moves it on a step."""
    if _chromium() is None:
        pytest.skip("no chromium (/usr/bin/chromium or `chromium` on PATH): apt-get install chromium")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    out = tmp_path / "site"
    env = {**os.environ, "JUPYTER_PREFER_ENV_PATH": "1"}
    built = subprocess.run([sys.executable, "-m", "revbench.course.site", str(out), "--only", "01_tour"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert built.returncode == 0, built.stderr[-4000:]
    assert 'href="01_tour.html"' in (out / "index.html").read_text()
    tour = nbformat.read(ROOT / "notebooks" / "01_tour.ipynb", as_version=4)
    debuggers = sum(1 for c in tour.cells if c.cell_type == "code"
                    and ("--debug" in c.source.split("\n", 1)[0].split() or "revbench.debug(" in c.source))
    assert debuggers, "the tour shows the debugger"
    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"]
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), headless=True, args=args)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            # the page must work offline: nbconvert's CDN scripts (MathJax, require.js) are cut off
            page.route("**/*", lambda route: route.abort() if route.request.url.startswith("http")
                       else route.continue_())
            hrefs = re.findall(r'href="([^"#]+)', (out / "01_tour.html").read_text())
            stale = [h for h in hrefs if h.endswith((".ipynb", ".md")) and "://" not in h]
            assert not stale, f"links the site does not serve: {stale}"
            docs = [h for h in hrefs if h.startswith("docs/")]
            assert docs and all((out / h).is_file() for h in docs), docs
            page.goto((out / "01_tour.html").as_uri(), wait_until="domcontentloaded")
            frames = page.locator("iframe.rb-static-debugger")
            frames.first.wait_for(state="attached", timeout=30_000)
            assert frames.count() == debuggers
            frames.first.scroll_into_view_if_needed()
            debugger = page.frame_locator("iframe.rb-static-debugger").first
            status = debugger.locator(".rb-status")
            sync_api.expect(status).to_contain_text("step 1 /", timeout=30_000)
            before = status.inner_text()
            debugger.locator("button.rb-forward").click()
            sync_api.expect(status).to_contain_text("step 2 /", timeout=10_000)
            assert status.inner_text() != before
            debugger.locator("button.rb-back").click()
            sync_api.expect(status).to_contain_text("step 1 /", timeout=10_000)
            # each frame is sized to its debugger (by message: a page opened from disk has
            # no origin its frames share), not left at its estimated height
            page.wait_for_timeout(500)
            for k in range(frames.count()):
                frame = frames.nth(k)
                frame.scroll_into_view_if_needed()
                inner = page.frame_locator("iframe.rb-static-debugger").nth(k).locator(".rb-debugger")
                shown = inner.evaluate("e => e.getBoundingClientRect().bottom + window.scrollY")
                height = frame.evaluate("e => e.getBoundingClientRect().height")
                assert shown <= height <= shown + 40, (k, shown, height)
        finally:
            browser.close()
