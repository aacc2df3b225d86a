"""The targets modelbuild builds for: a registry keyed by target name, one entry each.

An entry holds everything that differs between targets, as hooks the steps
call; partition, lower, codegen and link never look at the target's kind:

- ``configure(spec, options) -> spec``: at load time, before anything runs and
  without TVM: the entry completed for this machine and the options asked for
  (``{"mcpu": ...}``), or a BuildError naming what the machine lacks (None:
  nothing to check). ``options`` names the options the entry takes.
- ``default_schedule(func, name, tvm_target) -> func``: lower, for a workload
  without a record (None: TVM's default schedule, applied at codegen).
- ``emit(lib, tmp, name, spec)``: codegen, the compiled workload (``tvm.tirx.build``
  of ``tvm_target``) -> its artifact file, named ``<workload><artifact_suffix>``.
- ``pack_graph_imports``: partition, ``export_library``'s ``fpack_imports`` for
  the graph's executable (None: TVM packs them into an object file).
- ``link(artifacts, graph_files, out, what)``: the artifacts and the graph's
  files -> the shared library, without TVM.
- ``vector_floats(tvm_target) -> int``: partition, the channel block of the blocked
  layout (``NCHWc``): floats in one vector register of the target's CPU (None: the
  target takes no blocked layout).

Adding a target is one ``register(TargetSpec(...))``, e.g. in a module listed
under ``[tool.modelbuild] targets`` in the project's pyproject.toml. Its name,
``key()`` (TVM target and toolchain) and the code of its ``sources`` are inputs
of every step, so builds for two targets never share an artifact.

Only plain data and TVM-free code here: choosing a target must not import TVM.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..core.errors import BuildError
from . import cpu, cpu_schedule, cuda


@dataclass(frozen=True)
class TargetSpec:
    """One build target: its name on the command line, its TVM target dict and its hooks.

    ``records_from`` lists the target kinds whose schedule records apply to it;
    ``sources`` the files (relative to modelbuild/, or absolute) whose code
    decides its outputs; ``toolchain`` what ``configure`` found (part of the key).
    """

    name: str
    tvm_target: dict = field(default_factory=dict)
    description: str = ""
    records_from: tuple[str, ...] = ()
    emit: Callable = cpu.write_object
    link: Callable = cpu.link_objects
    default_schedule: Callable | None = None
    pack_graph_imports: Callable | None = None
    configure: Callable | None = None
    artifact_suffix: str = ".o"
    sources: tuple[str, ...] = ("targets/cpu.py",)
    toolchain: str = ""
    device: str = "cpu"  # where its libraries run: tvm.device(device) (measuring, benchmarks)
    options: tuple[str, ...] = ()  # what `resolve(name, **options)` may set, e.g. ("mcpu",)
    vector_floats: Callable | None = None  # the blocked layout's channel block (None: none)

    @property
    def kind(self) -> str:
        return self.tvm_target["kind"]

    def key(self) -> str:
        """A stable string that changes whenever code for this target would change."""
        if not self.toolchain:
            return json.dumps(self.tvm_target, sort_keys=True)
        return json.dumps({"tvm_target": self.tvm_target, "toolchain": self.toolchain}, sort_keys=True)


TARGETS: dict[str, TargetSpec] = {}


def register(spec: TargetSpec) -> TargetSpec:
    """Add a target; a name can be registered once."""
    if not isinstance(spec.name, str) or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", spec.name):
        raise BuildError(f"target name {spec.name!r}: not a name (letters, digits, _, . and -, "
                         "not starting with . or -)")
    if not isinstance(spec.tvm_target, dict) or not isinstance(spec.tvm_target.get("kind"), str):
        raise BuildError(f"target '{spec.name}': its TVM target must be a dict with a kind, "
                         f"as TVM 0.27 takes targets (e.g. {{'kind': 'llvm'}}), not "
                         f"{spec.tvm_target!r}")
    if spec.name in TARGETS:
        raise BuildError(f"target '{spec.name}' is already registered")
    TARGETS[spec.name] = spec
    return spec


register(TargetSpec(
    "llvm", {"kind": "llvm"}, "this machine's CPU through LLVM (default; mcpu= for another CPU)",
    records_from=("llvm",), configure=cpu.configure_llvm, options=("mcpu",),
    default_schedule=cpu_schedule.default_schedule, vector_floats=cpu.vector_floats,
    sources=("targets/cpu.py", "targets/cpu_schedule.py", "targets/cpu_schedule_blocked.py",
             "targets/cpu_schedule_conv.py", "targets/cpu_schedule_generic.py",
             "targets/cpu_schedule_inline.py", "targets/cpu_schedule_queries.py")))
register(TargetSpec(
    "c", {"kind": "c"}, "host CPU through TVM's C codegen and the system C compiler",
    records_from=("c", "llvm"), emit=cpu.compile_c_source, configure=cpu.configure_c,
    vector_floats=cpu.vector_floats))
register(TargetSpec(
    "cuda", {"kind": "cuda", "host": {"kind": "llvm"}},
    "NVIDIA GPU: kernels compiled by nvcc, host code through LLVM",
    records_from=("cuda",), configure=cuda.configure,
    default_schedule=cuda.default_schedule, emit=cuda.emit,
    pack_graph_imports=cuda.pack_graph_imports, link=cuda.link,
    artifact_suffix=".cuda.tar", sources=("targets/cuda.py", "targets/libblob.py"),
    device="cuda"))

DEFAULT_TARGET = "llvm"


@dataclass(frozen=True)
class Choice:
    """A target as a user chooses it: its name and options (``doit build:M target=llvm
    mcpu=x86-64-v3``, ``python -m modelbuild ... --target llvm --mcpu x86-64-v3``)."""

    name: str = DEFAULT_TARGET
    mcpu: str | None = None

    def resolve(self) -> "TargetSpec":
        return resolve(self.name, mcpu=self.mcpu)

    def doit_vars(self) -> list[str]:
        """The doit command-line variables that choose it."""
        return [f"target={self.name}"] + ([f"mcpu={self.mcpu}"] if self.mcpu else [])

    def __str__(self) -> str:
        """``llvm``, or ``llvm mcpu=x86-64-v3``."""
        return self.name + (f" mcpu={self.mcpu}" if self.mcpu else "")


def resolve(name: str | None, **options) -> TargetSpec:
    """The target called ``name``, configured for this machine and ``options`` (those given as
    None are left out); a clear error for one modelbuild does not know, an option it does not
    take, or what this machine cannot build."""
    name = name or DEFAULT_TARGET
    try:
        spec = TARGETS[name]
    except KeyError:
        known = ", ".join(sorted(TARGETS))
        raise BuildError(
            f"unsupported target '{name}'",
            hint=f"modelbuild builds for: {known} (choose with `doit build:<model> target=NAME`)",
        ) from None
    given = {k: v for k, v in options.items() if v is not None}
    unknown = sorted(set(given) - set(spec.options))
    if unknown:
        raise BuildError(f"target '{name}' takes no option {', '.join(unknown)}",
                         hint=f"its options: {', '.join(spec.options) or 'none'}")
    return spec.configure(spec, given) if spec.configure else spec


def load_project_targets(root: Path, modules) -> None:
    """Import the modules a project names under ``[tool.modelbuild] targets``: each one
    registers its targets. Found beside the project's dodo.py, as doit finds dodo.py's imports."""
    if modules is None:
        return
    if isinstance(modules, str) or not all(isinstance(m, str) for m in modules):
        raise BuildError("[tool.modelbuild] targets must be a list of module names",
                         file=root / "pyproject.toml")
    for name in modules:
        if name in sys.modules:
            continue
        if not all(part.isidentifier() for part in name.split(".")):
            raise BuildError(f"targets names {name!r}, which is no module name (dotted "
                             "identifiers, no path)", file=root / "pyproject.toml",
                             hint="name a module beside dodo.py, or an installed one")
        added = str(root) not in sys.path
        if added:
            sys.path.insert(0, str(root))
        try:
            importlib.import_module(name)
        except ImportError as err:
            raise BuildError(f"cannot import target module '{name}': {err}",
                             file=root / "pyproject.toml",
                             hint="name a module beside dodo.py, or an installed one") from None
        except (KeyboardInterrupt, BuildError):
            raise
        except BaseException as err:  # noqa: BLE001 - the module's own error, in words
            from ..core.errors import summarize

            where = f" (line {err.lineno})" if isinstance(err, SyntaxError) else ""
            raise BuildError(f"the target module '{name}' failed as it was imported{where}: "
                             f"{summarize(err) if str(err) else type(err).__name__}",
                             file=root / "pyproject.toml",
                             hint=f"fix the module {name}, or remove it from targets") from None
        finally:
            if added:
                sys.path.remove(str(root))
