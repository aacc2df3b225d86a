"""A build step whose output is found by content: current, restored from the cache, or built.

doit keys its state by task name, so going back to an earlier record would
rebuild under doit alone. Steps here decide for themselves, from the digest
of their inputs (fingerprint.py). ``Step.decide`` is the one decision: doit's
``uptodate`` check (``Uptodate``, in the main process once the step's upstream
tasks ran) acts on it, restoring the output when the cache has it, and
``python -m modelbuild why`` reports it without acting. When the answer is
"run", doit runs ``build``, which compiles and fills the cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..core import atomic
from ..core.digest import bytes_digest
from ..core.errors import BuildError
from . import fingerprint
from .cache import Cache

CURRENT, RESTORE, RUN = "current", "restore", "run"


@dataclass(frozen=True)
class Decision:
    """What the next build does with a step, and what it knows on the way."""

    action: str                  # CURRENT, RESTORE or RUN
    inputs: dict | None          # the step's inputs now (None: an input file is missing)
    payload: bytes | None = None  # RESTORE: the cached output
    corrupt: bool = False        # RUN: the cache had an entry, but it is damaged


@dataclass(frozen=True)
class Step:
    """One cached step: ``kind`` names its cache section ("lowered", "object")."""

    task: str
    kind: str
    cache: Cache
    output: Path
    inputs: Callable[[], dict]  # reads the step's input files; picklable (a partial)

    def current_inputs(self) -> dict | None:
        try:
            return self.inputs()
        except FileNotFoundError:
            return None

    def decide(self) -> Decision:
        """Current (output matches its stamp and the inputs), restore (the cache has the
        output for these inputs) or run. Reads only: nothing is written or logged."""
        inputs = self.current_inputs()
        if inputs is None:
            return Decision(RUN, None)
        if fingerprint.is_current(self.output, inputs):
            return Decision(CURRENT, inputs)
        exists, payload = self.cache.peek(self.kind, fingerprint.key(inputs))
        if payload is not None:
            return Decision(RESTORE, inputs, payload)
        return Decision(RUN, inputs, corrupt=exists)

    def restore(self, inputs: dict, payload: bytes) -> None:
        """Put the cached ``payload`` for ``inputs`` in place, with its stamp."""
        key = fingerprint.key(inputs)
        atomic.write_bytes(self.output, payload)
        fingerprint.write_stamp(self.output, inputs, bytes_digest(payload))
        self.cache.touch(self.kind, key)
        self.cache.log("hit", self.kind, key)

    def build(self, compute: Callable, *args) -> None:
        """The task's action: restore if another process filled the entry meanwhile,
        else ``compute(*args)`` (which writes the output) and store the result."""
        try:
            inputs = self.inputs()
        except FileNotFoundError as err:
            raise BuildError(f"{self.task}: its input {err.filename} is missing",
                             hint="build the model again (`doit build:<model>`): the step that "
                                  "makes it reruns when its output is gone") from None
        key = fingerprint.key(inputs)
        payload = self.cache.get(self.kind, key)
        if payload is not None:
            self.restore(inputs, payload)
            return
        self.cache.log("miss", self.kind, key)
        compute(*args)
        payload = self.output.read_bytes()
        if self.inputs() != inputs:
            return  # an input was edited while building: no stamp, no entry; next run rebuilds
        self.cache.put(self.kind, key, payload)
        fingerprint.write_stamp(self.output, inputs, bytes_digest(payload))


FROM_CACHE = "modelbuild_from_cache"  # set on a doit Task whose output was restored


def restored_from_cache(task) -> bool:
    """Whether the uptodate check of this doit task restored its output from the cache."""
    return bool(getattr(task, FROM_CACHE, False))


@dataclass(frozen=True)
class Uptodate:
    """doit ``uptodate`` check of a Step: acts on ``Step.decide``. doit passes the task
    (its first parameter is named ``task``), which is marked when its output was restored
    from the cache, for the reporter."""

    step: Step

    def __call__(self, task) -> bool:
        try:
            decision = self.step.decide()
        except Exception:  # noqa: BLE001 - cannot tell: run the step, which reports the cause
            return False
        if decision.action == CURRENT:
            return True
        if decision.action == RESTORE:
            self.step.restore(decision.inputs, decision.payload)
            setattr(task, FROM_CACHE, True)
            return True
        if decision.corrupt:
            self.step.cache.discard_corrupt(self.step.kind, fingerprint.key(decision.inputs))
        return False
