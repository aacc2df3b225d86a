"""Model declarations in models/: discovery and its errors (no TVM needed)."""

import pytest

from modelbuild.core import models
from modelbuild.core.errors import BuildError


def test_toml_and_dropped_onnx_files_are_both_models(tmp_path):
    (tmp_path / "a.toml").write_text('onnx = "onnx:backend/test/data/light/light_squeezenet.onnx"\n')
    (tmp_path / "b.onnx").write_bytes(b"not read at discovery")
    (tmp_path / "c.toml").write_text('[inputs]\nx = [1, 3, 8, 8]\n')
    found = models.discover(tmp_path)
    assert list(found) == ["a", "b", "c"]
    assert found["a"].onnx_path.is_file()  # resolved inside the installed onnx package
    assert found["b"].source_files() == [tmp_path / "b.onnx"]
    assert found["c"].onnx_path == tmp_path / "c.onnx"
    assert found["c"].inputs == {"x": [1, 3, 8, 8]}
    assert found["c"].source_files() == [tmp_path / "c.toml", tmp_path / "c.onnx"]


def test_repository_declares_resnet50_and_two_more_families():
    from conftest import REPO

    found = models.discover(REPO / "models")
    assert {"resnet50", "squeezenet", "inception_v1"} <= set(found)
    for spec in found.values():
        assert spec.onnx_path.is_file(), spec


@pytest.mark.parametrize("text, needle", [
    ("onnx = ", "not a valid model declaration"),
    ('onxx = "a.onnx"', "unknown keys ['onxx']"),
    ('[inputs]\nx = [1, -3]', "[inputs] must map input names to lists of positive integers"),
    ("onnx = 5", "onnx = 5: not a file name"),
    ('onnx = ""', "onnx = '': not a file name"),
    ('onnx = ["m.onnx"]', "onnx = ['m.onnx']: not a file name"),
    ('onnx = "m\\u0000.onnx"', "not a file name"),
    ('onnx = "onnx:"', "not a file name"),
])
def test_bad_declarations_name_the_file(tmp_path, text, needle):
    (tmp_path / "m.toml").write_text(text)
    with pytest.raises(BuildError) as info:
        models.discover(tmp_path)
    assert needle in str(info.value) and "m.toml" in str(info.value)


def test_an_onnx_file_that_is_no_regular_file_is_refused_before_it_is_read(tmp_path):
    """A folder gave an internal error; a pipe or /dev/zero hung partition with no output."""
    import os

    (tmp_path / "pipe.onnx").parent.mkdir(exist_ok=True)
    os.mkfifo(tmp_path / "pipe.onnx")
    (tmp_path / "folder.onnx").mkdir()
    (tmp_path / "loop.onnx").symlink_to("loop.onnx")
    cases = {"pipe": "is not a regular file (a device or a pipe)", "folder": "is a folder",
             "loop": "cannot be read: Too many levels of symbolic links",
             "zero": "is not a regular file", "gone": "does not exist"}
    (tmp_path / "zero.toml").write_text('onnx = "/dev/zero"\n')
    (tmp_path / "gone.toml").write_text('onnx = "nowhere.onnx"\n')
    specs = {**models.discover_all(tmp_path)[0]}
    for name, needle in cases.items():
        with pytest.raises(BuildError) as info:
            models.check_exists(specs[name])
        assert needle in str(info.value), (name, str(info.value))
