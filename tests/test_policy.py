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
DESIGN = Path("/work/shared/DESIGN.md")


def test_default_policy_is_the_design_text() -> None:
    if not DESIGN.exists():
        pytest.skip("DESIGN.md not beside the checkout")
    blocks = re.findall(r"```toml\n(.*?)```", DESIGN.read_text(), re.S)
    design = next(b for b in blocks if b.startswith('name = "default"'))
    assert DEFAULT.read_text() == design


def test_default_policy_values() -> None:
    p = load_policy(DEFAULT)
    assert (p.name, p.version) == ("default", 1)
    assert p.digest == "sha256:" + hashlib.sha256(DEFAULT.read_bytes()).hexdigest()
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
    text = DEFAULT.read_text()
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
         ":3: colour: unknown key (expected one of name, version, invariants, fixed, fresh, exceptions)"),
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
