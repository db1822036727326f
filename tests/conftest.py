"""Shared fixtures. Every test gets its own $EVALRIG_HOME so no test touches the real one."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def evalrig_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("evalrig-home")
    monkeypatch.setenv("EVALRIG_HOME", str(home))
    return home


@pytest.fixture
def repo_root() -> Path:
    return ROOT
