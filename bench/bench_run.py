"""Speed and memory of `evalrig run` (issue 3's targets), with a floor measured in the same run.

    .venv/bin/python bench/bench_run.py [--quick]

Figures:
- attempts/s of 1,000 attempts of a no-op agent (`/bin/true`, an exact verifier) at
  --jobs 2, under `process` (goal >= 150) and `bwrap` (goal >= 80);
- the rig's cost per attempt against a floor: a bare loop, at the same two threads, that
  copies the same checkpoint, starts the same command and appends four synced lines
  (goal <= 2.5x under process; under bwrap <= 3x, and against a floor that starts the same
  bwrap). `--rounds` runs of the rig (default 3), each between two floors; every ratio is
  printed and the goal judged on their median, since a shared machine's speed drifts by a
  fifth between two runs a minute apart;
- the rig's peak RSS over a 10,000-attempt run (goal <= 150 MB);
- planning the resume of a bundle that holds 50,000 results (goal <= 2 s);
- where an attempt's time goes: a second run of the rig, in this process, whose attempts
  hand back their stage timers (evalrig.attempt.stages, kept on each outcome, never in the
  bundle), beside the bundle writes and the scheduling, and the floor's cost in the same
  unit (milliseconds of one of the two slots per attempt).

The rig runs as `python -m evalrig run` in a subprocess; its rate is taken from the
manifest's created_at / finished_at, so interpreter start-up is not counted against it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evalrig.store.bundle import load_run  # noqa: E402
from evalrig.store.checkpoint import seal  # noqa: E402
from evalrig.store.files import write_json_atomic  # noqa: E402
from evalrig.store.jsonl import append_line  # noqa: E402

RATIO_GOAL = {"process": 2.5, "bwrap": 3.0}
"""Issue 11's goals for the rig's cost against the plain floor."""


def make_inputs(root: Path, home: Path, tasks: int) -> tuple[Path, Path]:
    ck = root / "ckpt"
    (ck / "state").mkdir(parents=True)
    (ck / "checkpoint.toml").write_text('name = "noop"\n[agent]\ncommand = ["/bin/true"]\n')
    (ck / "state" / "notes.txt").write_text("a small checkpoint\n" * 20)
    seal(ck, home, datetime(2026, 12, 1, tzinfo=UTC))
    for i in range(tasks):
        d = root / "tasks" / "fixed" / f"t{i:03d}"
        d.mkdir(parents=True)
        (d / "prompt.md").write_text("Do nothing.\n")
        (d / "task.toml").write_text('[verifier]\nkind = "exact"\nexpected = "x"\n')
    return ck, root / "tasks"


def run_rig(ck: Path, tasks: Path, out: Path, repeat: int, sandbox: str, env: dict[str, str]) -> dict:
    argv = [sys.executable, "-m", "evalrig", "run", "--checkpoint", str(ck), "--tasks", str(tasks),
            "--out", str(out), "--repeat", str(repeat), "--jobs", "2", "--sandbox", sandbox,
            "--json"]
    p = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True)
    stderr = p.stderr
    if p.returncode != 0:
        raise SystemExit(f"rig failed ({p.returncode}): {stderr.decode()[-2000:]}")
    m = load_run(out).manifest
    assert m.finished_at is not None
    wall = (m.finished_at - m.created_at).total_seconds()
    return {"attempts": m.counts.attempts, "wall_s": wall, "rate": m.counts.attempts / wall}


BWRAP_FLOOR = ["--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib",
               "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev",
               "--unshare-all", "--die-with-parent"]


def floor(ck: Path, scratch: Path, n: int, jobs: int = 2, prefix: list[str] | None = None) -> float:
    """Attempts/s of the bare loop: copy the checkpoint, start the command, four synced lines.

    `prefix` starts the command the way a level must at the least (bwrap: its own
    namespaces and a read-only /usr), so that the sandbox's own start-up is in the floor.
    """
    log = scratch / "floor.jsonl"
    counter = iter(range(n))
    lock = threading.Lock()
    record = {"trial_id": "t:0", "attempt_id": "x", "status": "failed", "pad": "p" * 200}

    def worker() -> None:
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            root = scratch / f"a{i}"
            shutil.copytree(ck, root / "agent")
            (root / "out").mkdir()
            subprocess.run([*(prefix or []), "/bin/true"], cwd=root / "agent", check=True)
            for _ in range(4):
                append_line(log, record)
            shutil.rmtree(root)

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return n / (time.monotonic() - t0)


class _TimedJournal:
    """The runner's Journal, timed: what the bundle writes cost its loop."""

    seconds = 0.0

    def __init__(self, base: Any, *args: Any) -> None:
        self._inner = base(*args)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in ("write", "sync", "close"):
            return attr

        def timed(*a: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return attr(*a)
            finally:
                _TimedJournal.seconds += time.perf_counter() - t0
        return timed


def breakdown(ck: Path, tasks: Path, out: Path, repeat: int, level: str, home: Path) -> dict[str, float]:
    """Milliseconds of slot time per attempt, by stage, from a run in this process.

    The attempt's own stages come from its outcome; the bundle writes are the runner's
    Journal calls (its loop's thread); scheduling is what is left of the two slots' time:
    the slots idle while the loop records, syncs and hands out the next attempts.
    """
    from evalrig.attempt import stages, trial
    from evalrig.run import loop
    from evalrig.run.executors import AttemptWork
    from evalrig.run.lifecycle import run_eval
    from evalrig.run.settings import RunRequest

    got: list[dict[str, float]] = []
    busy = [0.0]
    lock = threading.Lock()

    def attempt(spec: Any) -> Any:
        t0 = time.perf_counter()
        outcome = trial.run_attempt(spec)
        spent = time.perf_counter() - t0
        with lock:
            got.append(dict(outcome.stages))
            busy[0] += spent
        return outcome

    journal = loop.Journal
    loop.Journal = lambda *a: _TimedJournal(journal, *a)  # type: ignore[assignment,misc]
    _TimedJournal.seconds = 0.0
    try:
        req = RunRequest(out=out, checkpoint=ck, tasks=tasks, repeat=repeat, sandbox=level, jobs=2)
        run_eval(req, home, {}, hooks=loop.Hooks(work=AttemptWork(trial.run_estimate, attempt)))
    finally:
        loop.Journal = journal  # type: ignore[misc]
    m = load_run(out).manifest
    assert m.finished_at is not None
    wall = (m.finished_at - m.created_at).total_seconds()
    n = len(got)
    ms = {name: 1000 * sum(g.get(name, 0.0) for g in got) / n for name in stages.ORDER}
    ms["rest of the attempt"] = 1000 * busy[0] / n - sum(ms.values())
    ms["bundle writes"] = 1000 * _TimedJournal.seconds / n
    ms["scheduling (slots idle)"] = 1000 * (2 * wall - busy[0]) / n - ms["bundle writes"]
    ms["total"] = 1000 * 2 * wall / n
    return ms


def print_breakdown(level: str, ms: dict[str, float], floor_rate: float) -> None:
    print(f"{'':8s} where an attempt's time goes under {level} (ms of one of 2 slots per attempt; "
          "an in-process run):")
    for name, v in ms.items():
        print(f"{'':10s} {name:28s} {v:7.2f}")
    fl = 2000 / floor_rate
    print(f"{'':10s} {'floor, same unit':28s} {fl:7.2f}   (the rig {ms['total'] / fl:.2f}x)")


def peak_rss_mb(ck: Path, tasks: Path, out: Path, repeat: int, env: dict[str, str]) -> tuple[float, int]:
    argv = [sys.executable, "-m", "evalrig", "run", "--checkpoint", str(ck), "--tasks", str(tasks),
            "--out", str(out), "--repeat", str(repeat), "--jobs", "2", "--sandbox", "process",
            "--json"]
    p = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert p.stderr is not None
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise SystemExit(f"rig failed ({p.returncode}): {p.stderr.read().decode()[-2000:]}")
    return usage.ru_maxrss / 1024, load_run(out).manifest.counts.attempts


def resume_planning_s(root: Path, home: Path, n_results: int) -> float:
    """Build a complete bundle of n_results results on a real task set, then time its resume."""
    from evalrig.run.lifecycle import run_eval

    req = build_resume_bundle(root, home, n_results)
    t0 = time.monotonic()
    s2 = run_eval(req, home, {})
    elapsed = time.monotonic() - t0
    assert s2.kept == n_results and s2.ran == 0, (s2.kept, s2.ran)
    return elapsed


def build_resume_bundle(root: Path, home: Path, n_results: int) -> Any:
    """A complete bundle of n_results trials (100 tasks), each with its four records."""
    from evalrig.models.run import Actual, AttemptEvent, Canary, Estimate
    from evalrig.run.lifecycle import run_eval
    from evalrig.run.settings import RunRequest
    from evalrig.store.clock import utcnow

    tasks_n = 100
    repeat = n_results // tasks_n
    ck, tasks = make_inputs(root, home, tasks_n)
    out = root / "big"
    req = RunRequest(out=out, checkpoint=ck, tasks=tasks, repeat=1, sandbox="process", jobs=2)
    s = run_eval(req, home, {})  # a real small bundle whose manifest we then scale up
    b = load_run(out)
    template = b.results[0]
    from evalrig.core.plan import Filters, OutcomeSettings, build_plan
    from evalrig.store.tasks import load_taskset

    st = b.manifest.settings
    plan = build_plan(load_taskset(tasks).tasks, b.manifest.checkpoint.id, repeat, 0,
                      OutcomeSettings(st.timeout_scale, st.max_retries, st.sandbox, ()), Filters())
    now = utcnow()
    for name in ("attempts.jsonl", "estimates.jsonl", "actuals.jsonl", "results.jsonl"):
        (out / name).unlink()
    with open(out / "attempts.jsonl", "wb") as fa, open(out / "results.jsonl", "wb") as fr, \
            open(out / "estimates.jsonl", "wb") as fe, open(out / "actuals.jsonl", "wb") as fc:
        from evalrig.core.digest import canonical_line

        for t in plan.trials:
            aid = f"{t.task_id}-{t.rep}-1-0000"
            ev = AttemptEvent(event="start", trial_id=t.trial_id, attempt_id=aid, attempt=1,
                              task_id=t.task_id, rep=t.rep, at=now)
            fa.write(canonical_line(ev))
            fa.write(canonical_line(ev.model_copy(update={"event": "end", "status": "failed"})))
            fe.write(canonical_line(Estimate(estimate_id="e", attempt_id=aid, trial_id=t.trial_id,
                                             task_id=t.task_id, rep=t.rep, state="none", at=now)))
            fc.write(canonical_line(Actual(trial_id=t.trial_id, attempt_id=aid, task_id=t.task_id,
                                           rep=t.rep, wall_s=0.01, exit_code=0, timed_out=False,
                                           usage_source="missing", stdout_bytes=0, stderr_bytes=0,
                                           stdout_truncated=False, stderr_truncated=False)))
            fr.write(canonical_line(template.model_copy(update={
                "trial_id": t.trial_id, "attempt_id": aid, "task_id": t.task_id, "rep": t.rep,
                "inputs_id": t.inputs_id, "canary": Canary(value="c", found=False)})))
    # as a run killed before its first finish leaves it ("running", no digests to hold the
    # records to): a finished run's records must be the ones it registered, and these are made
    m = b.manifest.model_copy(update={"repeat": repeat, "plan_digest": plan.digest, "status": "running"})
    write_json_atomic(out / "manifest.json", m)
    del s
    return RunRequest(out=out, checkpoint=ck, tasks=tasks, repeat=repeat, sandbox="process", jobs=2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller N for a fast look")
    ap.add_argument("--level", choices=("process", "bwrap"), action="append",
                    help="measure only this level (repeatable; default: both)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="runs of the rig per level, each between two floors (default 3; the median counts)")
    ap.add_argument("--rates-only", action="store_true",
                    help="leave out the RSS and resume-planning figures")
    a = ap.parse_args()
    n, n_rss, n_resume = (200, 1000, 5000) if a.quick else (1000, 10000, 50000)
    tmp = Path(tempfile.mkdtemp(prefix="evalrig-bench-"))
    home = tmp / "home"
    env = dict(os.environ, EVALRIG_HOME=str(home))
    os.environ["EVALRIG_HOME"] = str(home)
    try:
        ck, tasks = make_inputs(tmp / "in", home, 10)
        print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs "
              "(figures on a shared machine vary; the ratio to the floor measured beside "
              "each run is the steadier one)")
        for level, goal in (("process", 150), ("bwrap", 80)):
            from evalrig.attempt.sandbox import resolve_level

            if a.level and level not in a.level:
                continue

            if level == "bwrap" and resolve_level("auto").level != "bwrap":
                print("bwrap: skipped (bubblewrap cannot run here)")
                continue
            # Rounds of floor, rig, floor, so that each rig run has a floor measured right
            # before and right after it on the same machine; a shared machine's speed drifts
            # by a fifth between two runs a minute apart, so the goal is judged on the median.
            ratios, rates = [], []
            floors = [floor(ck, tmp / f"floor-{level}-0", n)]
            for i in range(a.rounds):
                r = run_rig(ck, tasks, tmp / f"run-{level}-{i}", n // 10, level, env)
                floors.append(floor(ck, tmp / f"floor-{level}-{i + 1}", n))
                fl = (floors[-2] + floors[-1]) / 2
                ratios.append(fl / r["rate"])
                rates.append(r["rate"])
            ratio, rate = statistics.median(ratios), statistics.median(rates)
            fl = statistics.median(floors)
            ms = breakdown(ck, tasks, tmp / f"stages-{level}", n // 10, level, home)
            judged = level == "process"  # bwrap's goal is against a floor that starts the same bwrap
            print(f"{level:8s} {r['attempts']} attempts a run, {a.rounds} runs: median {rate:7.1f} attempts/s "
                  f"(goal >= {goal}: {'ok' if rate >= goal else 'MISSED'}); floor (copy + start + 4 synced "
                  f"lines, 2 threads) {' / '.join(f'{f:.0f}' for f in floors)} attempts/s; rig cost "
                  f"{' / '.join(f'{x:.2f}' for x in ratios)}x the floor beside each run, median {ratio:.2f}x"
                  + (f" (goal <= {RATIO_GOAL[level]}x: {'ok' if ratio <= RATIO_GOAL[level] else 'MISSED'})"
                     if judged else ""))
            if level == "bwrap":
                bw = floor(ck, tmp / "floor-bwrap-c", n, prefix=[resolve_level("bwrap").bwrap_path
                                                                  or "bwrap", *BWRAP_FLOOR])
                print(f"{'':8s} floor with the command started under a minimal bwrap: {bw:.1f} "
                      f"attempts/s; rig cost {bw / rate:.2f}x that floor (median rig rate; goal <= "
                      f"{RATIO_GOAL[level]}x: {'ok' if bw / rate <= RATIO_GOAL[level] else 'MISSED'})")
                fl = bw
            print_breakdown(level, ms, fl)
        if a.rates_only:
            return 0
        rss, attempts = peak_rss_mb(ck, tasks, tmp / "run-rss", n_rss // 10, env)
        print(f"peak RSS over {attempts} attempts: {rss:.1f} MB (goal <= 150: "
              f"{'ok' if rss <= 150 else 'MISSED'})")
        secs = resume_planning_s(tmp / "resume", home, n_resume)
        print(f"planning the resume of {n_resume} results: {secs:.2f} s (goal <= 2: "
              f"{'ok' if secs <= 2 else 'MISSED'})")
    finally:
        print(f"load average at the end: {os.getloadavg()[0]:.1f}")
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
