"""Shared fixtures. Every test gets its own $EVALRIG_HOME so no test touches the real one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent

# Property tests explore new examples on every run at a desk; under CI (CI=true, as .ci/run
# runs) each draws the same examples every time, so that a submission lands or fails on its
# own change, not on the draw. A rare failure a desk run finds is pinned with @example.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(autouse=True)
def evalrig_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("evalrig-home")
    monkeypatch.setenv("EVALRIG_HOME", str(home))
    return home


@pytest.fixture
def repo_root() -> Path:
    return ROOT


# The longest test files (pytest --durations, file by file), longest first. tests/run.sh runs
# the suite on two pytest-xdist workers, each file whole on one worker, in collection order
# (--no-loadscope-reorder): these start first and the short files fill in around them, where
# one long file left to the end would run alone while the other worker idles. Order only:
# every test runs, each file's tests in their own order. A file not named here runs after.
LONGEST_FIRST = (
    # first, on a fresh worker: after other files in the same worker process, its kill -9 of
    # a Ray driver once left the agent's bwrap running (an order dependence not yet found)
    "test_ray.py",
    "test_tau2.py",
    "test_release_train.py",
    "test_llm_train.py",
    "test_redteam_gate.py",
    "test_redteam_trust.py",
    "test_episode.py",
    "test_redteam_canary.py",
    "test_redteam_seal.py",
    "test_redteam_untrusted.py",
    "test_redteam_whatruns.py",
    "test_redteam_seccomp.py",
    "test_redteam_network.py",
    "test_run_messages.py",
    "test_redteam_evidence.py",
    "test_redteam_faults.py",
    "test_sandbox.py",
    "test_redteam_records.py",
    "test_redteam_harness.py",
    "test_watch.py",
    "test_release_faults.py",
    "test_redteam_escaping.py",
    "test_redteam_leftovers.py",
    "test_examples.py",
    "test_cli_gate.py",
    "test_eval_sh.py",
    "test_driver_secret.py",
    "test_conformance.py",
    "test_gate.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not hasattr(config, "workerinput"):  # one process: the files in their usual order
        return
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's own order kept
