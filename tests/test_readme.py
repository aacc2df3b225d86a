"""The README's promises that a file can check: its trust model names tests that exist (a
guarantee whose test was renamed or removed is no longer shown by anything), and it stays
a landing page."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def test_every_test_the_trust_model_names_exists():
    text = README.read_text()
    section = text[text.index("## Trust model"):]
    section = section[:section.index("\n## ", 1)]
    named = re.findall(r"`(test_\w+\.py)::(test_\w+)`", section)
    assert len(named) >= 10, section
    missing = [f"{file}::{name}" for file, name in named
               if not (ROOT / "tests" / file).is_file()
               or name not in _test_functions(ROOT / "tests" / file)]
    assert not missing, missing


def test_the_readme_is_a_landing_page_that_starts_with_the_two_commands():
    lines = README.read_text().splitlines()
    assert len(lines) <= 300
    commands = [i for i, line in enumerate(lines) if line.startswith("python -m pip install")]
    assert len(commands) >= 2 and "doit build:resnet50" in lines[commands[0]]
    assert 'pytest -m ""' in lines[commands[1]]
    assert commands[0] < 40  # before the reference, not after it
