"""A cache's entries as files (issue 37): a file:// store's folders replaced by links, and
entries of gigabytes behind an intact header, in the remote and in the local cache.

Real stores as in test_remote_cache.py (a folder, file://), real doit builds of the tiny
model; every library is compared with the clean build's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from conftest import Project, sha256
from test_remote_cache import _checkout, _file_remote

from modelbuild.cache import entry_format

pytestmark = pytest.mark.slow  # doit builds


def _files_under(folder) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("linked", ["object shard", "object", "partition"])
def test_a_link_in_a_shared_store_sends_no_upload_outside_it(tiny_built, tmp_path, linked):
    """A kind folder (remote/partition) or a shard (remote/object/8d) made a link to an
    outside folder: a read-write build wrote its entries (and a shard folder) there."""
    store, outside = tmp_path / "shared-cache", tmp_path / "outside"
    remote = _file_remote(store)
    outside.mkdir()
    if linked == "object shard":
        shard = sorted((tiny_built.root / "build" / ".cache" / "object").iterdir())[0].name
        (store / "object").mkdir()
        link = store / "object" / shard
    else:
        link = store / linked
    link.symlink_to(outside, target_is_directory=True)

    project = _checkout(tiny_built, tmp_path / "ci")
    run = project.doit("build:tiny", env=remote.build_env())
    assert _files_under(outside) == [], run.output
    component = str(link.relative_to(store))
    warning = (f"warning: remote cache {store.as_uri()}: {component} is a symbolic link, not a "
               "folder of the store; nothing is uploaded through it")
    assert run.output.count(warning) == 1, run.output
    assert link.is_symlink() and "unavailable" not in run.output, run.output
    assert remote.entries(), run.output  # the entries elsewhere in the store went up
    assert sha256(project.library("tiny")) == sha256(tiny_built.library("tiny"))


def _peek(project: Project, kind: str, key: str, env: dict) -> tuple[dict, int]:
    """What the project's cache (both tiers) finds for an entry, looked up in a process of
    its own (timed after a lookup of a missing entry, which imports what the store needs:
    on a busy machine that alone can take a second), and that process's peak RSS in MB."""
    import tempfile

    code = f"""
import json, time
from pathlib import Path
from modelbuild.cache.store import Cache
from modelbuild.core.paths import Project
cache = Cache.of(Project(Path({str(project.root)!r})))
cache.peek({kind!r}, "0" * 64)  # imports and connects (fsspec): not what is timed
start = time.monotonic()
found = cache.peek({kind!r}, {key!r})
seconds = time.monotonic() - start
hwm = next(int(line.split()[1]) for line in open("/proc/self/status")
           if line.startswith("VmHWM:"))
print(json.dumps({{"seconds": seconds, "used": found.payload is not None,
                  "local": found.corrupt_local, "remote": found.corrupt_remote,
                  "peak_kb": hwm}}))
"""
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen([sys.executable, "-c", code], cwd=project.root, env=env,
                                stdout=out, stderr=subprocess.STDOUT, text=True)
        status = proc.wait()
        out.seek(0)
        text = out.read()
    assert status == 0, text
    # the child's own peak (VmHWM, this process image's: ru_maxrss would count the pages
    # of the test process it was forked from, before its exec)
    found = json.loads(text.splitlines()[-1])
    return found, found.pop("peak_kb") // 1024


def _sparse(entry, declare: bool) -> None:
    """Make ``entry`` 2 GB larger (sparse: no disk); ``declare``: behind a header that
    declares a payload of that size (the header alone is intact)."""
    if declare:
        kind, key = entry.parent.parent.name, entry.name
        header = entry_format.frame(b"", kind, key).partition(b"\n")[0].split(b" ")
        header[2] = b"%d" % (2 << 30)
        entry.write_bytes(b" ".join(header) + b"\n")
    with open(entry, "r+b") as f:
        f.truncate(entry.stat().st_size + (2 << 30))


@pytest.mark.parametrize("where,declare", [("remote", False), ("remote", True),
                                           ("local", False)],
                         ids=["remote-padded", "remote-declared", "local-padded"])
def test_a_sparse_2_gb_partition_entry_is_refused_without_reading_it(tiny_built, tmp_path,
                                                                     where, declare):
    """A sparse 2 GB partition entry was read whole (15.6 s, 4.4 GB RSS) before it was
    refused: a partition entry's limit was half the machine's memory, and nothing looked
    at the size its header declares before reading."""
    remote = _file_remote(tmp_path / "shared-cache")
    project = _checkout(tiny_built, tmp_path / "a")
    built_cache = tiny_built.root / "build" / ".cache"
    cache = tmp_path / "shared-cache" if where == "remote" else project.root / "build" / ".cache"
    shutil.copytree(built_cache, cache, dirs_exist_ok=True)
    # the entry of this model's partition (the shared build's cache may hold others,
    # which earlier tests' builds of it left)
    key = json.loads((tiny_built.root / "build" / "tiny" / "partition"
                      / "manifest.msgpack.stamp").read_text())["key"]
    entry = cache / "partition" / key[:2] / key
    assert entry.is_file(), sorted(p.name for p in cache.glob("partition/??/*"))
    _sparse(entry, declare)

    env = remote.build_env(mode="read")
    found, peak = _peek(project, "partition", entry.name, env)
    assert not found["used"] and found["seconds"] < 1.0, found
    assert peak < 300, (peak, found)
    if not declare:  # its size is not its header's: damaged, said
        assert found["remote" if where == "remote" else "local"] == "damaged", found

    run = project.doit("build:tiny", env=env)
    assert "partition:tiny" in run.ran, run.output
    assert ("was corrupt" in run.output) != declare, run.output
    assert sha256(project.library("tiny")) == sha256(tiny_built.library("tiny"))
