"""`python -m modelbuild select`: make one sampled variant the active record."""

from __future__ import annotations

import argparse

from ..schedules import variants
from . import options
from .output import console
from .workspace import resolve_model

HELP = "make one sampled variant the active record"


def arguments(p: argparse.ArgumentParser) -> None:
    """This command's arguments (``python -m modelbuild select --help``)."""
    options.model(p)
    p.add_argument("workload")
    p.add_argument("variant", type=options.variant,
                   help="variant number, 'default' for no record, or a compute of the "
                        "workload (e.g. winograd: the default schedule on it)")


def run(args) -> int:
    layout = resolve_model(args).layout
    if not args.variant.isdigit() and args.variant != "default":
        path = variants.select_compute(layout, args.workload, args.variant)
        console.print(f"{args.workload}: builds the {args.variant} compute with the default "
                      f"schedule" + (f" ({path})" if path.is_file() else ""))
        return 0
    k = None if args.variant == "default" else int(args.variant)
    path = variants.select(layout, args.workload, k)
    if k is None:
        console.print(f"{args.workload}: no active record; builds with the target's default schedule")
    else:
        console.print(f"{args.workload}: variant {k} is now {path}")
    return 0
