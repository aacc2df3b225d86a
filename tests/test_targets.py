"""Targets: a table of what modelbuild builds for; the target is an input of every step."""

import pytest

from conftest import assert_close, model_inputs, run_library
from modelbuild import manifest, targets
from modelbuild.errors import BuildError


def test_unknown_target_lists_the_known_ones():
    with pytest.raises(BuildError) as info:
        targets.resolve("cuda")
    assert "unsupported target 'cuda'" in str(info.value)
    assert "c, llvm" in str(info.value)


def test_changing_the_target_reruns_every_step_and_builds_for_it(tiny_copy):
    llvm_lib = tiny_copy.library("tiny").read_bytes()
    x = model_inputs(tiny_copy.root, "tiny")
    expected = run_library(tiny_copy.library("tiny"), x)
    man = manifest.read(tiny_copy.root / "build/tiny/partition/manifest.msgpack")
    every = ({"partition:tiny", "link:tiny"}
             | {f"{kind}:tiny/{w.name}" for w in man.workloads for kind in ("lower", "codegen")})

    run = tiny_copy.doit("build:tiny", "target=c")
    assert run.ran == every
    assert tiny_copy.library("tiny").read_bytes() != llvm_lib
    assert_close(run_library(tiny_copy.library("tiny"), x), expected)

    assert tiny_copy.doit("build:tiny", "target=c").ran == set()
    back = tiny_copy.doit("build:tiny")
    assert {"partition:tiny", "link:tiny"} <= back.ran
    assert_close(run_library(tiny_copy.library("tiny"), x), expected, rel=0)
