"""compare and gate at scale: 10,000 tasks × k = 5 per side (goal ≤ 3 s each, ≤ 500 MB peak RSS).

Two run bundles are built on disk (results, actuals, attempts and estimates lines, as the
runner writes them; no evidence files), then each step runs in a fresh Python process so
that its wall time includes start-up and its peak RSS is its own:
- baseline: read the two results.jsonl and parse every line (orjson), nothing else;
- compare: `evalrig compare` (verify every digest, load both runs, the statistics, write);
- gate: `evalrig gate` on the comparison.

    .venv/bin/python bench/bench_compare.py [--tasks 10000] [--k 5]
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from _steps import measured, run_step  # noqa: E402

STEP = measured(r"""
if kind == "baseline":
    import orjson
    n = 0
    for a in args:  # a bundle (its results.jsonl) or a .jsonl file
        with open(a if a.endswith(".jsonl") else a + "/results.jsonl", "rb") as f:
            for line in f:
                orjson.loads(line); n += 1
    code = 0
else:
    from evalrig.cli import app
    try:
        app(args, standalone_mode=False)
        code = 0
    except SystemExit as e:
        code = e.code
    except Exception as e:
        code = getattr(e, "exit_code", 99)
""")


step = functools.partial(run_step, STEP)


def build(root: Path, n: int, k: int, home: Path, policy_digest: str) -> tuple[Path, Path]:
    import random

    from gate_bundles import Side, Task, write_run

    rng = random.Random(7)
    champ, cand = {}, {}
    for i in range(n):
        p = rng.betavariate(0.6, 0.4)
        suite = "fresh" if i % 10 else "fixed"
        champ[f"t{i:05d}"] = Task(suite, [rng.random() < p for _ in range(k)], cost=0.02)
        cand[f"t{i:05d}"] = Task(suite, [rng.random() < min(1.0, p + 0.03) for _ in range(k)], cost=0.018)
    a = write_run(root / "champion", Side("champ", champ, repeat=k, policy_digest=policy_digest), home, full=True)
    b = write_run(root / "candidate", Side("cand", cand, repeat=k, policy_digest=policy_digest), home, full=True)
    return a, b


def main() -> int:
    import os

    from evalrig.store.files import sha256_file

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=10_000)
    ap.add_argument("--k", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        home = root / "home"
        policy = ROOT / "policies" / "default.toml"
        t = time.perf_counter()
        a, b = build(root, args.tasks, args.k, home, sha256_file(policy))
        print(f"built two bundles of {args.tasks} tasks x k={args.k} in {time.perf_counter() - t:.1f} s "
              f"({(a / 'results.jsonl').stat().st_size / 1e6:.1f} MB of results each)")
        env = {**os.environ, "EVALRIG_HOME": str(home), "NO_COLOR": "1"}
        rows = [("baseline: parse both results.jsonl", *step("baseline", str(a), str(b), env=env))]
        rows.append(("compare", *step("compare", "compare", str(a), str(b), "--out", str(root / "cmp"), env=env)))
        rows.append(("gate", *step("gate", "gate", str(root / "cmp"), "--policy", str(policy), env=env)))
        print(f"{'step':40} {'wall s':>8} {'CPU s':>8} {'peak MB':>8} {'exit':>5}")
        for name, wall, cpu, rss, code in rows:
            print(f"{name:40} {wall:8.2f} {cpu:8.2f} {rss:8.0f} {code:5d}")
        size = (root / "cmp" / "comparison.json").stat().st_size
        print(f"comparison.json: {size / 1e6:.1f} MB")
        print(json.dumps({name: {"wall_s": round(w, 3), "cpu_s": round(c, 3), "peak_mb": round(r)}
                          for name, w, c, r, _ in rows}))
        print(f"load average while measuring: {os.getloadavg()[0]:.1f} (2 cores; wall times include waiting)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
