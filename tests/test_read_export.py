"""`export` (docs/reading.md): each format round-tripped (JSONL loaded by the `datasets`
library, JUnit XML checked against a schema, CSV parsed), fresh tasks only by default,
recorded in the home so that a later gate finds the exported tasks not fresh, and refused
for a bundle that does not verify. Pairs' invariants as property tests."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from gate_bundles import Side, Task, counts_tasks, write_run
from hypothesis import given, settings
from hypothesis import strategies as st
from read_bundles import write_bundle, write_tasks
from test_cli_verdict import BETTER, CHAMP, policy
from typer.testing import CliRunner

from evalrig.cli import app
from evalrig.models.reading import ExportEntry
from evalrig.read.export import Chat, pairs_of, xml_text
from evalrig.store.jsonl import read_chained


def cli(home: Path, *args: object) -> object:
    return CliRunner().invoke(app, [str(a) for a in args], env={"EVALRIG_HOME": str(home), "NO_COLOR": "1"})


@pytest.fixture
def bundles(tmp_path: Path, evalrig_home: Path) -> tuple[Path, Path, Path]:
    tasks = write_tasks(tmp_path / "t")
    a = write_bundle(tmp_path / "a", tasks, evalrig_home)
    b = write_bundle(tmp_path / "b", tasks, evalrig_home, run_id="run-other", name="agent-b", prefix="b")
    return a, b, tasks


def jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_trajectories_hold_every_final_fresh_attempt_as_chat(bundles: tuple[Path, Path, Path],
                                                           tmp_path: Path, evalrig_home: Path) -> None:
    a, _, _ = bundles
    out = tmp_path / "traj.jsonl"
    r = cli(evalrig_home, "export", a, "--format", "trajectories", "--to", out)
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    rows = jsonl(out)
    assert {x["suite"] for x in rows} == {"fresh"} and len(rows) == 12  # 6 fresh tasks x 2, no fixed
    exact = next(x for x in rows if x["attempt_id"] == "a-exact-1-0")
    assert exact["messages"] == [{"role": "user", "content": "Solve exact-1.\n"},
                                 {"role": "assistant", "content": "42\n"}]
    assert exact["verifier"]["kind"] == "exact" and exact["spend"]["candidate"]["cost_usd"] == 0.01
    chat = next(x for x in rows if x["attempt_id"] == "a-chat-1-0")
    # an episode starts with its task's prompt, as the agent saw it (the file $EVALRIG_PROMPT names)
    assert chat["messages"][0] == {"role": "system", "content": "Solve chat-1.\n"}
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    assert chat["tools"][0]["function"]["name"] == "cancel"
    r = cli(evalrig_home, "export", a, "--format", "trajectories", "--to", out, "--min-reward", "1")
    assert r.exit_code == 0 and all(x["reward"] == 1.0 for x in jsonl(out))  # type: ignore[attr-defined]


def test_pairs_cross_two_bundles_and_load_as_conversational_preferences(
        bundles: tuple[Path, Path, Path], tmp_path: Path, evalrig_home: Path) -> None:
    a, b, _ = bundles
    out = tmp_path / "pairs.jsonl"
    r = cli(evalrig_home, "export", a, b, "--format", "pairs", "--to", out)
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    rows = jsonl(out)
    assert rows and all(x["chosen_reward"] > x["rejected_reward"] for x in rows)
    assert all(x["chosen_attempt_id"] != x["rejected_attempt_id"] for x in rows)
    assert any(x["chosen_run_id"] != x["rejected_run_id"] for x in rows)  # across bundles
    chat = [x for x in rows if x["task_id"] == "chat-1"]
    # the two episodes share the user's message, the tool call and its result; they part at the answer
    assert chat and all([m["role"] for m in x["prompt"]] == ["system", "user", "assistant", "tool"] for x in chat)
    assert all(x["chosen"][0]["content"] == "done" for x in chat)
    datasets = pytest.importorskip("datasets")
    ds = datasets.load_dataset("json", data_files=str(out), split="train")
    assert len(ds) == len(rows)
    for col in ("prompt", "chosen", "rejected"):
        for messages in ds[col]:
            assert isinstance(messages, list) and messages
            assert all(isinstance(m["role"], str) and "content" in m for m in messages)
    traj = tmp_path / "traj.jsonl"
    assert cli(evalrig_home, "export", a, "--format", "trajectories", "--to", traj).exit_code == 0  # type: ignore[attr-defined]
    ds = datasets.load_dataset("json", data_files=str(traj), split="train")
    assert len(ds) == 12 and all(m[0]["role"] == ("system" if t.startswith("chat") else "user")
                                 for t, m in zip(ds["task_id"], ds["messages"], strict=True))


JUNIT_XSD = """<?xml version="1.0" encoding="UTF-8"?>
<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema" elementFormDefault="qualified">
  <xs:element name="failure"><xs:complexType mixed="true">
    <xs:attribute name="message" type="xs:string"/><xs:attribute name="type" type="xs:string"/>
  </xs:complexType></xs:element>
  <xs:element name="error"><xs:complexType mixed="true">
    <xs:attribute name="message" type="xs:string"/><xs:attribute name="type" type="xs:string"/>
  </xs:complexType></xs:element>
  <xs:element name="testcase"><xs:complexType>
    <xs:sequence>
      <xs:element ref="failure" minOccurs="0" maxOccurs="unbounded"/>
      <xs:element ref="error" minOccurs="0" maxOccurs="unbounded"/>
    </xs:sequence>
    <xs:attribute name="name" type="xs:string" use="required"/>
    <xs:attribute name="classname" type="xs:string" use="required"/>
    <xs:attribute name="time" type="xs:decimal" use="required"/>
  </xs:complexType></xs:element>
  <xs:element name="testsuite"><xs:complexType>
    <xs:sequence><xs:element ref="testcase" minOccurs="0" maxOccurs="unbounded"/></xs:sequence>
    <xs:attribute name="name" type="xs:string" use="required"/>
    <xs:attribute name="tests" type="xs:nonNegativeInteger" use="required"/>
    <xs:attribute name="failures" type="xs:nonNegativeInteger" use="required"/>
    <xs:attribute name="errors" type="xs:nonNegativeInteger" use="required"/>
    <xs:attribute name="time" type="xs:decimal" use="required"/>
  </xs:complexType></xs:element>
  <xs:element name="testsuites"><xs:complexType>
    <xs:sequence><xs:element ref="testsuite" minOccurs="0" maxOccurs="unbounded"/></xs:sequence>
    <xs:attribute name="name" type="xs:string"/>
  </xs:complexType></xs:element>
</xs:schema>
"""


def test_junit_validates_one_testcase_per_task(bundles: tuple[Path, Path, Path], tmp_path: Path,
                                                evalrig_home: Path) -> None:
    a, _, _ = bundles
    out = tmp_path / "junit.xml"
    r = cli(evalrig_home, "export", a, "--format", "junit", "--to", out, "--suite", "fresh", "--suite", "fixed")
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    xmlschema = pytest.importorskip("xmlschema")
    schema = xmlschema.XMLSchema(JUNIT_XSD)
    schema.validate(str(out))
    import xml.etree.ElementTree as ET

    root = ET.parse(out).getroot()
    cases = root.findall(".//testcase")
    assert sorted(c.get("name") for c in cases) == ["chat-1", "cmd-1", "exact-1", "fixed-1", "json-1", "regex-1",
                                                   "text-1"]
    exact = next(c for c in cases if c.get("name") == "exact-1")
    assert len(exact.findall("failure")) == 1 and float(exact.get("time")) == 4.0
    assert not next(c for c in cases if c.get("name") == "fixed-1").findall("failure")
    assert xml_text("a\x00b\x1bc\ud800") == "a\ufffdb\ufffdc\ufffd"


def test_junit_counts_an_infrastructure_fault_as_an_error(tmp_path: Path, evalrig_home: Path) -> None:
    tasks = counts_tasks([3, 4])
    tasks["fresh-down"] = Task("fresh", [True])  # its one trial never got past the infrastructure
    d = write_run(tmp_path / "r", Side("x", tasks, unscored={"fresh-000", "fresh-down"}), evalrig_home)
    out = tmp_path / "j.xml"
    assert cli(evalrig_home, "export", d, "--format", "junit", "--to", out).exit_code == 0  # type: ignore[attr-defined]
    pytest.importorskip("xmlschema").XMLSchema(JUNIT_XSD).validate(str(out))
    text = out.read_text()
    assert text.count("<error ") == 6 and 'errors="2"' in text and 'name="fresh-down"' in text


def test_csv_has_a_row_for_every_attempt_superseded_and_unscored_ones_too(tmp_path: Path,
                                                                          evalrig_home: Path) -> None:
    tasks = counts_tasks([3, 4])
    tasks["fresh-down"] = Task("fresh", [True])
    d = write_run(tmp_path / "r", Side("x", tasks, unscored={"fresh-000", "fresh-down"}), evalrig_home)
    out = tmp_path / "x.csv"
    assert cli(evalrig_home, "export", d, "--format", "csv", "--to", out).exit_code == 0  # type: ignore[attr-defined]
    rows = list(csv.DictReader(out.open()))
    fresh = [json.loads(x) for x in (d / "results.jsonl").read_text().splitlines()]
    fresh = [x for x in fresh if x["suite"] == "fresh"]
    assert sorted(r["attempt_id"] for r in rows) == sorted(x["attempt_id"] for x in fresh)
    assert any(r["status"] == "infra_error" and r["final"] == "false" for r in rows)
    assert {r["final"] for r in rows if r["status"] == "passed"} == {"true"}
    assert cli(evalrig_home, "export", d, "--format", "csv", "--to", d / "x.csv").exit_code == 4  # type: ignore[attr-defined]


def test_csv_has_a_stable_header_and_one_row_per_attempt(bundles: tuple[Path, Path, Path], tmp_path: Path,
                                                         evalrig_home: Path) -> None:
    a, b, _ = bundles
    out = tmp_path / "x.csv"
    assert cli(evalrig_home, "export", a, b, "--format", "csv", "--to", out).exit_code == 0  # type: ignore[attr-defined]
    rows = list(csv.reader(out.open()))
    header = rows[0]
    assert header[:10] == ["run_id", "task_id", "suite", "trial_id", "rep", "attempt", "attempt_id", "status",
                           "passed", "reward"]
    assert header[10:] == sorted(header[10:]) and {"wall_s", "verifier.kind", "canary.found"} <= set(header)
    assert len(rows) == 1 + 24 and len(set(header)) == len(header)
    again = tmp_path / "y.csv"
    assert cli(evalrig_home, "export", a, b, "--format", "csv", "--to", again).exit_code == 0  # type: ignore[attr-defined]
    assert again.read_bytes() == out.read_bytes()


def test_a_bundle_that_fails_verification_is_not_exported(bundles: tuple[Path, Path, Path], tmp_path: Path,
                                                          evalrig_home: Path) -> None:
    a, _, _ = bundles
    (a / "attempts" / "a-exact-1-1" / "out" / "answer.txt").write_text("42\n")  # a forged pass
    out = tmp_path / "x.jsonl"
    r = cli(evalrig_home, "export", a, "--format", "trajectories", "--to", out)
    assert r.exit_code == 4, r.output  # type: ignore[attr-defined]
    assert "fails verification" in r.stderr and "a-exact-1-1/out/answer.txt" in r.stderr  # type: ignore[attr-defined]
    assert not out.exists() and not (evalrig_home / "exports.jsonl").exists()


def test_export_is_recorded_and_a_later_gate_finds_the_tasks_not_fresh(tmp_path: Path, evalrig_home: Path) -> None:
    pol, digest = policy(tmp_path)
    champ = write_run(tmp_path / "champ", Side("champion-build", counts_tasks(CHAMP), policy_digest=digest), evalrig_home)
    cand = write_run(tmp_path / "cand", Side("candidate-build", counts_tasks(BETTER), policy_digest=digest), evalrig_home)
    # an earlier train's bundle whose fresh tasks are the same content: exported for training
    old = write_run(tmp_path / "old", Side("old-build", counts_tasks(CHAMP), policy_digest=digest), evalrig_home)
    assert cli(evalrig_home, "compare", champ, cand, "--out", tmp_path / "c1").exit_code == 0  # type: ignore[attr-defined]
    assert cli(evalrig_home, "gate", tmp_path / "c1", "--policy", pol, "--advisory").exit_code == 0  # type: ignore[attr-defined]
    r = cli(evalrig_home, "export", old, "--format", "csv", "--to", tmp_path / "old.csv")
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    entries = read_chained(evalrig_home / "exports.jsonl", ExportEntry).records
    assert len(entries) == 1 and entries[0].suites == ["fresh"] and len(entries[0].content) == len(CHAMP)
    assert entries[0].bundles[0].run_id == "run-old-build" and entries[0].prev is not None
    assert cli(evalrig_home, "compare", champ, cand, "--out", tmp_path / "c2").exit_code == 0  # type: ignore[attr-defined]
    r = cli(evalrig_home, "gate", tmp_path / "c2", "--policy", pol, "--json")
    assert r.exit_code == 3, r.output  # type: ignore[attr-defined]
    decision = json.loads((tmp_path / "c2" / "decisions" / "default-v1.json").read_text())
    rule = next(x for x in decision["rules"] if x["name"] == "invariant.fresh-after-seal")
    assert rule["held"] is False and rule["seen_before"] == len(CHAMP)
    assert rule["seen_by_candidates"][0].startswith("export of run-old-build at ")


def test_usage_errors(bundles: tuple[Path, Path, Path], tmp_path: Path, evalrig_home: Path) -> None:
    a, _, _ = bundles
    assert cli(evalrig_home, "export", a, "--format", "parquet", "--to", tmp_path / "x").exit_code == 2  # type: ignore[attr-defined]
    assert cli(evalrig_home, "export", a, "--format", "csv", "--to", tmp_path / "x",
               "--suite", "nightly").exit_code == 2  # type: ignore[attr-defined]


# -- pairs, as properties ----------------------------------------------------------------

attempts = st.lists(
    st.tuples(st.sampled_from(["a1", "a2", "a3", "a4", "a5", "a6"]), st.sampled_from([0.0, 0.25, 0.5, 1.0]),
              st.dictionaries(st.sampled_from(["p0", "p1", "p2", "p3"]), st.integers(0, 3), max_size=3)),
    max_size=6)


@settings(max_examples=200, deadline=None)
@given(attempts)
def test_pairs_invariants(raw: list[tuple[str, float, dict[str, int]]]) -> None:
    # a prefix digest names one message list, so one length
    chats = [(a, r, Chat([], [], {p: int(p[1]) for p in ps})) for a, r, ps in raw]
    got = list(pairs_of(chats))
    for ci, ri, k in got:
        assert ci != ri and chats[ci][0] != chats[ri][0]  # never an attempt with itself
        assert chats[ci][1] > chats[ri][1]  # rewards differ; the higher is chosen
        shared = chats[ci][2].prefixes.keys() & chats[ri][2].prefixes.keys()
        assert shared and k == max(chats[ci][2].prefixes[p] for p in shared)  # the longest shared prefix
    keys = [frozenset((c, r)) for c, r, _ in got]
    assert len(keys) == len(set(keys))  # each two attempts once
    want = {frozenset((i, j)) for i in range(len(chats)) for j in range(i + 1, len(chats))
            if chats[i][0] != chats[j][0] and chats[i][1] != chats[j][1]
            and chats[i][2].prefixes.keys() & chats[j][2].prefixes.keys()}
    assert set(keys) == want  # and every such two


def test_a_link_added_to_the_evidence_is_never_exported(bundles: tuple[Path, Path, Path], tmp_path: Path,
                                                        evalrig_home: Path) -> None:
    a, _, _ = bundles
    secret = tmp_path / "secret.txt"
    secret.write_text('{"frame": {"type": "session", "messages": [{"role": "user", "content": "secret"}]}, '
                      '"from": "rig", "to": "agent"}\n')
    (a / "attempts" / "a-exact-1-0" / "transcript.jsonl").symlink_to(secret)  # not listed: verify skips links
    out = tmp_path / "t.jsonl"
    r = cli(evalrig_home, "export", a, "--format", "trajectories", "--to", out)
    assert r.exit_code == 4 and "symbolic link" in r.stderr, r.output  # type: ignore[attr-defined]
    assert not out.exists()
