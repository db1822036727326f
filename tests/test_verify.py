"""`evalrig verify`: every result re-derived from stored evidence, every digest checked."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from agents.run_kit import cli, make_checkpoint, make_tasks

from evalrig.store.bundle import load_run


@pytest.fixture
def bundle(tmp_path: Path, evalrig_home: Path) -> Path:
    ck = make_checkpoint(tmp_path, evalrig_home)
    tasks = make_tasks(tmp_path, 2)
    out = tmp_path / "b"
    r = cli("run", "--checkpoint", ck, "--tasks", tasks, "--out", out, "--repeat", "2",
            "--sandbox", "process")
    assert r.exit_code == 0, r.stderr
    return out


def test_an_untouched_bundle_verifies(bundle: Path) -> None:
    r = cli("verify", bundle, "--json")
    assert r.exit_code == 0, r.stderr
    doc = orjson.loads(r.stdout)
    assert doc["ok"] and doc["results"] == 4 and doc["rederived"] == 4


def _line_of(bundle: Path, status: str) -> tuple[int, dict]:
    lines = (bundle / "results.jsonl").read_bytes().splitlines()
    for i, raw in enumerate(lines, start=1):
        rec = orjson.loads(raw)
        if rec["status"] == status:
            return i, rec
    raise AssertionError(status)


def test_a_tampered_result_line_is_caught_with_its_line(bundle: Path) -> None:
    n, rec = _line_of(bundle, "passed")
    lines = (bundle / "results.jsonl").read_bytes().splitlines()
    lines[n - 1] = orjson.dumps(rec | {"status": "failed", "passed": False, "reward": 0.0},
                                option=orjson.OPT_SORT_KEYS)
    (bundle / "results.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    r = cli("verify", bundle)
    assert r.exit_code == 4
    assert f"results.jsonl:{n}: trial {rec['trial_id']}: recorded failed, re-derived passed" in r.stderr
    assert "results.jsonl: digest" in r.stderr and "differs from manifest.json" in r.stderr


def test_tampered_evidence_is_caught_by_its_digest_and_by_re_derivation(bundle: Path) -> None:
    n, rec = _line_of(bundle, "failed")
    (bundle / "attempts" / rec["attempt_id"] / "out" / "answer.txt").write_text("even\n")
    r = cli("verify", bundle)
    assert r.exit_code == 4
    assert f"results.jsonl:{n}: trial {rec['trial_id']}: evidence of {rec['attempt_id']}" in r.stderr
    assert f"results.jsonl:{n}: trial {rec['trial_id']}: recorded failed, re-derived passed" in r.stderr
    assert "answer.txt: digest" in r.stderr


def test_a_changed_verifier_is_refused_by_task_name(bundle: Path) -> None:
    tasks = Path(load_run(bundle).manifest.settings.tasks_dir)
    toml = tasks / "fixed" / "t0" / "task.toml"
    toml.write_text(toml.read_text().replace('"even"', '"odd"'))
    r = cli("verify", bundle)
    assert r.exit_code == 4
    assert "task t0: its verifier changed since the run" in r.stderr
    assert "t1" not in r.stderr  # only the changed task is named


def test_a_bundle_resumed_after_a_task_changed_verifies(bundle: Path) -> None:
    # The resume ran the changed task's trials again; their earlier results stay on
    # record with the old verifier and must not make the bundle unverifiable.
    m = load_run(bundle).manifest
    toml = Path(m.settings.tasks_dir) / "fixed" / "t0" / "task.toml"
    toml.write_text(toml.read_text().replace('"even"', '"odd"'))
    r = cli("run", "--out", bundle, "--resume")
    assert r.exit_code == 0, r.stderr
    assert len(load_run(bundle).results) == 6
    r = cli("verify", bundle, "--json")
    assert r.exit_code == 0, r.stderr
    assert orjson.loads(r.stdout)["rederived"] == 4


def test_an_unfinished_bundle_does_not_verify(bundle: Path) -> None:
    m = orjson.loads((bundle / "manifest.json").read_bytes())
    m["status"] = "running"
    (bundle / "manifest.json").write_bytes(orjson.dumps(m))
    r = cli("verify", bundle)
    assert r.exit_code == 4 and "never finished" in r.stderr


def test_verify_of_a_directory_that_is_no_bundle(tmp_path: Path) -> None:
    r = cli("verify", tmp_path)
    assert r.exit_code == 4 and "manifest.json: missing" in r.stderr


@pytest.mark.parametrize(("edit", "problem"), [
    ({"status": "incomplete"}, "status: the manifest says incomplete, the records make it complete"),
    ({"repeat": 3}, "counts.trials: the manifest says 4, the records give 6"),
])
def test_a_manifest_that_disagrees_with_its_records_is_caught(
        bundle: Path, edit: dict, problem: str) -> None:
    # The bundle digest covers the files, not the manifest: what compare reads from it
    # must still agree with results.jsonl.
    m = orjson.loads((bundle / "manifest.json").read_bytes())
    (bundle / "manifest.json").write_bytes(orjson.dumps(m | edit))
    r = cli("verify", bundle)
    assert r.exit_code == 4
    assert f"manifest.json: {problem}" in r.stderr


def test_a_manifest_whose_counts_were_edited_is_caught(bundle: Path) -> None:
    m = orjson.loads((bundle / "manifest.json").read_bytes())
    m["counts"] = m["counts"] | {"passed": m["counts"]["passed"] + 1}
    (bundle / "manifest.json").write_bytes(orjson.dumps(m))
    r = cli("verify", bundle)
    assert r.exit_code == 4 and "manifest.json: counts.passed: the manifest says" in r.stderr


def test_verify_refuses_a_hidden_canary_finding(bundle: Path) -> None:
    """A result that says `found: false` where the stored evidence holds the canary (here
    base32 of its random part, planted after the run) is refused by re-derivation."""
    import base64

    n, rec = _line_of(bundle, "passed")
    random_part = rec["canary"]["value"].removeprefix("rst_")
    leak = bundle / "attempts" / rec["attempt_id"] / "out" / "notes.txt"
    leak.write_bytes(base64.b32encode(random_part.encode()))
    r = cli("verify", bundle)
    assert r.exit_code == 4
    assert (f"results.jsonl:{n}: trial {rec['trial_id']}: the stored evidence of {rec['attempt_id']} "
            "holds the canary (out/notes.txt); the result records it not found") in r.stderr


def test_verify_rederives_a_canary_split_across_the_streams(tmp_path: Path) -> None:
    from evalrig.attempt.evidence import rederive_canary

    (tmp_path / "stdout.txt").write_bytes(b"log " + b"0123456789abcdef")
    (tmp_path / "stderr.txt").write_bytes(b"fedcba9876543210 end")
    assert rederive_canary(tmp_path, b"0123456789abcdeffedcba9876543210") == ["stdout+stderr"]
    assert rederive_canary(tmp_path, b"00000000000000000000000000000000") == []
