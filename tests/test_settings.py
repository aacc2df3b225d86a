"""Settings resolved once (environment, else pyproject.toml, else default), and the
options every command shares declared once: what a user notices of both."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_project
from onnx_models import tiny_model

from modelbuild.core import settings
from modelbuild.core.errors import BuildError
from modelbuild.core.paths import Project
from modelbuild.cache import store as cache


def _project(tmp_path, table: str = ""):
    (tmp_path / "pyproject.toml").write_text(f"[tool.modelbuild]\n{table}")
    return tmp_path


def test_environment_wins_over_pyproject_which_wins_over_the_default(tmp_path):
    root = _project(tmp_path, 'remote-cache = "file:///a"\nremote-cache-timeout = 3\n')
    from_file = settings.resolve(root, {})
    assert from_file.get("remote-cache") == "file:///a"
    assert from_file.get("remote-cache-timeout") == 3.0
    assert from_file.get("remote-cache-mode") == "read"            # the default
    from_env = settings.resolve(root, {"MODELBUILD_REMOTE_CACHE": "file:///b",
                                       "MODELBUILD_REMOTE_CACHE_TIMEOUT": "7"})
    assert from_env.get("remote-cache") == "file:///b"
    assert from_env.get("remote-cache-timeout") == 7.0
    empty = settings.resolve(root, {"MODELBUILD_REMOTE_CACHE": ""})  # empty: unset
    assert empty.get("remote-cache") == "file:///a"
    # an AWS secret key holds "/": urlsplit takes what follows it for the host and port
    slash = "s3://AKIAEXAMPLE:wJalr/XUtnFEMI/K7MDENG@team/cache"
    assert settings.resolve(root, {"MODELBUILD_REMOTE_CACHE": slash}).get("remote-cache") == slash


def test_the_cache_dir_is_relative_to_the_root_from_pyproject_and_as_given_from_env(tmp_path):
    root = _project(tmp_path, 'cache-dir = "shared"\n')
    assert cache.location(Project(root), settings.resolve(root, {})) == root / "shared"
    assert (cache.location(Project(root), settings.resolve(root, {"MODELBUILD_CACHE": "/x/y"}))
            == Path("/x/y"))
    (tmp_path / "bare").mkdir()
    bare = _project(tmp_path / "bare")
    assert cache.location(Project(bare), settings.resolve(bare, {})) == bare / "build" / ".cache"


@pytest.mark.parametrize("env,value,expected", [
    ("MODELBUILD_REMOTE_CACHE_TIMEOUT", "0", "remote-cache-timeout must be a positive number "
                                             "of seconds (an hour at most), not '0'"),
    ("MODELBUILD_REMOTE_CACHE_TIMEOUT", "inf", "not 'inf'"),
    ("MODELBUILD_REMOTE_CACHE", "garbage", "remote-cache must be a URL such as s3://"),
    # both were taken, then said "unavailable" on every build, as if the store were down
    ("MODELBUILD_REMOTE_CACHE", "foo://bucket/p", "remote-cache names a kind of store fsspec "
                                                  "does not know (foo://)"),
    ("MODELBUILD_REMOTE_CACHE", "s3://[", "remote-cache must be a URL such as s3://"),
    ("MODELBUILD_REMOTE_CACHE", "http://host:99999/c", "remote-cache must be a URL such as"),
    ("MODELBUILD_EXECUTOR", "5", "executor must be host:port (tcp://host:8786), not '5'"),
    ("MODELBUILD_EXECUTOR", "tcp://host:99999", "not 'tcp://host:99999'"),
    ("MODELBUILD_REMOTE_CACHE_TIMEOUT", "soon", "not 'soon'"),
    ("MODELBUILD_REMOTE_CACHE_MODE", "write-only", "remote-cache-mode must be one of read, "
                                                   "read-write, not 'write-only'"),
])
def test_a_bad_value_is_one_line_naming_the_setting_and_where_to_set_it(tmp_path, env, value,
                                                                        expected):
    key = next(s.key for s in settings.SETTINGS if s.env == env)
    with pytest.raises(BuildError) as err:
        settings.resolve(_project(tmp_path), {env: value}).get(key)
    assert expected in str(err.value)
    assert err.value.hint.startswith(f"set {env} or `{key}` under [tool.modelbuild]")


@pytest.mark.parametrize("line, expected", [
    ("cache-dir = 5", "cache-dir must be non-empty text, not 5"),
    ('cache-dir = ["a"]', "cache-dir must be non-empty text, not ['a']"),
    ('cache-dir = ""', "cache-dir must be non-empty text, not ''"),
    ("targets = 5", 'targets must be a list of module names, e.g. ["my_targets"], not 5'),
    ("remote-cache = 5", "remote-cache must be non-empty text, not 5"),
    ("executor = 5", "executor must be non-empty text, not 5"),
    ("remote-cache-timeout = true", "remote-cache-timeout must be a positive number of "
                                    "seconds (an hour at most), not True"),
])
def test_a_value_of_the_wrong_type_in_pyproject_is_one_line(tmp_path, line, expected):
    """cache-dir = 5 made a folder named 5, remote-cache = 5 was shown as the remote, targets
    = 5 was a traceback: a value of the wrong type is the setting's error."""
    key = line.split(" = ")[0]
    with pytest.raises(BuildError) as err:
        settings.resolve(_project(tmp_path, line + "\n"), {}).get(key)
    assert expected in str(err.value)


def test_a_bad_value_of_an_unused_setting_is_no_error(tmp_path):
    config = settings.resolve(_project(tmp_path, "remote-cache-timeout = -1\n"), {})
    assert config.get("remote-cache") is None  # no remote tier: its timeout is never read


def test_every_declared_setting_is_a_known_key_and_unknown_keys_are_refused(tmp_path):
    assert set(settings.KNOWN) == {s.key for s in settings.SETTINGS if s.in_pyproject}
    with pytest.raises(BuildError, match="unknown keys in \\[tool.modelbuild\\]: cache_dir"):
        settings.resolve(_project(tmp_path, 'cache_dir = "x"\n'), {})


def _help(root, *args) -> str:
    return subprocess.run([sys.executable, "-m", "modelbuild", *args, "--help"], cwd=root,
                          capture_output=True, text=True, check=True).stdout


@pytest.mark.slow
def test_every_command_with_target_has_the_same_target_and_mcpu_options(tmp_path):
    project = make_project(tmp_path / "p", {"tiny": tiny_model()})
    with_target = ["tune", "import", "export", "sample", "check", "inspect", "explain", "watch",
                   "why", "bench", "sweep"]
    for command in with_target:
        text = " ".join(_help(project.root, command).split())
        assert "--target TARGET the target to build for (default: llvm)" in text, command
        assert "--mcpu MCPU the CPU to build for with target llvm" in text, command
    for command in ("select", "serve", "cache"):
        assert "--target" not in _help(project.root, command), command


def test_a_cache_dir_in_the_home_of_no_user_is_one_line(tmp_path):
    """`~nosuchuser/cache` was a traceback from doit and an internal error from the commands."""
    project = make_project(tmp_path / "p", {"tiny": tiny_model()})
    (project.root / "pyproject.toml").write_text('[tool.modelbuild]\ncache-dir = "~nosuchuser5/c"\n')
    run = project.doit("build:tiny", check=False)
    assert run.returncode != 0 and "Traceback" not in run.output, run.output
    assert "cache-dir = '~nosuchuser5/c': no such user's home folder" in run.output, run.output
    proc = subprocess.run([sys.executable, "-m", "modelbuild", "cache", "stats"], cwd=project.root,
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "no such user's home folder" in proc.stderr, proc
    assert "internal error" not in proc.stderr
