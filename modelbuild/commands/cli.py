"""The modelbuild command line: schedule records and measurements (`python -m modelbuild --help`).

Building stays with doit (`doit build:<model>`); these commands make, check
and inspect the records a build uses, and time what it built. This module only
parses the arguments; each command is a module of this package with ``run(args)``,
imported when it is the one asked for.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from rich.markup import escape

from ..core.errors import BuildError
from ..graph.actions import internal_error
from .output import errors


def build_parser() -> argparse.ArgumentParser:
    from .sweep import CRITERIA, MODES

    parser = argparse.ArgumentParser(prog="python -m modelbuild", description=__doc__.split("\n\n")[0])
    parser.add_argument("--project", help="project directory (default: found upwards from here)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("tune", help="tune a model's workloads with MetaSchedule and write records")
    p.add_argument("model")
    p.add_argument("--workload", action="append", help="only this workload (repeatable)")
    p.add_argument("--all-workloads", action="store_true",
                   help="tune every workload with a reduction, not only those taking 99%% of "
                        "the time with the default schedule")
    p.add_argument("--trials", type=_positive,
                   help="at most this many measured trials per workload (total: this times the "
                        "workloads)")
    p.add_argument("--total-trials", type=_positive, default=64,
                   help="measured trials in all, placed by MetaSchedule's gradient task "
                        "scheduler, workloads weighted by their calls per run (default 64)")
    p.add_argument("--work-dir", help="MetaSchedule database directory "
                                      "(default: build/<model>/tuning)")
    p.add_argument("--target", default="llvm")
    p.add_argument("--mcpu", help="the CPU to build for with target llvm (default: this machine's), e.g. x86-64-v3")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--keep-if-faster", action=argparse.BooleanOptionalAction, default=True,
                   help="time each tuned record against the default schedule here and keep "
                        "it only if faster (default: on)")
    p.add_argument("--rpc", metavar="HOST:PORT",
                   help="measure on the devices of this TVM RPC tracker (candidates are still "
                        "built here); needs --key")
    p.add_argument("--key", help="with --rpc: the device key its servers registered with")
    p.add_argument("--json", action="store_true",
                   help="print the import's outcome as JSON (progress goes to stderr)")
    p.set_defaults(module="tune")

    p = sub.add_parser("import", help="import a MetaSchedule database into record files")
    p.add_argument("model")
    p.add_argument("work_dir", help="directory with database_workload.json and "
                                    "database_tuning_record.json")
    p.add_argument("--source", default="tuned", help="what to call these records (tuned/hand/...)")
    p.add_argument("--keep-if-faster", action="store_true",
                   help="time each record against the default schedule here; keep only faster ones")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--target", default="llvm")
    p.add_argument("--mcpu", help="the CPU to build for with target llvm (default: this machine's), e.g. x86-64-v3")
    p.set_defaults(module="import_records")

    p = sub.add_parser("export", help="write a model's records as a MetaSchedule JSONDatabase")
    p.add_argument("model")
    p.add_argument("out_dir")
    p.add_argument("--target", default="llvm")
    p.add_argument("--mcpu", help="the CPU to build for with target llvm (default: this machine's), e.g. x86-64-v3")
    p.set_defaults(module="export_records")

    p = sub.add_parser("sample", help="sample valid schedule variants of one workload "
                                      "(no measurement)")
    p.add_argument("model")
    p.add_argument("workload")
    p.add_argument("-n", "--count", type=_positive, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--target", default="llvm")
    p.add_argument("--mcpu", help="the CPU to build for with target llvm (default: this machine's), e.g. x86-64-v3")
    p.set_defaults(module="sample_variants")

    p = sub.add_parser("select", help="make one sampled variant the active record")
    p.add_argument("model")
    p.add_argument("workload")
    p.add_argument("variant", type=_variant, help="variant number, or 'default' for no record")
    p.set_defaults(module="select_variant")

    p = sub.add_parser("check", help="validate every record against the current model")
    p.add_argument("model")
    p.add_argument("--target", default="llvm")
    p.add_argument("--mcpu", help="the CPU to build for with target llvm (default: this machine's), e.g. x86-64-v3")
    p.set_defaults(module="check_records")

    p = sub.add_parser("inspect", help="list a model's workloads with their record status")
    p.add_argument("model")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--target", default="llvm")
    p.add_argument("--mcpu", help="the CPU to build for with target llvm (default: this machine's), e.g. x86-64-v3")
    p.set_defaults(module="inspect_records")

    p = sub.add_parser("explain", help="which model operators each workload computes; one "
                                       "workload's record, artifacts and time")
    p.add_argument("model")
    p.add_argument("workload", nargs="?", help="one workload (default: all of them)")
    p.add_argument("--node", help="which workload computes this operator (ONNX node name)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--target", default="llvm")
    p.add_argument("--mcpu", help="the CPU to build for with target llvm (default: this machine's), e.g. x86-64-v3")
    p.set_defaults(module="explain")

    p = sub.add_parser("watch", help="rebuild a model in one warm process on every edit")
    p.add_argument("model")
    p.add_argument("--bench", action="store_true", help="print end-to-end latency after each rebuild")
    p.add_argument("--target", default="llvm")
    p.add_argument("--mcpu", help="the CPU to build for with target llvm (default: this machine's), e.g. x86-64-v3")
    p.set_defaults(module="watch")

    p = sub.add_parser("why", help="dry run: which tasks the next build runs, and why")
    p.add_argument("model")
    p.add_argument("--target", help="the target the build would use (default: llvm)")
    p.add_argument("--mcpu", help="the CPU to build for with target llvm (default: this machine's), e.g. x86-64-v3")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(module="why")

    p = sub.add_parser("serve", help="warm build workers (Dask) for this project's builds, "
                                     "until Ctrl-C")
    p.add_argument("--workers", type=_positive, default=2, help="worker processes (default 2)")
    p.add_argument("--port", type=_natural, default=0,
                   help="the scheduler's port on 127.0.0.1 (default: any free one)")
    p.add_argument("--stop", action="store_true", help="stop the serve of this project")
    p.add_argument("--status", action="store_true", help="is one running, with which workers")
    p.set_defaults(module="serve")

    p = sub.add_parser("cache", help="the artifact cache: stats, prune --max-size SIZE, clear, "
                                     "keygen DIR (a key pair signing the remote cache)")
    p.add_argument("action", choices=("stats", "prune", "clear", "keygen"))
    p.add_argument("folder", nargs="?", help="keygen: where to write the key pair")
    p.add_argument("--max-size", help="prune: keep at most this much (e.g. 500M, 2G)")
    p.add_argument("--json", action="store_true", help="stats: machine-readable output")
    p.set_defaults(module="cache")

    p = sub.add_parser("bench", help="time the built library end to end and per workload")
    p.add_argument("model")
    p.add_argument("--runs", type=_positive, default=10, help="timed runs (default 10)")
    p.add_argument("--warmup", type=_natural, default=2, help="untimed runs first (default 2)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--build", action=argparse.BooleanOptionalAction, default=True,
                   help="run `doit build:<model>` first, so the library matches the records "
                        "(default: on)")
    p.add_argument("--target", default="llvm")
    p.add_argument("--mcpu", help="the CPU to build for with target llvm (default: this machine's), e.g. x86-64-v3")
    p.set_defaults(module="bench")

    p = sub.add_parser("sweep", help="build and benchmark the model once per variant of "
                                     "some workloads")
    p.add_argument("model")
    p.add_argument("--workload", action="append", required=True,
                   help="a workload whose variants to sweep (repeatable)")
    p.add_argument("--variants", help="comma-separated variant numbers, 'default' for no record "
                                      "(default: every sampled variant)")
    p.add_argument("--mode", choices=MODES, default="one-at-a-time",
                   help="with several workloads: vary one at a time, the others at their "
                        "active record (default), or build their cross product")
    p.add_argument("--max-builds", type=_positive, default=16,
                   help="refuse a plan of more builds than this (default 16)")
    p.add_argument("--select-fastest", action="store_true",
                   help="make the fastest variant(s) the active record; without it the active "
                        "records are restored as they were")
    p.add_argument("--by", choices=CRITERIA, default="latency",
                   help="fastest by end-to-end median latency (default), or by the swept "
                        "workloads' median time (steadier on a busy machine)")
    p.add_argument("--runs", type=_positive, default=10, help="timed runs per variant (default 10)")
    p.add_argument("--warmup", type=_natural, default=2, help="untimed runs first (default 2)")
    p.add_argument("--name", help="results go to build/<model>/sweeps/<name>.json and .png "
                                  "(default: the workload names)")
    p.add_argument("--json", action="store_true",
                   help="print the result (the saved JSON) on stdout; progress goes to stderr")
    p.add_argument("--target", default="llvm")
    p.add_argument("--mcpu", help="the CPU to build for with target llvm (default: this machine's), e.g. x86-64-v3")
    p.set_defaults(module="sweep")
    return parser


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, not {text!r}")
    return int(text)


def _variant(text: str) -> str:
    if text != "default" and not (text.isdigit() and int(text) >= 1):
        raise argparse.ArgumentTypeError(f"expected a variant number (1, 2, ...) or 'default', "
                                         f"not {text!r}")
    return text


def _natural(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, not {text!r}")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    """Parse, run one command, and say what went wrong on stderr: a BuildError as its
    message and hint (exit 1), anything else as an internal error (exit 2), Ctrl-C as
    "interrupted" (exit 130). Never a traceback, unless MODELBUILD_TRACEBACK=1."""
    args = build_parser().parse_args(argv)
    try:
        command = importlib.import_module(f"{__package__}.{args.module}")
        return command.run(args)
    except BuildError as err:
        errors.print(f"[red]{escape(str(err))}[/red]")
        return 1
    except KeyboardInterrupt:
        errors.print("interrupted")
        return 130
    except Exception as err:  # noqa: BLE001 - reported in words, never as a traceback
        errors.print(f"[red]{escape(internal_error(err, 'python -m modelbuild ' + args.command))}[/red]")
        return 2


if __name__ == "__main__":
    sys.exit(main())
