"""Loading tasks and task sets; the fixed-suite lock (docs/tasks.md)."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from evalrig.core.digest import sha256_json
from evalrig.core.errors import EvalrigError, ExitCode
from evalrig.store.tasks import collect_task_problems, load_taskset, lock_fixed, write_lock
from evalrig.store.tree import hash_tree

EXACT = '[verifier]\nkind = "exact"\nexpected = "42"\n'
FRESH = 'created_at = 2026-12-01T10:00:00.000000Z\n'


def write_task(root: Path, suite: str, name: str, toml: str = EXACT, prompt: bool = True,
               verifier_files: dict[str, str] | None = None) -> Path:
    d = root / suite / name
    d.mkdir(parents=True, exist_ok=True)
    if suite == "fresh" and "created_at" not in toml and "suite" not in toml:
        toml = FRESH + toml
    (d / "task.toml").write_text(toml)
    if prompt:
        (d / "prompt.md").write_text(f"What is 6 x 7? ({name})\n")
    for rel, text in (verifier_files or {}).items():
        p = d / "verifier" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return d


def sample_set(root: Path) -> Path:
    write_task(root, "fixed", "add")
    write_task(root, "fixed", "mul", '[verifier]\nkind = "regex"\npattern = "4[0-9]"\n')
    write_task(root, "fresh", "dates", '[verifier]\nkind = "json"\nexpected = {a = 1}\n')
    write_task(root, "invariant", "safe", '[verifier]\nkind = "command"\ncommand = ["python3", "check.py"]\n',
               verifier_files={"check.py": "import sys; sys.exit(0)\n"})
    (root / "fixed.lock").write_text('{"schema_version": "1.0", "tasks": {}}\n')
    (root / ".hidden").mkdir()
    (root / "README.md").write_text("the bundled tasks\n")
    return root


def problems(root: Path) -> list[str]:
    ts, probs = collect_task_problems(root)
    assert (ts is None) == bool(probs)
    return [p.render() for p in probs]


def test_load_taskset(tmp_path: Path) -> None:
    ts = load_taskset(sample_set(tmp_path / "tasks"))
    assert [t.id for t in ts.tasks] == ["add", "dates", "mul", "safe"]
    assert ts.suites() == {"fixed": 2, "fresh": 1, "invariant": 1}
    assert ts.fresh_created_at() == {"dates": datetime(2026, 12, 1, 10, tzinfo=UTC)}
    add = ts.by_id()["add"]
    assert add.suite == "fixed"
    assert add.prompt_path == tmp_path / "tasks" / "fixed" / "add" / "prompt.md"
    assert add.files_dir == add.dir / "files" and add.verifier_dir == add.dir / "verifier"
    assert add.digest == hash_tree(add.dir).digest
    assert ts.id == sha256_json({t.id: t.digest for t in ts.tasks})


def test_verifier_identity(tmp_path: Path) -> None:
    root = sample_set(tmp_path / "tasks")
    ts = load_taskset(root)
    safe = ts.by_id()["safe"]
    assert safe.verifier_identity.kind == "command" and safe.verifier_identity.version == "1"
    settings = {"kind": "command", "command": ["python3", "check.py"], "timeout_s": 60.0,
                "network": False, "version": "1"}
    files = hash_tree(safe.verifier_dir).digest
    assert safe.verifier_identity.digest == sha256_json({"settings": settings, "files": files})
    add = ts.by_id()["add"]
    assert add.verifier_identity.digest == sha256_json(
        {"settings": {"kind": "exact", "expected": "42", "version": "1"}, "files": None})
    # Editing the verifier's files changes its identity and the task's digest.
    (safe.verifier_dir / "check.py").write_text("import sys; sys.exit(1)\n")
    again = load_taskset(root).by_id()["safe"]
    assert again.verifier_identity.digest != safe.verifier_identity.digest
    assert again.digest != safe.digest


def test_taskset_id_changes_with_any_file(tmp_path: Path) -> None:
    root = sample_set(tmp_path / "tasks")
    before = load_taskset(root).id
    (root / "fresh" / "dates" / "prompt.md").write_text("changed\n")
    assert load_taskset(root).id != before


def test_given_id_may_differ_from_folder(tmp_path: Path) -> None:
    root = tmp_path / "tasks"
    write_task(root, "fixed", "folder-name", 'id = "real-id"\n' + EXACT)
    assert [t.id for t in load_taskset(root).tasks] == ["real-id"]


def test_every_problem_at_once(tmp_path: Path) -> None:
    root = tmp_path / "tasks"
    write_task(root, "fixed", "a", 'kind = [\n')
    write_task(root, "fixed", "b", '[verifier]\nkind = "fuzzy"\n')
    write_task(root, "fixed", "c", '[verifier]\nkind = "regex"\nexpected = "x"\n')
    write_task(root, "fixed", "d", prompt=False)
    write_task(root, "fresh", "e", 'suite = "fresh"\n' + EXACT)
    write_task(root, "fresh", "f", 'created_at = 2026-12-01T10:00:00\n' + EXACT)
    write_task(root, "fixed", "g", 'tags = []\n\n[verifier]\nkind = "regex"\npattern = "a)"\n')
    write_task(root, "fixed", "h", 'suite = "fresh"\n' + EXACT)
    write_task(root, "invariant", "i", '[verifier]\nkind = "command"\ncommand = ["python3", "check.py"]\ntimeout_s = 0\n')
    write_task(root, "invariant", "j", '[verifier]\nkind = "command"\ncommand = ["python3", "check.py"]\n')
    (root / "extra").mkdir()
    r = str(root)
    assert problems(root) == [
        f"{r}/extra: not a suite folder: expected one of fixed, fresh, invariant, public (tasks live in <dir>/<suite>/<id>/)",
        f"{r}/fixed/a/task.toml:2: not valid TOML: invalid value (at the end of the file)",
        f"{r}/fixed/b/task.toml:2: verifier.kind: expected one of exact, regex, json, command",
        f'{r}/fixed/c/task.toml:1: verifier.pattern: required for kind "regex"',
        f'{r}/fixed/c/task.toml:3: verifier.expected: not a setting of kind "regex"',
        f"{r}/fixed/d/prompt.md: missing (every task needs a prompt.md: the text the agent is shown)",
        f"{r}/fixed/g/task.toml:5: verifier.pattern: does not compile (unbalanced parenthesis at position 1)",
        f"{r}/fixed/h/task.toml:1: suite: \"fresh\" does not match its folder {r}/fixed/ (move the task folder to fresh/ or drop the key)",
        f"{r}/fresh/e/task.toml: created_at: required for fresh tasks (UTC, e.g. 2026-12-01T10:00:00.000000Z)",
        f"{r}/fresh/f/task.toml:1: created_at: timestamp has no time zone; write it in UTC with a trailing Z",
        f"{r}/invariant/i/task.toml:4: verifier.timeout_s: must be greater than 0 (got 0)",
        f"{r}/invariant/j/task.toml:3: verifier.command: the command verifier runs from {r}/invariant/j/verifier/, which does not exist (put its files there)",
    ]


def test_command_verifier_script_must_exist(tmp_path: Path) -> None:
    root = tmp_path / "tasks"
    write_task(root, "fixed", "a", '[verifier]\nkind = "command"\ncommand = ["python3", "check.py"]\n',
               verifier_files={"other.py": ""})
    assert problems(root) == [
        f'{root}/fixed/a/task.toml:3: verifier.command[1]: "check.py" is not in {root}/fixed/a/verifier/ (the command runs from there)'
    ]


def test_duplicate_id(tmp_path: Path) -> None:
    root = tmp_path / "tasks"
    write_task(root, "fixed", "same")
    write_task(root, "fresh", "other", 'id = "same"\n' + FRESH + EXACT)
    assert problems(root) == [
        f'{root}/fresh/other/task.toml:1: id: "same" is also the id of {root}/fixed/same/ (ids are unique in a task set; rename one)'
    ]


def test_load_taskset_raises_with_every_problem(tmp_path: Path) -> None:
    root = tmp_path / "tasks"
    write_task(root, "fixed", "a", prompt=False)
    write_task(root, "fixed", "b", '[verifier]\nkind = "fuzzy"\n')
    with pytest.raises(EvalrigError) as ei:
        load_taskset(root)
    e = ei.value
    assert e.code == ExitCode.INVALID
    assert e.message == "2 problems in the task set"
    assert len(e.problems) == 2
    assert e.render().splitlines()[1:3] == [
        f"  {root}/fixed/a/prompt.md: missing (every task needs a prompt.md: the text the agent is shown)",
        f"  {root}/fixed/b/task.toml:2: verifier.kind: expected one of exact, regex, json, command",
    ]


def test_missing_directory(tmp_path: Path) -> None:
    assert problems(tmp_path / "nope") == [
        f"{tmp_path}/nope: no such directory (expected a task set: <dir>/<suite>/<task-id>/task.toml)"
    ]


def test_fifo_in_a_task_is_a_problem(tmp_path: Path) -> None:
    root = tmp_path / "tasks"
    d = write_task(root, "fixed", "a")
    os.mkfifo(d / "pipe")
    assert problems(root) == [
        f"{d}: FIFO at pipe cannot be part of a sealed tree"
    ]


def test_lock_adds_and_never_removes(tmp_path: Path) -> None:
    root = sample_set(tmp_path / "tasks")
    (root / "fixed.lock").unlink()
    lock = lock_fixed(root)
    ts = load_taskset(root)
    assert lock.tasks == {"add": ts.by_id()["add"].digest, "mul": ts.by_id()["mul"].digest}
    write_lock(root, lock)
    write_task(root, "fixed", "new")
    lock2 = lock_fixed(root)
    assert set(lock2.tasks) == {"add", "mul", "new"}
    assert lock2.tasks["add"] == lock.tasks["add"]


def test_lock_refuses_edited_and_removed(tmp_path: Path) -> None:
    root = sample_set(tmp_path / "tasks")
    write_lock(root, lock_fixed(root))
    locked_add = load_taskset(root).by_id()["add"].digest
    (root / "fixed" / "add" / "prompt.md").write_text("edited\n")
    now_add = hash_tree(root / "fixed" / "add").digest
    import shutil

    shutil.rmtree(root / "fixed" / "mul")
    assert problems(root) == [
        f"{root}/fixed.lock:4: tasks.add: fixed task add changed since it was locked "
        f"({root}/fixed/add: locked {locked_add}, now {now_add}); restore it, or add the changed task under a new id",
        f"{root}/fixed.lock:5: tasks.mul: locked fixed task mul is missing from the task set; "
        f"the fixed suite only grows: restore {root}/fixed/mul",
    ]
    with pytest.raises(EvalrigError):
        lock_fixed(root)


def test_locked_task_moved_out_of_fixed(tmp_path: Path) -> None:
    root = sample_set(tmp_path / "tasks")
    write_lock(root, lock_fixed(root))
    (root / "fresh" / "add").parent.mkdir(exist_ok=True)
    os.rename(root / "fixed" / "add", root / "fresh" / "add")
    (root / "fresh" / "add" / "task.toml").write_text(FRESH + EXACT)
    assert problems(root) == [
        f"{root}/fixed.lock:4: tasks.add: locked fixed task add is now in suite fresh ({root}/fresh/add); move it back to fixed/"
    ]


# -- the contract's own task.toml example is a golden fixture --------------------------

DESIGN_TASK = '''\
id = "parse-dates"                 # unique in the task set, [A-Za-z0-9._-]+; the folder name by default
suite = "fresh"                    # fixed | fresh | invariant | public; the parent folder by default
created_at = 2026-12-01T10:00:00.000000Z  # required for fresh tasks; UTC
tags = ["parsing"]
timeout_s = 60                     # the agent's wall-clock limit
max_output_bytes = 1048576         # cap on stdout and on stderr each (default 1 MiB)
max_evidence_bytes = 67108864      # cap on evidence kept (default 64 MiB)
network = false                    # the agent may reach the network on this task
evidence = ["work/**/*.py"]        # extra files kept as evidence (out/ is always kept)
[resources]
cpus = 1                           # what one attempt needs; used by executors that schedule
[verifier]
kind = "exact"                     # exact | regex | json | command
expected = "2026-12-01"            # the answer, compared with out/answer.txt, whitespace-trimmed
version = "1"
'''


def test_design_example_is_current() -> None:
    design = Path("/work/shared/DESIGN.md")
    if not design.exists():
        pytest.skip("DESIGN.md not beside the checkout")
    assert DESIGN_TASK in design.read_text()


def test_design_task_example_loads_and_round_trips(tmp_path: Path) -> None:
    from evalrig.models.inputs import TaskFile

    write_task(tmp_path / "tasks", "fresh", "parse-dates", DESIGN_TASK)
    t = load_taskset(tmp_path / "tasks").by_id()["parse-dates"]
    s = t.spec
    assert (s.id, s.suite, s.created_at) == ("parse-dates", "fresh", datetime(2026, 12, 1, 10, tzinfo=UTC))
    assert (s.tags, s.timeout_s, s.max_output_bytes, s.max_evidence_bytes, s.network, s.evidence) == (
        ["parsing"], 60, 1048576, 67108864, False, ["work/**/*.py"])
    assert s.resources.cpus == 1
    assert s.verifier.model_dump() == {"kind": "exact", "expected": "2026-12-01", "version": "1"}
    dumped = s.model_dump(mode="json")
    assert dumped["created_at"] == "2026-12-01T10:00:00.000000Z"
    again = TaskFile.model_validate(dumped)
    assert again == s and again.model_dump(mode="json") == dumped


@pytest.mark.parametrize("verifier", [
    '[verifier]\nkind = "regex"\npattern = "[0-9]{4}"\n',
    '[verifier]\nkind = "json"\nexpected = {a = [1, 2.5, true, "x"]}\n',
    '[verifier]\nkind = "command"\ncommand = ["python3", "check.py"]\ntimeout_s = 5\nnetwork = true\n',
])
def test_every_verifier_kind_round_trips(tmp_path: Path, verifier: str) -> None:
    from evalrig.models.inputs import TaskFile

    write_task(tmp_path / "tasks", "invariant", "t", verifier, verifier_files={"check.py": ""})
    s = load_taskset(tmp_path / "tasks").tasks[0].spec
    assert TaskFile.model_validate(s.model_dump(mode="json")) == s


def test_evidence_globs_stay_inside_the_attempt_root(tmp_path: Path) -> None:
    root = tmp_path / "tasks"
    write_task(root, "fixed", "a", 'evidence = ["work/*.py", "../secrets", "/etc/passwd"]\n' + EXACT)
    msg = "must be a glob relative to the attempt root (like work/**/*.py; not absolute, no '..')"
    assert problems(root) == [
        f"{root}/fixed/a/task.toml:1: evidence[1]: {msg}",
        f"{root}/fixed/a/task.toml:1: evidence[2]: {msg}",
    ]


def test_files_must_be_a_directory(tmp_path: Path) -> None:
    root = tmp_path / "tasks"
    d = write_task(root, "fixed", "a")
    (d / "files").write_text("not a folder")
    assert problems(root) == [f"{d}/files: must be a directory (the task's input files)"]


@pytest.mark.parametrize(("toml", "problem"), [
    ('network = "yes"\n', 'network: must be a valid boolean (got \'yes\')'),
    ('network = 1\n', "network: must be a valid boolean (got 1)"),
    ('timeout_s = "60"\n', "timeout_s: must be a valid number (got '60')"),
    ("max_output_bytes = 100.0\n", "max_output_bytes: must be a valid integer (got 100.0)"),
    ("[resources]\ncpus = true\n", "resources.cpus: must be a valid number (got True)"),
])
def test_values_of_the_wrong_type_are_not_coerced(tmp_path: Path, toml: str, problem: str) -> None:
    # The published schema says boolean / number: a string "yes" is an error, not a guess.
    root = tmp_path / "tasks"
    write_task(root, "fixed", "a", toml + EXACT)
    assert [p.split(": ", 1)[1] for p in problems(root)] == [problem]


@pytest.mark.parametrize("expected", ["nan", "[1, inf]", "{a = {b = -inf}}"])
def test_a_json_expected_value_that_is_not_finite_is_refused(tmp_path: Path, expected: str) -> None:
    # answer.json cannot hold nan or inf: the task could never pass.
    root = tmp_path / "tasks"
    write_task(root, "fixed", "a", f'[verifier]\nkind = "json"\nexpected = {expected}\n')
    assert [p.split(": ", 1)[1] for p in problems(root)] == [
        "verifier.expected: must hold only finite numbers (JSON has no nan or inf)"]


@pytest.mark.parametrize("name", ["task.toml", "prompt.md"])
def test_a_linked_task_toml_or_prompt_is_refused(tmp_path: Path, name: str) -> None:
    # The digest (and fixed.lock) takes a link's target string: the task could change
    # under a locked digest.
    root = tmp_path / "tasks"
    d = write_task(root, "fixed", "a")
    (tmp_path / name).write_bytes((d / name).read_bytes())
    (d / name).unlink()
    (d / name).symlink_to(tmp_path / name)
    assert problems(root) == [f"{d / name}: is a symbolic link; the task's digest would not cover "
                              "what it points to (replace the link with the file itself)"]


@pytest.mark.parametrize(("text", "tags"), [
    ('created_at = 2026-12-01T11:00:00Z\ntags = ["a", "b"]\n[verifier]\nkind = "exact"\n', ["a", "b"]),
    ('[verifier]\ntags = ["in a table"]\n', None),
    ('  [verifier]\ntags = ["in a table"]\n', None),
    ('tags = ["a]b"]  # a comment\n', ["a]b"]),
    ('m = [\n  [1],\n]\ntags = ["after a nested array"]\n', ["after a nested array"]),
    ('p = """\ntags = ["in a string"]\n"""\ntags = ["real"]\n', ["real"]),
    ('tags = [\n  "a",\n  "b",\n]\n', ["a", "b"]),
    ('tags = ["twice"]\ntags = ["twice"]\n', None),
    ('tags = "not a list"\n', None),
    ("x = 1\n", None),
])
def test_tags_are_read_as_toml_reads_them(tmp_path: Path, text: str, tags: list[str] | None) -> None:
    """The summary's tags (read from the `tags` line alone when it can be) are what a TOML
    parser reads at the top level of task.toml."""
    from evalrig.store.tasks import read_tags

    d = tmp_path / "fresh" / "t1"
    d.mkdir(parents=True)
    (d / "task.toml").write_text(text)
    (tmp_path / "fresh" / "t2").mkdir()
    (tmp_path / "fresh" / "t2" / "task.toml").write_text('tags = ["not asked for"]\n')
    want = {"t1": tags} if tags is not None else {}
    assert read_tags(tmp_path, {"t1": "fresh"}) == want
    assert read_tags(tmp_path, {"t1": "fixed"}) == want  # found in another suite when it moved
    assert read_tags(tmp_path, {"../fresh/t1": "fresh"}) == {}  # an id from a record is never a path
