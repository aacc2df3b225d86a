"""`python -m modelbuild select`: make one sampled variant the active record."""

from __future__ import annotations

import argparse

from ..core.digits import is_decimal
from ..core.errors import BuildError, no_workload
from ..graph import build_lock
from ..schedules import active, variants
from . import options
from .output import console
from .workspace import resolve_model

HELP = "make one sampled variant the active record"


def check_selectable(project, layout, workload: str) -> None:
    """A BuildError unless ``workload``'s active record is the user's to choose now: the
    model is partitioned (its workloads and their computes are known), has the workload,
    schedules it with no Python file (which would stay active beside the JSON), and no sweep
    of the model runs (it puts its own variants in place, then the records it saw)."""
    build_lock.refuse_during_sweep(project, layout.name, "select")
    if not layout.workloads_dir.is_dir():
        raise BuildError(f"model '{layout.name}' is not partitioned yet: its workloads and "
                         "their computes are known once it is",
                         hint=f"doit build:{layout.name} (or doit partition:{layout.name}), "
                              "then select")
    if not layout.workload(workload).is_file():
        raise no_workload(layout.name, workload)
    python = active.python_file(layout, workload)
    if python is not None:
        raise BuildError("the workload is scheduled by a Python file, which stays active "
                         "whatever JSON record is selected", file=python,
                         workload=workload, hint="move the .py record aside to select a variant")


def arguments(p: argparse.ArgumentParser) -> None:
    """This command's arguments (``python -m modelbuild select --help``)."""
    options.model(p)
    p.add_argument("workload")
    p.add_argument("variant", type=options.variant,
                   help="variant number, 'default' for no record, or a compute of the "
                        "workload (e.g. winograd: the default schedule on it)")


def _keep_active(layout, workload: str) -> None:
    """The user's own active record (no variant's copy) becomes a variant before another
    replaces it: `select` overwrote (or, for default, deleted) a hand-edited record."""
    kept = variants.keep_active(layout, workload)
    if kept is not None:
        console.print(f"{workload}: the active record was no variant's copy; kept as variant "
                      f"{kept} ({layout.variants_dir(workload) / f'{kept}.json'}): "
                      f"`python -m modelbuild select {layout.name} {workload} {kept}` makes it "
                      "active again")


def run(args) -> int:
    from .sweep_records import recover

    ws = resolve_model(args)
    layout = ws.layout
    check_selectable(ws.project, layout, args.workload)
    recovered = recover(layout)  # a killed sweep's: before this choice, never after it
    if recovered:
        console.print(f"a sweep of {layout.name} was killed before it put back the active "
                      f"records it found: {'; '.join(recovered)}")
    digits = args.variant.isascii() and args.variant.isdigit()
    if digits and not is_decimal(args.variant):  # more digits than any variant's name has
        variants.require(layout, args.workload, args.variant)
    if not digits and args.variant != "default":
        variants.check_computes(layout, args.workload, [args.variant])
        _keep_active(layout, args.workload)
        path = variants.select_compute(layout, args.workload, args.variant)
        console.print(f"{args.workload}: builds the {args.variant} compute with the default "
                      f"schedule" + (f" ({path})" if path.is_file() else ""))
        return 0
    k = None if args.variant == "default" else int(args.variant)
    if k is not None:
        variants.require(layout, args.workload, k)  # before the active record is kept
    _keep_active(layout, args.workload)
    path = variants.select(layout, args.workload, k)
    if k is None:
        console.print(f"{args.workload}: no active record; builds with the target's default schedule")
    else:
        console.print(f"{args.workload}: variant {k} is now {path}")
    return 0
