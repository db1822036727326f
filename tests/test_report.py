"""`evalrig report` without a browser: what the page holds, its defences, bad input, the
verdict file's link and the lazy import of matplotlib (docs/report.md). The page as a
person sees it is tested in headless Chromium (test_report_chromium.py)."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from gate_bundles import chain
from report_bundles import (
    HOSTILE,
    POLICY,
    alert_event,
    build_train,
    release_events,
    rollback_event,
    ship_event,
    tripwire_event,
    write_curves,
)
from typer.testing import CliRunner

from evalrig.cli import app
from evalrig.store.bundle import check_run_digests

ROOT = Path(__file__).resolve().parent.parent


def cli(home: Path, *args: object):
    return CliRunner().invoke(app, [str(a) for a in args], env={"EVALRIG_HOME": str(home), "NO_COLOR": "1"})


@pytest.fixture
def train(tmp_path: Path, evalrig_home: Path):
    return build_train(tmp_path, evalrig_home)


def _report(home: Path, *args: object) -> tuple[str, dict]:
    r = cli(home, "report", *args, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    return Path(out["report"]).read_text(), out


def _scripts(html: str) -> list[str]:
    return re.findall(r"<script(?![^>]*application/json)[^>]*>(.*?)</script>", html, flags=re.S)


def test_comparison_page_verdict_first_plots_inline_and_nothing_to_fetch(train, evalrig_home: Path) -> None:
    html, out = _report(evalrig_home, train.cmp, "--tasks", train.taskset)
    assert out["kind"] == "comparison" and out["tasks"] == len(train.tasks) and out["banners"] == []
    md = next((train.cmp / "decisions").glob("*.md")).read_text()
    headline = md.splitlines()[0].removeprefix("# ")
    assert headline in html
    # the verdict comes before the rules, the suites, the plots and the tasks
    order = [html.index(x) for x in (headline, "<h3>Rules</h3>", 'id="suites"', 'id="plots"', 'id="tasks"')]
    assert order == sorted(order)
    assert html.count("<svg") >= 4
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", html)  # nothing fetched
    assert "<link" not in html and "@import" not in html


def test_one_script_allowed_by_its_hash_and_untrusted_text_escaped(train, evalrig_home: Path) -> None:
    html, _ = _report(evalrig_home, train.cmp)
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1).replace("&#x27;", "'")
    scripts = _scripts(html)
    assert len(scripts) == 1
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in csp and "default-src 'none'" in csp
    assert "unsafe-inline'" not in csp.split("script-src")[1].split(";")[0]
    # the agent's answer and message hold markup: never raw in the page
    assert "<script>alert(1)" not in html and "<img" not in html and "onerror=\"alert" not in html
    data = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S).group(1)
    assert "</" not in data
    shown = HOSTILE.replace("\x1b", "\\x1b")  # the text itself, its control characters shown escaped
    assert json.dumps(shown)[1:-1] in json.dumps(json.loads(data)) and "\\u001b" not in data


def test_a_tampered_bundle_is_shown_under_a_banner_naming_the_first_digest(train, evalrig_home: Path) -> None:
    results = train.champion / "results.jsonl"
    results.write_bytes(results.read_bytes().replace(b'"passed":false', b'"passed":true', 1))
    html, out = _report(evalrig_home, train.cmp)
    assert len(out["banners"]) == 1 and "does not verify" in out["banners"][0]
    assert f"{results}: digest" in out["banners"][0]
    assert 'class="banner"' in html and html.count("<svg") >= 4
    # comparison.json edited: named first, still rendered
    cmp_json = train.cmp / "comparison.json"
    cmp_json.write_bytes(cmp_json.read_bytes() + b"\n")
    html, out = _report(evalrig_home, train.cmp)
    assert f"First digest that fails: {cmp_json}: digest" in out["banners"][0]
    assert "KEEP the champion" in html or "PROMOTE" in html or "BLOCK" in html


def test_moved_runs_are_named_and_the_comparisons_numbers_still_shown(train, evalrig_home: Path) -> None:
    train.champion.rename(train.root / "elsewhere")
    html, out = _report(evalrig_home, train.cmp)
    assert out["banners"] == []
    assert f"has moved: it is no longer at {train.champion}" in html
    assert "candidate&#x27;s run bundle" not in html  # the candidate's is where it was
    assert 'id="suites"' in html and html.count("<svg") >= 3


def test_a_run_bundle_report_leaves_the_bundle_verifying(train, evalrig_home: Path) -> None:
    html, out = _report(evalrig_home, train.champion)
    assert out["kind"] == "run" and out["tasks"] == len(train.tasks)
    assert (train.champion / "report.html").is_file()
    assert check_run_digests(train.champion) == []
    assert html.count("<svg") >= 4 and "run-champ" in html


def test_a_torn_line_is_shown_as_such(train, evalrig_home: Path) -> None:
    results = train.candidate / "results.jsonl"
    results.write_bytes(results.read_bytes() + b'{"schema_version": "1.0", "trial')
    html, out = _report(evalrig_home, train.candidate)
    assert "results.jsonl ends in a torn line" in html
    assert "not listed" in out["banners"][0] or "digest" in out["banners"][0]


def test_unreadable_input_exits_4(tmp_path: Path, evalrig_home: Path) -> None:
    r = cli(evalrig_home, "report", tmp_path / "nothing")
    assert r.exit_code == 4 and "not a bundle" in r.output
    r = cli(evalrig_home, "report")
    assert r.exit_code == 2


def test_the_verdict_file_links_to_the_report_once_it_exists(train, evalrig_home: Path) -> None:
    decision = next((train.cmp / "decisions").glob("*.json"))
    before = decision.read_bytes()
    md = decision.with_suffix(".md").read_text()
    assert "no HTML report yet" in md and f"report {train.cmp}" in md
    _report(evalrig_home, train.cmp)
    r = cli(evalrig_home, "gate", train.cmp, "--policy", POLICY)  # gating again rewrites the verdict file
    assert r.exit_code in (0, 1, 3), r.output
    md = decision.with_suffix(".md").read_text()
    assert "[the HTML report](../report.html)" in md
    assert decision.read_bytes() == before  # the decision, which is digested and signed, is untouched


def _log(path: Path, lines: list[dict]) -> Path:
    path.write_bytes(chain(lines))
    return path


def test_release_log_curves_with_events_marked(tmp_path: Path, evalrig_home: Path) -> None:
    aa, bb = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    log = _log(tmp_path / "releases.jsonl", [
        ship_event(0, "2026-12-01T10:00:00.000000Z", aa, "<b>v2</b>", None),
        tripwire_event(1, "2026-12-01T11:00:00.000000Z", aa, False),
        rollback_event(2, "2026-12-01T11:00:01.000000Z", aa, bb, 1),
        alert_event(3, "2026-12-01T12:00:00.000000Z", "reversal", "two rollbacks"),
    ])
    html, out = _report(evalrig_home, "--log", log)
    assert out["kind"] == "log" and out["banners"] == [] and Path(out["report"]) == tmp_path / "releases.html"
    assert html.count("<svg") >= 1 and "ev-rollback" in html and "two rollbacks" in html
    # a broken chain: the lines before it shown, the first failing line named
    raw = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(raw[0] + raw[2] + raw[3])
    html, out = _report(evalrig_home, "--log", log, "--out", tmp_path / "r.html")
    assert f"{log}:2" in out["banners"][0] and html.count('<tr class="ev-') == 1


def test_matplotlib_is_imported_by_report_only() -> None:
    code = ("import sys\nfrom evalrig.cli import app\n"
            "for args in (['--help'], ['schema', 'decision']):\n"
            "    try:\n        app(args, standalone_mode=False)\n    except SystemExit:\n        pass\n"
            "print('matplotlib' in sys.modules, 'evalrig.read.plots' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "False False"


def test_release_curves_come_from_the_gate_ledger(tmp_path: Path, evalrig_home: Path) -> None:
    write_curves(evalrig_home, (0.81, 0.84, 0.79))
    log = _log(tmp_path / "releases.jsonl", [ship_event(0, "2026-12-02T11:00:00.000000Z", "sha256:" + "a" * 64, "v1",
                                                        None)])
    html, out = _report(evalrig_home, "--log", log)
    assert "carries curve figures yet" not in html
    for label in ("champion fixed pass rate", "fresh delta (mean_d)", "ship", "rollback", "alert"):
        assert f">{label}<" in html
    assert "12-03 10:00" in html  # the third train on the axis


def test_a_broken_gate_ledger_is_named_not_drawn(tmp_path: Path, evalrig_home: Path) -> None:
    (evalrig_home / "gates.jsonl").write_text('{"prev": "0000", "at": "x"}\n')
    log = _log(tmp_path / "releases.jsonl", [])
    html, out = _report(evalrig_home, "--log", log)
    assert out["banners"] and "gate ledger does not verify" in out["banners"][0]
    assert "gates.jsonl" in out["banners"][0]


def test_whether_signed_by_the_homes_record(train, evalrig_home: Path) -> None:
    decision = next((train.cmp / "decisions").glob("*.json"))
    html, _ = _report(evalrig_home, train.cmp)
    assert "Not signed yet" in html
    r = cli(evalrig_home, "sign", decision, "--reject", "--by", "<i>Ada</i>", "--reason", "looked")
    assert r.exit_code == 0, r.output
    html, _ = _report(evalrig_home, train.cmp)
    assert "by &lt;i&gt;Ada&lt;/i&gt;" in html and "<i>Ada" not in html


def test_a_link_at_the_output_is_refused_not_followed(train, evalrig_home: Path, tmp_path: Path) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    (train.cmp / "report.html").symlink_to(target)
    r = cli(evalrig_home, "report", train.cmp)
    assert r.exit_code == 4 and "report.html" in r.output
    assert target.read_text() == "keep me"


def test_a_line_that_is_not_the_rigs_is_a_problem_shown_not_a_refusal(train, evalrig_home: Path) -> None:
    results = train.candidate / "results.jsonl"
    results.write_bytes(results.read_bytes() + b'{"schema_version": "1.0", "status": "won"}\n')
    html, out = _report(evalrig_home, train.candidate)
    assert "results.jsonl" in out["banners"][0]
    assert "the run&#x27;s lines are not shown" in html and "run-cand" in html


def _signed_log(path: Path, lines: list[dict], home: Path) -> Path:
    """The events appended by the rig's own writer, each signed by the home (a log the rig
    appends to, as `watch` does, holds no unsigned line)."""
    from evalrig.models.releases import ReleaseLine
    from evalrig.store.releases import append_event

    for row in lines:
        append_event(path, ReleaseLine.model_validate({k: v for k, v in row.items() if k != "prev"}).root, home)
    return path


def test_the_release_curves_are_the_ones_watch_computes(tmp_path: Path, evalrig_home: Path) -> None:
    write_curves(evalrig_home, (0.81, 0.84, 0.79, 0.83, 0.86, 0.85, 0.88, 0.9, 0.7, 0.72, 0.71))
    log = _signed_log(tmp_path / "releases.jsonl", release_events(8), evalrig_home)
    html, out = _report(evalrig_home, "--log", log)
    assert out["banners"] == []
    drawn = json.loads(re.search(r'<script type="application/json" id="curves-data">(.*?)</script>', html,
                                 re.S).group(1))
    r = CliRunner().invoke(app, ["watch", "--log", str(log), "--json"], env={"EVALRIG_HOME": str(evalrig_home)})
    assert r.exit_code == 3, r.output  # the champion below the floor for three trains: an alert fires
    watched = json.loads(r.stdout)["series"]
    assert drawn == watched
    assert len(drawn["trains"]) == 11 and [m["kind"] for m in drawn["releases"]].count("rollback") == 1
    assert "floor" in [a["alert_kind"] for a in drawn["alerts"]] and "Alerts firing now" in html


def test_a_release_log_is_shown_up_to_its_first_line_the_store_refuses(tmp_path: Path, evalrig_home: Path) -> None:
    events = release_events(4)
    del events[3]["bundle"]  # a tripwire the rig never writes: its chain holds, its schema does not
    log = _log(tmp_path / "releases.jsonl", events)
    html, out = _report(evalrig_home, "--log", log)
    assert len(out["banners"]) == 1 and f"{log}:4" in out["banners"][0] and "bundle" in out["banners"][0]
    assert html.count('<tr class="ev-') == 3
    r = cli(evalrig_home, "history", "--log", log)  # the same line every other reader refuses
    assert r.exit_code == 4 and f"{log}:4" in r.output


def test_sign_remakes_the_report_beside_the_decision_and_its_lines_name_eval_sh(train, evalrig_home: Path) -> None:
    """The README sends the signer to report.html: after `sign` it says who signed, not
    "Not signed yet"; its commands are the ones the person typed (`…/eval.sh`), never a
    bare `evalrig` that is not on their PATH."""
    from redteam import EVAL_SH, eval_sh

    decision = next((train.cmp / "decisions").glob("*.json"))
    made = eval_sh(evalrig_home, "report", train.cmp, "--tasks", train.taskset)
    assert made.code == 0, made
    html = (train.cmp / "report.html").read_text()
    assert "Not signed yet" in html and f"<code>{EVAL_SH} sign {decision} --approve|--reject" in html
    assert "<code>evalrig " not in html
    s = eval_sh(evalrig_home, "sign", decision, "--reject", "--by", "Ada", "--reason", "looked at it")
    assert s.code == 0, s
    assert f"report: {train.cmp / 'report.html'} (made again" in s.stdout
    html = (train.cmp / "report.html").read_text()
    assert "Not signed yet" not in html and "Signed: rejected by Ada" in html
    assert "<code>evalrig " not in html
    # a comparison without a report gets none from sign; the sign-off is all it does
    (train.cmp / "report.html").unlink()
    s = eval_sh(evalrig_home, "sign", decision, "--reject", "--by", "Bo", "--reason", "again")
    assert s.code == 0 and "report:" not in s.stdout, s
    assert not (train.cmp / "report.html").exists()


def test_evidence_shown_inline_is_capped_per_page_and_the_rest_named(train, evalrig_home: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Files open inline only up to the page's budget (a train of many thousand attempts would
    make a page no browser opens); past it each file is still listed, with a note saying why
    it is not shown and where it is."""
    from evalrig.read import report

    def inline(html: str) -> list[list]:
        data = json.loads(re.search(r'id="report-data">(.*?)</script>', html, re.S).group(1))
        return [f for t in data["tasks"] for a in t[11] if a[8] for f in a[8]["files"]]

    files = inline(_report(evalrig_home, train.cmp)[0])
    assert all(f[2] is not None for f in files if f[1])  # every non-empty text file, inline
    monkeypatch.setattr(report, "MAX_INLINE_PAGE", 40)
    files = inline(_report(evalrig_home, train.cmp)[0])
    shown = [f for f in files if f[2] is not None]
    assert shown and sum(len(f[2]) for f in shown) <= 40
    cut = [f for f in files if f[2] is None and f[1]]
    assert cut and all("not shown inline" in f[3] and "show BUNDLE ATTEMPT" in f[3] for f in cut)
