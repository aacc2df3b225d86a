"""The package's shape: layered subpackages, no import cycle, lower layers never import higher.

Imports are read from the source (those inside functions too; type-only imports
under ``if TYPE_CHECKING:`` aside), as the step code digests read them.
"""

import ast
import re
from pathlib import Path

from modelbuild.steps import code

PACKAGE = code.PACKAGE
# Lowest first: a module may import its own layer and the layers before it.
LAYERS = ("core", "targets", "measure", "schedules", "steps", "cache", "cluster", "decision",
          "graph", "commands")
TOP = {"__init__.py", "__main__.py"}


def modules() -> list[str]:
    return sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py"))


def graph() -> dict[str, set[str]]:
    return {m: code.imports_of(m) for m in modules()}


def layer(module: str) -> str | None:
    parts = Path(module).parts
    return parts[0] if len(parts) > 1 else None


def test_the_top_of_the_package_holds_only_the_entry_points():
    assert {m for m in modules() if layer(m) is None} == TOP
    assert {layer(m) for m in modules()} - {None} == set(LAYERS)


def test_no_import_cycle():
    edges = graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt):] + [nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in edges:
        if node not in state:
            visit(node)


def test_lower_layers_never_import_higher_ones():
    rank = {name: i for i, name in enumerate(LAYERS)}
    wrong = [f"{m} imports {dep}" for m, deps in graph().items() if layer(m)
             for dep in deps if layer(dep) and rank[layer(dep)] > rank[layer(m)]]
    assert not wrong, "\n".join(wrong)


def test_each_layer_says_what_it_holds_and_imports_only_what_it_says():
    edges = graph()
    for i, name in enumerate(LAYERS):
        doc = ast.get_docstring(ast.parse((PACKAGE / name / "__init__.py").read_text()))
        assert doc and doc.startswith(f"{name}: "), name
        allowed = re.search(r"May import: ([^.]*)\.", doc)
        assert allowed, f"{name}/__init__.py does not say what it may import"
        if "every other layer" in allowed.group(1):
            said = set(LAYERS) - {name}
        else:
            said = set(re.findall(r"[a-z]+", allowed.group(1))) & set(LAYERS)
        assert said <= set(LAYERS[:i]) or name == LAYERS[-1], (name, said)
        used = {layer(d) for m, deps in edges.items() if layer(m) == name for d in deps}
        assert used - {None, name} <= said, (name, used - {None, name} - said)


def test_the_import_reader_sees_lazy_imports_and_skips_type_only_ones(tmp_path, monkeypatch):
    pkg = tmp_path / "modelbuild"
    (pkg / "core").mkdir(parents=True)
    for name in ("a", "b", "c"):
        (pkg / "core" / f"{name}.py").write_text("")
    (pkg / "core" / "m.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from . import a\n"
        "if TYPE_CHECKING:\n    from . import c\n"
        "def f():\n    from .b import x\n")
    monkeypatch.setattr(code, "PACKAGE", pkg)
    assert code.imports_of("core/m.py") == {"core/a.py", "core/b.py"}


def _full_reading(monkeypatch, module: str) -> set[str]:
    with monkeypatch.context() as m:
        m.setattr(code, "_quick_import_nodes", lambda text: None)
        return code.imports_of(module)


def test_the_quick_import_reading_finds_what_parsing_the_whole_module_finds(monkeypatch):
    quick = [m for m in modules() if code._quick_import_nodes((PACKAGE / m).read_text()) is not None]
    assert len(quick) > 0.9 * len(modules())  # else every doit run parses them all again
    for module in modules():
        assert code.imports_of(module) == _full_reading(monkeypatch, module), module


def test_the_quick_import_reading_never_misses_a_statement(tmp_path, monkeypatch):
    pkg = tmp_path / "modelbuild"
    (pkg / "core").mkdir(parents=True)
    for name in "abcdefgh":
        (pkg / "core" / f"{name}.py").write_text("")
    monkeypatch.setattr(code, "PACKAGE", pkg)
    cases = {
        "if x: import modelbuild.core.a\n": {"core/a.py"},
        "x = 1; from . import b\n": {"core/b.py"},
        "try: from .c import y\nexcept ImportError: pass\n": {"core/c.py"},
        "from . \\\n    import d\n": {"core/d.py"},
        "from . import (\n    a,  # the first\n    b,\n)\n": {"core/a.py", "core/b.py"},
        # prose opening a bracket it never closes must not hide the import after it
        '"""Read\nfrom the cache (see\n"""\nfrom . import e\n': {"core/e.py"},
        '"""Read\nfrom the cache, (or\nimport it.\n"""\nfrom . import f\n': {"core/f.py"},
        "def g():\n    from .g import z\n    return z\n": {"core/g.py"},
        '"""Example:\n\nfrom . import h\n"""\n': {"core/h.py"},  # by chance: one module more
    }
    for source, expected in cases.items():
        (pkg / "core" / "m.py").write_text(source)
        assert code.imports_of("core/m.py") == expected, source
        assert _full_reading(monkeypatch, "core/m.py") <= expected, source
