"""A build step whose output is found by content: up to date, restored from the
cache, or built and stored.

doit keys its state by task name, so going back to an earlier record would
rebuild under doit alone. Steps here decide for themselves, from the digest
of their inputs (fingerprint.py): doit asks ``Uptodate`` (in the main
process, once the step's upstream tasks ran), which says yes when the output
is current or was just restored from the cache; otherwise doit runs
``build``, which compiles and fills the cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import atomic, fingerprint
from .cache import Cache, digest

# Names of the tasks whose output this process restored from the cache (for the reporter).
restored: set[str] = set()


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

    def restore(self, inputs: dict) -> bool:
        """Put the cached output for ``inputs`` in place; False when there is none."""
        key = fingerprint.key(inputs)
        payload = self.cache.get(self.kind, key)
        if payload is None:
            return False
        atomic.write_bytes(self.output, payload)
        fingerprint.write_stamp(self.output, inputs, digest(payload))
        self.cache.log("hit", self.kind, key)
        restored.add(self.task)
        return True

    def build(self, compute: Callable, *args) -> None:
        """The task's action: restore if another process filled the entry meanwhile,
        else ``compute(*args)`` (which writes the output) and store the result."""
        inputs = self.inputs()
        if self.restore(inputs):
            return
        self.cache.log("miss", self.kind, fingerprint.key(inputs))
        compute(*args)
        payload = self.output.read_bytes()
        if self.inputs() != inputs:
            return  # an input was edited while building: no stamp, no entry; next run rebuilds
        self.cache.put(self.kind, fingerprint.key(inputs), payload)
        fingerprint.write_stamp(self.output, inputs, digest(payload))


@dataclass(frozen=True)
class Uptodate:
    """doit ``uptodate`` check of a Step (no arguments: doit passes none)."""

    step: Step

    def __call__(self) -> bool:
        inputs = self.step.current_inputs()
        if inputs is None:
            return False
        return fingerprint.is_current(self.step.output, inputs) or self.step.restore(inputs)
