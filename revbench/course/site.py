"""The course as a static website: every lesson executed, then exported to HTML.

Run it from the repository's root (``make site`` does)::

    python -m revbench.course.site [OUTDIR] [--source notebooks] [--only 01_tour ...]

Each lesson notebook (``notebooks/NN_*.ipynb``) is executed top to bottom with nbclient on
a fresh ``python3`` kernel, from its own folder (as JupyterLab and Binder run it), with
``REVBENCH_STATIC_DEBUGGER=1`` in the kernel's environment: a debugger widget then also
carries its static page as ``text/html`` (an ``<iframe class="rb-static-debugger">`` that
steps without a kernel; see :mod:`revbench.jupyter.debugger`).  Before the export, every
output that has another representation drops its widget view, so the page shows that
``text/html`` (or a progress bar's text) instead of a widget that would need a kernel, and
the notebook's widget state is dropped (no widget manager is loaded from a CDN).  nbconvert's
``HTMLExporter`` then writes ``OUTDIR/NN_name.html`` per lesson (plots inline), the pages of
``docs/`` go to ``OUTDIR/docs/`` as HTML (the lessons link to them), and ``OUTDIR/index.html``
lists the lessons with their titles and subtitles.

The site works offline, opened from disk: no page loads anything from the network.  The
maths of the lessons (``$T$``, ``$$ ... $$``) is typeset at build time, as MathML, by
`latex2mathml <https://pypi.org/project/latex2mathml/>`_ (see :func:`tex_to_mathml`), and
the ``<script>`` tags nbconvert's template points at a CDN (MathJax, require.js, mermaid)
are left out; a page that would still load a remote script, style sheet, image or frame
stops the build (:func:`remote_assets`).

Why execute instead of exporting the committed notebooks: they are committed without
outputs (``tests/test_notebooks.py`` checks it), so the site is where students see the
results -- and building it is one more check that every lesson runs.  A cell that fails
stops the build with the lesson, the cell and the error.
"""

from __future__ import annotations

import argparse
import copy
import functools
import html
import os
import re
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
#: the environment variable that makes a debugger widget carry its static page
STATIC_ENV = "REVBENCH_STATIC_DEBUGGER"
#: a lesson's file name: two digits, an underscore, a name (``01_tour.ipynb``)
LESSON_NAME = re.compile(r"^\d\d_[\w-]+\.ipynb$")
#: seconds one cell may run (the first cells pay for the kernel's start and cold compilations)
CELL_TIMEOUT_S = 600
#: a markdown link to a lesson notebook, from a lesson (``02_x.ipynb``) or from the docs
#: (``../notebooks/02_x.ipynb``); and to a page of the docs, from a lesson (``../docs/ad.md``)
LESSON_LINK = re.compile(r"\]\((?:\.\./notebooks/)?(\d\d_[\w-]+)\.ipynb(#[^)\s]*)?\)")
DOCS_LINK = re.compile(r"\]\(\.\./docs/([\w-]+)\.md(#[^)\s]*)?\)")
#: a markdown link from one page of the docs to another (``ad.md#1-grad``)
SIBLING_DOC_LINK = re.compile(r"\]\(([\w-]+)\.md(#[^)\s]*)?\)")
#: maths in a line of markdown: ``$$...$$`` or ``$...$`` (one capture group, for re.split)
MATH = re.compile(r"(\$\$.+?\$\$|(?<![\\$])\$[^$]+?(?<![\\$])\$)")
#: a markdown link (its text kept), emphasis marks (``*``, ``**``, ``_`` around words)
LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
EMPHASIS = re.compile(r"\*+|(?<!\w)_+|_+(?!\w)")
#: a lesson heading's number: ``3. Title``, ``Lesson 3 — Title``, ``Lesson 3: Title``
NUMBERED_TITLE = re.compile(r"^(?:lesson\s+(\d+)\s*[.:)\u2014\u2013-]?|(\d+)\s*[.:)\u2014\u2013-])\s*(.+)$",
                            re.IGNORECASE)
#: where one sentence ends and the next begins
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(])")
#: what latex2mathml leaves of a command it does not know: ``<mi>\foo</mi>``
UNKNOWN_TEX = re.compile(r">(\\[A-Za-z]+)<")
#: a resource a page would load from the network: a script, style sheet, image, frame or
#: module by an absolute URL (a link to follow, ``<a href="https://...">``, is fine)
REMOTE_ASSET = re.compile(
    r"<(?:script|link|img|iframe|source|video|audio|embed)\b[^>]*?\s(?:src|href)\s*=\s*[\"']?((?:https?:)?//[^\"'\s>]+)"
    r"|\bimport\s*\(?\s*[\"']((?:https?:)?//[^\"']+)"
    r"|@import\s+(?:url\()?[\"']?((?:https?:)?//[^\"')\s]+)",
    re.IGNORECASE)


class SiteError(RuntimeError):
    """A lesson could not be built (a cell failed, or a lesson is missing)."""


@dataclass
class Lesson:
    """One lesson of the site: where it came from, what it is called, where it went."""

    source: Path
    title: str
    subtitle: str
    html_name: str
    seconds: float = 0.0


def find_lessons(source: Path, only: Sequence[str] = ()) -> list[Path]:
    """The lesson notebooks in ``source`` (``NN_name.ipynb``, in order), or the ones named
    in ``only`` (by stem, ``01_tour``, or file name)."""
    lessons = sorted(p for p in source.glob("*.ipynb") if LESSON_NAME.match(p.name))
    if not only:
        if not lessons:
            raise SiteError(f"no lesson notebooks (NN_name.ipynb) in {source}")
        return lessons
    by_stem = {p.stem: p for p in lessons}
    chosen = []
    for name in only:
        stem = Path(name).name.removesuffix(".ipynb")
        if stem not in by_stem:
            raise SiteError(f"no lesson {name!r} in {source}; the lessons are: {', '.join(by_stem)}")
        chosen.append(by_stem[stem])
    return chosen


def _text(source: Any) -> str:
    return "".join(source) if isinstance(source, list) else str(source)


def _plain(markdown: str) -> str:
    """One line of markdown as plain text: emphasis, code marks and link targets dropped;
    maths (``$...$``) kept as it is, for :func:`inline_html` to typeset."""
    parts = MATH.split(" ".join(markdown.split()))
    for k in range(0, len(parts), 2):  # the text between the maths
        text = LINK.sub(r"\1", parts[k])
        parts[k] = EMPHASIS.sub("", text.replace("`", ""))
    return "".join(parts).strip()


def lesson_title(heading: str, stem: str = "") -> str:
    """A lesson's title as the index shows every lesson's: ``N. Title``, whether its heading
    reads ``# 3. Title``, ``# Lesson 3 — Title`` or just ``# Title`` (the number then from
    the file name, ``03_x``); no trailing colon."""
    text = _plain(heading).rstrip(" :")
    m = NUMBERED_TITLE.match(text)
    if m:
        return f"{int(m[1] or m[2])}. {m[3]}"
    number = re.match(r"(\d\d)_", stem)
    return f"{int(number[1])}. {text}" if number else text


def lesson_subtitle(paragraph: str) -> str:
    """The index's line under a lesson's title, from the lesson's first paragraph: at most
    its first two sentences, without the *Lesson N of the course* that the title already
    says, and without a last sentence that ends in a colon (it introduces a list the index
    does not show)."""
    text = re.sub(r"^Lesson \d+ of the (?:[\w-]+ )?course\s*[,:;]?\s*", "", _plain(paragraph),
                  flags=re.IGNORECASE)
    sentences = SENTENCE_END.split(text)[:2]
    while len(sentences) > 1 and sentences[-1].endswith(":"):
        sentences.pop()
    text = " ".join(sentences)
    if text.endswith(":"):
        text = text.rstrip(" :") + "."
    return text[:1].upper() + text[1:]


def describe(nb: Any, fallback: str) -> tuple[str, str]:
    """The lesson's title (its first ``# heading``, see :func:`lesson_title`) and subtitle
    (from the first paragraph after the heading, usually the italic *Lesson N of the
    course: ...* line, see :func:`lesson_subtitle`), as plain text with maths as ``$...$``.
    ``fallback`` is the notebook's stem (``03_x``): the title when there is no heading."""
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        lines = _text(cell.source).splitlines()
        for i, line in enumerate(lines):
            if line.startswith("# "):
                rest = "\n".join(lines[i + 1:]).strip()
                first = rest.split("\n\n", 1)[0]
                return lesson_title(line[2:], fallback), lesson_subtitle(first)
    return fallback, ""


def site_links(markdown: str, lesson_prefix: str = "", docs_prefix: str = "docs/") -> str:
    """Links as the site lays pages out: a lesson notebook's link goes to its page
    (``02_x.ipynb`` -> ``02_x.html``), a link to the docs to their HTML page
    (``../docs/ad.md#frag`` -> ``docs/ad.html#frag``)."""
    markdown = LESSON_LINK.sub(lambda m: f"]({lesson_prefix}{m[1]}.html{m[2] or ''})", markdown)
    return DOCS_LINK.sub(lambda m: f"]({docs_prefix}{m[1]}.html{m[2] or ''})", markdown)


def for_static_page(nb: Any) -> Any:
    """A copy of the executed notebook ready for a page without a kernel: every output that
    has another representation loses its widget view (the debugger then shows its static
    ``text/html`` page; a progress bar its text), and the widget state goes, so the exported
    page loads no widget manager.  Links to other lessons and to the docs point at their
    pages on the site."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = site_links(_text(cell.source))
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data")
            if data and WIDGET_VIEW in data and len(data) > 1:
                del data[WIDGET_VIEW]
    nb.metadata.pop("widgets", None)
    return nb


def execute(path: Path, timeout: int = CELL_TIMEOUT_S) -> Any:
    """``path`` executed top to bottom on a fresh ``python3`` kernel started in its folder,
    with ``REVBENCH_STATIC_DEBUGGER=1`` (and ``REVBENCH_TIERED=0``) in the kernel's environment."""
    import nbclient
    import nbformat

    nb = nbformat.read(path, as_version=4)
    env = dict(os.environ)
    env[STATIC_ENV] = "1"
    # each call compiled before it runs, as before tiering: the page shows no "compiling in
    # the background" lines, and a cell that times a call times the compiled code
    env.setdefault("REVBENCH_TIERED", "0")
    env.setdefault("JUPYTER_PREFER_ENV_PATH", "1")  # this environment's python3 kernel
    os.environ.setdefault("JUPYTER_PREFER_ENV_PATH", "1")  # ... found by this process
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=timeout,
                                     resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute(env=env)
    except nbclient.exceptions.CellExecutionError as e:
        plain = re.sub(r"\x1b\[[0-9;]*m", "", str(e))  # IPython colours its tracebacks
        raise SiteError(f"{path.name}: a cell failed, the site is not built:\n{plain}") from e
    return nb


def tex_to_mathml(tex: str, display: bool = False) -> str:
    """The TeX of one formula as a MathML ``<math>`` element, which browsers typeset
    natively (MathML Core: Chromium since 109, Firefox, Safari), with no script and no font
    to fetch.

    Why latex2mathml, at build time: nbconvert's pages load MathJax from a CDN when they
    are opened, so offline the maths stayed raw ``$T$``.  Bundling MathJax instead would add
    megabytes of scripts and fonts to the site (and a copy to keep in step with the
    template's configuration); latex2mathml is a small, maintained, pure-Python converter
    that covers the TeX the lessons use, and the page then needs nothing at all.  A command
    it does not know would come out as its raw name, so it stops the build instead."""
    from latex2mathml.converter import convert

    try:
        mathml = convert(tex.strip(), display="block" if display else "inline")
    except Exception as e:  # latex2mathml's errors name the construct, not the formula
        raise SiteError(f"cannot typeset the TeX {tex.strip()!r}: {type(e).__name__}: {e}") from e
    unknown = UNKNOWN_TEX.search(mathml)
    if unknown:
        raise SiteError(f"cannot typeset the TeX {tex.strip()!r}: latex2mathml does not know {unknown[1]}")
    return mathml


def inline_html(text: str) -> str:
    """Plain text with ``$...$`` maths (a title, a subtitle) as HTML: escaped, maths as MathML."""
    parts = MATH.split(text)
    return "".join(tex_to_mathml(part.strip("$"), display=part.startswith("$$")) if k % 2
                   else html.escape(part) for k, part in enumerate(parts))


def remote_assets(page: str) -> list[str]:
    """The URLs of what ``page`` would load from the network when it is opened (scripts,
    style sheets, images, frames, imported modules); links to follow are not counted."""
    return [next(url for url in m.groups() if url) for m in REMOTE_ASSET.finditer(page)]


#: nbconvert's lab template without what it loads from a CDN: require.js (nothing on the
#: pages uses it: the widget manager that did is left out, see :func:`for_static_page`),
#: MathJax (the maths is MathML already), mermaid (no lesson draws a diagram) and the
#: widget manager; LaTeX outputs (``text/latex``) typeset like the markdown's maths
SITE_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{% block data_latex scoped %}
<div class="jp-RenderedLatex jp-OutputArea-output {{ extra_class }}" data-mime-type="text/latex">
{{ output.data['text/latex'] | markdown2html }}
</div>
{%- endblock data_latex %}
"""


@functools.cache
def _exporter_class() -> type:
    """nbconvert's ``HTMLExporter`` with :data:`SITE_TEMPLATE` and the maths of markdown
    (cells and ``text/markdown`` outputs) as MathML.  Made on first use: nbconvert is only
    needed to build the site."""
    import jinja2
    from nbconvert import HTMLExporter
    from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

    class MathMLRenderer(IPythonRenderer):  # type: ignore[misc]
        """nbconvert's markdown renderer, its maths typeset by :func:`tex_to_mathml`
        instead of left as ``$...$`` text for MathJax."""

        def block_math(self, body: str) -> str:
            return tex_to_mathml(body, display=True)

        def inline_math(self, body: str) -> str:
            return tex_to_mathml(body)

        def latex_environment(self, name: str, body: str) -> str:
            return tex_to_mathml(f"\\begin{{{name}}}{body}\\end{{{name}}}", display=True)

    class SiteExporter(HTMLExporter):  # type: ignore[misc]
        def __init__(self, **kw: Any) -> None:
            super().__init__(template_name="lab", template_file="revbench_site.html.j2",
                             extra_loaders=[jinja2.DictLoader({"revbench_site.html.j2": SITE_TEMPLATE})],
                             **kw)

        @jinja2.pass_context  # nbconvert's filters get the template's context so
        def markdown2html(self, context: Any, source: str) -> str:
            cell = context.get("cell", {})
            renderer = MathMLRenderer(
                escape=False, attachments=cell.get("attachments", {}), embed_images=self.embed_images,
                path=context.get("resources", {}).get("metadata", {}).get("path", ""),
                anchor_link_text=self.anchor_link_text, exclude_anchor_links=self.exclude_anchor_links,
                **getattr(self, "lexer_options", {}))  # nbconvert >= 7.17
            return MarkdownWithMath(renderer=renderer).render(source)

    return SiteExporter


def export(nb: Any, title: str) -> str:
    """The executed notebook as one HTML page (JupyterLab's look, images inline) that needs
    no network: maths as MathML, no script from a CDN (see :data:`SITE_TEMPLATE`)."""
    exporter = _exporter_class()(embed_images=True)
    body, _ = exporter.from_notebook_node(for_static_page(nb), resources={"metadata": {"name": title}})
    return body


INDEX_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 780px;
  margin: 40px auto; padding: 0 16px; color: #1f2328; line-height: 1.5; }
h1 { margin-bottom: 4px; }
.rb-site-intro { color: #57606a; margin-top: 0; }
ol.rb-lessons { list-style: none; padding-left: 0; }
ol.rb-lessons li { margin: 14px 0; }
ol.rb-lessons a { font-size: 1.15em; font-weight: 600; color: #0969da; text-decoration: none; }
ol.rb-lessons a:hover { text-decoration: underline; }
.rb-subtitle { display: block; color: #57606a; }
footer { margin-top: 32px; font-size: 0.9em; color: #6e7781; }
"""


def index_html(lessons: Sequence[Lesson], docs: Sequence[tuple[str, str]] = ()) -> str:
    """The site's front page: the lessons in order, each a link with its subtitle (their
    numbers are in their titles, see :func:`lesson_title`, so the list shows none of its
    own); then the reference pages of the docs."""
    reference = ""
    if docs:
        links = "\n".join(f'<li><a href="{html.escape(href)}">{html.escape(title)}</a></li>'
                          for href, title in docs)
        reference = f'<h2>Reference</h2>\n<ul class="rb-docs">\n{links}\n</ul>'
    items = "\n".join(
        f'<li><a class="rb-lesson" href="{html.escape(lesson.html_name)}">{inline_html(lesson.title)}</a>'
        f'<span class="rb-subtitle">{inline_html(lesson.subtitle)}</span></li>'
        for lesson in lessons)
    from revbench._version import __version__

    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>revbench course</title>
<style>{INDEX_CSS}</style></head>
<body>
<h1>The revbench course</h1>
<p class="rb-site-intro">Reversible programming and automatic differentiation by uncomputation, in
{len(lessons)} lessons. Each page is a lesson notebook run top to bottom; its debuggers step
without a kernel (use the buttons). To edit and run the code, open the notebooks in JupyterLab
(<code>make lab</code>) or on Binder.</p>
<ol class="rb-lessons">
{items}
</ol>
{reference}
<footer>Built with revbench {html.escape(__version__)}.</footer>
</body></html>
"""


def slug(heading: str) -> str:
    """GitHub's anchor for a heading (``7. The stepping debugger: `--debug` `` ->
    ``7-the-stepping-debugger---debug``), so the lessons' links into the docs still land."""
    text = html.unescape(re.sub(r"<[^>]+>", "", heading)).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def doc_page(markdown: str, title: str) -> str:
    """One page of ``docs/`` as HTML: links to other docs pages and to the lessons rewritten,
    headings given GitHub's anchors."""
    import mistune  # nbconvert's markdown renderer

    markdown = SIBLING_DOC_LINK.sub(lambda m: f"]({m[1]}.html{m[2] or ''})", markdown)
    body = mistune.html(site_links(markdown, lesson_prefix="../", docs_prefix=""))
    body = re.sub(r"<h([1-6])>(.*?)</h\1>", lambda m: f'<h{m[1]} id="{slug(m[2])}">{m[2]}</h{m[1]}>',
                  body, flags=re.DOTALL)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<style>{INDEX_CSS}
pre {{ background: #f6f8fa; padding: 8px 12px; overflow-x: auto; border-radius: 6px; }}
code {{ font-size: 0.92em; }} table {{ border-collapse: collapse; }}
th, td {{ border: 1px solid #d0d7de; padding: 3px 8px; }} img {{ max-width: 100%; }}</style></head>
<body><p><a href="../index.html">&larr; the course</a></p>
{body}
</body></html>
"""


def export_docs(docs: Path, outdir: Path) -> list[tuple[str, str]]:
    """``docs/*.md`` as HTML pages in ``outdir/docs`` (their images copied beside them), so
    the lessons' links into the docs work on the site; returns (page, title) pairs."""
    if not docs.is_dir():
        return []
    target = outdir / "docs"
    target.mkdir(parents=True, exist_ok=True)
    pages = []
    for path in sorted(docs.iterdir()):
        if path.suffix == ".md":
            text = path.read_text(encoding="utf-8")
            first = next((ln[2:].strip() for ln in text.splitlines() if ln.startswith("# ")), path.stem)
            first = first.replace("`", "")
            write_page(target / f"{path.stem}.html", doc_page(text, first))
            pages.append((f"docs/{path.stem}.html", first))
        elif path.is_file():
            shutil.copy2(path, target / path.name)
    return pages


def write_page(path: Path, page: str) -> None:
    """Write one page of the site, which must load nothing from the network
    (:func:`remote_assets`): opened offline, it would be missing a piece."""
    remote = remote_assets(page)
    if remote:
        raise SiteError(f"{path.name} would load from the network, so it would break offline: "
                        + ", ".join(remote))
    path.write_text(page, encoding="utf-8")


def build(outdir: Path, source: Path, only: Sequence[str] = (), timeout: int = CELL_TIMEOUT_S,
          log: Any = sys.stderr) -> list[Lesson]:
    """Execute and export each lesson of ``source`` into ``outdir``, then write the index.

    Returns the lessons built (with their execution times).  Raises :class:`SiteError` when
    a lesson is missing or one of its cells fails."""
    paths = find_lessons(source, only)
    outdir.mkdir(parents=True, exist_ok=True)
    lessons = []
    for path in paths:
        print(f"building {path.name} ...", file=log, flush=True)
        t0 = time.perf_counter()
        nb = execute(path, timeout)
        seconds = time.perf_counter() - t0
        title, subtitle = describe(nb, path.stem)
        lesson = Lesson(path, title, subtitle, f"{path.stem}.html", seconds)
        write_page(outdir / lesson.html_name, export(nb, title))
        print(f"  {outdir / lesson.html_name}  ({seconds:.1f} s to run)", file=log, flush=True)
        lessons.append(lesson)
    docs = export_docs(source.resolve().parent / "docs", outdir)
    write_page(outdir / "index.html", index_html(lessons, docs))
    return lessons


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m revbench.course.site",
        description="Build the course website: each lesson notebook executed (debuggers as "
                    "static pages that step without a kernel) and exported to HTML, plus an index.")
    parser.add_argument("outdir", nargs="?", default="site", type=Path,
                        help="where the pages go (default: site/)")
    parser.add_argument("--source", default="notebooks", type=Path,
                        help="the folder of the lesson notebooks (default: notebooks/)")
    parser.add_argument("--only", nargs="+", default=(), metavar="LESSON",
                        help="build only these lessons (e.g. 01_tour); the index lists just them")
    parser.add_argument("--timeout", type=int, default=CELL_TIMEOUT_S,
                        help=f"seconds one cell may run (default {CELL_TIMEOUT_S})")
    args = parser.parse_args(argv)
    try:
        lessons = build(args.outdir, args.source, args.only, args.timeout)
    except SiteError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{len(lessons)} lessons in {args.outdir}/ -- open {args.outdir / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
