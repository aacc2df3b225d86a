"""Where every artifact of a build lives. Pure path arithmetic, no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import BuildError


def plain(name: str, what: str = "workload") -> str:
    """``name`` when it can be a workload's (or a compute's) name: an identifier, as TVM
    names a fused function. Anything else (``../../notes``, ``a/b``, "") never becomes a
    path: a command given one wrote or deleted files outside the model's folders."""
    if not isinstance(name, str) or not name.isidentifier():
        raise BuildError(f"{what} {name!r}: not a {what} name (letters, digits and _, as "
                         f"`python -m modelbuild inspect <model>` lists them)")
    return name


@dataclass(frozen=True)
class Project:
    """A modelbuild project: the directory holding dodo.py, models/ and schedules/."""

    root: Path

    @property
    def models_dir(self) -> Path:
        return self.root / "models"

    @property
    def schedules_dir(self) -> Path:
        return self.root / "schedules"

    @property
    def build_dir(self) -> Path:
        return self.root / "build"

    def model(self, name: str) -> "ModelPaths":
        return ModelPaths(self, name)


@dataclass(frozen=True)
class ModelPaths:
    """The paths of one model's inputs and outputs."""

    project: Project
    name: str

    @property
    def dir(self) -> Path:
        return self.project.build_dir / self.name

    @property
    def manifest(self) -> Path:
        return self.dir / "partition" / "manifest.msgpack"

    @property
    def partition_dir(self) -> Path:
        """Everything partition writes: the manifest, workloads/ and graph/."""
        return self.dir / "partition"

    @property
    def partition_checked(self) -> Path:
        """The memo of partition's files as last verified ({path: [signature, sha256]},
        core/filecheck.py), beside the partition folder, not in it (it is no output)."""
        return self.dir / "partition.checked"

    @property
    def graph_dir(self) -> Path:
        """Objects of the VM executable (bytecode and constants) of the graph."""
        return self.dir / "partition" / "graph"

    @property
    def workloads_dir(self) -> Path:
        return self.dir / "partition" / "workloads"

    @property
    def computes_dir(self) -> Path:
        """The TIR of the workloads' other computes (steps/compute_variants.py)."""
        return self.dir / "partition" / "computes"

    def workload(self, workload: str, compute: str = "direct") -> Path:
        """A workload's TIR as partition wrote it; ``compute``: another compute of it,
        computes/<workload>@<compute>.json."""
        if compute == "direct":
            return self.workloads_dir / f"{plain(workload)}.json"
        return self.computes_dir / f"{plain(workload)}@{plain(compute, 'compute')}.json"

    @property
    def records_dir(self) -> Path:
        return self.project.schedules_dir / self.name

    def record(self, workload: str) -> Path:
        return self.records_dir / f"{plain(workload)}.json"

    def python_record(self, workload: str) -> Path:
        return self.records_dir / f"{plain(workload)}.py"

    def variants_dir(self, workload: str) -> Path:
        return self.records_dir / "variants" / plain(workload)

    def lowered(self, workload: str) -> Path:
        return self.dir / "lowered" / f"{plain(workload)}.json"

    def object(self, workload: str, suffix: str = ".o") -> Path:
        """A workload's codegen artifact; ``suffix``: the target's (an object file: .o)."""
        return self.dir / "objects" / f"{plain(workload)}{suffix}"

    @property
    def library(self) -> Path:
        return self.dir / f"{self.name}.so"

    @property
    def benchmark(self) -> Path:
        """The last `bench` result of the library (JSON)."""
        return self.dir / "bench.json"

    def sweep(self, name: str) -> Path:
        """A variant sweep's results (JSON); its plot is beside it, as .png."""
        return self.dir / "sweeps" / f"{name}.json"

    @property
    def sweep_journal(self) -> Path:
        """The active records a running sweep found, kept until it has put them back (a
        killed sweep leaves it: commands/sweep.py)."""
        return self.dir / ".sweep-records.msgpack"
