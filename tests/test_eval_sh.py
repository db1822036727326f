"""eval.sh: bootstrap, fast path, reinstall on a changed pyproject.toml, and its own exit 6.

These run the real script against a tiny stand-in project in a temp directory (a program
that plays evalrig), so the bootstrap is exercised without reinstalling the real one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

STAND_IN = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "evalrig-standin"
version = "{version}"
requires-python = ">=3.11"

[project.scripts]
evalrig = "standin:main"

[tool.setuptools]
py-modules = ["standin"]
"""


def _project(tmp_path: Path, version: str = "0.0.1") -> Path:
    proj = tmp_path / "proj"
    proj.mkdir(exist_ok=True)
    shutil.copy(ROOT / "eval.sh", proj / "eval.sh")
    (proj / "pyproject.toml").write_text(STAND_IN.format(version=version))
    (proj / "standin.py").write_text(
        "import os, sys\n"
        "def main():\n"
        "    print('standin', os.getcwd(), *sys.argv[1:])\n"
        "    sys.exit(int(os.environ.get('STANDIN_EXIT', '0')))\n"
    )
    return proj


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env or dict(os.environ), capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_bootstrap_then_fast_path_then_reinstall(tmp_path: Path) -> None:
    proj = _project(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    first = _run([str(proj / "eval.sh"), "a", "b c"], cwd=elsewhere)
    assert first.returncode == 0, first.stderr
    assert first.stdout == f"standin {elsewhere} a b c\n"
    setup_lines = [ln for ln in first.stderr.splitlines() if ln.startswith("eval.sh: setting up")]
    assert len(setup_lines) == 1

    second = _run([str(proj / "eval.sh"), "x"], cwd=elsewhere)
    assert (second.returncode, second.stderr) == (0, "")

    # Exit codes pass straight through (a verdict's 1 or 3 is the rig's, not eval.sh's).
    env = {**os.environ, "STANDIN_EXIT": "3"}
    assert _run([str(proj / "eval.sh")], cwd=elsewhere, env=env).returncode == 3

    # Through a symlink in another directory.
    link = tmp_path / "bin" / "es"
    link.parent.mkdir()
    link.symlink_to(proj / "eval.sh")
    via = _run([str(link), "y"], cwd=elsewhere)
    assert (via.returncode, via.stdout, via.stderr) == (0, f"standin {elsewhere} y\n", "")

    # Touched but unchanged: no reinstall.
    os.utime(proj / "pyproject.toml")
    touched = _run([str(proj / "eval.sh")], cwd=elsewhere)
    assert (touched.returncode, touched.stderr) == (0, "")

    # Changed: reinstalled once.
    (proj / "pyproject.toml").write_text(STAND_IN.format(version="0.0.2"))
    changed = _run([str(proj / "eval.sh")], cwd=elsewhere)
    assert changed.returncode == 0, changed.stderr
    assert "eval.sh: setting up" in changed.stderr


def test_no_python_exits_6(tmp_path: Path) -> None:
    proj = _project(tmp_path)
    # A PATH with the shell tools eval.sh uses but no Python at all.
    tools = tmp_path / "tools"
    tools.mkdir()
    for name in ("bash", "dirname", "readlink", "cat", "touch", "flock"):
        found = shutil.which(name)
        if found:
            (tools / name).symlink_to(found)
    env = {"PATH": str(tools), "HOME": str(tmp_path)}
    res = _run([str(tools / "bash"), str(proj / "eval.sh"), "--help"], cwd=tmp_path, env=env)
    assert res.returncode == 6
    assert "no Python 3.11 or newer found" in res.stderr
    assert not (proj / ".venv").exists()


def test_failed_install_exits_6(tmp_path: Path) -> None:
    proj = _project(tmp_path)
    (proj / "pyproject.toml").write_text("this is not toml [[[")
    res = _run([str(proj / "eval.sh")], cwd=tmp_path, env={**os.environ, "EVALRIG_PYTHON": sys.executable})
    assert res.returncode == 6
    assert "installing evalrig" in res.stderr and ".venv-install.log" in res.stderr


@pytest.mark.slow
def test_an_install_without_the_evalrig_script_exits_6(tmp_path: Path) -> None:
    proj = _project(tmp_path)
    # A valid project that pip installs happily but that has no console script.
    (proj / "pyproject.toml").write_text(STAND_IN.format(version="0.0.1").split("[project.scripts]")[0]
                                         + '[tool.setuptools]\npy-modules = ["standin"]\n')
    res = _run([str(proj / "eval.sh")], cwd=tmp_path, env={**os.environ, "EVALRIG_PYTHON": sys.executable})
    assert res.returncode == 6, res.stderr
    assert "gave no" in res.stderr and "bin/evalrig" in res.stderr
