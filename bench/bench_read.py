"""Reading at scale: `show` and `export` of a 50,000-attempt run bundle (show's summary goal
≤ 1 s with flat memory), each against a bare loop over the same files in the same run.

One bundle is built on disk: a task set of TASKS exact-answer fresh tasks, TASKS × K attempts
with an answer file each, results and actuals lines as the runner writes them and a manifest
whose digests cover every file. Each step runs in a fresh Python process, so that its wall
time includes start-up and its peak RSS is its own. Steps are listed in STEPS; a later part
(`report`, say) adds its own rows there.

    .venv/bin/python bench/bench_read.py [--tasks 2000] [--k 25]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from _steps import measured, run_step  # noqa: E402

STEP = measured(r"""
if kind == "bare-show":
    # the floor of a summary: parse every results and actuals line, count passes per suite
    import orjson
    passed, n, cost = {}, 0, 0.0
    with open(args[0] + "/results.jsonl", "rb") as f:
        for line in f:
            d = orjson.loads(line); n += 1
            passed[d["suite"]] = passed.get(d["suite"], 0) + (d["status"] == "passed")
    with open(args[0] + "/actuals.jsonl", "rb") as f:
        for line in f:
            cost += orjson.loads(line).get("cost_usd") or 0.0
elif kind == "bare-export":
    # the floor of trajectories: every results line, its prompt and answer, one JSON line out
    import orjson
    prompts = {}
    with open(args[0] + "/results.jsonl", "rb") as f, open(args[2], "wb") as out:
        for line in f:
            d = orjson.loads(line)
            p = prompts.get(d["task_id"])
            if p is None:
                p = prompts[d["task_id"]] = open(f"{args[1]}/fresh/{d['task_id']}/prompt.md").read()
            answer = open(f"{args[0]}/attempts/{d['attempt_id']}/out/answer.txt").read()
            out.write(orjson.dumps({"messages": [{"role": "user", "content": p},
                                                 {"role": "assistant", "content": answer}],
                                    "reward": d["reward"], "task_id": d["task_id"]}) + b"\n")
else:
    from evalrig.cli import app
    try:
        app(args, standalone_mode=False)
    except SystemExit as e:
        code = e.code
    except Exception as e:
        code = getattr(e, "exit_code", 99)
""")


step = functools.partial(run_step, STEP)


def build(root: Path, n: int, k: int, home: Path) -> tuple[Path, Path]:
    """A task set of n fresh tasks and a complete run bundle of n × k attempts."""
    import random
    from datetime import UTC, datetime

    from evalrig.core.digest import canonical_line, sha256_bytes
    from evalrig.models.run import (
        Actual,
        Canary,
        CheckpointRef,
        Result,
        RunCounts,
        RunManifest,
        RunSettings,
        TasksetRef,
    )
    from evalrig.run.lifecycle import register_finished
    from evalrig.store.bundle import file_digests
    from evalrig.store.files import write_json_atomic
    from evalrig.store.tasks import content_digest, load_taskset

    t0 = datetime(2026, 12, 1, tzinfo=UTC)
    tasks_dir = root / "tasks"
    for i in range(n):
        d = tasks_dir / "fresh" / f"t{i:05d}"
        d.mkdir(parents=True)
        (d / "task.toml").write_text(f'created_at = 2026-12-01T11:00:00.000000Z\ntags = ["g{i % 7}"]\n'
                                     f'[verifier]\nkind = "exact"\nexpected = "{i}"\n')
        (d / "prompt.md").write_text(f"What is {i}?\n")
    taskset = load_taskset(tasks_dir)
    rng = random.Random(7)
    bundle = root / "run"
    results, actuals = [], []
    for task in taskset.tasks:
        p = rng.random()
        for rep in range(k):
            aid = f"a-{task.id}-{rep}"
            ok = rng.random() < p
            out = bundle / "attempts" / aid / "out"
            out.mkdir(parents=True)
            (out / "answer.txt").write_text(task.id[1:].lstrip("0") if ok else "no")
            results.append(canonical_line(Result(
                trial_id=f"{task.id}:{rep}", attempt_id=aid, attempt=1, task_id=task.id, suite="fresh", rep=rep,
                inputs_id=sha256_bytes(aid.encode()), status="passed" if ok else "failed", passed=ok,
                reward=1.0 if ok else 0.0, verifier=task.verifier_identity, sandbox="bwrap",
                containment="namespace", network=False, canary=Canary(value="c", found=False),
                evidence_digest=sha256_bytes(aid.encode()), evidence_bytes=4)))
            actuals.append(canonical_line(Actual(
                trial_id=f"{task.id}:{rep}", attempt_id=aid, task_id=task.id, rep=rep, wall_s=1.0, cpu_s=0.5,
                exit_code=0, timed_out=False, cost_usd=0.01, usage_source="reported", stdout_bytes=0,
                stderr_bytes=0, stdout_truncated=False, stderr_truncated=False)))
    (bundle / "results.jsonl").write_bytes(b"".join(results))
    (bundle / "actuals.jsonl").write_bytes(b"".join(actuals))
    for name in ("attempts.jsonl", "estimates.jsonl"):
        (bundle / name).write_bytes(b"")
    trials = n * k
    passed = sum(b'"status":"passed"' in r for r in results)
    manifest = RunManifest(
        run_id="bench", rig_version="0.1.0", checkpoint=CheckpointRef(id=sha256_bytes(b"c"), name="c", sealed_at=t0),
        taskset=TasksetRef(id=taskset.id, count=n, suites=taskset.suites(),
                           fresh_created_at=taskset.fresh_created_at(),
                           fresh_content={t.id: content_digest(t) for t in taskset.tasks}),
        repeat=k, seed=0, settings=RunSettings(timeout_scale=1.0, max_retries=0, sandbox="bwrap",
                                               tasks_dir=str(tasks_dir), checkpoint_dir="c", jobs=1),
        subset=False, policy_pin=None, plan_digest=sha256_bytes(b"p"), status="complete",
        counts=RunCounts(trials=trials, scored=trials, passed=passed, failed=trials - passed, agent_error=0,
                         timeout=0, infra_error=0, interrupted=0, attempts=trials, unscored=0),
        seal_checks=[], created_at=t0, finished_at=t0, files=file_digests(bundle))
    write_json_atomic(bundle / "manifest.json", manifest)
    register_finished(home, manifest)
    return bundle, tasks_dir


Steps = list[tuple[str, Callable[[Path, Path, Path, dict[str, str]], tuple[float, float, float, int]]]]

STEPS: Steps = [
    ("bare loop: results + actuals", lambda b, t, r, env: step("bare-show", str(b), env=env)),
    ("show BUNDLE (summary)", lambda b, t, r, env: step("show", "show", str(b), "--json", env=env)),
    ("bare loop: prompt + answer -> jsonl", lambda b, t, r, env: step("bare-export", str(b), str(t),
                                                                       str(r / "bare.jsonl"), env=env)),
    ("export --format trajectories", lambda b, t, r, env: step(
        "export", "export", str(b), "--format", "trajectories", "--to", str(r / "traj.jsonl"), env=env)),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=2_000)
    ap.add_argument("--k", type=int, default=25)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        home = root / "home"
        t = time.perf_counter()
        bundle, tasks = build(root, args.tasks, args.k, home)
        print(f"built a bundle of {args.tasks} tasks x k={args.k} = {args.tasks * args.k} attempts in "
              f"{time.perf_counter() - t:.1f} s ({(bundle / 'results.jsonl').stat().st_size / 1e6:.1f} MB of results)")
        env = {**os.environ, "EVALRIG_HOME": str(home), "NO_COLOR": "1"}
        rows = [(name, *run(bundle, tasks, root, env)) for name, run in STEPS]
        print(f"{'step':40} {'wall s':>8} {'CPU s':>8} {'peak MB':>8} {'exit':>5}")
        for name, wall, cpu, rss, code in rows:
            print(f"{name:40} {wall:8.2f} {cpu:8.2f} {rss:8.0f} {code:5d}")
        print(json.dumps({name: {"wall_s": round(w, 3), "cpu_s": round(c, 3), "peak_mb": round(r)}
                          for name, w, c, r, _ in rows}))
        print(f"load average while measuring: {os.getloadavg()[0]:.1f} (2 cores; wall times include waiting)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
