"""A crafted partition entry on a remote a project trusts without a key (issue 37, items 1-3).

Without ``remote-cache-public-key`` a project uses the remote's unsigned entries, so a
partition entry that is intact (every file the size and sha256 its manifest lists) but not
what partition writes must be refused by the entry's check: not kept in the local cache
(where it failed every build until `cache clear`), partition run here, and the library a
clean build's. The remote is a file:// folder holding the clean build's entries.
"""

from __future__ import annotations

import hashlib
import shutil

import msgpack
import pytest
from conftest import sha256
from test_cache_trust import MANIFEST, _partition_entry, _rewrap, _unframe
from test_remote_cache import _checkout, _file_remote

from modelbuild.steps.partition_output import entry_problem


def _listed_again(files: dict, man: dict) -> None:
    """The manifest's sizes and digests made those of ``files`` again: the entry is intact."""
    for out in man["outputs"]:
        out[1], out[2] = len(files[out[0]]), hashlib.sha256(files[out[0]]).hexdigest()


def _garbage_tir(files, man):
    files["workloads/mean.json"] = b"garbage, not TVM's JSON"
    _listed_again(files, man)


def _garbage_graph_object(files, man):
    files["graph/graph1.o"] = b"not an object file at all"
    _listed_again(files, man)


def _renamed(files, man, old: str, new: str) -> None:
    for w in man["workloads"]:
        w[0] = new if w[0] == old else w[0]
    for out in man["outputs"]:
        out[0] = f"workloads/{new}.json" if out[0] == f"workloads/{old}.json" else out[0]
    files[f"workloads/{new}.json"] = files.pop(f"workloads/{old}.json")


def _size_a_string(files, man):
    man["outputs"][0][1] = str(man["outputs"][0][1])


def _hash_a_number(files, man):
    man["workloads"][0][1] = 12345


def _shape_a_map(files, man):
    man["inputs"][0][1] = {str(i): d for i, d in enumerate(man["inputs"][0][1])}


CRAFTED = {
    # item 1: lower failed with "internal error ... JSONDecodeError" on every build
    "garbage-tir": _garbage_tir,
    "garbage-graph-object": _garbage_graph_object,
    # item 2: converted (int("123"), tuple of a map's keys) or taken as it was
    "size-a-string": _size_a_string,
    "hash-a-number": _hash_a_number,
    "shape-a-map": _shape_a_map,
    # item 3: a name the build's paths refuse: a traceback on every build
    "escape-in-a-workload-name": lambda f, m: _renamed(f, m, "mean", "mean\x1b[2J\x07"),
}


@pytest.mark.slow
@pytest.mark.parametrize("what", sorted(CRAFTED))
def test_a_crafted_partition_entry_is_refused_and_not_kept(tiny_built, tmp_path, what):
    shutil.copytree(tiny_built.root / "build" / ".cache", tmp_path / "shared")
    remote = _file_remote(tmp_path / "shared")
    entry = _partition_entry(tmp_path / "shared")
    files = msgpack.unpackb(_unframe(entry))
    man = msgpack.unpackb(files[MANIFEST])
    CRAFTED[what](files, man)
    files[MANIFEST] = msgpack.packb(man)
    _rewrap(entry, files)

    victim = _checkout(tiny_built, tmp_path / "victim")
    run = victim.doit("build:tiny", env=remote.build_env(mode="read"))
    assert "partition:tiny" in run.ran, run.output
    assert f"remote cache entry partition/{entry.name} was corrupt" in run.output
    assert sha256(victim.library("tiny")) == sha256(tiny_built.library("tiny"))
    # nothing of it was kept: without the remote, the next build is a warm one
    shutil.rmtree(victim.root / "build" / "tiny")
    again = victim.doit("build:tiny")
    assert again.ran == {"link:tiny"} and "partition:tiny" in again.from_cache, again.output
    assert sha256(victim.library("tiny")) == sha256(tiny_built.library("tiny"))


def _entry(tiny_built, edit) -> bytes:
    (path,) = (tiny_built.root / "build" / ".cache").glob("partition/??/*")
    files = msgpack.unpackb(_unframe(path))
    man = msgpack.unpackb(files[MANIFEST])
    edit(files, man)
    files[MANIFEST] = msgpack.packb(man)
    return msgpack.packb(files)


def _huge_compute_name(files, man):
    old = next(out for out in man["outputs"] if out[0].startswith("computes/"))
    workload = old[0].removeprefix("computes/").partition("@")[0]
    new = f"computes/{workload}@{'c' * 100_000}.json"
    files[new] = files.pop(old[0])
    old[0] = new


def _control_characters(files, man):
    _renamed(files, man, "mean", "mean\x1b[2J\x07")
    files["workloads/mean\x1b[2J\x07.json"] += b" "  # and not the file listed


@pytest.mark.parametrize("edit", [_huge_compute_name, _control_characters])
def test_why_an_entry_is_refused_names_its_file_shortened_and_escaped(tiny_built, edit):
    """The reason is printed (an executor's worker sending such a bundle back, a restore):
    a 100 KB name was echoed whole, an escape sequence raw."""
    problem = entry_problem(_entry(tiny_built, edit))
    assert problem is not None
    assert len(problem) < 300, len(problem)
    assert problem.isprintable(), problem
