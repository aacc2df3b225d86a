"""The targets modelbuild can build for, as a table keyed by target name.

Only plain data here: choosing a target must not import TVM.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from .errors import BuildError


@dataclass(frozen=True)
class TargetSpec:
    """One build target: its name on the command line and its TVM target dict.

    ``emit`` names how codegen turns a compiled workload into an object file
    (see codegen.EMITTERS); ``records_from`` lists the target kinds whose
    schedule records apply to this target.
    """

    name: str
    tvm_target: dict = field(default_factory=dict)
    description: str = ""
    emit: str = "object"
    records_from: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        return self.tvm_target["kind"]

    def key(self) -> str:
        """A stable string that changes whenever code for this target would change."""
        return json.dumps(self.tvm_target, sort_keys=True)


TARGETS: dict[str, TargetSpec] = {
    "llvm": TargetSpec("llvm", {"kind": "llvm"}, "host CPU through LLVM (default)",
                       emit="object", records_from=("llvm",)),
    "c": TargetSpec("c", {"kind": "c"}, "host CPU through TVM's C codegen and the system C compiler",
                    emit="c-source", records_from=("c", "llvm")),
}

DEFAULT_TARGET = "llvm"


def resolve(name: str | None) -> TargetSpec:
    """The target called ``name``; a clear error for one modelbuild cannot build."""
    name = name or DEFAULT_TARGET
    try:
        return TARGETS[name]
    except KeyError:
        known = ", ".join(sorted(TARGETS))
        raise BuildError(
            f"unsupported target '{name}'",
            hint=f"modelbuild builds for: {known} (choose with `doit build:<model> target=NAME`)",
        ) from None
