"""The layers of revbench: a lower layer never imports an upper one, and no module imports
itself back through others.

Every module of the package is parsed with :mod:`ast`; every import counts, wherever it
is written -- at module level, inside a function, under ``if TYPE_CHECKING:`` -- since a
function-level import is a dependency all the same (it only runs later).  Each module
belongs to one layer of :data:`LAYERS` (bottom first, docs/architecture.md §2); the test
fails naming the importing module, the line and the imported module when a module imports
one of a higher layer, when modules import each other in a cycle (within a layer too),
and when a module imports another module's private (``_name``) name.

A new module belongs to the layer of the longest entry of :data:`LAYERS` it falls under
(a package entry covers its submodules); one under none fails the test: add it there.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "revbench"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE

#: the layers, bottom first: (name, the modules and packages in it).  ``revbench`` itself
#: (the public API of ``__init__.py``) stands for that module alone, not its submodules.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("core", ("revbench._version", "revbench.config", "revbench.lang.errors", "revbench.lang.ir",
              "revbench.lang.text", "revbench.lang.pretty", "revbench.lang.markers",
              "revbench.debugging")),  # (the package's __init__ imports nothing)
    ("rules", ("revbench.rules",)),
    ("lang", ("revbench.lang",)),  # the front end: parse, check, types, suggest
    ("transforms", ("revbench.transforms",)),
    ("backends", ("revbench.backends", "revbench.tiering", "revbench.cache")),
    ("compiler", ("revbench.compiler", "revbench.debugging.explain")),
    ("function", ("revbench.function", "revbench.transport")),
    ("sweeps", ("revbench.ad.sweep", "revbench.ad.gpu", "revbench.ad.batch")),
    ("api", ("revbench.ad", "revbench.testing", "revbench.debugging.tracing", "revbench.checkpoint",
             "revbench.lib")),
    ("apps", ("revbench.jupyter", "revbench.interop", "revbench.experiments",
              "revbench.workloads", "revbench.course", "revbench.gradbench")),
    # (the moved modules' old names: one-line shims, kept for one release)
    ("facade", ("revbench", "revbench.demo")),
)

#: private names still imported across modules, with why: (importer, imported module)
PENDING_PRIVATE: Mapping[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Import:
    importer: str
    line: int
    imported: str  # a module of the package
    name: str | None = None  # ``from imported import name`` (None: the module itself)

    def __str__(self) -> str:
        what = self.imported + (f" ({self.name})" if self.name else "")
        return f"{self.importer}, line {self.line}, imports {what}"


# --------------------------------------------------------------------------- #
# Reading the package
# --------------------------------------------------------------------------- #
def module_files(root: Path, package: str = PACKAGE) -> dict[str, Path]:
    """Module name -> file, for every ``.py`` file under ``root`` (a package's
    ``__init__.py`` is the package's name)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(name: str, modules: Iterable[str]) -> str | None:
    """The module of the package that importing ``name`` runs: ``name`` itself, or the
    nearest enclosing one (``revbench.lang`` is a namespace package: no file)."""
    modules = set(modules)
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str, source: str, modules: Iterable[str], is_package: bool = False,
               package: str = PACKAGE) -> list[Import]:
    """Every import of a module of the package in ``source`` (the text of ``module``),
    at any depth: module level, functions, ``if TYPE_CHECKING:``, ``try``, and
    ``importlib.import_module("...")`` with a literal name."""
    modules = set(modules)
    here = module.split(".") if is_package else module.split(".")[:-1]
    out: list[Import] = []

    def add(target: str, line: int, name: str | None = None) -> None:
        if target != package and not target.startswith(package + "."):
            return
        if name is not None and f"{target}.{name}" in modules:  # from pkg import submodule
            target, name = f"{target}.{name}", None
        found = _resolve(target, modules)
        if found is not None and found != module:
            out.append(Import(module, line, found, name))

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                add(target, node.lineno, None if alias.name == "*" else alias.name)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called in ("import_module", "__import__"):
                add(node.args[0].value, node.lineno)
    return out


def package_imports(root: Path = ROOT, package: str = PACKAGE) -> list[Import]:
    files = module_files(root, package)
    out = []
    for module, path in files.items():
        out += imports_of(module, path.read_text(encoding="utf-8"), files,
                          path.name == "__init__.py", package)
    return out


# --------------------------------------------------------------------------- #
# The checks
# --------------------------------------------------------------------------- #
def layer_of(module: str, layers: Sequence[tuple[str, Sequence[str]]] = LAYERS,
             package: str = PACKAGE) -> int | None:
    """The index in ``layers`` of the longest entry ``module`` falls under (None: none)."""
    best, best_len = None, -1
    for i, (_, entries) in enumerate(layers):
        for entry in entries:
            covers = module == entry or (entry != package and module.startswith(entry + "."))
            if covers and len(entry) > best_len:
                best, best_len = i, len(entry)
    return best


def unplaced(modules: Iterable[str], layers=LAYERS, package: str = PACKAGE) -> list[str]:
    return sorted(m for m in modules if layer_of(m, layers, package) is None)


def upward_imports(imports: Iterable[Import], layers=LAYERS, package: str = PACKAGE) -> list[str]:
    """One message per import of a module of a higher layer than the importer's."""
    out = []
    for imp in imports:
        low, high = layer_of(imp.importer, layers, package), layer_of(imp.imported, layers, package)
        if low is not None and high is not None and high > low:
            out.append(f"{imp}: layer {layers[low][0]!r} imports layer {layers[high][0]!r}")
    return out


def cycles(imports: Iterable[Import]) -> list[list[Import]]:
    """One cycle of imports per strongly connected group of modules (each import names
    its line), whatever their layers."""
    edges: dict[str, dict[str, Import]] = {}
    for imp in imports:
        edges.setdefault(imp.importer, {}).setdefault(imp.imported, imp)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm; the package is shallow enough to recurse
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    out = []
    for group in groups:  # a shortest way from the group's first module back to it
        members, start = set(group), group[0]
        came: dict[str, Import] = {}
        frontier = [start]
        while start not in came:
            nxt = []
            for v in frontier:
                for w, imp in sorted(edges.get(v, {}).items()):
                    if w in members and w not in came:
                        came[w] = imp
                        nxt.append(w)
            frontier = nxt
        path = [came[start]]
        while path[-1].importer != start:
            path.append(came[path[-1].importer])
        out.append(path[::-1])
    return out


def describe_cycle(path: list[Import], layers=LAYERS, package: str = PACKAGE) -> str:
    def where(m: str) -> str:
        i = layer_of(m, layers, package)
        return f"{m} [{layers[i][0] if i is not None else '?'}]"

    steps = " -> ".join(f"{where(imp.importer)} (line {imp.line})" for imp in path)
    return f"cycle: {steps} -> {where(path[0].importer)}"


def describe_cycles(found: list[list[Import]], imports: Iterable[Import], layers=LAYERS,
                    package: str = PACKAGE) -> list[str]:
    """Each cycle, and every module of its group when the group is larger than the cycle."""
    imports = list(imports)
    out = []
    for path in found:
        text = describe_cycle(path, layers, package)
        group = _group_of(path[0].importer, imports)
        if len(group) > len(path):
            text += f" (the modules importing each other: {', '.join(group)})"
        out.append(text)
    return out


def _group_of(module: str, imports: list[Import]) -> list[str]:
    """The modules that ``module`` reaches and that reach it back."""
    def reach(start: str, forward: bool) -> set[str]:
        seen, todo = {start}, [start]
        while todo:
            v = todo.pop()
            for imp in imports:
                a, b = (imp.importer, imp.imported) if forward else (imp.imported, imp.importer)
                if a == v and b not in seen:
                    seen.add(b)
                    todo.append(b)
        return seen

    return sorted(reach(module, True) & reach(module, False))


def private_imports(imports: Iterable[Import], modules: Iterable[str]) -> list[Import]:
    """``from x import _name`` across modules, ``_name`` not a submodule or a dunder."""
    modules = set(modules)
    return [imp for imp in imports
            if imp.name is not None and imp.name.startswith("_") and not imp.name.startswith("__")
            and f"{imp.imported}.{imp.name}" not in modules]


# --------------------------------------------------------------------------- #
# The package
# --------------------------------------------------------------------------- #
def test_every_module_has_a_layer():
    missing = unplaced(module_files(ROOT))
    assert not missing, ("modules in no layer (add them to LAYERS in tests/test_layers.py and "
                         "to docs/architecture.md §2): " + ", ".join(missing))


def test_no_lower_layer_imports_an_upper_one():
    bad = upward_imports(package_imports())
    assert not bad, "imports of an upper layer:\n  " + "\n  ".join(bad)


def test_no_import_cycles():
    imports = package_imports()
    found = cycles(imports)
    assert not found, "import cycles:\n  " + "\n  ".join(describe_cycles(found, imports))


def test_no_private_names_imported_across_modules():
    bad = [imp for imp in private_imports(package_imports(), module_files(ROOT))
           if (imp.importer, imp.imported) not in PENDING_PRIVATE]
    assert not bad, ("private names imported from another module (make them public names of "
                     "the module that owns them, or move them):\n  " + "\n  ".join(map(str, bad)))
    still = {(imp.importer, imp.imported) for imp in private_imports(package_imports(),
                                                                     module_files(ROOT))}
    done = sorted(set(PENDING_PRIVATE) - still)
    assert not done, f"no longer imports private names: remove from PENDING_PRIVATE: {done}"


def test_the_imports_are_found():
    """The reader sees the imports the package is known to have, inside functions too."""
    found = {(imp.importer, imp.imported) for imp in package_imports()}
    assert ("revbench.function", "revbench.compiler") in found
    assert ("revbench", "revbench.jupyter.magic") in found  # inside load_ipython_extension
    assert ("revbench.ad.reverse", "revbench.ad.batch") in found


# --------------------------------------------------------------------------- #
# The checker itself, on tiny packages
# --------------------------------------------------------------------------- #
TOY_LAYERS = (("low", ("pkg.low",)), ("mid", ("pkg.mid", "pkg.other")), ("top", ("pkg",)))


def _toy(tmp_path: Path, files: dict[str, str]) -> tuple[dict[str, Path], list[Import]]:
    root = tmp_path / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return module_files(root, "pkg"), package_imports(root, "pkg")


def test_checker_reports_an_upward_import_in_a_function(tmp_path):
    _, imports = _toy(tmp_path, {
        "low.py": "import os\n\n\ndef f():\n    from pkg.mid import g\n    return g\n",
        "mid.py": "from pkg import low\n\n\ndef g():\n    pass\n",
    })
    bad = upward_imports(imports, TOY_LAYERS, "pkg")
    assert bad == ["pkg.low, line 5, imports pkg.mid (g): layer 'low' imports layer 'mid'"]


def test_checker_reports_the_facade_imported_from_below(tmp_path):
    _, imports = _toy(tmp_path, {"mid.py": "def h():\n    import pkg\n    return pkg\n"})
    assert upward_imports(imports, TOY_LAYERS, "pkg") == [
        "pkg.mid, line 2, imports pkg: layer 'mid' imports layer 'top'"]


def test_checker_reports_a_cycle_within_a_layer(tmp_path):
    _, imports = _toy(tmp_path, {
        "mid.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.other import x\n",
        "other.py": "from . import mid\nx = 1\n",
    })
    assert upward_imports(imports, TOY_LAYERS, "pkg") == []
    found = cycles(imports)
    assert len(found) == 1
    assert describe_cycle(found[0], TOY_LAYERS, "pkg") == (
        "cycle: pkg.mid [mid] (line 3) -> pkg.other [mid] (line 1) -> pkg.mid [mid]")


def test_checker_names_every_module_of_a_larger_group(tmp_path):
    _, imports = _toy(tmp_path, {
        "low.py": "import pkg.mid\n",
        "mid.py": "def f():\n    from pkg import low, other\n",
        "other.py": "import pkg.low\n",
    })
    found = cycles(imports)
    assert len(found) == 1 and len(found[0]) == 2
    [text] = describe_cycles(found, imports, TOY_LAYERS, "pkg")
    assert text.endswith("(the modules importing each other: pkg.low, pkg.mid, pkg.other)")
    assert "pkg.low, line 1, imports pkg.mid: layer 'low' imports layer 'mid'" in \
        upward_imports(imports, TOY_LAYERS, "pkg")


def test_checker_passes_a_clean_package_and_finds_what_is_unplaced(tmp_path):
    files, imports = _toy(tmp_path, {
        "low.py": "x = 1\n",
        "mid.py": "import importlib\nfrom pkg.low import x\nlow = importlib.import_module('pkg.low')\n",
        "stray.py": "from pkg import mid\n",
    })
    assert {(i.importer, i.imported, i.line) for i in imports} == {
        ("pkg.mid", "pkg.low", 2), ("pkg.mid", "pkg.low", 3), ("pkg.stray", "pkg.mid", 1)}
    assert upward_imports(imports, TOY_LAYERS, "pkg") == []
    assert cycles(imports) == []
    assert unplaced(files, TOY_LAYERS, "pkg") == ["pkg.stray"]


def test_checker_reports_private_names(tmp_path):
    files, imports = _toy(tmp_path, {
        "low.py": "_x = 1\n__all__ = []\n",
        "_helper.py": "",
        "mid.py": "from pkg.low import _x, __all__\nfrom pkg import _helper\n",
    })
    assert [str(i) for i in private_imports(imports, files)] == ["pkg.mid, line 1, imports pkg.low (_x)"]


