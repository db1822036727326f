"""The HTML report read as a reviewer reads it (docs/report.md), in headless Chromium: on a
phone (390 x 844: no sideways scroll of the page, wide tables scroll in their own box,
plots one per row) and on a desktop; a trial's transcript, evidence and both sides' trials;
the task table's first order; the release curves' labels and marks. The report is made
through eval.sh, as a person makes it. Skipped, never passed, where Chromium cannot be had.

EVALRIG_SHOTS=1 refreshes the screenshots in docs/img/ that docs/report.md shows."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from chromium import Browser, not_blank, why_unavailable
from redteam import EVAL_SH, eval_sh
from report_bundles import (
    EPISODE_SAY,
    EPISODE_TASK,
    LONG_LINES,
    build_train,
    relayed_transcript,
)

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "docs" / "img"

pytestmark = [pytest.mark.slow, pytest.mark.skipif(why_unavailable() is not None,
                                                   reason=f"headless Chromium: {why_unavailable()}")]

PHONE = (390, 844)


def _save(png: bytes, name: str) -> None:
    if os.environ.get("EVALRIG_SHOTS") == "1":
        SHOTS.mkdir(parents=True, exist_ok=True)
        (SHOTS / name).write_bytes(png)


@pytest.fixture
def report(tmp_path: Path, evalrig_home: Path) -> Path:
    """A gated train's report.html, made by `eval.sh report`: an episode whose transcript holds
    the driver's hops, and a task whose attempts leave long, binary and stderr files."""
    train = build_train(tmp_path, evalrig_home, transcript=relayed_transcript(), files=True)
    made = eval_sh(evalrig_home, "report", train.cmp, "--tasks", train.taskset)
    assert made.code == 0, made
    return train.cmp / "report.html"


def _open_task(b: Browser, task_id: str) -> None:
    b.eval(f"document.querySelector('#task-body tr.task[data-id=\"{task_id}\"]').click()")


def test_on_a_phone_the_page_never_scrolls_sideways_and_plots_stand_one_per_row(report: Path) -> None:
    with Browser(width=PHONE[0], height=PHONE[1]) as b:
        b.emulate(*PHONE, mobile=True)
        b.open(report)
        assert b.eval("document.documentElement.clientWidth") == PHONE[0]
        assert b.eval("document.scrollingElement.scrollWidth") <= PHONE[0]
        # every table's box stays inside the page (a table, or the box it scrolls in); one wider
        # than the phone scrolls in that box
        boxes = b.eval("Array.from(document.querySelectorAll('table')).map(t => {"
                       "var box = t.parentElement.classList.contains('scroll') ? t.parentElement : t;"
                       "return [t.id, box.getBoundingClientRect().right, box.scrollWidth, box.clientWidth,"
                       " getComputedStyle(box).overflowX];})")
        assert all(right <= PHONE[0] for _, right, *_ in boxes), boxes
        assert all(ox == "auto" for _, right, sw, cw, ox in boxes if sw > cw), boxes
        task_box = next(x for x in boxes if x[0] == "task-table")
        assert task_box[2] > task_box[3]  # the task table's d, p and cost: reached by its own scroll
        # the rules' text and the signing command wrap inside the page
        for sel in ("#verdict p", "#verdict code", "table.rules td", "#verdict li"):
            right = b.eval(f"Math.max(...Array.from(document.querySelectorAll('{sel}'))"
                           ".map(e => e.getBoundingClientRect().right))")
            assert right <= PHONE[0], (sel, right)
        assert EVAL_SH.name in b.eval("document.querySelector('#verdict').innerText")  # the name typed
        # the per-suite plots: one per row, each as wide as the page allows (readable)
        panels = b.eval("Array.from(document.querySelectorAll('figure.wide')).map(f => Array.from("
                        "f.querySelectorAll('svg.plot')).map(s => {var r = s.getBoundingClientRect();"
                        " return [Math.round(r.top), r.left, r.right, r.width];}))")
        assert len(panels) >= 2 and all(len(p) >= 3 for p in panels), panels
        for fig in panels:
            assert len({top for top, *_ in fig}) == len(fig)  # every panel a row of its own
            assert all(right <= PHONE[0] and width >= 0.7 * PHONE[0] * 0.9 for _, _, right, width in fig), fig
        _open_task(b, "t002")
        assert b.eval("document.scrollingElement.scrollWidth") <= PHONE[0]  # an opened task too
        b.eval("window.scrollTo(0, 0)")
        shot = b.screenshot(full_page=False)  # what the phone shows first: the verdict, the signing line
        assert not_blank(shot)[1] > 0.02
        _save(shot, "report-phone.png")
        b.eval("document.querySelector('figure.wide').scrollIntoView()")
        _save(b.screenshot(full_page=False), "report-phone-plots.png")


def test_on_a_desktop_a_suites_panels_share_a_row(report: Path) -> None:
    with Browser(width=1280, height=1000) as b:
        b.open(report)
        assert b.eval("document.scrollingElement.scrollWidth") <= 1280
        tops = b.eval("Array.from(document.querySelector('figure.wide').querySelectorAll('svg.plot'))"
                      ".map(s => Math.round(s.getBoundingClientRect().top))")
        assert len(tops) >= 3 and len(set(tops)) == 1, tops
        _save(b.screenshot(), "report-comparison.png")


def test_the_task_table_opens_with_the_tasks_that_moved_first(report: Path) -> None:
    with Browser(height=1000) as b:
        b.open(report)
        ds = b.eval("Array.from(document.querySelectorAll('#task-body tr.task td:nth-child(5)'))"
                    ".map(td => td.textContent)")
        moved = [float(d) for d in ds if d not in ("0", "–")]
        assert moved and ds[:len(moved)] == [d for d in ds if d not in ("0", "–")]  # every moved task first
        assert moved == sorted(moved)  # the worst first
        assert "moved first" in b.eval("document.getElementById('count').textContent")


def test_a_transcript_shows_each_message_once_with_tool_calls_and_their_results(report: Path) -> None:
    with Browser(height=1200) as b:
        b.open(report)
        _open_task(b, EPISODE_TASK)
        b.eval("document.querySelectorAll('details.transcript').forEach(d => d.open = true)")
        one = "document.querySelector('details.transcript')"
        text = b.eval(f"{one}.innerText")
        # as the agent saw it: the opening, its tool call, the result, its answer, the end; each once
        for said in ("Where is my order?", EPISODE_SAY, "not found"):
            assert text.count(said) == 1, (said, text)
        assert "driver_end" in text
        call = b.eval(f"{one}.querySelector('.call').innerText")
        assert "find_order" in call and '{"id": 417}' in call and "not found" in call  # the call with its result
        # the tool-call-only turn shows its call, never an empty bar
        assert b.eval(f"Array.from({one}.querySelectorAll('.turn')).every(t => t.querySelector('pre, .call'))")
        # the rig's hops to and from the driver: folded away in a raw-frames toggle
        raw = f"{one}.querySelector('details.raw-frames')"
        assert b.eval(f"{raw}.open") is False
        assert "raw frames" in b.eval(f"{raw}.querySelector('summary').textContent").lower()
        assert b.eval(f"{raw}.querySelectorAll('.turn').length") == 7
        b.eval(f"{raw}.open = true")
        assert EPISODE_SAY in b.eval(f"{raw}.innerText") and "rig → driver" in b.eval(f"{raw}.innerText")
        b.eval(f"{one}.scrollIntoView()")
        _save(b.screenshot(full_page=False), "report-transcript.png")


def test_trials_side_by_side_with_status_in_colour_and_evidence_inline(report: Path) -> None:
    with Browser(height=1400) as b:
        b.open(report)
        _open_task(b, "t002")
        detail = "document.querySelector('tr.detail')"
        # champion and candidate side by side, one row per repetition
        reps = b.eval(f"Array.from({detail}.querySelectorAll('.reps > h5')).map(h => h.textContent)")
        assert reps == [f"repetition {i}" for i in range(5)]
        cells = b.eval(f"Array.from({detail}.querySelectorAll('.reps > .side')).map(c => [c.className, "
                       "Math.round(c.getBoundingClientRect().top), c.getBoundingClientRect().left])")
        for champ, cand in zip(cells[::2], cells[1::2], strict=True):
            assert "side-champion" in champ[0] and "side-candidate" in cand[0]
            assert champ[1] == cand[1] and champ[2] < cand[2]
        colours = b.eval(f"Array.from({detail}.querySelectorAll('.st')).map(s => [s.textContent, "
                         "getComputedStyle(s).backgroundColor])")
        assert {c for s, c in colours if s == "passed"} == {"rgb(47, 125, 61)"}
        assert {c for s, c in colours if s == "failed"} == {"rgb(179, 54, 59)"}
        # a failed trial shows the tails of the agent's stderr and stdout; a passed one does not
        boxes = b.eval(f"Array.from({detail}.querySelectorAll('.trial')).map(t => [t.querySelector('.st')"
                       ".textContent, t.querySelector('.tails') ? t.querySelector('.tails').innerText : null])")
        assert any(s == "failed" for s, _ in boxes) and any(s == "passed" for s, _ in boxes)
        for status, tails in boxes:
            if status == "passed":
                assert tails is None
                continue
            assert "stderr line 29" in tails and "stderr line 17" not in tails and "stdout.txt" in tails
        # text files open inline, escaped and capped with a note; a binary one is named, not shown
        b.eval(f"{detail}.querySelectorAll('details').forEach(d => d.open = true)")
        files = b.eval(f"Array.from({detail}.querySelector('.trial').querySelectorAll('details.file'))"
                       ".map(f => [f.querySelector('summary').textContent, f.innerText])")
        by_name = {name.split(" (")[0]: text for name, text in files}
        assert "note line 0" in by_name["out/notes.txt"] and "note line 399" not in by_name["out/notes.txt"]
        size = sum(len(f"note line {i}\n") for i in range(LONG_LINES))
        assert f"the first 4,000 characters of {size:,} bytes are shown; the rest is cut" in by_name["out/notes.txt"]
        assert "binary (1,024 bytes): not shown" in by_name["out/blob.bin"]
        assert "42" in by_name["out/answer.txt"] or "41" in by_name["out/answer.txt"]
        # the screenshot: one trial's files open, the notes file among them
        b.eval(f"{detail}.querySelectorAll('details').forEach(d => d.open = false);"
               f"var t = {detail}.querySelector('.trial'); t.querySelector('details.files').open = true;"
               "t.querySelectorAll('details.file').forEach(f => f.open = /notes|answer|blob/.test("
               "f.querySelector('summary').textContent)); t.scrollIntoView()")
        _save(b.screenshot(full_page=False), "report-evidence.png")
        # an agent's markup in a file is text: the hostile answer of t001, opened inline
        _open_task(b, "t001")
        b.eval("document.querySelectorAll('tr.detail details').forEach(d => d.open = true)")
        assert "<script>alert(1)</script>" in b.eval("document.body.innerText")
        assert b.eval("document.querySelectorAll('img, tr.detail script').length") == 0
        assert b.dialogs == []


def test_the_release_curves_label_trains_and_set_a_rollback_beside_its_ship(tmp_path: Path,
                                                                            evalrig_home: Path) -> None:
    """Two trains gated, both shipped, the second rolled back by a person: every one of the
    three events falls after the second train, and each shows, side by side, named."""
    from release_kit import BETTER, agent, train

    from evalrig.store.checkpoint import checkpoint_id

    home, log = evalrig_home, tmp_path / "releases.jsonl"
    b = agent(tmp_path / "b", home, "agent-b")
    c = agent(tmp_path / "c", home, "agent-c")
    d1 = train(tmp_path, home, "t1", "sha256:" + "a" * 64, b, BETTER)
    d2 = train(tmp_path, home, "t2", checkpoint_id(b).digest, c, BETTER)
    for decision, ckpt in ((d1, b), (d2, c)):
        for step in (("sign", decision, "--approve", "--by", "alice"),
                     ("ship", decision, "--checkpoint", ckpt, "--log", log)):
            done = eval_sh(home, *step)
            assert done.code == 0, done
    done = eval_sh(home, "rollback", "--to", "previous", "--by", "bob", "--reason", "looked wrong", "--log", log)
    assert done.code == 0, done
    made = eval_sh(home, "report", "--log", log)
    assert made.code == 0, made
    with Browser(height=1100) as b:
        b.open(tmp_path / "releases.html")
        svg = "document.querySelector('svg.plot')"
        box = b.eval(f"(() => {{var r = {svg}.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom];}})()")
        rects = b.eval(f"Array.from({svg}.querySelectorAll('text')).map(t => {{var r = t.getBoundingClientRect();"
                       " return [t.textContent, r.left, r.top, r.right, r.bottom];})")
        texts = [r[0] for r in rects]
        assert "#1 12-02 12:00" in texts and "#2 12-02 12:00" in texts, texts  # each train: number and date
        # no label is cut off: every text of the plot lies inside it
        for name, left, top, right, bottom in rects:
            assert left >= box[0] - 1 and top >= box[1] - 1 and right <= box[2] + 1 and bottom <= box[3] + 1, name
        for name in ("champion fixed pass rate", "fresh delta (mean_d)", "public pass rate, candidate"):
            assert name in texts
        # the two ships and the rollback fall after the same train: each named, side by side
        marks = sorted((left + right) / 2 for name, left, _, right, _ in rects if name in ("s0", "s1", "r2"))
        assert len(marks) == 3 and all(b_ - a_ >= 6 for a_, b_ in zip(marks, marks[1:], strict=False)), rects
        shot = b.screenshot()
        assert not_blank(shot)[1] > 0.02
        _save(shot, "report-releases.png")


def test_a_run_bundles_trials_stand_one_per_repetition(tmp_path: Path, evalrig_home: Path) -> None:
    train = build_train(tmp_path, evalrig_home, files=True)
    made = eval_sh(evalrig_home, "report", train.candidate, "--tasks", train.taskset)
    assert made.code == 0, made
    with Browser(height=1000) as b:
        b.open(train.candidate / "report.html")
        _open_task(b, "t002")
        assert b.eval("document.querySelectorAll('tr.detail .reps > h5').length") == 5
        assert b.eval("document.querySelectorAll('tr.detail .reps > .side-run .trial').length") == 5
        assert b.eval("document.querySelector('tr.detail .reps').style.getPropertyValue('--sides')") == "1"
        assert b.console_errors() == []
