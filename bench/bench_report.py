"""report at scale: a comparison of 10,000 tasks × k = 5 (goal ≤ 10 s and a page ≤ 25 MB).

Two run bundles are built on disk as bench_compare builds them (results, actuals,
attempts and estimates lines; no evidence files), compared and gated; then each step runs
in a fresh Python process so that its wall time includes start-up and its peak RSS is its
own:
- baseline: read the two runs' results, actuals and estimates with a bare loop (orjson), nothing else;
- report: `evalrig report` of the comparison (verify every digest, read both runs, draw the
  plots, write the page).

    .venv/bin/python bench/bench_report.py [--tasks 10000] [--k 5]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from bench_compare import build, step  # noqa: E402

BASELINE = ("results.jsonl", "actuals.jsonl", "estimates.jsonl")


def in_chromium(page: Path) -> dict[str, float]:
    """Whether the page stays usable: seconds to load it (parse, first table page drawn), to
    sort every task by d and to filter them (skipped without Chromium)."""
    from chromium import Browser, why_unavailable

    if why_unavailable() is not None:
        print(f"in headless Chromium: skipped ({why_unavailable()})")
        return {}
    with Browser() as b:
        t = time.perf_counter()
        b.open(page)
        rows = b.eval("document.querySelectorAll('#task-body tr.task').length")
        out = {"load": time.perf_counter() - t}
        t = time.perf_counter()
        b.eval("document.querySelector('#tasks th[data-key=d]').click()")
        out["sort"] = time.perf_counter() - t
        t = time.perf_counter()
        b.eval("var f = document.getElementById('filter'); f.value = 't00'; f.dispatchEvent(new Event('input'))")
        out["filter"] = time.perf_counter() - t
        assert rows > 0
    return out


def main() -> int:
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
        env = {**os.environ, "EVALRIG_HOME": str(home), "NO_COLOR": "1"}
        cmp = root / "cmp"
        step("compare", "compare", str(a), str(b), "--out", str(cmp), env=env)
        step("gate", "gate", str(cmp), "--policy", str(policy), env=env)
        print(f"built, compared and gated two bundles of {args.tasks} tasks x k={args.k} in "
              f"{time.perf_counter() - t:.1f} s")
        files = [str(d / name) for d in (a, b) for name in BASELINE]
        rows = [("baseline: parse the runs' lines (orjson)", *step("baseline", *files, env=env)),
                ("report", *step("report", "report", str(cmp), env=env))]
        print(f"{'step':42} {'wall s':>8} {'CPU s':>8} {'peak MB':>8} {'exit':>5}")
        for name, wall, cpu, rss, code in rows:
            print(f"{name:42} {wall:8.2f} {cpu:8.2f} {rss:8.0f} {code:5d}")
        size = (cmp / "report.html").stat().st_size
        print(f"report.html: {size / 1e6:.1f} MB")
        browser = in_chromium(cmp / "report.html")
        if browser:
            print("in headless Chromium: " + ", ".join(f"{k} {v:.2f} s" for k, v in browser.items()))
        print(json.dumps({"report_html_mb": round(size / 1e6, 2),
                          **{name: {"wall_s": round(w, 3), "cpu_s": round(c, 3), "peak_mb": round(r)}
                             for name, w, c, r, _ in rows}}))
        print(f"load average while measuring: {os.getloadavg()[0]:.1f} (2 cores; wall times include waiting)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
