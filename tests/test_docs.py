"""The documentation's code examples run, and show the output they really produce.

Every ```python block of a document is run, in order, as one script per document (so a
block may use names defined by the blocks before it).  ``@reversible`` reads a function's
source from its file, so the blocks are written to a real file and run with ``python`` in
a subprocess.  Each line of that script sits at the line it has in the Markdown file:
line numbers in tracebacks and error messages are those of the document.

Markers, as an HTML comment on the line just before a fence:

* ``<!-- docs-test: xfail REASON -->`` before a ```python block: a known bug makes the
  block fail.  It is left out of the document's script and run on its own, after the
  blocks before it, as a strict xfail, so this test reports when the bug is fixed (then
  remove the marker).
* ``<!-- docs-test: output -->`` before a ```text block: the block is output the script
  prints, verbatim, with the script's path written as ``/tmp/demo/example.py``.
* ``<!-- docs-test: syntax -->`` before a ```python block: an example that needs what
  these machines do not have (a SLURM queue): left out of the script, and only compiled.

``python tests/test_docs.py docs/language.md > example.py`` writes a document's script.
"""

from __future__ import annotations

import getpass
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = ("docs/language.md", "docs/architecture.md", "docs/ad.md", "docs/checkpointing.md",
             "docs/experiments.md", "docs/performance.md", "docs/interop.md", "docs/gpu.md",
             "docs/scale.md", "README.md")
#: documents whose examples need optional packages: skipped, saying so, where one is missing
#: (docs/gpu.md runs in Numba's CUDA simulator: conftest.py sets NUMBA_ENABLE_CUDASIM=1)
NEEDS = {"docs/interop.md": ("jax", "torch"), "docs/gpu.md": ("numba_cuda", "jax"),
         "docs/scale.md": ("distributed",)}
#: in the slow suite, which CI runs too: interop.md's examples start JAX and PyTorch (35 s
#: of the quick suite), checkpointing.md's compile twenty seconds of loops
SLOW_DOCUMENTS = ("docs/interop.md", "docs/checkpointing.md")
SHOWN_PATH = "/tmp/demo/example.py"  # how the documents show the script's path
TIMEOUT_S = 900

_FENCE = re.compile(r"^```([\w+-]*)\s*$")
_MARKER = re.compile(r"^<!--\s*docs-test:\s*(\w+)\s*(.*?)\s*-->\s*$")


@dataclass
class Block:
    lang: str
    start: int  # index (0-based) of the first line inside the fence
    lines: list[str]
    marker: str = ""  # "xfail", "output" or ""
    reason: str = ""


def blocks_of(text: str) -> list[Block]:
    """The fenced blocks of a Markdown text, with the docs-test marker before each."""
    out: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        marker = _MARKER.match(lines[i - 1]) if i > 0 else None
        j = i + 1
        while j < len(lines) and lines[j].rstrip() != "```":
            j += 1
        if j == len(lines):
            raise ValueError(f"unclosed code fence at line {i + 1}")
        out.append(Block(m.group(1), i + 1, lines[i + 1:j],
                         marker.group(1) if marker else "", marker.group(2) if marker else ""))
        i = j + 1
    return out


def script_of(text: str, extra: Block | None = None) -> str:
    """The document's python blocks as one script, each line at its line in the document.

    Blocks marked xfail are left out, except ``extra``, which is put in its place.
    """
    n = len(text.splitlines())
    script = [""] * n
    for b in blocks_of(text):
        is_extra = extra is not None and b.start == extra.start
        if b.lang != "python" or b.marker == "syntax" or (b.marker == "xfail" and not is_extra):
            continue
        if extra is not None and b.start > extra.start:
            break
        script[b.start:b.start + len(b.lines)] = b.lines
    return "\n".join(script) + "\n"


def run_script(source: str, name: str) -> subprocess.CompletedProcess:
    """Run ``source`` as ``example.py`` in a folder that is the same from run to run.

    revbench's compile cache is keyed on the generated code, which names the file and
    line each function came from: a stable path lets later runs reuse the compilations.
    """
    folder = Path(tempfile.gettempdir()) / f"revbench-test-docs-{getpass.getuser()}" / name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "example.py"
    path.write_text(source)
    # Numba's cache of the script's own @njit functions (docs/ad.md's driver) is keyed on
    # the script alone, so it would outlive a change of the kernels they call: start afresh
    shutil.rmtree(folder / "__pycache__", ignore_errors=True)
    proc = subprocess.run([sys.executable, str(path)], cwd=folder, capture_output=True,
                          text=True, timeout=TIMEOUT_S)
    proc.stdout = proc.stdout.replace(str(path), SHOWN_PATH)
    proc.stderr = proc.stderr.replace(str(path), SHOWN_PATH)
    return proc


def _slug(doc: str) -> str:
    return re.sub(r"\W", "_", doc)


def _read(doc: str) -> str:
    return (ROOT / doc).read_text()


def _xfail_cases():
    cases = []
    for doc in DOCUMENTS:
        for b in blocks_of(_read(doc)):
            if b.lang == "python" and b.marker == "xfail":
                cases.append(pytest.param(doc, b.start, id=f"{doc}:{b.start}",
                                          marks=pytest.mark.xfail(strict=True, reason=b.reason)))
    return cases or [pytest.param(None, 0, marks=pytest.mark.skip(reason="no known-bug blocks"))]


@pytest.mark.parametrize("doc", [pytest.param(d, marks=pytest.mark.slow) if d in SLOW_DOCUMENTS else d
                                 for d in DOCUMENTS])
def test_examples_run(doc: str) -> None:
    for module in NEEDS.get(doc, ()):
        pytest.importorskip(module, reason=f"{doc}'s examples need {module} "
                                           "(pip install 'revbench[interop]')")
    text = _read(doc)
    blocks = blocks_of(text)
    assert any(b.lang == "python" for b in blocks), f"{doc} has no python examples"
    proc = run_script(script_of(text), _slug(doc))
    assert proc.returncode == 0, (
        f"the examples of {doc} failed (line numbers are the document's):\n"
        f"{proc.stderr[-6000:]}\n--- stdout ---\n{proc.stdout[-2000:]}")
    for b in blocks:
        if b.marker == "output":
            shown = "\n".join(b.lines)
            assert shown in proc.stdout, (
                f"{doc}, line {b.start + 1}: the output shown is not what the examples print.\n"
                f"--- shown ---\n{shown}\n--- printed ---\n{proc.stdout[-4000:]}")


def test_syntax_only_examples_compile() -> None:
    found = 0
    for doc in DOCUMENTS:
        for b in blocks_of(_read(doc)):
            if b.marker == "syntax":
                found += 1
                compile("\n" * b.start + "\n".join(b.lines) + "\n", doc, "exec")
    assert found


@pytest.mark.parametrize(("doc", "start"), _xfail_cases())
def test_known_bug_examples(doc: str, start: int) -> None:
    text = _read(doc)
    block = next(b for b in blocks_of(text) if b.start == start)
    proc = run_script(script_of(text, extra=block), f"{_slug(doc)}-{start + 1}")
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_markers_are_well_placed() -> None:
    for doc in DOCUMENTS:
        for b in blocks_of(_read(doc)):
            if b.marker == "xfail":
                assert b.lang == "python" and b.reason, f"{doc}:{b.start}: xfail needs a reason"
            elif b.marker == "output":
                assert b.lang == "text", f"{doc}:{b.start}: output marks a ```text block"
            elif b.marker == "syntax":
                assert b.lang == "python", f"{doc}:{b.start}: syntax marks a ```python block"
            else:
                assert b.marker == "", f"{doc}:{b.start}: unknown marker {b.marker!r}"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/test_docs.py DOCUMENT.md > example.py")
    sys.stdout.write(script_of(Path(sys.argv[1]).read_text()))
