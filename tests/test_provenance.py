"""Where each output and local cache entry came from, and what that allows (issue 37, holes 1
and 4): a signing CI uploads only what it built or verified, never an unsigned download it
happened to keep; a public key set after a build distrusts the outputs that build restored
from unsigned (or other-key) remote entries.

Real stores (a file:// folder), real key pairs, real doit builds of the tiny model; every
library is compared with the clean build's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from conftest import sha256
from test_cache_trust import _entry_of, _poison, _signing_env, _with_public_key
from test_remote_cache import _checkout, _file_remote

os.environ.pop("MODELBUILD_REMOTE_CACHE_SIGNING_KEY", None)
needs_objcopy = pytest.mark.skipif(shutil.which("objcopy") is None,
                                   reason="needs binutils' objcopy")


def _why(project, env) -> str:
    proc = subprocess.run([sys.executable, "-m", "modelbuild", "why", "tiny"], cwd=project.root,
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


@pytest.mark.slow
@needs_objcopy
def test_a_signing_ci_never_re_signs_an_unsigned_download(tiny_built, keys, tmp_path):
    """The README's transition (read-write, a signing key, no public key yet): CI trusts an
    unsigned entry a store writer placed, as documented; when the writer then deletes it, CI's
    next build (fresh checkout, warm local cache) must not upload it with CI's signature."""
    shared = tmp_path / "shared-cache"
    remote = _file_remote(shared)
    ci_env = {**_signing_env(remote, keys), "MODELBUILD_CACHE": str(tmp_path / "ci-cache")}
    _checkout(tiny_built, tmp_path / "ci-1").doit("build:tiny", env=ci_env)
    mean = tiny_built.root / "build" / "tiny" / "objects" / "mean.o"
    entry = _entry_of(shared, "object", mean.read_bytes())
    evil = _poison(entry, mean, tmp_path, keep_signature=False)

    # CI with another (empty) local cache downloads the unsigned entry and uses it: no key
    ci_env["MODELBUILD_CACHE"] = str(tmp_path / "ci-cache-2")
    second = _checkout(tiny_built, tmp_path / "ci-2")
    run = second.doit("build:tiny", env=ci_env)
    assert second.objects("tiny")["mean.o"] == evil, run.output

    entry.unlink()  # the writer covers its tracks
    third = _checkout(tiny_built, tmp_path / "ci-3")
    run = third.doit("build:tiny", env=ci_env)
    assert run.ran == {"link:tiny"}, run.output  # everything from the warm local cache
    assert not entry.exists(), run.output  # nothing uploaded that this CI did not build
    assert "uploaded" not in run.stdout, run.output
    assert all(evil not in raw for raw in remote.entries().values())

    # a reader with the key: the object entry is missing, built here; the library is clean
    reader = _with_public_key(_checkout(tiny_built, tmp_path / "reader"), keys)
    read = reader.doit("build:tiny", env=remote.build_env(mode="read"))
    assert read.ran_kind("codegen") == {"codegen:tiny/mean"}, read.output
    assert sha256(reader.library("tiny")) == sha256(tiny_built.library("tiny"))


@pytest.mark.slow
@needs_objcopy
def test_a_public_key_set_again_rebuilds_what_was_restored_unsigned(tiny_built, keys, tmp_path):
    """A reader that once built without `remote-cache-public-key` linked a poisoned object;
    with the key put back, `why` says the object came from an unsigned entry and the next
    build replaces it: the library is the clean build's, not the attacker's."""
    shared = tmp_path / "shared-cache"
    remote = _file_remote(shared)
    ci = _with_public_key(_checkout(tiny_built, tmp_path / "ci"), keys)
    ci.doit("build:tiny", env=_signing_env(remote, keys))
    mean = ci.root / "build" / "tiny" / "objects" / "mean.o"
    evil = _poison(_entry_of(shared, "object", mean.read_bytes()), mean, tmp_path,
                   keep_signature=False)

    reader = _checkout(tiny_built, tmp_path / "reader")
    saved = (reader.root / "pyproject.toml").read_bytes() \
        if (reader.root / "pyproject.toml").exists() else None
    env = remote.build_env(mode="read")
    reader.doit("build:tiny", env=env)  # no key: the poisoned object is linked
    assert reader.objects("tiny")["mean.o"] == evil

    _with_public_key(reader, keys)
    why = _why(reader, env)
    assert "restored from an unsigned remote entry; a public key is now set" in why, why
    run = reader.doit("build:tiny", env=env)
    assert run.ran_kind("codegen") == {"codegen:tiny/mean"}, run.output
    assert reader.objects("tiny")["mean.o"] == mean.read_bytes()
    assert sha256(reader.library("tiny")) == sha256(tiny_built.library("tiny"))
    assert reader.doit("build:tiny", env=env).ran == set()  # and it stays built

    # without the key again, the object built here is this machine's own: nothing reruns
    if saved is None:
        (reader.root / "pyproject.toml").unlink()
    else:
        (reader.root / "pyproject.toml").write_bytes(saved)
    assert reader.doit("build:tiny", env=env).ran == set()


@pytest.mark.slow
def test_a_changed_public_key_re_verifies_what_the_old_key_verified(tiny_built, keys, tmp_path):
    """Outputs restored from entries the old key verified are not kept silently under a new
    key: re-verified (they are not the new key's), so restored from elsewhere or rebuilt."""
    shared = tmp_path / "shared-cache"
    remote = _file_remote(shared)
    ci = _with_public_key(_checkout(tiny_built, tmp_path / "ci"), keys)
    ci.doit("build:tiny", env=_signing_env(remote, keys))
    reader = _with_public_key(_checkout(tiny_built, tmp_path / "reader"), keys)
    env = remote.build_env(mode="read")
    assert reader.doit("build:tiny", env=env).ran == {"link:tiny"}  # all verified downloads

    new_keys = tmp_path / "new-keys"
    subprocess.run([sys.executable, "-m", "modelbuild", "cache", "keygen", str(new_keys)],
                   check=True, capture_output=True)
    _with_public_key(reader, new_keys)
    why = _why(reader, env)
    assert "remote-cache-public-key does not verify" in why, why
    run = reader.doit("build:tiny", env=env)
    assert run.ran_kind("codegen") and run.ran_kind("lower"), run.output
    assert sha256(reader.library("tiny")) == sha256(tiny_built.library("tiny"))
    assert reader.doit("build:tiny", env=env).ran == set()
