"""The HTML report as a person sees it: headless Chromium loads report.html from disk with
the network off (docs/report.md). Skipped, never passed, where Chromium cannot be had. The
screenshots in docs/img/ are test_report_reading.py's."""

from __future__ import annotations

from pathlib import Path

import pytest
from chromium import Browser, not_blank, why_unavailable
from gate_bundles import chain
from report_bundles import (
    EPISODE_SAY,
    EPISODE_TASK,
    HOSTILE,
    build_train,
    release_events,
    write_curves,
)
from typer.testing import CliRunner

from evalrig.cli import app

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.slow, pytest.mark.skipif(why_unavailable() is not None,
                                                   reason=f"headless Chromium: {why_unavailable()}")]

ROW_IDS = "Array.from(document.querySelectorAll('#task-body tr.task')).map(r => r.dataset.id)"


def _report(tmp_path: Path, home: Path) -> tuple[Path, list[str]]:
    train = build_train(tmp_path, home)
    r = CliRunner().invoke(app, ["report", str(train.cmp), "--tasks", str(train.taskset)], env={"EVALRIG_HOME": str(home), "NO_COLOR": "1"})
    assert r.exit_code == 0, r.output
    return train.cmp / "report.html", train.tasks


def test_report_renders_offline_with_verdict_tasks_and_plots(tmp_path: Path, evalrig_home: Path) -> None:
    html, tasks = _report(tmp_path, evalrig_home)
    with Browser(height=1000) as b:
        b.open(html)
        shot = b.screenshot()
        sd, inked = not_blank(shot)
        assert sd > 0.05 and inked > 0.02, (sd, inked)
        verdict = b.eval("document.querySelector('#verdict h2.verdict').textContent")
        sentence = b.eval("document.querySelector('#verdict p.sentence').textContent")
        md = next((tmp_path / "cmp" / "decisions").glob("*.md")).read_text()
        assert f"# {verdict}" in md  # the verdict file's headline, word for word
        assert sentence.split("). ", 1)[1] in md.replace("`", "")
        assert b.eval("document.querySelectorAll('svg.plot').length") >= 4
        assert sorted(b.eval(ROW_IDS)) == sorted(tasks)
        body = b.eval("document.body.innerText")
        for t in tasks:
            assert t in body
        # nothing but the page itself was requested; its script ran under the CSP (rows exist)
        assert [u for u in b.requests if not u.startswith("file://")] == []
        assert b.dialogs == []
        assert not [e for e in b.console_errors() if "Content Security Policy" in e]


def test_sorting_filtering_and_a_transcript(tmp_path: Path, evalrig_home: Path) -> None:
    html, tasks = _report(tmp_path, evalrig_home)
    with Browser(height=1200) as b:
        b.open(html)
        b.eval("document.querySelector('#tasks th[data-key=id]').click()")
        assert b.eval(ROW_IDS) == sorted(tasks)
        b.eval("document.querySelector('#tasks th[data-key=id]').click()")
        assert b.eval(ROW_IDS) == sorted(tasks, reverse=True)
        b.eval("document.querySelector('#tasks th[data-key=d]').click()")
        ds = b.eval("Array.from(document.querySelectorAll('#task-body tr.task td:nth-child(5)'))"
                    ".map(td => td.textContent)")
        nums = [float(x) for x in ds if x != "–"]
        assert nums == sorted(nums) and len(set(nums)) > 1
        # filter by text, then by suite
        b.eval("var f = document.getElementById('filter'); f.value = 't00'; "
               "f.dispatchEvent(new Event('input'))")
        assert b.eval(ROW_IDS) and all("t00" in t for t in b.eval(ROW_IDS))
        assert len(b.eval(ROW_IDS)) == sum("t00" in t for t in tasks)
        b.eval("var f = document.getElementById('filter'); f.value = ''; f.dispatchEvent(new Event('input'));"
               "var s = document.getElementById('suite'); s.value = 'invariant'; s.dispatchEvent(new Event('input'))")
        assert b.eval(ROW_IDS) == ["inv-000"]
        b.eval("var s = document.getElementById('suite'); s.value = ''; s.dispatchEvent(new Event('input'));"
               "var m = document.getElementById('moved'); m.value = 'worse'; m.dispatchEvent(new Event('input'))")
        worse = b.eval("Array.from(document.querySelectorAll('#task-body tr.task td:nth-child(5)'))"
                       ".map(td => parseFloat(td.textContent))")
        assert all(d < 0 for d in worse)
        # an episode opens to its transcript; the agent's hostile text is shown as text, never run
        b.eval("var m = document.getElementById('moved'); m.value = ''; m.dispatchEvent(new Event('input'));"
               f"document.querySelector('#task-body tr.task[data-id=\"{EPISODE_TASK}\"]').click()")
        b.eval("document.querySelectorAll('details.transcript').forEach(d => d.open = true)")
        text = b.eval("document.querySelector('tr.detail').innerText")
        assert EPISODE_SAY in text and "find_order" in text and "driver_end" in text
        assert "not a frame (not a JSON object)" in text and "line 7 is torn" in text
        assert "alert(1)" in text and "[bold]\\x1b[31m" in text  # shown, escaped; a terminal escape seen, not obeyed
        b.eval("document.querySelector('details.transcript').scrollIntoView()")
        # a task's trials list their evidence files and the answer got
        b.eval("document.querySelector('#task-body tr.task[data-id=\"t001\"]').click()")
        b.eval("document.querySelectorAll('tr.detail details').forEach(d => d.open = true)")
        detail = b.eval("Array.from(document.querySelectorAll('tr.detail')).map(x => x.innerText).join('\\n')")
        assert "out/answer.txt" in detail and "stdout.txt" in detail
        assert 'expected "42"' in detail  # the verifier's settings, read from the task set after its digest
        assert "expected\n42" in detail and "got\n</script>" in detail  # beside what the agent answered
        assert HOSTILE.split("<img")[0] in detail
        assert b.eval("document.querySelectorAll('img').length") == 0
        assert b.dialogs == []
        assert [u for u in b.requests if not u.startswith("file://")] == []


def test_release_log_page(tmp_path: Path, evalrig_home: Path) -> None:
    write_curves(evalrig_home, (0.81, 0.84, 0.79, 0.83, 0.86, 0.85, 0.88, 0.9))
    log = tmp_path / "releases.jsonl"
    log.write_bytes(chain(release_events(8)))
    r = CliRunner().invoke(app, ["report", "--log", str(log)], env={"EVALRIG_HOME": str(evalrig_home)})
    assert r.exit_code == 0, r.output
    with Browser(height=900) as b:
        b.open(tmp_path / "releases.html")
        shot = b.screenshot()
        assert not_blank(shot)[1] > 0.02
        assert b.eval("document.querySelectorAll('svg.plot').length") == 1
        assert b.eval("document.querySelectorAll('#events tbody tr').length") == len(release_events(8))
        assert b.eval("document.querySelectorAll('tr.ev-rollback').length") == 1
        assert [u for u in b.requests if not u.startswith("file://")] == []
