"""The modelbuild command line: schedule records and measurements (`python -m modelbuild --help`).

Building stays with doit (`doit build:<model>`); these commands make, check
and inspect the records a build uses, and time what it built. Each command is a
module of this package declaring ``HELP``, ``arguments(parser)`` and ``run(args)``;
this module puts them together and runs the one asked for.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from rich.markup import escape

from ..core.errors import BuildError
from ..graph.actions import internal_error, is_machine_error, machine_error
from . import options
from .output import errors


# The commands in the order --help lists them: (name, module of this package).
COMMANDS = (("tune", "tune"), ("import", "import_records"), ("export", "export_records"),
            ("sample", "sample_variants"), ("select", "select_variant"),
            ("check", "check_records"), ("inspect", "inspect_records"), ("explain", "explain"),
            ("watch", "watch"), ("why", "why"), ("serve", "serve"), ("cache", "cache"),
            ("bench", "bench"), ("sweep", "sweep"))


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command: each module's ``HELP`` and ``arguments(parser)``."""
    parser = argparse.ArgumentParser(prog="python -m modelbuild", description=__doc__.split("\n\n")[0])
    parser.add_argument("--project", type=options.text,
                        help="project directory (default: found upwards from here)")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, module_name in COMMANDS:
        module = importlib.import_module(f"{__package__}.{module_name}")
        command = sub.add_parser(name, help=module.HELP)
        module.arguments(command)
        command.set_defaults(module=module_name)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse, run one command, and say what went wrong on stderr: a BuildError as its
    message and hint (exit 1), anything else as an internal error (exit 2), Ctrl-C as
    "interrupted" (exit 130). Never a traceback, unless MODELBUILD_TRACEBACK=1."""
    where = "python -m modelbuild"
    try:
        args = build_parser().parse_args(argv)  # imports every command module
        where += " " + args.command
        return importlib.import_module(f"{__package__}.{args.module}").run(args)
    except BuildError as err:
        errors.print(f"[red]{escape(str(err))}[/red]")
        return 1
    except KeyboardInterrupt:
        errors.print("interrupted")
        return 130
    except BrokenPipeError:  # `... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 141  # as a shell reports a process ended by SIGPIPE
    except Exception as err:  # noqa: BLE001 - reported in words, never as a traceback
        if is_machine_error(err):  # a full disk, a read-only folder: not a bug
            errors.print(f"[red]{escape(machine_error(err, where, step=False))}[/red]")
            return 1
        errors.print(f"[red]{escape(internal_error(err, where))}[/red]")
        return 2


if __name__ == "__main__":
    sys.exit(main())
