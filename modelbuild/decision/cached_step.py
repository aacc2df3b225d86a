"""A build step whose output is found by content: current, restored from the cache, or built.

doit keys its state by task name, so going back to an earlier record would
rebuild under doit alone. Steps here decide for themselves, from the digest
of their inputs (fingerprint.py). ``Step.decide`` is the one decision: doit's
``uptodate`` check (``Uptodate``, in the main process once the step's upstream
tasks ran) acts on it, restoring the output when the cache has it, and
``python -m modelbuild why`` reports it without acting: asked to explain, the decision
carries its reasons (the step's ``why``, from reasons.py), so `why` prints the verdict and
the words of the very check the build makes. When the answer is "run", doit runs
``build``, which compiles and fills the cache.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from ..cache.remote import FORGED, UNSIGNED
from ..cache.store import LOCAL, UNKNOWN_ORIGIN, UNSIGNED_DOWNLOAD, Cache, Found, provenance
from ..core import atomic, interrupts, regular_file
from ..core.digest import file_digest
from ..core.errors import BuildError
from . import fingerprint

CURRENT, RESTORE, RUN = "current", "restore", "run"
MODIFIED = "output modified since it was built"  # the words reasons.py uses
# why an intact output is not kept (cache.Cache.output_distrusted), in `why`'s words
DISTRUST_WORDS = {
    UNSIGNED: "restored from an unsigned remote entry; a public key is now set "
              "(remote-cache-public-key): not trusted, made again",
    FORGED: "restored from a remote entry that remote-cache-public-key does not verify "
            "(signed with another key, or the key changed since): made again",
    UNKNOWN_ORIGIN: "made by an earlier modelbuild, whose stamp does not say whether it came "
                    "from a verified download; a public key is set: made again",
}


@dataclass(frozen=True)
class FileOutput:
    """A step's output that is one file: the cache holds its bytes."""

    path: Path

    def pack(self) -> bytes:
        return regular_file.read_bytes(self.path)

    def unpack(self, payload: bytes) -> None:
        atomic.write_bytes(self.path, payload)

    def digest(self) -> str | None:
        """What the stamp records of the output; None when it is missing or damaged."""
        try:
            return file_digest(self.path)
        except OSError:
            return None


@dataclass(frozen=True)
class Decision:
    """What the next build does with a step, and what it knows on the way."""

    action: str                  # CURRENT, RESTORE or RUN
    inputs: dict | None          # the step's inputs now (None: an input file is missing)
    payload: bytes | None = None  # RESTORE: the cached output
    corrupt: bool = False        # RUN: the cache had an entry, but it is damaged
    source: str = LOCAL          # RESTORE: which tier has it (cache.LOCAL or cache.REMOTE)
    corrupt_remote: bool = False  # the remote tier's entry is damaged
    origin: str | None = None    # RESTORE: where the entry came from (cache.Found.origin)
    reasons: tuple[str, ...] = ()  # asked to explain, and not CURRENT: why, in words
    distrusted: str | None = None  # the output matches its stamp, but not where it came
    #                                from (cache.Cache.output_distrusted): why, a REASONS key


@dataclass(frozen=True)
class Step:
    """One cached step: ``kind`` names its cache section (steps/kinds.py: "partition", "lowered",
    "object"). ``output`` is the file the stamp is beside; ``store`` packs and unpacks what
    the step makes (by default that one file); ``why(step, stamp, decision)`` says in words
    why it is not current (reasons.py; picklable: a partial)."""

    task: str
    kind: str
    cache: Cache
    output: Path
    inputs: Callable[[], dict]  # reads the step's input files; picklable (a partial)
    store: object = None        # FileOutput(output) when None; see FileOutput for the protocol
    why: Callable | None = None  # (step, stamp, decision) -> list of reasons

    @property
    def artifact(self):
        return self.store if self.store is not None else FileOutput(self.output)

    @property
    def _check(self):
        """What a cache entry must be to be used (the artifact's ``check``, if it has one)."""
        return getattr(self.artifact, "check", None)

    def current_inputs(self) -> dict | None:
        try:
            return self.inputs()
        except FileNotFoundError:
            return None

    def is_current(self, inputs: dict) -> bool:
        return self._intact(inputs) and self._distrusted() is None

    def _intact(self, inputs: dict) -> bool:
        """Whether the output is the one its stamp says was made from ``inputs``."""
        stamp = fingerprint.read_stamp(self.output)
        if stamp is None or stamp["key"] != fingerprint.key(inputs):
            return False
        digest = self.artifact.digest()
        return digest is not None and digest == stamp.get("output_sha256")

    def _distrusted(self) -> str | None:
        """Why the output, intact, must still not be kept (it came from a download the
        project's public key does not verify, which a key set or changed since may make so);
        None to keep it. A stamp is read, nothing hashed."""
        stamp = fingerprint.read_stamp(self.output) or {}
        if "key" not in stamp:
            return None
        return self.cache.output_distrusted(self.kind, stamp["key"],
                                            stamp.get("origin", ()))

    def decide(self, explain: bool = False) -> Decision:
        """Current (output matches its stamp and the inputs), restore (the cache, local or
        remote, has the output for these inputs) or run. Nothing is written or logged.
        ``explain``: a decision other than current carries its reasons (as doit's
        ``get_status(get_log=True)``); the build's uptodate check does not ask."""
        decision = self._decide()
        if not explain or decision.action == CURRENT or self.why is None:
            return decision
        reasons = self.why(self, fingerprint.read_stamp(self.output), decision)
        if decision.distrusted is not None:  # intact, and kept until now: say why no more
            reasons = [DISTRUST_WORDS.get(decision.distrusted, decision.distrusted),
                       *(r for r in reasons if r != MODIFIED)]
        return replace(decision, reasons=tuple(reasons))

    def _decide(self) -> Decision:
        inputs = self.current_inputs()
        if inputs is None:
            return Decision(RUN, None)
        distrusted = None
        if self._intact(inputs):
            distrusted = self._distrusted()
            if distrusted is None:
                return Decision(CURRENT, inputs)
        found = self.cache.peek(self.kind, fingerprint.key(inputs), check=self._check)
        if found.payload is not None:
            return Decision(RESTORE, inputs, found.payload, found.corrupt_local, found.source,
                            found.corrupt_remote, origin=found.origin, distrusted=distrusted)
        return Decision(RUN, inputs, corrupt=found.corrupt_local,
                        corrupt_remote=found.corrupt_remote, distrusted=distrusted)

    def _stamp(self, inputs: dict, origin: dict | None = None) -> None:
        """``origin``: where the output came from (cache.provenance; None: made here)."""
        fingerprint.write_stamp(self.output, inputs, self.artifact.digest(), origin)

    def restore(self, inputs: dict, payload: bytes, source: str = LOCAL,
                origin: str | None = None) -> None:
        """Put the cached ``payload`` for ``inputs`` in place, with its stamp, which says
        where it came from (``origin``: cache.Found.origin); a payload from the remote tier
        is kept in the local cache too, with its origin."""
        key = fingerprint.key(inputs)
        if source != LOCAL:
            origin = origin or UNSIGNED_DOWNLOAD
        self.artifact.unpack(payload)
        self._stamp(inputs, provenance(origin, payload))
        if source == LOCAL:
            self.cache.used_local(self.kind, key, payload, origin)
        else:
            self.cache.put_local(self.kind, key, payload, origin)
        self.cache.log("hit", self.kind, key, source)

    def _made_by_a_step(self, filename) -> bool:
        """Whether a missing input is a build output (in the project's build folder, where
        this step's output is too), not a source file of the model."""
        build = next((p for p in self.output.parents if p.name == "build"), None)
        try:
            return build is not None and Path(filename).resolve().is_relative_to(build.resolve())
        except (OSError, TypeError, ValueError):
            return True

    def build(self, compute: Callable, *args) -> None:
        """The task's action: restore if another process filled the local entry meanwhile
        (the remote tier was asked by the uptodate check just before), else
        ``compute(*given, *args)`` (which writes the output) and store the result.

        Each input is read once (issue 19): ``given`` is what ``self.inputs()`` read to
        describe them (fingerprint.Inputs: the bytes, the parsed record; empty for a step
        whose compute reads its own files), so the key, the output and the stamp all come
        from the same bytes, whatever is edited meanwhile."""
        try:
            inputs = self.inputs()
        except FileNotFoundError as err:
            made = self._made_by_a_step(err.filename)
            raise BuildError(f"{self.task}: its input {err.filename} is missing",
                             hint="build the model again (`doit build:<model>`): the step that "
                                  "makes it reruns when its output is gone" if made else
                                  "it is a source file of the model, which no step makes: put "
                                  "it back (an ONNX model's external data lies beside it)"
                             ) from None
        key = fingerprint.key(inputs)
        found = self.cache.peek(self.kind, key, remote=False, check=self._check)
        self.cache.report_damage(self.kind, key, found)
        if found.payload is not None:
            self.restore(inputs, found.payload, found.source, found.origin)
            return
        self.cache.log("miss", self.kind, key)
        compute(*getattr(inputs, "given", ()), *args)
        interrupts.check()  # a Ctrl-C the step's work swallowed: keep nothing it made
        payload = self.artifact.pack()
        # An input edited while building: no stamp, no entry; the next run rebuilds (an
        # extra check: the output is already the read inputs' own, given to compute above).
        if self.inputs() != inputs:
            return
        self.cache.put(self.kind, key, payload)
        self._stamp(inputs)


FROM_CACHE = "modelbuild_from_cache"  # set on a doit Task whose output was restored


def restored_from_cache(task) -> str | None:
    """Which cache tier the uptodate check of this doit task restored its output from
    (cache.LOCAL or cache.REMOTE), None when it did not."""
    return getattr(task, FROM_CACHE, None) or None


@dataclass(frozen=True)
class Uptodate:
    """doit ``uptodate`` check of a Step (or of a link, link_check.Link: the same
    ``decide``, which never restores): acts on ``Step.decide``. doit passes the task
    (its first parameter is named ``task``), which is marked when its output was restored
    from the cache, for the reporter."""

    step: Step
    restore: bool = True  # False: a step its cache entry would restore counts as to run

    def __call__(self, task) -> bool:
        try:
            decision = self.step.decide()
        except Exception:  # noqa: BLE001 - cannot tell: run the step, which reports the cause
            return False
        if decision.action == CURRENT:
            return True
        if decision.corrupt or decision.corrupt_remote:
            self.step.cache.report_damage(self.step.kind, fingerprint.key(decision.inputs), Found(
                corrupt_local=decision.corrupt, corrupt_remote=decision.corrupt_remote))
        if decision.action == RESTORE and self.restore:
            try:
                self.step.restore(decision.inputs, decision.payload, decision.source,
                                  decision.origin)
            except (OSError, BuildError):  # cannot be put in place (a folder in the way, a
                return False  # full disk): the step runs, and its own failure says why
            setattr(task, FROM_CACHE, decision.source)
            return True
        return False
