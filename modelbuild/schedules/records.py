"""Schedule records: one human-editable JSON file per workload.

    {
      "format": "modelbuild.record/1",
      "workload": "fused_conv2d_add_relu",
      "workload_hash": "1234567890",
      "target": {"kind": "llvm"},
      "run_secs": [0.00123],            # measured run time(s), or null
      "source": "tuned",                # tuned / sampled / hand (informational)
      "trace": [[instructions...], [decisions...]]   # Trace.as_json()
    }

Parsing and validating a record is plain JSON work: no TVM import.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..core import atomic, regular_file
from ..core.errors import BuildError
from ..targets.registry import TargetSpec

FORMAT = "modelbuild.record/1"
REQUIRED = ("format", "workload", "workload_hash", "target", "trace")
OPTIONAL = ("run_secs", "source", "model")


@dataclass(frozen=True)
class Record:
    path: Path | None
    workload: str
    workload_hash: str
    target: dict
    trace: list  # [instructions, decisions], as Trace.as_json() gives it
    run_secs: list[float] | None = None
    source: str | None = None
    model: str | None = None

    def to_json(self) -> dict:
        data = {
            "format": FORMAT,
            "model": self.model,
            "workload": self.workload,
            "workload_hash": self.workload_hash,
            "target": self.target,
            "source": self.source,
            "run_secs": self.run_secs,
            "trace": self.trace,
        }
        return {k: v for k, v in data.items() if v is not None or k == "run_secs"}

    def canonical(self) -> str:
        """What the record means, independent of formatting: equal iff the build is equal."""
        meaning = {"workload_hash": self.workload_hash, "target": self.target, "trace": self.trace}
        return json.dumps(meaning, sort_keys=True, separators=(",", ":"))


def _int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -2**31 < value < 2**31


# Deeper than any trace or target MetaSchedule writes; TVM's JSON reader recursed out of
# the stack on a value nested 900 deep.
MAX_DEPTH = 64


def depth(value) -> int:
    """How deeply lists and objects nest in ``value`` (0 for a number or a string)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, depth)
            todo.extend((x, depth + 1) for x in (item.values() if isinstance(item, dict) else item))
    return deepest


def trace_problem(trace) -> str | None:
    """What is wrong with a trace as ``Trace.as_json()`` gives it ([instructions,
    decisions]), or None: its shape, its depth, and the decisions TVM trusts (records
    here, and the lines of a MetaSchedule database that ``import`` reads)."""
    if not (isinstance(trace, list) and len(trace) == 2 and all(isinstance(t, list) for t in trace)):
        return "trace must be [instructions, decisions] as Trace.as_json() gives it"
    if depth(trace) > MAX_DEPTH:
        return f"the trace is nested more than {MAX_DEPTH} deep: no schedule is"
    return _decisions_problem(trace)


def _decisions_problem(trace: list) -> str | None:
    """What is wrong with the trace's decisions, or None. TVM trusts them: a null value, an
    instruction index out of range or a category past the candidates crashed the whole
    process (a segmentation fault, a corrupted heap) instead of failing the record."""
    insts, decisions = trace
    for index, inst in enumerate(insts):
        if (isinstance(inst, list) and len(inst) == 4 and inst[0] == "Split"
                and isinstance(inst[2], list) and len(inst[2]) > 1
                and inst[2][1] not in (False, 0)):  # a database writes 0 for false
            return (f"instruction {index} (Split) turns off the split's bounds check "
                    "(disable_predication): with factors that do not divide the loop, the "
                    "library would write past its buffers, and nothing checks that they do")
    seen = set()
    for d in decisions:
        if not (isinstance(d, list) and len(d) == 2 and _int(d[0])):
            return f"a decision must be [instruction index, value], not {json.dumps(d)[:60]}"
        index, value = d
        if not 0 <= index < len(insts):
            return (f"a decision names instruction {index}; the trace has {len(insts)} "
                    f"instructions (0 to {len(insts) - 1})")
        if index in seen:
            return f"two decisions for instruction {index}"
        seen.add(index)
        inst = insts[index]
        if not (isinstance(inst, list) and len(inst) == 4 and isinstance(inst[0], str)
                and isinstance(inst[2], list)):
            return f"instruction {index} is not [kind, inputs, attributes, outputs]"
        kind, attrs = inst[0], inst[2]
        ints = isinstance(value, list) and all(_int(v) for v in value)
        if not (_int(value) or ints):
            return (f"the decision of instruction {index} ({kind}) must be an integer or a list "
                    f"of integers, not {json.dumps(value)[:40]}")
        if kind == "SampleCategorical":
            count = len(attrs[0]) if attrs and isinstance(attrs[0], list) else 0
            if not (_int(value) and 0 <= value < count):
                return (f"the decision of instruction {index} (SampleCategorical) must pick one "
                        f"of its {count} candidates (0 to {count - 1}), not {json.dumps(value)}")
        elif kind in ("SamplePerfectTile", "SamplePartitionedTile"):
            n = attrs[0] if attrs and _int(attrs[0]) else None
            if not (ints and len(value) == n and all(v >= 1 for v in value)):
                return (f"the decision of instruction {index} ({kind}) must be {n} tile "
                        f"factors of at least 1, not {json.dumps(value)}")
        elif kind == "SampleComputeLocation" and not (_int(value) and value >= -2):
            return (f"the decision of instruction {index} (SampleComputeLocation) must be a "
                    f"loop index (-2 or more), not {json.dumps(value)}")
    return None


def _fail(path: Path, workload: str | None, message: str, hint: str | None = None):
    raise BuildError(message, file=path, workload=workload, hint=hint)


def parse(text: str, path: Path, expected_workload: str | None = None) -> Record:
    """A validated Record from JSON text; BuildError naming the file otherwise."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        _fail(path, expected_workload,
              f"invalid JSON at line {err.lineno}, column {err.colno}: {err.msg}",
              "fix the syntax, or restore the file from version control")
    except RecursionError:
        _fail(path, expected_workload, "JSON nested too deeply to be a record",
              "restore the file from version control")
    if not isinstance(data, dict):
        _fail(path, expected_workload, "a record must be a JSON object")
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        _fail(path, expected_workload, f"missing field(s): {', '.join(missing)}")
    unknown = sorted(set(data) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        _fail(path, expected_workload, f"unknown field(s): {', '.join(unknown)}")
    if data["format"] != FORMAT:
        _fail(path, expected_workload, f"format is {data['format']!r}, expected {FORMAT!r}")
    if expected_workload is not None and data["workload"] != expected_workload:
        _fail(path, expected_workload,
              f"the record is for workload '{data['workload']}', but its file name says "
              f"'{expected_workload}'", "rename the file after the workload it schedules")
    problem = trace_problem(data["trace"])
    if problem is not None:
        _fail(path, expected_workload, problem, "sample a valid record again "
              "(`python -m modelbuild sample`), or restore the file from version control")
    trace = data["trace"]
    if not isinstance(data["target"], dict) or "kind" not in data["target"]:
        _fail(path, expected_workload, "target must be a TVM target object with a 'kind'")
    if depth(data["target"]) > MAX_DEPTH:
        _fail(path, expected_workload, "target is nested too deeply to be a TVM target")
    for key in ("source", "model"):
        if data.get(key) is not None and not isinstance(data[key], str):
            _fail(path, expected_workload, f"{key} must be a string or null")
    run_secs = data.get("run_secs")
    if run_secs is not None and not (
        isinstance(run_secs, list)
        and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in run_secs)
    ):
        _fail(path, expected_workload, "run_secs must be a list of numbers or null")
    if run_secs and not all(0 <= x < FAILED_RUN_SECS for x in run_secs):  # NaN fails it too
        _fail(path, expected_workload,
              f"run_secs {run_secs} is no measured time (each must be at least 0 and below "
              f"{FAILED_RUN_SECS:g} s, MetaSchedule's mark of a run that failed: TVM's database "
              "drops such a record, so a build would not use it)",
              "set run_secs to null, or to the time measured")
    return Record(path, str(data["workload"]), str(data["workload_hash"]), data["target"], trace,
                  [float(x) for x in run_secs] if run_secs else None, data.get("source"),
                  data.get("model"))


# MetaSchedule's run time for a candidate that failed to build or run: a record with it
# is not one TVM's database returns.
FAILED_RUN_SECS = 1e10

# A record is a few KB; a schedule file this large is not one (and is not read whole).
MAX_BYTES = 16 << 20


def read(path: Path) -> bytes:
    """A record or schedule file's bytes: a regular file of at most MAX_BYTES (a pipe in its
    place made every command that read it wait forever; a link to /dev/zero read until
    memory ran out). Raises regular_file.NotRegular (a FileNotFoundError) or TooLarge."""
    return regular_file.read_limited(path, MAX_BYTES)


def unreadable(path: Path, err: OSError) -> str:
    """Why the file at ``path`` is no record, in words, for an error ``read`` raised."""
    if isinstance(err, regular_file.NotRegular):
        return ("a folder, not a record file" if path.is_dir()
                else "not a regular file (a pipe, a device or a socket), not a record file")
    if isinstance(err, FileNotFoundError):
        return "a link to a file that does not exist" if path.is_symlink() else "missing"
    return f"cannot be read: {err.strerror or type(err).__name__}"


def load(path: Path, expected_workload: str | None = None) -> Record:
    try:
        data = read(path)
    except OSError as err:
        raise BuildError(unreadable(path, err), file=path,
                         workload=expected_workload,
                         hint="put a record file there, or remove what is") from None
    return parse_bytes(data, path, expected_workload)


def parse_bytes(data: bytes, path: Path, expected_workload: str | None = None) -> Record:
    """A validated Record from the bytes read from ``path``; BuildError otherwise."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        _fail(path, expected_workload, "not a text file")
    # as Path.read_text reads it (universal newlines): error positions stay the same
    return parse(text.replace("\r\n", "\n").replace("\r", "\n"), path, expected_workload)


def check_target(record: Record, target: TargetSpec) -> None:
    kind = record.target.get("kind")
    if kind not in target.records_from:
        _fail(record.path, record.workload,
              f"the record was made for target '{kind}', this build is for '{target.name}'",
              "build with the record's target, or replace the record with one for this target")
    import tvm

    from ..core.errors import summarize

    try:
        tvm.target.Target(record.target)
    except Exception as err:  # noqa: BLE001 - TVM's reasons vary: ValueError, TVMError
        _fail(record.path, record.workload,
              f"target {json.dumps(record.target)[:120]} is not one TVM can make: "
              f"{summarize(err, limit=1)}",
              "restore the target the record was made for, or sample a record again")


def format_record(record: Record) -> str:
    """Pretty JSON for people: one trace instruction or decision per line."""
    data = record.to_json()
    trace = data.pop("trace")
    lines = ["{"]
    for key, value in data.items():
        lines.append(f"  {json.dumps(key)}: {json.dumps(value, sort_keys=True)},")
    insts, decisions = trace
    lines.append('  "trace": [')
    lines.append("    [")
    lines.append(",\n".join(f"      {json.dumps(i)}" for i in insts))
    lines.append("    ],")
    lines.append("    [")
    lines.append(",\n".join(f"      {json.dumps(d)}" for d in decisions))
    lines.append("    ]")
    lines.append("  ]")
    lines.append("}")
    return "\n".join(line for line in lines if line) + "\n"


def plain(obj):
    """TVM containers (Array, Map, String, IntImm, FloatImm) as plain JSON values.

    For traces and targets read from TVM; imports TVM only when given a TVM object."""
    if obj is None or isinstance(obj, (bool, int, float)):
        return obj
    if isinstance(obj, str):
        return str(obj)
    import tvm

    if isinstance(obj, tvm.tirx.IntImm):
        return int(obj.value)
    if isinstance(obj, tvm.tirx.FloatImm):
        return float(obj.value)
    if hasattr(obj, "items"):
        return {str(k): plain(v) for k, v in obj.items()}
    return [plain(x) for x in obj]


def save(path: Path, record: Record) -> None:
    atomic.write_text(path, format_record(record))
