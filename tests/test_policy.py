"""The release policy: the bundled default, range checks, digests (docs/gate.md)."""

from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path

import pytest

from evalrig.core.errors import EvalrigError, ExitCode
from evalrig.core.policy import parse_policy
from evalrig.models.inputs import INVARIANT_CHECKS, PolicyFile
from evalrig.store.policy import load_policy, policy_problems

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "policies" / "default.toml"
DEFAULT_V1 = ROOT / "policies" / "default-v1.toml"
DESIGN = Path("/work/shared/DESIGN.md")


def test_default_policy_is_the_design_text() -> None:
    if not DESIGN.exists():
        pytest.skip("DESIGN.md not beside the checkout")
    blocks = re.findall(r"```toml\n(.*?)```", DESIGN.read_text(), re.S)
    design = next(b for b in blocks if b.startswith('name = "default"'))
    release = next(b for b in blocks if b.startswith("[tripwires]"))
    # v1 stays byte for byte what runs pinned; v2 is v1's rules plus the release tables
    assert DEFAULT_V1.read_text() == design
    assert DEFAULT.read_text() == design.replace("version = 1\n", "version = 2\n", 1) + release


def test_default_policy_v2_keeps_v1_rules_and_adds_the_release_tables() -> None:
    v1, v2 = load_policy(DEFAULT_V1), load_policy(DEFAULT)
    assert (v1.name, v1.version, v2.name, v2.version) == ("default", 1, "default", 2)
    skip = {"version", "tripwires", "watch"}
    assert v1.spec.model_dump(exclude=skip) == v2.spec.model_dump(exclude=skip)
    t, w = v2.spec.tripwires, v2.spec.watch
    assert (t.suite, t.checks) == ("invariant", ["sealed", "isolated", "no-secret-leak", "invariant-suite"])
    assert (w.shift_window, w.shift_min, w.shift_min_cost_ratio) == (4, 0.05, 1.25)
    assert (w.floor_fixed_pass_rate, w.floor_trains, w.stall_trains, w.reversal_window) == (0.80, 3, 6, 6)
    # v1 declares neither table: the same defaults apply to what it promoted
    assert v1.spec.tripwires == t and v1.spec.watch == w


@pytest.mark.parametrize(("table", "bad", "message"), [
    ("tripwires", 'checks = ["fresh-after-seal"]', "tripwires.checks[0]"),
    ("tripwires", "checks = []", "tripwires.checks"),
    ("tripwires", 'suite = "nightly"', "tripwires.suite"),
    ("watch", "shift_window = 0", "watch.shift_window"),
    ("watch", "shift_min = 1.5", "watch.shift_min"),
    ("watch", "shift_min_cost_ratio = 0.9", "watch.shift_min_cost_ratio"),
    ("watch", "reversal_window = 1", "watch.reversal_window"),
    ("watch", "page = true", "watch.page"),
])
def test_release_tables_refuse_bad_values(tmp_path: Path, table: str, bad: str, message: str) -> None:
    p = tmp_path / "p.toml"
    p.write_text(f'name = "x"\nversion = 1\n[{table}]\n{bad}\n')
    with pytest.raises(EvalrigError) as e:
        load_policy(p)
    assert e.value.code == ExitCode.INVALID
    assert message in e.value.render()


@pytest.mark.parametrize("path", [DEFAULT_V1, DEFAULT])
def test_default_policy_values(path: Path) -> None:
    p = load_policy(path)
    assert (p.name, p.version) == ("default", 1 if path == DEFAULT_V1 else 2)
    assert p.digest == "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    s = p.spec
    assert s.invariants.checks == list(INVARIANT_CHECKS)
    assert s.invariants.max_infra_error_rate == 0.10
    assert (s.fixed.alpha, s.fixed.stable_min_rate, s.fixed.aggregate_alpha) == (0.05, 0.9, 0.02)
    f = s.fresh
    assert (f.min_tasks, f.min_discordant, f.alpha, f.win_margin) == (20, 6, 0.025, 0.05)
    assert (f.noninferiority_margin, f.efficiency_metric, f.efficiency_ratio) == (0.05, "cost", 0.90)
    assert s.exceptions == {"security-patch": "ships without a win; everything else still applies"}


def test_round_trip() -> None:
    spec = load_policy(DEFAULT).spec
    again = parse_policy(spec.model_dump(mode="json"), "dumped")
    assert again == spec
    assert again.model_dump(mode="json") == spec.model_dump(mode="json")


def test_digest_is_of_the_bytes(tmp_path: Path) -> None:
    p = tmp_path / "p.toml"
    p.write_bytes(DEFAULT.read_bytes() + b"# a comment changes the digest\n")
    assert load_policy(p).spec == load_policy(DEFAULT).spec
    assert load_policy(p).digest != load_policy(DEFAULT).digest


def test_parse_policy_is_pure() -> None:
    data = tomllib.loads(DEFAULT.read_text())
    assert parse_policy(data, "x") == PolicyFile.model_validate(data)
    data["fixed"]["alpha"] = 1.0
    with pytest.raises(EvalrigError) as ei:
        parse_policy(data, "inline")
    assert ei.value.render().splitlines()[0] == "inline: fixed.alpha: must be less than 1 (got 1.0)"


def variant(tmp_path: Path, old: str, new: str) -> Path:
    text = DEFAULT_V1.read_text()  # the line numbers below are v1's (v2 only adds tables at the end)
    assert old in text
    p = tmp_path / "p.toml"
    p.write_text(text.replace(old, new, 1))
    return p


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("alpha = 0.05 ", "alpha = 7 ", ":8: fixed.alpha: must be less than 1 (got 7)"),
        ("alpha = 0.025", "alpha = 0", ":14: fresh.alpha: must be greater than 0 (got 0)"),
        ("min_discordant = 6", "min_discordant = 6\nbogus = 1",
         ":14: fresh.bogus: unknown key (expected one of min_tasks, min_discordant, alpha, "
         "win_margin, noninferiority_margin, efficiency_metric, efficiency_ratio)"),
        ('version = 1', 'version = 1\ncolour = "red"',
         ":3: colour: unknown key (expected one of name, version, invariants, fixed, fresh, exceptions, tripwires, watch)"),
        ("win_margin = 0.05", "win_margin = -0.1",
         ":15: fresh.win_margin: must be greater than or equal to 0 (got -0.1)"),
        ("noninferiority_margin = 0.05", "noninferiority_margin = -1",
         ":16: fresh.noninferiority_margin: must be greater than or equal to 0 (got -1)"),
        ('"ships without a win; everything else still applies"', '"  "',
         ":20: exceptions.security-patch: needs a description: say what the exception waives"),
        ('"cost"', '"money"', ":17: fresh.efficiency_metric: expected one of cost, wall_s, cpu_s (got 'money')"),
        ('"sealed",', '"sealed", "vibes",',
         ":4: invariants.checks[2]: expected one of complete, sealed, isolated, policy-pinned, "
         "fresh-after-seal, no-secret-leak, history-preserved, bundle-integrity, invariant-suite (got 'vibes')"),
        ("stable_min_rate = 0.9", "stable_min_rate = 1.5",
         ":9: fixed.stable_min_rate: must be less than or equal to 1 (got 1.5)"),
        ('name = "default"', 'name = "default"\nname = "twice"',
         ":2: not valid TOML: cannot overwrite a value (column 15)"),
    ],
)
def test_bad_policies(tmp_path: Path, old: str, new: str, message: str) -> None:
    p = variant(tmp_path, old, new)
    assert [x.render() for x in policy_problems(p)] == [f"{p}{message}"]
    with pytest.raises(EvalrigError) as ei:
        load_policy(p)
    assert ei.value.code == ExitCode.INVALID
    assert ei.value.file == str(p)


def test_missing_name_and_version(tmp_path: Path) -> None:
    p = tmp_path / "p.toml"
    p.write_text("[fixed]\nalpha = 0.05\n")
    assert [x.render() for x in policy_problems(p)] == [f"{p}: name: required", f"{p}: version: required"]


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(EvalrigError) as ei:
        load_policy(tmp_path / "none.toml")
    assert ei.value.render().splitlines()[0] == f"{tmp_path}/none.toml: no such policy file"
