"""`evalrig tasks` lists a task set; `run --task` with an unknown id points to it (issue 12, item 10)."""

from __future__ import annotations

from pathlib import Path

import orjson
from agents.run_kit import add_task, cli, make_checkpoint, make_tasks


def test_tasks_lists_id_suite_verifier_tags_and_digest(tmp_path: Path) -> None:
    tasks = make_tasks(tmp_path, 3)
    add_task(tasks, "tagged", "answer: parity\n", suite="invariant", tags=["a", "b"])
    r = cli("tasks", "--tasks", tasks)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert [line.split()[0] for line in lines[:-1]] == ["t0", "t1", "t2", "tagged"]
    tagged = lines[3].split()
    assert tagged[1:4] == ["invariant", "exact", "a,b"] and tagged[4].startswith("sha256:")
    assert lines[1].split()[1:4] == ["fresh", "exact", "-"]
    assert lines[-1].startswith(f"4 tasks in {tasks} (task set sha256:")


def test_tasks_json_gives_every_digest_whole(tmp_path: Path) -> None:
    from evalrig.store.tasks import load_taskset

    tasks = make_tasks(tmp_path, 2)
    r = cli("tasks", "--tasks", tasks, "--json")
    assert r.exit_code == 0, r.output
    doc = orjson.loads(r.stdout)
    ts = load_taskset(tasks)
    assert doc["taskset_id"] == ts.id
    assert [t["id"] for t in doc["tasks"]] == ["t0", "t1"]
    t0 = doc["tasks"][0]
    assert t0["digest"] == ts.tasks[0].digest and t0["suite"] == "fixed" and t0["tags"] == []
    assert t0["verifier"]["kind"] == "exact" and t0["verifier"]["digest"].startswith("sha256:")


def test_tasks_of_a_broken_task_set_exits_4_naming_the_problem(tmp_path: Path) -> None:
    r = cli("tasks", "--tasks", tmp_path / "nowhere")
    assert r.exit_code == 4
    assert "no such directory" in r.stderr and r.stdout == ""


def test_quiet_keeps_the_listing(tmp_path: Path) -> None:
    tasks = make_tasks(tmp_path, 2)
    r = cli("tasks", "--tasks", tasks, "--quiet")
    assert r.exit_code == 0 and [line.split()[0] for line in r.stdout.splitlines()] == ["t0", "t1"]


def test_run_with_an_unknown_task_points_to_evalrig_tasks_and_the_nearest_ids(
        tmp_path: Path, evalrig_home: Path) -> None:
    ck, tasks = make_checkpoint(tmp_path, evalrig_home), make_tasks(tmp_path, 3)
    add_task(tasks, "roman-1666", "answer: parity\n")
    r = cli("run", "--checkpoint", ck, "--tasks", tasks, "--out", tmp_path / "b", "--sandbox", "process",
            "--task", "roman-166")
    assert r.exit_code == 4, r.output  # invalid input, as before: the id names no task
    assert f"-> no task 'roman-166'; see `evalrig tasks --tasks {tasks}` (nearest: roman-1666)\n" in r.stderr
    r = cli("run", "--checkpoint", ck, "--tasks", tasks, "--out", tmp_path / "b", "--sandbox", "process",
            "--task", "nope", "--json")
    assert r.exit_code == 4
    assert orjson.loads(r.stdout)["error"]["hint"] == f"no task 'nope'; see `evalrig tasks --tasks {tasks}`"
    assert not (tmp_path / "b").exists()
