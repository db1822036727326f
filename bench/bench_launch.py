"""Launch throughput: `/bin/true` 500 times at 2 in parallel under each sandbox level.

Prints attempts/s for each level beside a floor measured in the same run (a bare
`subprocess.run(["/bin/true"])` in 2 threads) and the ratio floor / level, i.e. what
containment costs. Targets (issue 3): >= 150/s under process, >= 80/s under
bwrap, on a 2-core machine. Each launch carries the limits a trial sets (memory, file
size, process count, disk watch), so the figures are those the runner will see.

On a shared machine the wall rate follows the load; the CPU time per launch (the rig and
every reaped child, kernel time included) does not, so it is printed too, with the rate
it allows on two otherwise idle cores.

    .venv/bin/python bench/bench_launch.py [--n 500] [--jobs 2]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from evalrig.attempt.sandbox import Launch, launch, resolve_level
from evalrig.core.environment import minimal_path


def cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def rate(n: int, jobs: int, one: object) -> tuple[float, float]:
    """(launches per second of wall time, CPU milliseconds per launch)."""
    cpu0 = cpu_s()
    began = time.perf_counter()
    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(one, range(n)))  # type: ignore[arg-type]
    return n / (time.perf_counter() - began), (cpu_s() - cpu0) / n * 1000


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
            memory_bytes=2 << 30,
            max_processes=256,
            max_file_bytes=256 << 20,
            disk_watch=(root, 256 << 20),
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
    cores = os.cpu_count() or 1
    base, base_cpu = rate(args.n, args.jobs, floor)
    print(
        f"load average {os.getloadavg()[0]:.1f} on {cores} cores; {args.n} launches, {args.jobs} at once"
    )
    print(f"floor    subprocess.run(/bin/true): {base:7.1f}/s   cpu {base_cpu:5.2f} ms/launch")
    levels = [("process", None, "")]
    choice = resolve_level("auto")
    if choice.level == "bwrap":
        levels.append(("bwrap", choice.bwrap_path, f" ({choice.bwrap_path})"))
    else:
        print(f"bwrap    skipped: {choice.warning}")
    for level, bwrap_path, note in levels:
        with tempfile.TemporaryDirectory(prefix="bench-launch-") as scratch:
            got, cpu = rate(
                args.n, args.jobs, launcher(level, bwrap_path, Path(scratch), args.jobs)
            )
        target = 150 if level == "process" else 80
        idle = min(args.jobs, cores) / cpu * 1000
        verdict = "ok" if got >= target else f"BELOW the {target}/s target at this load"
        print(
            f"{level:8} launch(){note}: {got:7.1f}/s   cpu {cpu:5.2f} ms/launch "
            f"(~{idle:.0f}/s on idle cores)   floor/level = {base / got:4.2f}x   {verdict}"
        )


if __name__ == "__main__":
    main()
