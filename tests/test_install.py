"""What a fresh environment needs: every package the code imports is declared, and a feature
run without one of its packages says which, and how to install it (no traceback)."""

import subprocess
import sys
from pathlib import Path

from conftest import REPO

from modelbuild.core import toml


def _without(project, module: str, *args) -> subprocess.CompletedProcess:
    """`python -m modelbuild ARGS` in a process where ``module`` cannot be imported."""
    code = (f"import sys; sys.modules[{module!r}] = None\n"
            "from modelbuild.commands.cli import main\n"
            f"sys.exit(main({list(args)!r}))")
    return subprocess.run([sys.executable, "-c", code], cwd=project.root, capture_output=True,
                          text=True)


def test_tune_without_cloudpickle_names_the_package_and_the_install_command(tiny_project):
    proc = _without(tiny_project, "cloudpickle", "tune", "tiny", "--trials", "1")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "tuning needs the Python package(s) 'cloudpickle'" in out
    assert "python -m pip install cloudpickle" in out
    assert "Traceback" not in out
    assert not (tiny_project.root / "build" / "tiny").exists()  # failed before any work


def test_every_module_the_package_imports_is_declared():
    """Third-party imports in modelbuild/ (those inside functions too) are dependencies of
    the package or of one of its extras."""
    import ast

    declared = toml.loads((REPO / "pyproject.toml").read_text())["project"]
    names = list(declared["dependencies"])
    for extra in declared["optional-dependencies"].values():
        names += extra
    packages = {n.split(";")[0].split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip()
                .lower().replace("_", "-") for n in names}
    provides = {"tvm": "apache-tvm", "tvm_ffi": "apache-tvm-ffi", "xgboost": "xgboost-cpu",
                "yaml": "pyyaml", "tomli": "tomli"}
    stdlib = set(sys.stdlib_module_names)
    imported = set()
    for path in (REPO / "modelbuild").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                imported.add(node.module.split(".")[0])
    third_party = {m for m in imported if m not in stdlib and m != "modelbuild"}
    undeclared = sorted(m for m in third_party
                        if provides.get(m, m).lower().replace("_", "-") not in packages)
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"
    assert Path(REPO / ".ci" / "run").is_file()
