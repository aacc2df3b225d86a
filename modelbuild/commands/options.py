"""The options several commands share, each declared once, and the argument types.

A command module declares its own arguments in ``arguments(parser)`` beside its
``run(args)``, calling these for the shared ones (as doit's commands list shared
option dicts in their ``cmd_options``).
"""

from __future__ import annotations

import argparse

from ..measure import RUNS_MAX
from ..targets.registry import DEFAULT_TARGET


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, not {text!r}")
    return int(text)


SEED_MAX = 2**31 - 1  # TVM's random seeds are 1 to 2^31 - 1
SAMPLES_MAX = 1000    # variants one `sample` makes (all are sampled before any is written)


def seed(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"expected a seed from 1 to {SEED_MAX}, not {text!r}")
    return int(text)


def _at_most(parse, maximum: int, what: str):
    """``parse`` (positive, natural) refusing a number past ``maximum`` ("at most N what")."""
    def check(text: str) -> int:
        count = parse(text)
        if count > maximum:
            raise argparse.ArgumentTypeError(f"at most {maximum} {what}, not {text}")
        return count
    return check


def port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"expected a port from 0 (any free one) to 65535, "
                                         f"not {text!r}")
    return int(text)


def natural(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, not {text!r}")
    return int(text)


sample_count = _at_most(positive, SAMPLES_MAX, "variants at a time")
runs = _at_most(positive, RUNS_MAX, "runs")
warmup = _at_most(natural, RUNS_MAX, "warm-up runs")


def variant(text: str) -> str:
    """A variant number, 'default', or a compute's name (a word: winograd, direct)."""
    if text != "default" and not (text.isdigit() and int(text) >= 1) \
            and not text.isidentifier():
        raise argparse.ArgumentTypeError(f"expected a variant number (1, 2, ...), 'default' or "
                                         f"a compute (e.g. winograd), not {text!r}")
    return text


def text(value: str) -> str:
    """A name or path given on the command line: not empty (an empty one was taken for
    'not given', and the default used)."""
    if not value.strip():
        raise argparse.ArgumentTypeError("expected a value, not an empty string")
    return value


def model(parser: argparse.ArgumentParser) -> None:
    """The model a command works on (positional): models/<model>.onnx or .toml."""
    parser.add_argument("model", type=text,
                        help="the model: models/<model>.onnx or models/<model>.toml")


def target(parser: argparse.ArgumentParser) -> None:
    """--target and --mcpu: the target the command builds (or would build) for."""
    parser.add_argument("--target", type=text, default=DEFAULT_TARGET,
                        help=f"the target to build for (default: {DEFAULT_TARGET})")
    parser.add_argument("--mcpu", type=text,
                        help="the CPU to build for with target llvm (default: this machine's), "
                             "e.g. x86-64-v3")


def json_output(parser: argparse.ArgumentParser, help: str = "machine-readable output") -> None:
    parser.add_argument("--json", action="store_true", help=help)


def timing(parser: argparse.ArgumentParser, runs_help: str = "timed runs (default 10)") -> None:
    """--runs and --warmup of a command that times the library."""
    parser.add_argument("--runs", type=runs, default=10, help=f"{runs_help}; at most {RUNS_MAX}")
    parser.add_argument("--warmup", type=warmup, default=2,
                        help="untimed runs first (default 2)")
