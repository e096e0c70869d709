"""The course website (``make site``: ``python -m revbench.course.site``).

Quick tests check the pieces on synthetic notebooks: which outputs lose their widget view
before the export, the lesson's title and subtitle, the choice of lessons, and that an
exported page carries the debugger's static iframe and no widget.  The slow test builds the
site for the tour (executed for real, with ``REVBENCH_STATIC_DEBUGGER=1``), opens the page
in Debian's chromium (never a downloaded browser; the CDN scripts nbconvert links are
blocked: the debugger must not need them) and steps a debugger inside its iframe.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
    assert (title, subtitle) == ("3. A lesson", "Things.")
    assert site.describe(nbformat.v4.new_notebook(), "03_x") == ("03_x", "")


@pytest.mark.parametrize("heading, stem, title", [
    ("3. A lesson", "03_x", "3. A lesson"),
    ("Lesson 2 — Reversible programming", "02_x", "2. Reversible programming"),
    ("Lesson 4: The `debugger`:", "04_x", "4. The debugger"),
    ("The *space\u2013time* knob: reverse", "05_knob", "5. The space\u2013time knob: reverse"),
    ("10 minutes of revbench", "", "10 minutes of revbench"),
])
def test_lesson_titles_read_alike_on_the_index(heading: str, stem: str, title: str) -> None:
    """Every lesson is ``N. Title`` on the index, however its heading numbers it; no
    markdown marks and no colon left dangling at the end."""
    assert site.lesson_title(heading, stem) == title


@pytest.mark.parametrize("paragraph, subtitle", [
    ("*Lesson 1 of the revbench course: the whole tool in ten minutes.*", "The whole tool in ten minutes."),
    ("*Lesson 4 of the revbench course, about 30 minutes. Before it: lessons 2\nand 3.*",
     "About 30 minutes. Before it: lessons 2 and 3."),
    ("*About 35 minutes.* Steps can be undone. This lesson builds programs step by step:",
     "About 35 minutes. Steps can be undone."),
    ("A loop of $T$ steps needs its states, **last first**. There are three ways:",
     "A loop of $T$ steps needs its states, last first."),
    ("There are three ways to get them back:", "There are three ways to get them back."),
    ("Uses `q_k` and [the docs](../docs/ad.md) on $q_{kj}$.", "Uses q_k and the docs on $q_{kj}$."),
])
def test_lesson_subtitles_have_no_dangling_colon(paragraph: str, subtitle: str) -> None:
    """The line under a title: the first sentences of the lesson's first paragraph, without
    the *Lesson N of the course* the title already says, nor a last sentence that ends in a
    colon (its list is not on the index); maths kept for the index to typeset."""
    assert site.lesson_subtitle(paragraph) == subtitle


def test_the_lessons_of_the_course_read_alike_on_the_index() -> None:
    """The six lessons' titles are all ``N. Title``, numbered in order, and no title or
    subtitle ends in a colon."""
    described = [site.describe(nbformat.read(path, as_version=4), path.stem)
                 for path in site.find_lessons(ROOT / "notebooks")]
    assert [t.split(". ", 1)[0] for t, _ in described] == [str(k + 1) for k in range(len(described))]
    for title, subtitle in described:
        assert re.fullmatch(r"\d+\. \S.*[^:]", title), title
        assert subtitle and subtitle[0].isupper() and subtitle.endswith("."), (title, subtitle)
        assert not re.search(r"[*`]|\]\(", title + subtitle), (title, subtitle)


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
    lessons = [site.Lesson(Path("01_tour.ipynb"), "1. A tour", "Ten minutes.", "01_tour.html"),
               site.Lesson(Path("02_x.ipynb"), "2. <Reversible>", "A loop of $T$ steps & more.", "02_x.html")]
    page = site.index_html(lessons)
    first = page.index('href="01_tour.html">1. A tour</a>')
    assert first < page.index('href="02_x.html">2. &lt;Reversible&gt;</a>')
    assert "Ten minutes." in page
    assert "A loop of <math" in page and "<mi>T</mi>" in page and "steps &amp; more." in page
    assert "$" not in page, "the subtitles' maths is typeset"


# ------------------------------------------------------------------ offline: maths, no CDN

MATHS = ("# 5. Maths\n\nA loop of $T$ steps keeps $\\log T$ states, as in $\\tfrac{1}{2} x^2$.\n\n"
         "$$\n\\sum_i \\operatorname{logsumexp}_k\\Big(\\alpha_k - \\tfrac12 \\lVert Q_k x_i\\rVert^2\\Big)\n"
         "$$\n\n"
         "Shell variables stay code: `$HOME`.")
#: the formulas of MATHS and of its outputs, each one ``<math>`` on the page
MATHS_FORMULAS = 6


def _maths_notebook() -> object:
    """A lesson with maths in markdown (inline and display), in a LaTeX output and in a
    markdown output, as nbclient leaves it after running."""
    new_output = nbformat.v4.new_output
    latex = new_output("display_data", data={"text/latex": "$$\\frac{a}{b}$$", "text/plain": "a/b"})
    markdown = new_output("display_data", data={"text/markdown": "so $y^2$", "text/plain": "y"})
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(MATHS),
                nbformat.v4.new_code_cell("x", outputs=[latex, markdown])]
    return nb


def _local_assets(page: str) -> list[str]:
    """What ``page`` loads by a relative URL (scripts, style sheets, images, frames)."""
    found = re.findall(r"<(?:script|link|img|iframe)\b[^>]*?\s(?:src|href)=[\"']([^\"'#]+)", page)
    return [url for url in found if not url.startswith(("data:", "about:"))]


def _maths_site(tmp_path: Path) -> Path:
    """A lesson page with maths, an index and the docs' pages, written as the site writes them."""
    pytest.importorskip("nbconvert", reason="nbconvert is not installed: pip install -e '.[test]'")
    nb = _maths_notebook()
    title, subtitle = site.describe(nb, "05_maths")
    site.write_page(tmp_path / "05_maths.html", site.export(nb, title))
    docs = site.export_docs(ROOT / "docs", tmp_path)
    lesson = site.Lesson(Path("05_maths.ipynb"), title, subtitle, "05_maths.html")
    site.write_page(tmp_path / "index.html", site.index_html([lesson], docs))
    return tmp_path


def test_the_pages_load_nothing_from_the_network(tmp_path: Path) -> None:
    """No page of the site loads a script, style sheet or font from a CDN (nbconvert's
    template points MathJax, require.js and mermaid at one): the maths is MathML already,
    and whatever a page loads by a relative URL is in the output folder."""
    out = _maths_site(tmp_path)
    pages = sorted(out.rglob("*.html"))
    assert len(pages) > 3
    for path in pages:
        page = path.read_text(encoding="utf-8")
        assert site.remote_assets(page) == [], path.name
        tags = " ".join(re.findall(r"<(?:script|link|img|iframe)\b[^>]*>", page, re.IGNORECASE))
        # (in the tags that load something: the prose may name a CDN, as teaching.md does)
        assert not re.search(r"cdnjs|jsdelivr|unpkg|require(?:\.min)?\.js", tags, re.IGNORECASE), path.name
        missing = [url for url in _local_assets(page) if not (path.parent / url).is_file()]
        assert not missing, (path.name, missing)
    lesson = (out / "05_maths.html").read_text(encoding="utf-8")
    assert lesson.count("<math") == MATHS_FORMULAS
    assert 'display="block"' in lesson and "<mfrac>" in lesson and "<mi>T</mi>" in lesson
    assert "$T$" not in lesson and "<code>$HOME</code>" in lesson, "maths typeset, code left alone"


def test_a_page_that_would_need_the_network_stops_the_build(tmp_path: Path) -> None:
    page = ('<html><head><script src="https://cdn.example.org/x.js"></script>'
            '<link rel="stylesheet" href="//fonts.example.org/f.css"></head>'
            '<body><a href="https://example.org/">a link is fine</a><img src="local.png">'
            '<script type="module">await import("https://cdn.example.org/m.mjs")</script></body></html>')
    assert site.remote_assets(page) == ["https://cdn.example.org/x.js", "//fonts.example.org/f.css",
                                        "https://cdn.example.org/m.mjs"]
    with pytest.raises(site.SiteError, match=r"x\.js.*f\.css"):
        site.write_page(tmp_path / "p.html", page)
    assert not (tmp_path / "p.html").exists()


def test_maths_the_converter_does_not_know_stops_the_build() -> None:
    """A command latex2mathml does not know would show as its raw name: the build says so."""
    pytest.importorskip("latex2mathml", reason="latex2mathml is not installed: pip install -e '.[site]'")
    assert site.tex_to_mathml("x^2").startswith("<math")
    with pytest.raises(site.SiteError, match=r"does not know \\frobnicate"):
        site.tex_to_mathml(r"\frobnicate x")


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


@contextlib.contextmanager
def _offline_page() -> Iterator[tuple[Any, Any, list[str]]]:
    """(playwright's sync API, a page, the URLs it tried to fetch from the network) in
    Debian's chromium (never a downloaded browser), with the network off: the context is
    offline, and any request that is not for a file is recorded and aborted."""
    if _chromium() is None:
        pytest.skip("no chromium (/usr/bin/chromium or `chromium` on PATH): apt-get install chromium")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"]
    remote: list[str] = []

    def local_only(route: Any) -> None:
        url = route.request.url
        if url.startswith(("file:", "data:", "about:", "blob:")):
            route.continue_()
        else:
            remote.append(url)
            route.abort()

    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), headless=True, args=args)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 1000})
            context.set_offline(True)
            context.route("**/*", local_only)
            yield sync_api, context.new_page(), remote
        finally:
            browser.close()


#: each ``<math>`` as chromium lays it out: its CSS display (MathML Core gives ``math``), and
#: the heights of a fraction and of the line around it
TYPESET = """() => [...document.querySelectorAll('math')].map(m => {
  const frac = m.querySelector('mfrac'), line = m.closest('p, div, a, span');
  return {display: getComputedStyle(m).display, text: m.textContent,
          frac: frac ? frac.getBoundingClientRect().height : 0,
          mi: m.querySelector('mi, mn') ? m.querySelector('mi, mn').getBoundingClientRect().height : 0,
          width: m.getBoundingClientRect().width};
})"""


def test_the_maths_is_typeset_offline_in_a_browser(tmp_path: Path) -> None:
    """The lesson page and the index opened from disk in chromium with no network: every
    formula is laid out as maths (a fraction stacks its parts, taller than a letter), no
    ``$T$`` is left in the text, and the pages asked the network for nothing."""
    out = _maths_site(tmp_path)
    with _offline_page() as (sync_api, page, remote):
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto((out / "05_maths.html").as_uri(), wait_until="load")
        typeset = page.evaluate(TYPESET)
        assert len(typeset) == MATHS_FORMULAS
        assert all("math" in m["display"] and m["width"] > 0 for m in typeset), typeset
        fractions = [m for m in typeset if m["frac"]]
        assert len(fractions) == 3 and all(m["frac"] > 1.5 * m["mi"] > 0 for m in fractions), fractions
        text = page.locator("main").inner_text()
        assert "$" not in text.replace("$HOME", ""), "no raw TeX left on the page"
        assert "\\log" not in text and "\\sum" not in text
        page.goto((out / "index.html").as_uri(), wait_until="load")
        sync_api.expect(page.locator("a.rb-lesson")).to_have_text("5. Maths")
        subtitle = page.locator(".rb-subtitle").first
        assert subtitle.locator("math").count() == 3 and "$" not in subtitle.inner_text()
        page.goto((out / "docs" / "ad.html").as_uri(), wait_until="load")
        assert page.locator("h1").count() == 1
        assert remote == [] and errors == []


@pytest.mark.slow
def test_the_tour_page_steps_in_a_browser(tmp_path: Path) -> None:
    """``python -m revbench.course.site --only 01_tour``: the page opens in chromium without
    a kernel or the network, shows one static debugger per debugger cell, and the forward
    button inside a debugger's iframe moves it on a step."""
    if _chromium() is None:
        pytest.skip("no chromium (/usr/bin/chromium or `chromium` on PATH): apt-get install chromium")
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
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
    # the page must work offline: it loads nothing from the network (nbconvert's CDN scripts,
    # MathJax and require.js, are left out) and its maths is typeset all the same
    with _offline_page() as (sync_api, page, remote):
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
        assert page.locator("main math").count() >= 2 and "$dy/dx$" not in page.locator("main").inner_text()
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
        assert remote == [], f"the page asked the network for {remote}"
