"""The code that decides each step's output, found from the step module's imports.

Editing any module a step imports, directly or through others, reruns that step:
the build tool's own code is an input, as in Bazel. The list is derived from
the source (its ``import`` statements, those inside functions too), so a new
module cannot be forgotten. The target registry's hooks are the exception: a
build for one target depends only on its own entry's hooks (``TargetSpec.sources``).
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from ..core.digest import bytes_digest
from .kinds import SOURCES

PACKAGE = Path(__file__).resolve().parent.parent  # modelbuild/
STEPS = SOURCES  # each step kind's module (kinds.py): step -> "steps/<step>.py"
_REGISTRY = "targets/registry.py"  # its imports of hook modules are per target, not per step


def _module_file(dotted: list[str]) -> str | None:
    """``["core", "errors"]`` -> "core/errors.py" when that module exists in the package."""
    if not dotted:
        return None
    base = PACKAGE.joinpath(*dotted)
    if base.with_suffix(".py").is_file():
        return str(base.with_suffix(".py").relative_to(PACKAGE))
    if (base / "__init__.py").is_file():
        return str((base / "__init__.py").relative_to(PACKAGE))
    return None


def _import_nodes(body):
    """The import statements among the statements ``body``, those nested in functions,
    classes and blocks too, but not those under ``if TYPE_CHECKING:`` (type annotations
    only: no code of theirs runs). Imports are statements: expressions are not entered."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from _import_nodes(node.orelse)
        else:
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    yield from _import_nodes(inner)


# What starts an import statement on one line: `from <module> import` or `import <name>`
# (the grammar puts no bracket before `import`), or `from`/`import` and a line break
# escaped by a backslash.
_START = r"(?:from[ \t]+(?:\.+|\.*[^\W\d][\w.]*)[ \t]+import\b|import[ \t]+[^\W\d]|(?:from|import)\b.*\\$)"
_IMPORT = re.compile(r"[ \t]*" + _START)
_INLINE = re.compile(r"[:;][ \t]*" + _START)  # `if x: import y`, `a; import b`


def _quick_import_nodes(text: str) -> list | None:
    """The import statements of a module read line by line: each line that starts an
    import statement is parsed alone (with its continuation lines), the rest of the module
    is not parsed. A statement starts a line, or follows ``;`` or a compound statement's
    ``:``; the line-starting ones are read here. None where that reading could miss one or
    misread one, and the whole module is parsed: an import statement's start after ``:``
    or ``;`` (``if x: import y``), a statement's start that does not parse with its
    continuation lines, ``TYPE_CHECKING`` (what to skip needs the blocks). A line starting
    with "from" and no statement's start ("from the cache, ...") is prose in a docstring;
    a docstring line that is an import statement by chance counts as one: a key then
    covers one module more.
    Parsing every module a build's keys cover was 80 ms of every doit run (62 modules for
    resnet50)."""
    if "TYPE_CHECKING" in text:
        return None
    lines = text.split("\n")
    nodes: list = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not _IMPORT.match(line):
            if _INLINE.search(line):
                return None
            i += 1  # no import's start; one starting "from"/"import" is prose in a docstring
            continue
        statement = [line.strip()]
        depth = line.count("(") - line.count(")")
        while (depth > 0 or statement[-1].endswith("\\")) and i + 1 < len(lines):
            i += 1
            statement.append(lines[i])
            depth += lines[i].count("(") - lines[i].count(")")
        try:
            body = ast.parse("\n".join(statement)).body
        except SyntaxError:
            return None
        if not all(isinstance(node, (ast.Import, ast.ImportFrom)) for node in body):
            return None
        nodes.extend(body)
        i += 1
    return nodes


def imports_of(relative: str) -> set[str]:
    """The package modules one module imports (files relative to modelbuild/)."""
    path = PACKAGE / relative
    if not path.is_file() or relative.startswith("/"):
        return set()
    here = list(Path(relative).parent.parts)
    found: set[str] = set()
    text = path.read_text()
    nodes = _quick_import_nodes(text)
    if nodes is None:
        nodes = _import_nodes(ast.parse(text, str(path)).body)
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - (node.level - 1)] if node.level > 1 else list(here)
            elif node.module and node.module.split(".")[0] == "modelbuild":
                base = []
            else:
                continue
            parts = [p for p in (node.module or "").split(".") if p]
            if not node.level:
                parts = parts[1:]
            module = base + parts
            subs = [_module_file(module + [alias.name]) for alias in node.names]
            found.update(sub for sub in subs if sub)  # `from . import x`: x is a module
            target = _module_file(module)
            if target and not all(subs):  # names defined in the module (or package) itself
                found.add(target)
        else:
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "modelbuild":
                    target = _module_file(parts[1:])
                    if target:
                        found.add(target)
    found.discard(relative)
    found.discard(str(Path(relative).parent / "__init__.py"))  # its own package: already there
    return found


@functools.lru_cache(maxsize=None)
def closure(files: tuple[str, ...]) -> tuple[str, ...]:
    """``files`` and every package module they import, directly or not, sorted."""
    seen: set[str] = set()
    todo = list(files)
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        if not (PACKAGE / current).is_file():
            continue  # an absolute path outside the package: itself only
        for dep in imports_of(current):
            if current == _REGISTRY and dep.startswith("targets/"):
                continue
            todo.append(dep)
    return tuple(sorted(seen))


def step_sources(step: str, target_sources: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Every module whose code runs in the step for a target whose entry names ``target_sources``."""
    return closure((STEPS[step], *target_sources))


@functools.lru_cache(maxsize=None)
def digest(files: tuple[str, ...]) -> str:
    """The digest of the named files' code (relative to modelbuild/, or absolute)."""
    return bytes_digest(b"".join(name.encode() + b"\0" + (PACKAGE / name).read_bytes()
                                 for name in files))[:16]
