"""A stamp that is JSON of another shape (hand-edited, another version's) is no stamp: the
step reruns or is restored, never an internal error that stays until the file is
deleted by hand (a kill-fuzz run found `{"key": "x", "inputs": [1]}` in partition's)."""

from __future__ import annotations

import json

import pytest
from conftest import sha256

SHAPES = [{"key": "x", "inputs": [1]}, {"key": 5}, [1, 2],
          {"key": "x", "inputs": {"sources": {"onnx": 5, "external": [1]}}}]


@pytest.mark.parametrize("stamp", ["partition/manifest.msgpack.stamp", "tiny.so.stamp"])
@pytest.mark.parametrize("shape", [SHAPES[0], *[pytest.param(s, marks=pytest.mark.slow)
                                                for s in SHAPES[1:]]],
                         ids=["inputs-list", "key-int", "list", "sources"])
def test_a_stamp_of_another_shape_is_no_stamp(tiny_copy, stamp, shape):
    good = sha256(tiny_copy.library("tiny"))
    (tiny_copy.root / "build" / "tiny" / stamp).write_text(json.dumps(shape))
    run = tiny_copy.doit("build:tiny")
    assert "internal error" not in run.output and "Traceback" not in run.output, run.output
    assert sha256(tiny_copy.library("tiny")) == good
    assert tiny_copy.doit("build:tiny").ran == set()
