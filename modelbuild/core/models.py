"""Find the models a project declares in ``models/``.

A model is either
- ``models/<name>.toml``: ``onnx = "<path>"`` (relative to ``models/``, or
  ``onnx:<path>`` inside the installed onnx package) and an optional
  ``[inputs]`` table of input shapes and an optional ``layout`` (core/passes.py LAYOUTS;
  the target's default when none), or
- ``models/<name>.onnx`` alone: a user's own ONNX file with static input shapes.

Reading declarations is plain file work: it must not import TVM or onnx.
"""

from __future__ import annotations

import importlib.util
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from . import regular_file, toml
from .errors import BuildError

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class ModelSpec:
    """A declared model: its name, its ONNX file, and declared input shapes."""

    name: str
    onnx_path: Path
    declaration: Path  # the file the user wrote: the .toml, or the .onnx itself
    inputs: dict[str, list[int]] = field(default_factory=dict)
    layout: str | None = None  # declared (or, in a build's context, chosen) layout

    def source_files(self) -> list[Path]:
        """Every file whose content changes the model (file_dep of partition)."""
        files = [self.declaration]
        if self.onnx_path != self.declaration:
            files.append(self.onnx_path)
        return files


def _onnx_package_dir() -> Path:
    spec = importlib.util.find_spec("onnx")
    if spec is None or not spec.submodule_search_locations:
        raise BuildError("the onnx package is not installed", hint="pip install onnx")
    return Path(list(spec.submodule_search_locations)[0])


def _resolve_onnx(ref: str, declaration: Path) -> Path:
    if ref.startswith("onnx:"):
        return _onnx_package_dir() / ref[len("onnx:"):]
    path = Path(ref)
    return path if path.is_absolute() else declaration.parent / path


_MOST_BYTES = 1024 * 1024  # a declaration is a few lines


def _declaration_text(path: Path) -> str:
    """A declaration's text: a regular file's, of at most a megabyte. A folder or a link to
    nothing named like one failed every model's build with a traceback, and a pipe (or a
    link to /dev/zero) made every doit command wait forever: each is this model's error."""
    try:
        return regular_file.read_limited(path, _MOST_BYTES).decode("utf-8")
    except regular_file.NotRegular:
        kind = "a folder" if path.is_dir() else "not a regular file (a pipe, a device or a socket)"
        raise BuildError(f"not a model declaration: {kind}", file=path,
                         hint="a declaration is a TOML file: remove or rename this") from None
    except FileNotFoundError:
        if not path.is_symlink():
            raise BuildError("the model declaration was removed while it was read",
                             file=path) from None
        raise BuildError("not a model declaration: a link to nothing", file=path,
                         hint="remove the link, or point it at the declaration") from None
    except OSError as err:
        raise BuildError(f"the model declaration cannot be read: {err.strerror or err}",
                         file=path, hint="a declaration is a TOML file of a few lines") from None


def _from_toml(path: Path) -> ModelSpec:
    try:
        data = toml.loads(_declaration_text(path))
    except (toml.DecodeError, UnicodeDecodeError, RecursionError) as err:
        raise BuildError(f"not a valid model declaration: {err}", file=path) from None
    unknown = set(data) - {"onnx", "inputs", "description", "layout"}
    if unknown:
        raise BuildError(f"unknown keys {sorted(unknown)}; allowed: onnx, inputs, description, "
                         "layout", file=path)
    layout = data.get("layout")
    if layout is not None:
        check_layout(layout, file=path)
    ref = data.get("onnx", f"{path.stem}.onnx")
    if not isinstance(ref, str) or not ref.strip() or "\0" in ref or ref == "onnx:":
        raise BuildError(f"onnx = {ref!r}: not a file name", file=path,
                         hint='onnx names the model\'s ONNX file: "resnet50.onnx" (beside '
                              'this file) or "onnx:<path>" (inside the onnx package)')
    onnx_path = _resolve_onnx(ref, path)
    inputs = data.get("inputs", {})
    if not isinstance(inputs, dict) or not all(
        isinstance(v, list) and all(isinstance(d, int) and not isinstance(d, bool)
                                    and 0 <= d < 2**31 for d in v)
        for v in inputs.values()
    ):
        raise BuildError("[inputs] must map input names to lists of positive integers or 0 "
                         "(an empty dimension), each under 2^31, e.g. x = [1, 3, 224, 224]",
                         file=path,
                         hint="fix the [inputs] table; the other models build meanwhile")
    return ModelSpec(path.stem, onnx_path, path, dict(inputs), layout)


def check_layout(layout, file=None, where: str = "layout") -> None:
    """Refuse a layout that is not one of LAYOUTS, in one line."""
    from .passes import LAYOUTS

    if layout not in LAYOUTS:
        raise BuildError(f"{where} = {layout!r}: not a layout modelbuild builds; known: "
                         f"{', '.join(LAYOUTS)}", file=file,
                         hint="NCHW (as imported) or NCHWc (channel-blocked, for CPU targets)")


def discover(models_dir: Path) -> dict[str, ModelSpec]:
    """All models declared in ``models_dir``, by name, in name order; raises the first
    refused declaration's error (``discover_all`` keeps the others usable)."""
    found, refused = discover_all(models_dir)
    if refused:
        raise next(iter(refused.values()))
    return found


def discover_all(models_dir: Path) -> tuple[dict[str, ModelSpec], dict[str, BuildError]]:
    """(the usable models, the refused declarations: why, by the name they would have)."""
    found: dict[str, ModelSpec] = {}
    refused: dict[str, BuildError] = {}
    if not models_dir.is_dir():
        return found, refused
    for path in sorted(models_dir.glob("*.toml")):
        try:
            found[path.stem] = _from_toml(path)
        except BuildError as err:
            refused[path.stem] = err
    for path in sorted(models_dir.glob("*.onnx")):
        if path.stem in refused:
            continue
        if path.stem not in found:
            found[path.stem] = ModelSpec(path.stem, path, path)
        elif found[path.stem].onnx_path.resolve() != path.resolve():
            spec = found.pop(path.stem)
            refused[path.stem] = BuildError(
                f"{spec.declaration} declares model '{path.stem}' with onnx = "
                f"{spec.onnx_path}, so this file beside it would be ignored", file=path,
                hint=f"delete or rename {path.name} (renamed, it is a model of its own), or "
                     f"point the .toml at it: onnx = \"{path.name}\"")
    for name in [n for n in found if not _NAME.match(n)]:
        refused[name] = BuildError(
            f"model name '{name}' is not usable: it may only use letters, digits, '_', '.' "
            "and '-', and not start with '.' or '-'", file=found.pop(name).declaration,
            hint="rename the file (the model's name is the file's name)")
    for name in [n for n in refused if not _NAME.match(n)]:
        if not refused[name].hint:
            refused[name].hint = "rename the file (the model's name is the file's name)"
    return dict(sorted(found.items())), dict(sorted(refused.items()))


def check_exists(spec: ModelSpec) -> None:
    """The model's ONNX file is a regular file that can be opened (a folder gave an
    internal error; a pipe or /dev/zero made partition wait or read forever)."""
    try:
        mode = spec.onnx_path.stat().st_mode
    except FileNotFoundError:
        raise BuildError(f"model '{spec.name}': ONNX file {spec.onnx_path} does not exist",
                         file=spec.declaration) from None
    except OSError as err:
        raise BuildError(f"model '{spec.name}': ONNX file {spec.onnx_path} cannot be read: "
                         f"{err.strerror or type(err).__name__}", file=spec.declaration) from None
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file (a device or a pipe)"
        raise BuildError(f"model '{spec.name}': ONNX file {spec.onnx_path} is {kind}",
                         file=spec.declaration)
