"""A shared cache that a hostile writer can reach (issue 19, items 4, 5, 6 and 8).

Real stores as in test_remote_cache.py (a file:// folder, moto's S3 server on 127.0.0.1),
real key pairs from `python -m modelbuild cache keygen`, real doit builds of the tiny
model; every library is compared with the clean build's.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys

import msgpack
import pytest
from conftest import Project, cli, sha256
from test_remote_cache import _checkout, _file_remote, _s3_remote, s3_endpoint  # noqa: F401

from modelbuild.cache import entry_format as cache

os.environ.pop("MODELBUILD_REMOTE_CACHE_SIGNING_KEY", None)
MANIFEST = "manifest.msgpack"


def _with_public_key(project: Project, keys) -> Project:
    """The project's pyproject.toml verifies the remote cache with the committed public key."""
    shutil.copytree(keys, project.root / "keys", dirs_exist_ok=True)
    (project.root / "keys" / "remote-cache.key").unlink()  # only CI holds the private key
    (project.root / "pyproject.toml").write_text(
        '[tool.modelbuild]\nremote-cache-public-key = "keys/remote-cache.pub"\n')
    return project


def _signing_env(remote, keys, mode="read-write"):
    return remote.build_env(mode=mode,
                            MODELBUILD_REMOTE_CACHE_SIGNING_KEY=str(keys / "remote-cache.key"))


def _frame(path, payload: bytes, signature: str | None = None) -> bytes:
    """``payload`` framed as the entry at ``path`` (<cache>/<kind>/<xx>/<key>) is."""
    return cache.frame(payload, path.parent.parent.name, path.name, signature)


def _unframe(path) -> bytes | None:
    return cache.unframe(path.read_bytes(), path.parent.parent.name, path.name)


def _entry_of(remote_folder, kind: str, payload: bytes):
    """The stored entry (a path in a file:// store) whose payload is ``payload``."""
    for path in remote_folder.glob(f"{kind}/??/*"):
        if _unframe(path) == payload:
            return path
    raise AssertionError(f"no {kind} entry holds that payload")


def test_keygen_makes_a_private_pair_and_never_overwrites(keys, tmp_path):
    assert stat.S_IMODE((keys / "remote-cache.key").stat().st_mode) == 0o600
    assert b"PUBLIC KEY" in (keys / "remote-cache.pub").read_bytes()
    before = (keys / "remote-cache.key").read_bytes()
    again = subprocess.run([sys.executable, "-m", "modelbuild", "cache", "keygen", str(keys)],
                           capture_output=True, text=True)
    assert again.returncode != 0 and "already exists; not replaced" in again.stderr
    assert "Traceback" not in again.stderr
    assert (keys / "remote-cache.key").read_bytes() == before


@pytest.fixture(params=["file", "s3"])
def remote(request, tmp_path):
    if request.param == "file":
        return _file_remote(tmp_path / "shared-cache")
    _, endpoint = request.getfixturevalue("s3_endpoint")
    return _s3_remote(endpoint, f"trust-{os.getpid()}-{id(request)}")


@pytest.mark.slow
def test_ci_signs_and_a_second_checkout_verifies_every_entry(tiny_built, keys, remote, tmp_path):
    ci = _with_public_key(_checkout(tiny_built, tmp_path / "ci"), keys)
    run = ci.doit("build:tiny", env=_signing_env(remote, keys))
    uploaded = remote.entries()
    assert f"{len(uploaded)} uploaded" in run.stdout
    for raw in uploaded.values():  # every header carries a signature
        assert len(raw.partition(b"\n")[0].split(b" ")) == 5

    laptop = _with_public_key(_checkout(tiny_built, tmp_path / "laptop"), keys)
    again = laptop.doit("build:tiny", env=remote.build_env(mode="read"))
    assert again.ran == {"link:tiny"}, again.output  # everything verified and restored
    assert len(again.from_remote) == len(uploaded)
    assert sha256(laptop.library("tiny")) == sha256(tiny_built.library("tiny"))


def _poison(entry_path, workload_object, tmp_path, keep_signature: bool) -> bytes:
    """Replace a stored object entry with another valid object of the same workload (an extra
    loaded section: the attacker's bytes end up in the library), re-wrapped with a correct
    sha256; with ``keep_signature``, the genuine entry's signature is copied along."""
    evil = tmp_path / "evil.o"
    payload_file = tmp_path / "payload.bin"
    payload_file.write_bytes(b"attacker's code" * 64)
    subprocess.run(["objcopy", "--add-section", f".poison={payload_file}",
                    "--set-section-flags", ".poison=alloc,load,readonly,data",
                    str(workload_object), str(evil)], check=True)
    signature = entry_path.read_bytes().partition(b"\n")[0].split(b" ")[4].decode()
    entry_path.write_bytes(_frame(entry_path, evil.read_bytes(),
                                  signature if keep_signature else None))
    return evil.read_bytes()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("objcopy") is None, reason="needs binutils' objcopy")
@pytest.mark.parametrize("keep_signature", [False, True], ids=["unsigned", "moved-signature"])
def test_a_poisoned_object_entry_is_refused_with_a_public_key(tiny_built, keys, tmp_path,
                                                              keep_signature):
    remote = _file_remote(tmp_path / "shared-cache")
    ci = _with_public_key(_checkout(tiny_built, tmp_path / "ci"), keys)
    ci.doit("build:tiny", env=_signing_env(remote, keys))
    mean = ci.root / "build" / "tiny" / "objects" / "mean.o"
    entry = _entry_of(tmp_path / "shared-cache", "object", mean.read_bytes())
    evil = _poison(entry, mean, tmp_path, keep_signature)

    # without a public key every writer is trusted: the poisoned object is linked
    trusting = _checkout(tiny_built, tmp_path / "trusting")
    run = trusting.doit("build:tiny", env=remote.build_env(mode="read"))
    assert run.ran == {"link:tiny"}, run.output
    assert trusting.objects("tiny")["mean.o"] == evil
    assert sha256(trusting.library("tiny")) != sha256(tiny_built.library("tiny"))

    # with the project's public key it is refused, said once, and built here
    checked = _with_public_key(_checkout(tiny_built, tmp_path / "checked"), keys)
    run = checked.doit("build:tiny", env=remote.build_env(mode="read"))
    assert run.ran_kind("codegen") == {"codegen:tiny/mean"}, run.output
    assert run.output.count(f"remote cache entry object/{entry.name} was not signed") == 1
    assert checked.objects("tiny")["mean.o"] == mean.read_bytes()
    assert sha256(checked.library("tiny")) == sha256(tiny_built.library("tiny"))
    # what the remote sent was not kept in the local cache either
    assert checked.doit("build:tiny").ran == set()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("objcopy") is None, reason="needs binutils' objcopy")
def test_a_shared_local_cache_never_hands_a_verifying_project_what_it_cannot_verify(
        tiny_built, keys, tmp_path):
    """One local cache for several projects (MODELBUILD_CACHE): what an unsigned store sent
    to one of them was kept there as if built here, and a project with a public key linked
    it (exit 0, another model's weights); after a key rotation, what the old key signed
    was still used."""
    local = {"MODELBUILD_CACHE": str(tmp_path / "one-local-cache")}
    signed = _file_remote(tmp_path / "signed-store")
    ci = _with_public_key(_checkout(tiny_built, tmp_path / "ci"), keys)
    ci.doit("build:tiny", env=_signing_env(signed, keys))
    shutil.copytree(tmp_path / "signed-store", tmp_path / "open-store")
    mean = ci.root / "build" / "tiny" / "objects" / "mean.o"
    evil = _poison(_entry_of(tmp_path / "open-store", "object", mean.read_bytes()), mean,
                   tmp_path, keep_signature=False)

    trusting = _checkout(tiny_built, tmp_path / "trusting")  # no key: trusts its store
    trusting.doit("build:tiny", env=_file_remote(tmp_path / "open-store").build_env(
        mode="read", **local))
    assert trusting.objects("tiny")["mean.o"] == evil

    checked = _with_public_key(_checkout(tiny_built, tmp_path / "checked"), keys)
    run = checked.doit("build:tiny", env=signed.build_env(mode="read", **local))
    assert checked.objects("tiny")["mean.o"] == mean.read_bytes(), run.output
    assert sha256(checked.library("tiny")) == sha256(tiny_built.library("tiny"))
    assert run.ran == {"link:tiny"}, run.output  # the signed store's entries instead
    assert run.output.count("was not signed, and remote-cache-public-key is set") == 1
    assert "Traceback" not in run.output

    # the key is rotated: what the old one signed (now in the local cache) is not used
    new_keys = tmp_path / "new-keys"
    subprocess.run([sys.executable, "-m", "modelbuild", "cache", "keygen", str(new_keys)],
                   check=True, capture_output=True)
    rotated = _with_public_key(_checkout(tiny_built, tmp_path / "rotated"), new_keys)
    run = rotated.doit("build:tiny", env={**os.environ, **local})
    assert run.ran_kind("codegen") and run.ran_kind("partition"), run.output
    assert sha256(rotated.library("tiny")) == sha256(tiny_built.library("tiny"))
    # what this machine built is its own: the next checkout with the new key reuses it
    again = _with_public_key(_checkout(tiny_built, tmp_path / "again"), new_keys)
    assert again.doit("build:tiny", env={**os.environ, **local}).ran == {"link:tiny"}


@pytest.mark.slow
def test_a_ci_with_a_warm_local_cache_fills_a_store_signed_with_a_rotated_key(tiny_built, keys,
                                                                              tmp_path):
    """After a key rotation, CI (read-write, new key) restored every step from its warm
    local cache and uploaded nothing: the store kept only entries signed with the old key,
    and every reader rebuilt everything, warning once per entry."""
    local = {"MODELBUILD_CACHE": str(tmp_path / "ci-local-cache")}
    remote = _file_remote(tmp_path / "shared-cache")
    ci = _with_public_key(_checkout(tiny_built, tmp_path / "ci"), keys)
    first = ci.doit("build:tiny", env={**_signing_env(remote, keys), **local})
    stored = len(remote.entries())
    assert f"{stored} uploaded" in first.stdout

    new_keys = tmp_path / "new-keys"
    subprocess.run([sys.executable, "-m", "modelbuild", "cache", "keygen", str(new_keys)],
                   check=True, capture_output=True)
    again = _with_public_key(_checkout(tiny_built, tmp_path / "ci-again"), new_keys)
    run = again.doit("build:tiny", env={**_signing_env(remote, new_keys), **local})
    assert run.ran == {"link:tiny"}, run.output  # every step from the warm local cache
    assert f"{stored} uploaded" in run.stdout, run.output
    reader = _with_public_key(_checkout(tiny_built, tmp_path / "reader"), new_keys)
    read = reader.doit("build:tiny", env=remote.build_env(mode="read"))
    assert read.ran == {"link:tiny"} and "not signed" not in read.output, read.output
    assert sha256(reader.library("tiny")) == sha256(tiny_built.library("tiny"))
    # once the store holds them, a warm CI uploads nothing more (one header read each)
    third = _with_public_key(_checkout(tiny_built, tmp_path / "ci-third"), new_keys)
    assert "uploaded" not in third.doit("build:tiny", env={**_signing_env(remote, new_keys),
                                                           **local}).stdout


@pytest.mark.slow
def test_a_changed_public_key_is_said_in_one_line_not_two_per_entry(tiny_built, keys, tmp_path):
    """A laptop kept what a signed store sent; then its public key was changed: each entry
    was refused twice, its local copy and the remote's, and said twice (30 lines)."""
    remote = _file_remote(tmp_path / "shared-cache")
    ci = _with_public_key(_checkout(tiny_built, tmp_path / "ci"), keys)
    ci.doit("build:tiny", env=_signing_env(remote, keys))
    laptop = _with_public_key(_checkout(tiny_built, tmp_path / "laptop"), keys)
    assert laptop.doit("build:tiny", env=remote.build_env(mode="read")).ran == {"link:tiny"}

    new_keys = tmp_path / "new-keys"
    subprocess.run([sys.executable, "-m", "modelbuild", "cache", "keygen", str(new_keys)],
                   check=True, capture_output=True)
    shutil.rmtree(laptop.root / "keys")
    _with_public_key(laptop, new_keys)
    shutil.rmtree(laptop.root / "build" / "tiny")  # its local cache stays
    run = laptop.doit("build:tiny", env=remote.build_env(mode="read"))
    entries = len(remote.entries())
    assert len(run.ran) == entries + 1, run.output  # every step built here, and the link
    refused = [ln for ln in run.output.splitlines() if "not signed by the owner" in ln]
    assert refused == [f"  warning: {entries} cache entries (here and in the remote cache) were "
                       "not signed by the owner of remote-cache-public-key; none was used"], \
        run.output
    assert sha256(laptop.library("tiny")) == sha256(tiny_built.library("tiny"))


@pytest.mark.slow
def test_a_public_key_that_cannot_be_read_without_a_remote_stops_nothing_it_need_not(
        tiny_built, keys, tmp_path):
    """With no remote configured, the public key is read only to judge downloads kept in the
    local cache: missing (or a pipe, which hung every command), it broke `cache` commands
    and builds that use no download. Such entries are then not used."""
    project = _with_public_key(_checkout(tiny_built, tmp_path / "a"), keys)
    (project.root / "keys" / "remote-cache.pub").unlink()
    os.mkfifo(project.root / "keys" / "remote-cache.pub")
    stats = subprocess.run([sys.executable, "-m", "modelbuild", "cache", "stats"],
                           cwd=project.root, capture_output=True, text=True, timeout=60)
    assert stats.returncode == 0, stats.stdout + stats.stderr
    run = project.doit("build:tiny", timeout=300)
    assert sha256(project.library("tiny")) == sha256(tiny_built.library("tiny"))
    assert "Traceback" not in run.output


@pytest.mark.slow
def test_read_write_without_the_private_key_uploads_nothing_and_says_so_once(tiny_built, keys,
                                                                            tmp_path):
    remote = _file_remote(tmp_path / "shared-cache")
    project = _with_public_key(_checkout(tiny_built, tmp_path / "a"), keys)
    run = project.doit("build:tiny", env=remote.build_env(mode="read-write"))
    assert remote.entries() == {}
    assert run.output.count("nothing is uploaded") == 1, run.output
    assert "MODELBUILD_REMOTE_CACHE_SIGNING_KEY is not set" in run.output
    assert sha256(project.library("tiny")) == sha256(tiny_built.library("tiny"))


@pytest.mark.slow
def test_a_signing_key_that_does_not_match_the_public_key_uploads_nothing(tiny_built, keys,
                                                                         tmp_path):
    other = tmp_path / "other-keys"
    subprocess.run([sys.executable, "-m", "modelbuild", "cache", "keygen", str(other)],
                   check=True, capture_output=True)
    remote = _file_remote(tmp_path / "shared-cache")
    project = _with_public_key(_checkout(tiny_built, tmp_path / "a"), keys)
    run = project.doit("build:tiny", env=_signing_env(remote, other))
    assert remote.entries() == {}
    assert run.output.count("does not match remote-cache-public-key: nothing is uploaded") == 1


def test_a_signing_key_in_pyproject_is_refused(tiny_built, tmp_path):
    project = _checkout(tiny_built, tmp_path / "a")
    (project.root / "pyproject.toml").write_text(
        '[tool.modelbuild]\nremote-cache-signing-key = "keys/remote-cache.key"\n')
    run = project.doit("build:tiny", check=False)
    assert run.returncode != 0
    assert "remote-cache-signing-key is never read from pyproject.toml" in run.output
    assert "Traceback" not in run.output


def _partition_entry(remote_folder):
    (path,) = remote_folder.glob("partition/??/*")
    return path


def _rewrap(path, files: dict) -> None:
    path.write_bytes(_frame(path, msgpack.packb(files)))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["../../../x", "ABS"])
def test_a_partition_entry_naming_a_path_is_refused_and_nothing_is_written_outside(
        tiny_built, tmp_path, name):
    """The crafted workload name makes build/tiny/lowered/<name>.json a file outside build/
    (the victim's own file, written beforehand): lower would write it, clean remove it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = _checkout(tiny_built, tmp_path / "victim")
    name = str(outside / "x") if name == "ABS" else name
    precious = outside / "x.json" if name.startswith("/") else victim.root / "x.json"
    precious.write_text("the victim's own file")
    remote = _file_remote(tmp_path / "shared-cache")
    _checkout(tiny_built, tmp_path / "a").doit("build:tiny", env=remote.build_env())
    entry = _partition_entry(tmp_path / "shared-cache")
    files = msgpack.unpackb(_unframe(entry))
    man = msgpack.unpackb(files[MANIFEST])
    old = man["workloads"][0][0]
    man["workloads"][0][0] = name
    for out in man["outputs"]:
        if out[0] == f"workloads/{old}.json":
            out[0] = f"workloads/{name}.json"
    files[f"workloads/{name}.json"] = files.pop(f"workloads/{old}.json")
    files[MANIFEST] = msgpack.packb(man)
    _rewrap(entry, files)

    run = victim.doit("build:tiny", env=remote.build_env())
    assert "partition:tiny" in run.ran, run.output
    assert f"remote cache entry partition/{entry.name} was corrupt" in run.output
    assert sha256(victim.library("tiny")) == sha256(tiny_built.library("tiny"))
    victim.doit("clean", "lower", check=False)
    assert precious.read_text() == "the victim's own file"
    assert sorted(p.name for p in outside.iterdir()) == (["x.json"] if precious.parent == outside
                                                         else [])
    assert not (tmp_path / "x.json").exists() and not (victim.root / "build" / "x.json").exists()
    # read-write: the refused entry was replaced by the one built here
    assert msgpack.unpackb(_unframe(entry)).keys() != files.keys()


MALFORMED = {"list": msgpack.packb([1, 2, 3]), "int": msgpack.packb(7),
             "no-manifest": msgpack.packb({"workloads/mean.json": b"{}"}),
             "empty-key": msgpack.packb({"": b""}), "empty": b"",
             "manifest-a-list": msgpack.packb({MANIFEST: msgpack.packb([1])})}


@pytest.mark.slow
@pytest.mark.parametrize("what", sorted(MALFORMED))
def test_a_malformed_partition_entry_is_rebuilt_without_a_traceback(tiny_built, tmp_path, what):
    remote = _file_remote(tmp_path / "shared-cache")
    _checkout(tiny_built, tmp_path / "a").doit("build:tiny", env=remote.build_env())
    entry = _partition_entry(tmp_path / "shared-cache")
    entry.write_bytes(_frame(entry, MALFORMED[what]))

    victim = _checkout(tiny_built, tmp_path / "victim")
    run = victim.doit("build:tiny", env=remote.build_env(mode="read"))
    assert "Traceback" not in run.output, run.output
    assert "partition:tiny" in run.ran, run.output
    assert f"remote cache entry partition/{entry.name} was corrupt" in run.output
    assert sha256(victim.library("tiny")) == sha256(tiny_built.library("tiny"))
    # the remote switched off: nothing of it was kept, nothing crashes
    again = victim.doit("build:tiny")
    assert "Traceback" not in again.output and again.ran == set(), again.output
    assert victim.doit("list").returncode == 0


def test_a_malformed_local_entry_is_rebuilt_without_a_traceback(tiny_copy):
    local = tiny_copy.root / "build" / ".cache"
    (entry,) = local.glob("partition/??/*")
    entry.write_bytes(_frame(entry, msgpack.packb([1, 2])))
    library = sha256(tiny_copy.library("tiny"))
    shutil.rmtree(tiny_copy.root / "build" / "tiny")
    run = tiny_copy.doit("build:tiny")
    assert "Traceback" not in run.output, run.output
    assert "partition:tiny" in run.ran
    assert f"cache entry partition/{entry.name} was corrupt" in run.output
    assert sha256(tiny_copy.library("tiny")) == library


def test_an_object_entry_of_another_workload_is_not_used(tiny_copy):
    objects = tiny_copy.root / "build" / "tiny" / "objects"
    local = tiny_copy.root / "build" / ".cache"
    entry = _entry_of(local, "object", (objects / "mean.o").read_bytes())
    entry.write_bytes(_frame(entry, (objects / "reshape.o").read_bytes()))
    library = sha256(tiny_copy.library("tiny"))
    shutil.rmtree(tiny_copy.root / "build" / "tiny")
    run = tiny_copy.doit("build:tiny")
    assert run.ran_kind("codegen") == {"codegen:tiny/mean"}, run.output
    assert "multiple definition" not in run.output
    assert f"cache entry object/{entry.name} was corrupt" in run.output
    assert sha256(tiny_copy.library("tiny")) == library


def test_a_manifest_that_is_not_a_map_is_rebuilt(tiny_copy):
    library = sha256(tiny_copy.library("tiny"))
    (tiny_copy.root / "build" / "tiny" / "partition" / MANIFEST).write_bytes(msgpack.packb([1]))
    listed = tiny_copy.doit("list", "--all")
    assert "Traceback" not in listed.output and "partition:tiny" in listed.stdout, listed.output
    run = tiny_copy.doit("build:tiny")
    assert "Traceback" not in run.output, run.output
    assert "partition:tiny" in run.ran | run.from_cache
    assert sha256(tiny_copy.library("tiny")) == library


def _chmod_blocks_writes(folder) -> bool:
    probe = folder / "probe"
    folder.chmod(0o555)
    try:
        probe.write_bytes(b"")
    except OSError:
        return True
    probe.unlink()
    return False  # root: permissions do not stop it


@pytest.mark.slow
@pytest.mark.parametrize("how", ["a-file", "read-only"])
def test_a_cache_that_cannot_be_written_warns_once_and_the_build_succeeds(tiny_built, tmp_path,
                                                                          how):
    project = _checkout(tiny_built, tmp_path / "a")
    where = tmp_path / "cache"
    if how == "a-file":
        where.write_text("not a folder")
    else:
        where.mkdir()
        if not _chmod_blocks_writes(where):
            where.chmod(0o755)  # running as root: each kind's folder is a file instead
            for kind in ("partition", "lowered", "object"):
                (where / kind).write_text("not a folder")
    try:
        run = project.doit("build:tiny", env={**os.environ, "MODELBUILD_CACHE": str(where)},
                           check=False)
    finally:
        if where.is_dir():
            where.chmod(0o755)
    assert run.returncode == 0, run.output
    assert run.output.count(f"warning: cache {where} cannot be written") == 1, run.output
    assert "internal error" not in run.output and "Traceback" not in run.output
    assert sha256(project.library("tiny")) == sha256(tiny_built.library("tiny"))


def test_cache_keygen_is_listed_in_help(tiny_built):
    assert "keygen" in cli(tiny_built, "cache", "--help").stdout


def test_a_key_file_that_never_ends_is_refused_not_read_whole(tiny_built, tmp_path):
    """/dev/zero as the signing key: the build read it until memory ran out."""
    remote = _file_remote(tmp_path / "shared-cache")
    project = _checkout(tiny_built, tmp_path / "a")
    env = remote.build_env(mode="read-write", MODELBUILD_REMOTE_CACHE_SIGNING_KEY="/dev/zero")
    run = project.doit("build:tiny", check=False, env=env)
    assert run.returncode != 0 and "Traceback" not in run.output, run
    assert "cannot read the signing key" in run.output, run
    assert "not a regular file" in run.output and "/dev/zero" not in run.output, run


@pytest.mark.slow
def test_two_intact_entries_swapped_are_not_used_for_each_other(tmp_path):
    """Two models of one architecture, other weights: their partition entries swapped in
    the local cache (both intact, both what partition makes) gave model a model b's
    weights, exit 0. An entry names the kind and key it is filed under: a moved one is
    corrupt, rebuilt, and the library is a's own."""
    from conftest import make_project
    from onnx_models import tiny_model

    project = make_project(tmp_path / "p", {"a": tiny_model(seed=0), "b": tiny_model(seed=1)})
    project.doit("build:a", "build:b")
    clean = sha256(project.library("a"))
    local = project.root / "build" / ".cache"

    def entry(model):
        stamp = project.root / "build" / model / "partition" / "manifest.msgpack.stamp"
        key = json.loads(stamp.read_text())["key"]
        return local / "partition" / key[:2] / key

    a, b = entry("a"), entry("b")
    a_bytes = a.read_bytes()
    a.write_bytes(b.read_bytes())
    b.write_bytes(a_bytes)
    shutil.rmtree(project.root / "build" / "a")
    run = project.doit("build:a")
    assert "partition:a" in run.ran, run.output
    assert f"cache entry partition/{a.name} was corrupt" in run.output
    assert "filed under another key" in run.output and "digest mismatch" not in run.output
    assert sha256(project.library("a")) == clean
