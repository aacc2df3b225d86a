"""Why would the next `doit build:<model>` run what it runs? A dry run that builds nothing.

For each task that acts, the build's own decision and its reasons: each step's
``decide(explain=True)`` (partition, lower, codegen: cached_step.Step; link:
link_check.Link; the words come with the verdict, reasons.py). What is left here is the
walk down the pipeline, and the predictions for a step whose upstream runs first (its
input is not known before the build). Like ``ninja -d explain``, but readable.

Nothing is written: no cache restore, no doit state change (doit's state is not read
either). TVM is not imported.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import msgpack

from ..core import manifest as manifest_mod
from ..core.digest import bytes_digest, file_digest
from ..core.paths import ModelPaths
from ..steps.partition_output import MANIFEST
from . import fingerprint, link_check
from .cached_step import CURRENT, RESTORE, RUN, Decision
from .context import Context, load_context
from .reasons import config_changes
from .step_builders import codegen_step, link_step, lower_step, partition_step


@dataclass
class Verdict:
    task: str
    action: str  # RUN or RESTORE (from the cache; doit reports it as up to date)
    reasons: list[str] = field(default_factory=list)
    source: str | None = None  # RESTORE: "local" or "remote", the cache tier that has it

    def to_json(self) -> dict:
        out = {"task": self.task, "action": self.action, "reasons": self.reasons}
        if self.source is not None:
            out["source"] = self.source
        return out

    @classmethod
    def of(cls, task: str, decision: Decision) -> Verdict:
        """A step's decision as ``why`` prints it: its action, its own reasons."""
        return cls(task, decision.action, list(decision.reasons),
                   decision.source if decision.action == RESTORE else None)


@dataclass
class _Partition:
    """partition's decision, and what the rest of the walk needs to know of it."""

    decision: Decision
    manifest: manifest_mod.Manifest | None  # as it will be once partition is done (None: unknown)
    repairs_only: bool  # partition acts, but its outputs are known: the ones it records
    recorded: dict = field(default_factory=dict)  # output path -> digest the manifest records


def _partition(ctx: Context, model: str) -> _Partition:
    layout = ctx.project.model(model)
    part = partition_step(ctx, ctx.models[model]).decide(explain=True)
    stamp = fingerprint.read_stamp(layout.manifest)
    man = manifest_mod.read(layout.manifest)
    if part.action == RESTORE:
        man = manifest_mod.Manifest.from_bytes(msgpack.unpackb(part.payload)[MANIFEST])
    # whether partition's outputs are known before the build: current, restored (the cache
    # entry holds them) or rewritten the same (same inputs: partition is deterministic)
    outputs_known = part.action != RUN or (stamp is not None and part.inputs is not None
                                           and stamp.get("inputs") == part.inputs)
    recorded = ({layout.partition_dir / rel: digest for rel, _, digest in man.outputs}
                if man is not None else {})
    if not outputs_known:  # the workloads it makes are known only once it has run
        part = replace(part, reasons=(
            *part.reasons, "its workloads are known once it has run: lower and codegen then "
                           "run for each new or changed one (not listed here)"))
    return _Partition(part, man, part.action != CURRENT and outputs_known, recorded)


def _workload(ctx: Context, model: str, workload: str, part: _Partition,
              linked: dict) -> tuple[list[Verdict], dict]:
    """The verdicts of one workload's lower and codegen (none when both are current), and
    what its object will be for the link: {object path: its sha256 once restored with the
    bytes the library was linked from (``linked``: {path: sha256} from the library's
    stamp), or None when it may differ}; empty when the object stays as it is."""
    lower_task, codegen_task = f"lower:{model}/{workload}", f"codegen:{model}/{workload}"
    lowered = lower_step(ctx, model, workload, part.recorded if part.repairs_only else None)
    low = lowered.decide(explain=True)
    if low.inputs is None:
        return [Verdict.of(lower_task, low)], {}
    if low.action == RUN:  # codegen's input is not known before lower ran: a prediction
        compiled = codegen_step(ctx, model, workload)
        old = (fingerprint.read_stamp(compiled.output) or {}).get("inputs", {})
        may_change = Verdict(codegen_task, RUN, [f"upstream output may change ({lower_task} "
                                                 "will run; if it makes the same TIR again, "
                                                 "the rebuild stops there)",
                                                 *config_changes(old.get("config"),
                                                                 ctx.config_for("codegen"),
                                                                 "codegen")])
        return [Verdict.of(lower_task, low), may_change], {str(compiled.output): None}
    verdicts = []
    if low.action == CURRENT:
        compiled = codegen_step(ctx, model, workload, file_digest(lowered.output))
    else:
        verdicts.append(Verdict.of(lower_task, low))
        compiled = codegen_step(ctx, model, workload, bytes_digest(low.payload),
                                f"{lower_task} restored from the cache")
    cg = compiled.decide(explain=True)
    if cg.action == CURRENT:
        return verdicts, {}
    restored = bytes_digest(cg.payload) if cg.action == RESTORE and cg.payload else None
    same = restored is not None and linked.get(str(compiled.output)) == restored
    return [*verdicts, Verdict.of(codegen_task, cg)], {str(compiled.output): restored
                                                       if same else None}


def _graph(layout: ModelPaths, part: _Partition, linked: dict) -> dict:
    """What partition leaves of the graph's files for the link: {path: sha256 as its
    manifest records it, or None when it may differ from what the library was linked
    from (``linked``; partition runs with other inputs, or is restored with other
    bytes)}; empty when partition is current."""
    if part.decision.action == CURRENT:
        return {}
    out = {}
    for name in part.manifest.graph_objects:
        path = layout.graph_dir / name
        digest = part.recorded.get(path) if part.repairs_only else None
        other = part.decision.action == RESTORE and linked and linked.get(str(path)) != digest
        out[str(path)] = None if other else digest
    return out


def _link(ctx: Context, model: str, part: _Partition, objects: dict,
          linked: dict) -> Verdict | None:
    """link: its own decision (link_check.Link), on its inputs as the steps before it leave
    them; what those steps may change is said as theirs (``objects``: _workload's)."""
    layout = ctx.project.model(model)
    graph = _graph(layout, part, linked)
    reasons = []
    if changing := sum(digest is None for digest in objects.values()):
        reasons.append(f"upstream output may change ({changing} object(s) will be made "
                       "or restored; the same bytes again stop the rebuild there)")
    if part.decision.action == RUN and not part.repairs_only:
        reasons.append(f"upstream partition:{model} will run (the graph may change)")
    if part.decision.action == RESTORE and None in graph.values():
        reasons.append(f"upstream partition:{model} is restored with other graph objects")
    decision = link_step(ctx, model, part.manifest, {**objects, **graph}).decide(explain=True)
    never_linked = not (layout.library.exists()
                        or fingerprint.stamp_path(layout.library).exists())
    # a library never linked (or cleaned): what the steps before it do says it all
    if decision.action == RUN and not (reasons and never_linked):
        reasons += decision.reasons
    return Verdict(f"link:{model}", RUN, reasons) if reasons else None


def predict(root: Path, model: str, target_name: str | None = None,
            mcpu: str | None = None) -> list[Verdict]:
    """What `doit build:<model> [target=...]` would do, task by task (only tasks that act).

    Runs where doit runs the build, in the project root (``root`` is that directory:
    the stamps name files relative to it): the caller is there. The decisions are the
    build's own: each step's ``decide`` (partition, lower, codegen, link).
    """
    # a query: its tasks take no build lock (nor wait for a build) and restore nothing
    ctx = replace(load_context(root, target_name, mcpu), query=True)
    part = _partition(ctx, model)
    verdicts = [] if part.decision.action == CURRENT else [
        Verdict.of(f"partition:{model}", part.decision)]
    if part.manifest is None:
        return [*verdicts, Verdict(f"(every workload of {model})", RUN,
                                   ["the workloads are known once partition has run"])]
    objects = {}
    linked = link_check.linked_digests(ctx.project.model(model).library)
    for w in part.manifest.workloads:
        found, obj = _workload(ctx, model, w.name, part, linked)
        verdicts += found
        objects.update(obj)
    link = _link(ctx, model, part, objects, linked)
    return verdicts + ([link] if link is not None else [])
