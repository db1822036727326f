"""Launch throughput: `/bin/true` 500 times at 2 in parallel under each sandbox level.

Prints attempts/s for each level beside a floor measured in the same run (a bare
`subprocess.run(["/bin/true"])` in 2 threads) and the ratio floor / level, i.e. what
containment costs. Targets (DESIGN §4 / issue 3): >= 150/s under process, >= 80/s under
bwrap, on a 2-core machine.

    .venv/bin/python bench/bench_launch.py [--n 500] [--jobs 2]
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from evalrig.sandbox import Launch, launch, minimal_path, resolve_level


def rate(n: int, jobs: int, one: object) -> float:
    began = time.perf_counter()
    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(one, range(n)))  # type: ignore[arg-type]
    return n / (time.perf_counter() - began)


def floor(_: int) -> None:
    subprocess.run(["/bin/true"], check=True)


def launcher(level: str, bwrap_path: str | None, scratch: Path, jobs: int):  # type: ignore[no-untyped-def]
    def one(i: int) -> None:
        slot = i % jobs
        root = scratch / f"slot{slot}"
        root.mkdir(exist_ok=True)
        spec = Launch(
            argv=["/bin/true"],
            cwd=root,
            env={"PATH": minimal_path(), "EVALRIG_ATTEMPT_ID": f"bench-{i}"},
            level=level,  # type: ignore[arg-type]
            rw_paths=[root],
            ro_paths=[],
            network=False,
            timeout_s=30,
            max_output_bytes=1 << 20,
            stdout_path=scratch / f"{i}.out",
            stderr_path=scratch / f"{i}.err",
            slot=slot,
            attempt_tag=f"bench-{i}",
            bwrap_path=bwrap_path,
        )
        done = launch(spec)
        if done.exit_code != 0:
            raise SystemExit(f"launch {i} under {level} failed: {done}")

    return one


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    base = rate(args.n, args.jobs, floor)
    print(f"floor    subprocess.run(/bin/true): {base:7.1f}/s")
    levels = [("process", None, "")]
    choice = resolve_level("auto")
    if choice.level == "bwrap":
        levels.append(("bwrap", choice.bwrap_path, f" ({choice.bwrap_path})"))
    else:
        print(f"bwrap    skipped: {choice.warning}")
    for level, bwrap_path, note in levels:
        with tempfile.TemporaryDirectory(prefix="bench-launch-") as scratch:
            got = rate(args.n, args.jobs, launcher(level, bwrap_path, Path(scratch), args.jobs))
        target = 150 if level == "process" else 80
        verdict = "ok" if got >= target else f"BELOW the {target}/s target"
        print(
            f"{level:8} launch(){note}: {got:7.1f}/s  floor/level = {base / got:4.2f}x  {verdict}"
        )


if __name__ == "__main__":
    main()
