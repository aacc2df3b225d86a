"""A team's cache: partition, lower and codegen found in a remote store shared by projects.

Real stores, started here: a folder (file://) and an S3 endpoint on 127.0.0.1 (moto's
server mode, as s3fs tests itself). Each project has its own local cache (build/.cache).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest
from conftest import Project, patched_env, sha256

from modelbuild.cache import entry_format as cache

pytestmark = pytest.mark.slow  # remote stores (moto's S3 server among them): the full suite only
KINDS = ("partition", "lowered", "object")


@pytest.fixture(scope="module")
def s3_endpoint():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield server, f"http://{host}:{port}"
    server.stop()


class Remote:
    """One remote store and the environment a build needs to use it."""

    def __init__(self, url: str, env: dict, listing):
        self.url, self.env, self._listing = url, env, listing

    def build_env(self, mode: str = "read-write", **extra) -> dict:
        return {**os.environ, **self.env, "MODELBUILD_REMOTE_CACHE": self.url,
                "MODELBUILD_REMOTE_CACHE_MODE": mode, "MODELBUILD_REMOTE_CACHE_TIMEOUT": "5",
                **extra}

    def entries(self) -> dict[str, bytes]:
        """``kind/key`` -> stored bytes of every entry."""
        return self._listing()


def _s3_remote(endpoint: str, bucket: str) -> Remote:
    import boto3

    creds = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
             "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint}
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    client.create_bucket(Bucket=bucket)

    def listing():
        out = {}
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="cache/"):
            for obj in page.get("Contents", []):
                kind, _, key = obj["Key"].removeprefix("cache/").split("/")
                out[f"{kind}/{key}"] = client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
        return out

    return Remote(f"s3://{bucket}/cache", creds, listing)


def _file_remote(folder) -> Remote:
    folder.mkdir(parents=True, exist_ok=True)

    def listing():
        return {f"{p.parent.parent.name}/{p.name}": p.read_bytes()
                for p in folder.glob("*/??/*") if p.is_file()}

    return Remote(folder.as_uri(), {}, listing)


@pytest.fixture(params=["file", "s3"])
def remote(request, tmp_path):
    if request.param == "file":
        return _file_remote(tmp_path / "shared-cache")
    _, endpoint = request.getfixturevalue("s3_endpoint")
    return _s3_remote(endpoint, f"team-{os.getpid()}-{time.monotonic_ns()}")


def _checkout(tiny_built: Project, dest) -> Project:
    """A fresh checkout of the tiny project: its sources, no build/ (so no local cache)."""
    shutil.copytree(tiny_built.root, dest, ignore=shutil.ignore_patterns("build"))
    return Project(dest)


def test_a_second_checkout_restores_every_step_from_the_remote(tiny_built, remote, tmp_path):
    first = _checkout(tiny_built, tmp_path / "a")
    run = first.doit("build:tiny", env=remote.build_env())
    assert run.ran_kind("partition") and run.ran_kind("codegen")
    uploaded = remote.entries()
    assert {k.split("/")[0] for k in uploaded} == set(KINDS), uploaded.keys()
    assert f"{len(uploaded)} uploaded" in run.stdout

    second = _checkout(tiny_built, tmp_path / "b")
    again = second.doit("build:tiny", env=remote.build_env(mode="read"))
    assert again.ran == {"link:tiny"}, again.output  # nothing recomputed
    restored = again.from_remote
    assert "partition:tiny" in restored
    assert {t.split(":")[0] for t in restored} == {"partition", "lower", "codegen"}
    assert len(restored) == len(uploaded)
    assert f"cache: {len(uploaded)} hits ({len(uploaded)} from the remote)" in again.stdout
    assert sha256(second.library("tiny")) == sha256(first.library("tiny"))
    assert second.objects("tiny") == first.objects("tiny")
    # the local cache now has them too: without the remote, a clean build still restores all
    shutil.rmtree(second.root / "build" / "tiny")
    local = second.doit("build:tiny")
    assert local.ran == {"link:tiny"} and not local.from_remote, local.output


def test_read_mode_uploads_nothing(tiny_built, remote, tmp_path):
    project = _checkout(tiny_built, tmp_path / "a")
    run = project.doit("build:tiny", env=remote.build_env(mode="read"))
    assert run.ran_kind("codegen")
    assert remote.entries() == {}
    assert "uploaded" not in run.stdout


def test_a_corrupt_remote_entry_is_reported_not_used_and_replaced(tiny_built, tmp_path):
    remote = _file_remote(tmp_path / "shared-cache")
    first = _checkout(tiny_built, tmp_path / "a")
    first.doit("build:tiny", env=remote.build_env())
    folder = tmp_path / "shared-cache"
    damaged = sorted(folder.glob("object/??/*"))[0]
    good = damaged.read_bytes()
    damaged.write_bytes(good[: len(good) // 2])  # truncated

    second = _checkout(tiny_built, tmp_path / "b")
    run = second.doit("build:tiny", env=remote.build_env())
    rebuilt = run.ran_kind("codegen")
    assert len(rebuilt) == 1, run.output  # the one damaged object, compiled again
    assert f"remote cache entry object/{damaged.name} was corrupt" in run.stdout
    assert sha256(second.library("tiny")) == sha256(first.library("tiny"))
    assert damaged.read_bytes() == good  # read-write: replaced by the rebuilt entry
    assert cache.unframe(damaged.read_bytes(), "object", damaged.name) is not None


@pytest.mark.parametrize("damage", ["cut short", "padded"])
def test_a_ci_with_a_warm_cache_replaces_an_entry_damaged_after_its_header(tiny_built, tmp_path,
                                                                           damage):
    """A payload cut short (or padded) after an intact header: a read-write build whose
    local cache had the entry read only the header, found it vouching for the payload, and
    uploaded nothing, so every reader found the entry corrupt for ever."""
    remote = _file_remote(tmp_path / "shared-cache")
    ci = _checkout(tiny_built, tmp_path / "ci")
    ci.doit("build:tiny", env=remote.build_env())
    damaged = sorted((tmp_path / "shared-cache").glob("object/??/*"))[0]
    good = damaged.read_bytes()
    damaged.write_bytes(good[:-10] if damage == "cut short" else good + b"\0" * 10)
    shutil.rmtree(ci.root / "build" / "tiny")  # the local cache stays: every step a hit
    run = ci.doit("build:tiny", env=remote.build_env())
    assert not run.ran_kind("codegen"), run.output
    assert damaged.read_bytes() == good, run.output
    reader = _checkout(tiny_built, tmp_path / "reader")
    read = reader.doit("build:tiny", env=remote.build_env(mode="read"))
    assert "corrupt" not in read.output and not read.ran_kind("codegen"), read.output


def test_the_remote_going_down_mid_build_leaves_a_correct_build_and_one_warning(
        tiny_built, s3_endpoint, tmp_path):
    from moto.server import ThreadedMotoServer

    # a store of its own, so that stopping it leaves the shared endpoint up
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    remote = _s3_remote(f"http://{host}:{port}", "team")
    try:
        first = _checkout(tiny_built, tmp_path / "a")
        first.doit("build:tiny", env=remote.build_env())
        second = _checkout(tiny_built, tmp_path / "b")
        # the build waits after its first remote hit (partition) until the store is down:
        # the rest of it came from the remote in 0.15 s, before a polling test stopped it
        hit, go = tmp_path / "first-remote-hit", tmp_path / "go"
        gate = patched_env(tmp_path / "site", f"""
import time
from pathlib import Path
from modelbuild.cache import store as cache
_log = cache.Cache.log
def log(self, event, kind, key, source=cache.LOCAL, why=""):
    _log(self, event, kind, key, source, why)
    if event == "hit" and source == cache.REMOTE and not Path({str(hit)!r}).exists():
        Path({str(hit)!r}).touch()
        deadline = time.monotonic() + 600
        while not Path({str(go)!r}).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
cache.Cache.log = log
""")
        proc = subprocess.Popen([sys.executable, "-m", "doit", "build:tiny"], cwd=second.root,
                                env={**remote.build_env(), "PYTHONPATH": gate["PYTHONPATH"]},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        events = second.root / "build" / f".cache-events.{proc.pid}"  # this run's log
        deadline = time.monotonic() + 300
        try:
            while not hit.exists():
                assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
                time.sleep(0.01)
            server.stop()
        finally:
            go.touch()
        out, err = proc.communicate(timeout=300)
    finally:
        server.stop()
    assert proc.returncode == 0, out + err
    assert (out + err).count("warning: remote cache") == 1, out + err
    lines = events.read_text().splitlines()
    assert lines[0].startswith("hit partition") and lines[0].endswith(" remote"), lines
    assert any(ln.startswith("miss ") for ln in lines), lines  # the rest was built here
    assert sha256(second.library("tiny")) == sha256(first.library("tiny"))
    assert second.objects("tiny") == first.objects("tiny")


def test_an_unreachable_remote_falls_back_to_building_locally(tiny_built, tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
           "MODELBUILD_REMOTE_CACHE": "s3://team/cache", "MODELBUILD_REMOTE_CACHE_MODE": "read-write",
           "MODELBUILD_REMOTE_CACHE_TIMEOUT": "3"}
    project = _checkout(tiny_built, tmp_path / "a")
    start = time.monotonic()
    run = project.doit("build:tiny", env=env)
    assert run.output.count("warning: remote cache s3://team/cache unavailable") == 1, run.output
    assert run.ran_kind("codegen") and run.ran_kind("partition")
    assert sha256(project.library("tiny")) == sha256(tiny_built.library("tiny"))
    assert time.monotonic() - start < 120


def test_why_names_the_remote_tier(tiny_built, tmp_path):
    import json

    remote = _file_remote(tmp_path / "shared-cache")
    _checkout(tiny_built, tmp_path / "a").doit("build:tiny", env=remote.build_env())
    second = _checkout(tiny_built, tmp_path / "b")
    proc = subprocess.run([sys.executable, "-m", "modelbuild", "why", "tiny", "--json"],
                          cwd=second.root, env=remote.build_env(mode="read"),
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    verdicts = {v["task"]: v for v in json.loads(proc.stdout)}
    assert verdicts["partition:tiny"]["action"] == "restore"
    assert verdicts["partition:tiny"]["source"] == "remote"
    assert "restore (remote cache)" in verdicts["partition:tiny"]["reasons"]
    restores = {t for t, v in verdicts.items() if v["action"] == "restore"}
    run = second.doit("build:tiny", env=remote.build_env(mode="read"))
    assert run.from_remote == restores
    assert run.ran == {t for t, v in verdicts.items() if v["action"] == "run"} == {"link:tiny"}


def test_a_bad_remote_setting_is_one_clear_error(tiny_built, tmp_path):
    project = _checkout(tiny_built, tmp_path / "a")
    env = {**os.environ, "MODELBUILD_REMOTE_CACHE": "file:///tmp/x",
           "MODELBUILD_REMOTE_CACHE_MODE": "write-only"}
    run = project.doit("build:tiny", env=env, check=False)
    assert run.returncode != 0
    assert "remote-cache-mode must be one of read, read-write, not 'write-only'" in run.output
    assert "Traceback" not in run.output


# -- a store that a hostile writer, or a sick endpoint, controls -----------------------------

def test_a_pipe_or_dev_zero_in_a_shared_folder_is_a_miss_and_the_build_ends(tiny_built,
                                                                             tmp_path):
    """A pipe named as an entry of a file:// store kept every reader's process alive after
    "done" (the download waited for a writer); a link to /dev/zero was read until memory
    ran out."""
    remote = _file_remote(tmp_path / "shared-cache")
    _checkout(tiny_built, tmp_path / "ci").doit("build:tiny", env=remote.build_env())
    objects = sorted((tmp_path / "shared-cache" / "object").glob("??/*"))
    assert len(objects) >= 2
    objects[0].unlink()
    os.mkfifo(objects[0])
    objects[1].unlink()
    objects[1].symlink_to("/dev/zero")

    reader = _checkout(tiny_built, tmp_path / "reader")
    run = reader.doit("build:tiny", env=remote.build_env(mode="read"), timeout=180)
    assert len(run.ran_kind("codegen")) == 2, run.output  # those two: built here
    assert "unavailable" not in run.output, run.output
    assert sha256(reader.library("tiny")) == sha256(tiny_built.library("tiny"))


@pytest.fixture
def trickling_endpoint():
    """An "S3 endpoint" on 127.0.0.1 that answers every request with 200 and then sends one
    byte a second, for ever."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    stop = threading.Event()

    def trickle(conn):
        with conn:
            try:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n"
                             b"Content-Type: binary/octet-stream\r\n\r\n")
                while not stop.wait(1.0):
                    conn.sendall(b"x")
            except OSError:
                pass

    def accept():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=trickle, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    server.close()


def test_a_store_that_trickles_bytes_cannot_keep_a_finished_build_alive(tiny_built, tmp_path,
                                                                        trickling_endpoint):
    """The download past the timeout kept its thread, which S3's read timeout never ended
    (a byte came every second), and the process waited for it after saying "done"."""
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": trickling_endpoint,
           "MODELBUILD_REMOTE_CACHE": "s3://team/cache", "MODELBUILD_REMOTE_CACHE_TIMEOUT": "2"}
    project = _checkout(tiny_built, tmp_path / "a")
    run = project.doit("build:tiny", env=env, timeout=120)
    assert "a download took more than 2 s" in run.output, run.output
    assert "modelbuild: done" in run.output
    assert sha256(project.library("tiny")) == sha256(tiny_built.library("tiny"))


def test_doit_n_3_uploads_every_step_its_workers_built(tiny_built, tmp_path, remote):
    """Under `doit -n N` each upload went to a thread pool made before doit forked its
    workers: in a worker it had no thread, and the upload "took more than 10 s", every run;
    then S3's connection, made before the fork, was "not fork-safe" in a worker."""
    project = _checkout(tiny_built, tmp_path / "a")
    run = project.doit("-n", "3", "build:tiny", env=remote.build_env(), timeout=300)
    assert "unavailable" not in run.output, run.output
    local = list((project.root / "build" / ".cache").glob("*/??/*"))
    assert len(remote.entries()) == len(local) and f"{len(local)} uploaded" in run.stdout, \
        run.output


@pytest.mark.parametrize("url", ["file://localhost{folder}", "file:/{folder}",
                                 "local:/{folder}"])
def test_a_file_url_names_a_folder_of_this_machine(tiny_built, tmp_path, url):
    """file://localhost/path wrote into ./localhost/path under the project, and said
    "uploaded"; file://path (two slashes) did the same with path's first folder."""
    folder = tmp_path / "shared-cache"
    folder.mkdir()
    project = _checkout(tiny_built, tmp_path / "a")
    env = {**os.environ, "MODELBUILD_REMOTE_CACHE": url.format(folder=folder),
           "MODELBUILD_REMOTE_CACHE_MODE": "read-write"}
    run = project.doit("build:tiny", env=env, check=False)
    if url.startswith("file://localhost"):
        assert run.returncode == 0 and list(folder.glob("*/??/*")), run.output
    else:
        assert run.returncode != 0 and "must be file:///path/to/folder" in run.output, run.output
    assert not any(p.name in ("localhost", "tmp") for p in project.root.iterdir())
    assert "Traceback" not in run.output


def test_secrets_in_settings_are_never_printed(tiny_built, tmp_path):
    """A CI secret handed over as the key itself (not its file) was printed whole in the
    error; a malformed URL was echoed with its password."""
    project = _checkout(tiny_built, tmp_path / "a")
    key = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIHsecretsecretsecret\n-----END PRIVATE KEY-----"
    import base64

    for extra in ({"MODELBUILD_REMOTE_CACHE": f"file://{tmp_path}/s",
                   "MODELBUILD_REMOTE_CACHE_SIGNING_KEY": key},
                  {"MODELBUILD_REMOTE_CACHE": f"file://{tmp_path}/s",  # as CI secrets often are
                   "MODELBUILD_REMOTE_CACHE_SIGNING_KEY": base64.b64encode(
                       key.encode()).decode() + "secretsecret"},
                  {"MODELBUILD_REMOTE_CACHE": "s3:/bob:TopSecret9@team/x"}):
        run = project.doit("build:tiny", env={**os.environ, **extra}, check=False)
        assert run.returncode != 0, run.output
        for secret in ("secretsecret", "TopSecret9", "BEGIN PRIVATE"):
            assert secret not in run.output, run.output
        assert "Traceback" not in run.output


def test_a_password_with_a_slash_is_not_printed(tiny_built, tmp_path):
    """AWS secret keys often hold a '/': the URL's user and password were printed whole."""
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
           "MODELBUILD_REMOTE_CACHE": "s3://AKIAEXAMPLE:wJalr/XUtnFEMI/K7MDENG@team/cache",
           "MODELBUILD_REMOTE_CACHE_TIMEOUT": "2"}
    project = _checkout(tiny_built, tmp_path / "a")
    run = project.doit("build:tiny", env=env)
    assert "warning: remote cache s3://***@team/cache unavailable" in run.output, run.output
    assert "wJalr" not in run.output and "AKIAEXAMPLE" not in run.output


def test_an_empty_object_is_one_damaged_entry_not_a_store_down(tiny_built, tmp_path,
                                                               s3_endpoint):
    """An empty S3 object: the bounded download's range request got 416, which took the
    whole store for down (in read-write mode for good: the entry was never replaced)."""
    import boto3

    _, endpoint = s3_endpoint
    remote = _s3_remote(endpoint, f"empty-{os.getpid()}")
    _checkout(tiny_built, tmp_path / "ci").doit("build:tiny", env=remote.build_env())
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    bucket = remote.url.split("/")[2]
    emptied = next(k for k in remote.entries() if k.startswith("object/"))
    kind, key = emptied.split("/")
    client.put_object(Bucket=bucket, Key=f"cache/{kind}/{key[:2]}/{key}", Body=b"")
    reader = _checkout(tiny_built, tmp_path / "reader")
    run = reader.doit("build:tiny", env=remote.build_env())
    assert "unavailable" not in run.output, run.output
    assert len(run.ran_kind("codegen")) == 1 and "1 uploaded" in run.stdout, run.output
    assert remote.entries()[emptied]  # replaced by this read-write build
    assert sha256(reader.library("tiny")) == sha256(tiny_built.library("tiny"))


def test_a_folder_at_an_entry_s_place_is_not_counted_as_uploaded(tiny_built, tmp_path):
    """fs.mv moved the entry into the folder, and the upload was counted."""
    remote = _file_remote(tmp_path / "shared-cache")
    first = _checkout(tiny_built, tmp_path / "a")
    first.doit("build:tiny", env=remote.build_env())
    entry = sorted((tmp_path / "shared-cache" / "object").glob("??/*"))[0]
    entry.unlink()
    entry.mkdir()
    second = _checkout(tiny_built, tmp_path / "b")
    run = second.doit("build:tiny", env=remote.build_env())
    assert "1 uploaded" not in run.stdout and "unavailable" not in run.output, run.output
    assert entry.is_dir() and not list(entry.iterdir())


def _peak_rss_build(project: Project, env: dict) -> tuple[subprocess.CompletedProcess, int]:
    """`doit build:tiny` in ``project`` and its process's peak RSS, in MB: the kernel's
    own figure at its exit (polling /proc missed the peak when the test was not scheduled
    then)."""
    import tempfile

    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen([sys.executable, "-m", "doit", "build:tiny"], cwd=project.root,
                                stdout=out, stderr=subprocess.STDOUT, text=True, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out.read(), "")
    return done, usage.ru_maxrss // 1024  # kilobytes on Linux


def test_a_huge_entry_in_the_store_is_a_miss_not_read_into_memory(tiny_built, tmp_path):
    """Anyone who can write the store could put a sparse file of gigabytes in an object
    entry's place: each reader read it whole (up to half its memory, every doit process at
    once) before finding it damaged, and went on reading after its request timed out."""
    remote = _file_remote(tmp_path / "shared-cache")
    _checkout(tiny_built, tmp_path / "ci").doit("build:tiny", env=remote.build_env())
    plain = _checkout(tiny_built, tmp_path / "plain")
    _, baseline = _peak_rss_build(plain, remote.build_env(mode="read"))
    entry = sorted((tmp_path / "shared-cache" / "object").glob("??/*"))[0]
    with open(entry, "r+b") as f:
        f.truncate(1536 << 20)  # sparse: takes no disk
    reader = _checkout(tiny_built, tmp_path / "reader")
    proc, peak = _peak_rss_build(reader, remote.build_env(mode="read"))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "unavailable" not in out and "Traceback" not in out, out
    assert "1 misses" in out or "1 miss" in out, out  # that step alone was built here
    assert peak < baseline + 300, (peak, baseline, out)
    assert sha256(reader.library("tiny")) == sha256(tiny_built.library("tiny"))


def test_a_store_that_refuses_connections_is_said_once(tiny_built, tmp_path):
    """An http:// store whose port refused connections read as "no such entry" on every
    request: no warning, and every step built here without a word why."""
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    project = _checkout(tiny_built, tmp_path / "a")
    env = {**os.environ, "MODELBUILD_REMOTE_CACHE": f"http://127.0.0.1:{port}/cache",
           "MODELBUILD_REMOTE_CACHE_TIMEOUT": "5"}
    run = project.doit("build:tiny", env=env, timeout=180)
    assert run.output.count(f"remote cache http://127.0.0.1:{port}/cache unavailable") == 1, \
        run.output
    assert sha256(project.library("tiny")) == sha256(tiny_built.library("tiny"))
