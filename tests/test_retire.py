"""`retire` through the CLI (docs/curves.md): which side is kept, graduation into fixed/ with
`suite` rewritten and `created_at` kept, the lock growing, the rest to retired/<train>/,
retire.json, refusals that move nothing, a crash half-way finished by running again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gate_bundles import Side, Task, view_from_counts, write_run
from hypothesis import given, settings
from hypothesis import strategies as st
from test_curves import NOW, policy_file
from typer.testing import CliRunner

from evalrig.cli import app
from evalrig.core.compare import build_comparison, history_check
from evalrig.core.digest import sha256_bytes
from evalrig.core.retire import Where, plan
from evalrig.store.compare import compare_bundles
from evalrig.store.decisions import gate_comparison

K = 5


def tasks_of(counts: dict[str, int], fixed: int = 3) -> dict[str, Task]:
    out = {t: Task("fresh", [j < n for j in range(K)]) for t, n in counts.items()}
    out.update({f"fixed-{i:03d}": Task("fixed", [True] * K) for i in range(fixed)})
    out["inv-000"] = Task("invariant", [True] * K)
    return out


def write_taskset(root: Path, ids: list[str], fixed: int = 3) -> Path:
    for suite, names in (("fresh", ids), ("fixed", [f"fixed-{i:03d}" for i in range(fixed)]), ("invariant", ["inv-000"])):
        for name in names:
            d = root / suite / name
            d.mkdir(parents=True)
            created = "created_at = 2026-12-01T11:00:00.000000Z\n" if suite == "fresh" else ""
            (d / "task.toml").write_text(f'suite = "{suite}"\n{created}[verifier]\nkind = "exact"\nexpected = "{name}"\n')
            (d / "prompt.md").write_text(f"say {name}\n")
    return root


# 24 fresh tasks: the candidate wins clearly; it fails a trial on three of them.
CHAMP = {f"t{i:02d}": 1 for i in range(24)}
CAND = {**{f"t{i:02d}": 5 for i in range(24)}, "t03": 4, "t07": 3, "t11": 0}


def train(tmp_path: Path, home: Path, champ: dict[str, int] = CHAMP, cand: dict[str, int] = CAND,
          gate: bool = True) -> tuple[Path, Path]:
    pol = policy_file(tmp_path)
    digest = sha256_bytes(pol.read_bytes())
    a = write_run(tmp_path / "a", Side("champ", tasks_of(champ), policy_digest=digest), home)
    b = write_run(tmp_path / "b", Side("cand", tasks_of(cand), policy_digest=digest), home)
    compare_bundles(a, b, tmp_path / "cmp", home)
    if gate:
        gate_comparison(tmp_path / "cmp", pol, None, False, home, NOW)
    return tmp_path / "cmp", write_taskset(tmp_path / "tasks", sorted(champ))


def run(home: Path, *args: object) -> tuple[int, str, str]:
    r = CliRunner().invoke(app, ["retire", *map(str, args)], env={"EVALRIG_HOME": str(home)})
    return r.exit_code, r.stdout, r.stderr


def test_graduates_the_kept_sides_failures_and_a_sample_and_retires_the_rest(tmp_path: Path,
                                                                            evalrig_home: Path) -> None:
    cmp, tasks = train(tmp_path, evalrig_home)
    before = (tasks / "fresh" / "t07" / "task.toml").read_text()
    code, out, err = run(evalrig_home, cmp, "--tasks", tasks, "--graduate-failed", "--sample", "2",
                         "--graduate", "t20", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["kept"] == "candidate" and r["complete"] and not r["resumed"]
    why = {m["task_id"]: m["why"] for m in r["graduated"]}
    assert {t for t, w in why.items() if w == "failed"} == {"t03", "t07", "t11"}
    assert why["t20"] == "named" and sum(w == "sample" for w in why.values()) == 2
    assert len(r["retired"]) == 24 - 6 and not any((tasks / "fresh").iterdir())
    for t in why:
        toml = (tasks / "fixed" / t / "task.toml").read_text()
        assert toml.startswith('suite = "fixed"\n') and "created_at = 2026-12-01T11:00:00.000000Z" in toml
    assert (tasks / "fixed" / "t07" / "task.toml").read_text() == before.replace('"fresh"', '"fixed"', 1)
    lock = json.loads((tasks / "fixed.lock").read_text())
    assert set(why) <= set(lock["tasks"]) and "fixed-000" in lock["tasks"]
    train_id = r["train"]
    assert train_id == json.loads((cmp / "retire.json").read_text())["train"]
    assert sorted(p.name for p in (tasks / "retired" / train_id).iterdir()) == sorted(m["task_id"] for m in r["retired"])
    # the task set is still valid, and retired/ is no suite
    code = CliRunner().invoke(app, ["validate", "--tasks", str(tasks)], env={"EVALRIG_HOME": str(evalrig_home)})
    assert code.exit_code == 0, code.output
    # a second retire is refused, nothing moves
    code, _, err = run(evalrig_home, cmp, "--tasks", tasks)
    assert code == 4 and "retired already" in err and str(cmp / "retire.json") in err


def test_the_sample_is_the_same_for_the_same_comparison(tmp_path: Path, evalrig_home: Path) -> None:
    picks = []
    for n in range(2):
        cmp, tasks = train(tmp_path / str(n), evalrig_home)
        code, out, _ = run(evalrig_home, cmp, "--tasks", tasks, "--sample", "3", "--json")
        assert code == 0
        picks.append(sorted(m["task_id"] for m in json.loads(out)["graduated"]))
    assert picks[0] == picks[1] and len(picks[0]) == 3 and not {"t03", "t07", "t11"} & set(picks[0])


def test_without_a_promoting_decision_the_champion_is_kept(tmp_path: Path, evalrig_home: Path) -> None:
    cmp, tasks = train(tmp_path, evalrig_home, gate=False)
    code, out, _ = run(evalrig_home, cmp, "--tasks", tasks, "--graduate-failed", "--json")
    assert code == 0
    r = json.loads(out)
    # the champion passed one trial of five on every task: each is a confirmed failure of the kept side
    assert r["kept"] == "champion" and r["decision_digest"] is None and len(r["graduated"]) == 24


@pytest.mark.parametrize("case", ["missing", "conflict-folder", "conflict-retired", "unknown"])
def test_refusals_move_nothing(tmp_path: Path, evalrig_home: Path, case: str) -> None:
    cmp, tasks = train(tmp_path, evalrig_home)
    args: list[object] = [cmp, "--tasks", tasks, "--graduate-failed"]
    if case == "missing":
        (tasks / "fresh" / "t05").rename(tmp_path / "t05")
    elif case == "conflict-folder":  # a fixed task's folder has the name of a graduating one's
        d = tasks / "fixed" / "t07"
        d.mkdir()
        (d / "task.toml").write_text('id = "other-07"\n[verifier]\nkind = "exact"\nexpected = "x"\n')
        (d / "prompt.md").write_text("x\n")
    elif case == "conflict-retired":
        digest = sha256_bytes((cmp / "comparison.json").read_bytes())
        (tasks / "retired" / digest[7:19] / "t00").mkdir(parents=True)
    else:
        args += ["--graduate", "nope"]
    snapshot = sorted(str(p.relative_to(tasks)) for p in tasks.rglob("*"))
    code, _, err = run(evalrig_home, *args)
    assert code == 4, err
    assert {"missing": "t05", "conflict-folder": "t07: fixed/t07 exists",
            "conflict-retired": "t00: retired/", "unknown": "--graduate nope"}[case] in err
    assert sorted(str(p.relative_to(tasks)) for p in tasks.rglob("*")) == snapshot
    assert not (cmp / "retire.json").exists()


def test_a_crash_half_way_is_finished_by_running_again(tmp_path: Path, evalrig_home: Path) -> None:
    """The plan is in retire.json before the first move: a retire killed after some moves
    finishes them when run again, and the task set ends as one uninterrupted retire leaves it."""
    from evalrig.models.retire import RetireFile
    from evalrig.store.files import write_json_atomic

    cmp, tasks = train(tmp_path, evalrig_home)
    code, out, _ = run(evalrig_home, cmp, "--tasks", tasks, "--graduate-failed", "--json")
    done = json.loads(out)
    # Put the task set back to the middle of that retire: the plan written, two tasks moved.
    record = RetireFile.model_validate({k: v for k, v in done.items() if k != "resumed"})
    for m in record.graduated + record.retired:
        (tasks / m.dest).rename(tasks / m.source)
        toml = tasks / m.source / "task.toml"
        toml.write_text(toml.read_text().replace('"fixed"', '"fresh"', 1))
    (tasks / "fixed.lock").unlink()
    for m in (record.graduated[0], record.retired[0]):
        (tasks / m.source).rename(tasks / m.dest)
    write_json_atomic(cmp / "retire.json", record.model_copy(update={"complete": False}))
    code, out, err = run(evalrig_home, cmp, "--tasks", tasks)
    assert code == 0, err
    assert "finished a retire a crash had left half-done" in out
    assert all((tasks / m.dest).is_dir() for m in record.graduated + record.retired)
    assert all(not (tasks / m.source).exists() for m in record.graduated + record.retired)
    assert (tasks / record.graduated[0].dest / "task.toml").read_text().startswith('suite = "fixed"')
    assert set(json.loads((tasks / "fixed.lock").read_text())["tasks"]) >= {m.task_id for m in record.graduated}


def test_a_fresh_task_folder_that_is_a_link_is_not_moved(tmp_path: Path, evalrig_home: Path) -> None:
    """A link in fresh/ pointing elsewhere would move the link and leave the task behind (or move
    someone else's folder into the set): refused as not in fresh/."""
    cmp, tasks = train(tmp_path, evalrig_home)
    (tasks / "fresh" / "t09").rename(tmp_path / "t09")
    (tasks / "fresh" / "t09").symlink_to(tmp_path / "t09")
    code, _, err = run(evalrig_home, cmp, "--tasks", tasks)
    assert code == 4 and "t09" in err
    assert (tasks / "fresh" / "t09").is_symlink()


# -- the plan, pure ------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(champ=st.lists(st.integers(0, 5), min_size=1, max_size=30), data=st.data(),
       failed=st.booleans(), sample=st.integers(0, 10), kept=st.sampled_from(["champion", "candidate"]))
def test_the_plan_moves_every_fresh_task_once(champ: list[int], data: st.DataObject, failed: bool,
                                              sample: int, kept: str) -> None:
    """Every fresh task of the train moves exactly once; graduation is what was asked (the
    named, the kept side's failures, at most `sample` it passed every trial); the same inputs
    give the same plan."""

    cand = data.draw(st.lists(st.integers(0, 5), min_size=len(champ), max_size=len(champ)))
    c = build_comparison(view_from_counts("champ", champ), view_from_counts("cand", cand),
                         history_check(None, None), False)
    ids = [r.task_id for r in c.suites["fresh"].per_task]
    named = data.draw(st.lists(st.sampled_from(ids), unique=True, max_size=3))
    where = Where({t: t for t in ids}, frozenset(), frozenset(), frozenset())
    digest = sha256_bytes(b"comparison")
    g, r = plan(c, digest, kept, where, named, failed, sample, "abc")  # type: ignore[arg-type]
    assert sorted(m.task_id for m in g + r) == sorted(ids)
    counts = dict(zip(ids, cand if kept == "candidate" else champ, strict=True))
    why = {m.task_id: m.why for m in g}
    assert {t for t, w in why.items() if w == "named"} == set(named)
    assert {t for t, w in why.items() if w == "failed"} == ({t for t in ids if counts[t] < K} - set(named)
                                                            if failed else set())
    drawn = [t for t, w in why.items() if w == "sample"]
    assert len(drawn) <= sample and all(counts[t] == K for t in drawn)
    assert len(drawn) == min(sample, sum(1 for t in ids if counts[t] == K and t not in why or t in drawn))
    assert plan(c, digest, kept, where, named, failed, sample, "abc") == (g, r)  # type: ignore[arg-type]
    assert all(m.dest == f"fixed/{m.task_id}" for m in g) and all(m.dest == f"retired/abc/{m.task_id}" for m in r)
