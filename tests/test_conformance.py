"""The contract of the commands after the gate and of reading (docs/release-engineers.md,
docs/reading.md, docs/episodes.md), checked the way a user's script meets it: real runs
through `eval.sh`, their exit codes, their files and their words.

One small run is shared by the module: a fixed, a fresh and a public single-turn task and a
fresh episode (the scripted bank counterpart of tests/episodes.py), one repetition each.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import orjson
import pytest

from tests.episodes import _AGENT_HEAD, AGENTS, add_episode_task
from tests.redteam import HONEST_AGENT, Train, add_task, eval_sh, make_checkpoint, run_train

# Single-turn tasks: answer "ok"; an episode: the gold bank agent.
BOTH = _AGENT_HEAD + textwrap.dedent("""
if os.environ.get("EVALRIG_EPISODE") != "1":
    with open(os.path.join(os.environ["EVALRIG_OUT"], "answer.txt"), "w") as f:
        f.write("ok\\n")
    sys.exit(0)
""") + textwrap.dedent(AGENTS["gold"])


class Run:
    def __init__(self, home: Path, root: Path) -> None:
        self.home, self.root = home, root
        self.ck = make_checkpoint(root / "ck", BOTH, name="both")
        assert eval_sh(home, "seal", self.ck).code == 0
        self.tasks = root / "tasks"
        add_task(self.tasks, "fixed", "fx0")
        add_task(self.tasks, "fresh", "fr0")
        add_task(self.tasks, "public", "pub0")
        add_episode_task(self.tasks, "ep0", suite="fresh")
        self.bundle = root / "run"
        step = eval_sh(home, "run", "--checkpoint", self.ck, "--tasks", self.tasks, "--out", self.bundle,
                       "--repeat", "1", "--jobs", "2", timeout=600)
        assert step.code == 0, step

    def lines(self, name: str) -> list[dict]:
        return [orjson.loads(x) for x in (self.bundle / name).read_bytes().splitlines() if x.strip()]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    root = tmp_path_factory.mktemp("conformance")
    return Run(root / "home", root)


def test_export_takes_the_public_suite_when_named(run: Run, tmp_path: Path) -> None:
    """`--suite S` names any suite, `public` too (docs/reading.md)."""
    to = tmp_path / "public.jsonl"
    step = eval_sh(run.home, "export", run.bundle, "--format", "trajectories", "--to", to, "--suite", "public",
                   "--json")
    assert step.code == 0, step
    assert step.json["suites"] == ["public"]  # type: ignore[index]
    assert [orjson.loads(x)["task_id"] for x in to.read_bytes().splitlines()] == ["pub0"]


SPEND_COLUMNS = {f"spend.{role}.{k}" for role in ("candidate", "driver", "judge")
                 for k in ("cost_usd", "input_tokens", "output_tokens", "source")}


def test_csv_spends_by_role_in_the_same_columns_whatever_the_attempts(run: Run, tmp_path: Path) -> None:
    """The header does not depend on whether some role reported a figure: a script reads
    `spend.candidate.cost_usd` from a single-turn export as from an episode's."""
    import csv

    headers = []
    for suite in ("fixed", "fresh"):  # fixed: single-turn only (every spend null); fresh: an episode too
        to = tmp_path / f"{suite}.csv"
        assert eval_sh(run.home, "export", run.bundle, "--format", "csv", "--to", to, "--suite", suite).code == 0
        rows = list(csv.reader(to.open()))
        header = rows[0]
        assert SPEND_COLUMNS <= set(header), header
        assert not {"spend.candidate", "spend.driver", "spend.judge"} & set(header)
        headers.append(header)
        for row in rows[1:]:
            cell = dict(zip(header, row, strict=True))
            assert cell["spend.driver.cost_usd"] == ""  # no driver wrote usage.json
    assert headers[0] == headers[1]


def test_a_manifest_that_is_not_json_is_named_as_such(run: Run, tmp_path: Path) -> None:
    """Every error says what is wrong: a manifest that does not parse is not "of no kind"."""
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(run.bundle, bad)
    (bad / "manifest.json").write_text("{")
    for args in (("show", bad), ("export", bad, "--format", "csv", "--to", tmp_path / "x.csv")):
        step = eval_sh(run.home, *args)
        assert step.code == 4, step
        assert "manifest.json: cannot be read as JSON" in step.stderr and "neither" not in step.stderr, step


def test_an_unknown_episode_key_lists_the_episode_keys(tmp_path: Path) -> None:
    """`[episode]`'s own keys are the ones to choose from (docs/episodes.md), not task.toml's."""
    tasks = tmp_path / "tasks"
    d = add_episode_task(tasks, "ep0", bounds="max_turn = 3")  # a typo of max_turns
    step = eval_sh(tmp_path / "home", "validate", "--tasks", tasks)
    assert step.code == 4, step
    line = next(x for x in step.stderr.splitlines() if "episode.max_turn:" in x)
    assert str(d / "task.toml") in line or "task.toml" in line
    for key in ("driver", "max_turns", "max_tool_errors", "turn_timeout_s", "driver_timeout_s", "max_cost_usd",
                "network"):
        assert key in line, line
    assert "created_at" not in line, line


@pytest.fixture(scope="module")
def train(tmp_path_factory: pytest.TempPathFactory) -> Train:
    """A promoted train: the champion answers "no", the candidate "ok" (six fresh tasks)."""
    root = tmp_path_factory.mktemp("train")
    champion = make_checkpoint(root / "champ", HONEST_AGENT.replace("ok", "no"), name="champ")
    candidate = make_checkpoint(root / "cand", name="cand")
    t = run_train(root / "home", root / "train", champion, candidate, repeat=1)
    assert t.steps["gate"].code == 0, t.steps["gate"]
    return t


def test_pairs_min_reward_bounds_the_chosen_attempt_only(train: Train, tmp_path: Path) -> None:
    """`--min-reward R` leaves out the pairs whose chosen attempt is below R: the rejected one
    is below the chosen by definition (docs/reading.md)."""
    bundles = (train.bundle("champion"), train.bundle("candidate"))
    for r, expected in (("1", 6), ("0.5", 6), ("0", 6)):
        to = tmp_path / f"pairs-{r}.jsonl"
        step = eval_sh(train.home, "export", *bundles, "--format", "pairs", "--to", to, "--min-reward", r, "--json")
        assert step.code == 0, step
        pairs = [orjson.loads(x) for x in to.read_bytes().splitlines()]
        assert len(pairs) == expected, (r, step)
        assert all(p["chosen_reward"] == 1.0 and p["rejected_reward"] == 0.0 for p in pairs)
    # trajectories keep their meaning: every attempt below R is left out
    to = tmp_path / "traj.jsonl"
    assert eval_sh(train.home, "export", *bundles, "--format", "trajectories", "--to", to, "--min-reward", "1").code == 0
    assert {orjson.loads(x)["reward"] for x in to.read_bytes().splitlines()} == {1.0}


def test_tripwire_takes_the_run_options_a_tripwire_suite_may_need(train: Train, tmp_path: Path) -> None:
    """`tripwire … [run options]`: an invariant suite whose counterpart needs a key (or the
    network) is run the way `run` would run it (docs/release-engineers.md)."""
    home, candidate = train.home, train.candidate
    assert eval_sh(home, "sign", train.decision, "--approve", "--by", "alice").code == 0
    assert eval_sh(home, "ship", train.decision, "--checkpoint", candidate).code == 0
    add_task(train.tasks, "invariant", "inv0")
    common = ("tripwire", "--checkpoint", candidate, "--tasks", train.tasks, "--repeat", "1", "--jobs", "2")
    # the options reach the run: a --driver-secret that is not set is refused as `run` refuses it
    step = eval_sh(home, *common, "--out", tmp_path / "tw0", "--driver-secret", "NOT_SET_ANYWHERE")
    assert step.code == 4 and "--driver-secret NOT_SET_ANYWHERE: not set" in step.stderr, step
    step = eval_sh(home, *common, "--out", tmp_path / "tw1", "--driver-secret", "SIM_KEY", "--executor", "local",
                   "--json", env={"SIM_KEY": "s3cret"})
    assert step.code == 0, step
    settings = orjson.loads((tmp_path / "tw1" / "manifest.json").read_bytes())["settings"]
    assert settings["driver_secrets"] == ["SIM_KEY"] and settings["executor"] == "local"
