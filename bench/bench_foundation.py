"""Benchmarks of the foundation (issue 2). Run: `.venv/bin/python bench/bench_foundation.py`.

(a) start-up: wall of `eval.sh --help` and `eval.sh validate --tasks tasks` (median of
    10 runs; goal ≤ 0.3 s), and whether scipy is imported on those paths (it must not be);
(b) `validate` on 2,000 generated tasks (goal ≤ 1.5 s);
(c) sealing a generated 200 MB checkpoint of 10,000 files against `sha256sum` over the same
    files in the same run (goal ≥ 80 % of its throughput), and the content hash's CPU in
    process per hash version.

Generated data goes under a temporary directory, never into the repository. `--quick`
shrinks (b) and (c) tenfold for a smoke run.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EVAL = ROOT / "eval.sh"
PY = ROOT / ".venv" / "bin" / "python"


CPU: list[float] = []
"""CPU seconds (user + sys) of each measured run: on a shared, loaded machine the wall
clock overstates a command's own cost, so both are printed."""


def wall(cmd: list[str], env: dict[str, str], cwd: Path = ROOT) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    elapsed = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return elapsed


def median_wall(cmd: list[str], env: dict[str, str], runs: int = 10, cwd: Path = ROOT) -> float:
    wall(cmd, env, cwd)  # warm the page cache
    CPU.clear()
    return statistics.median(wall(cmd, env, cwd) for _ in range(runs))


def cpu() -> str:
    return f"(cpu {statistics.median(CPU):.3f} s)"


def imports_scipy(args: list[str], env: dict[str, str]) -> bool:
    r = subprocess.run([str(PY), "-X", "importtime", "-m", "evalrig", *args], cwd=ROOT, env=env,
                       capture_output=True, text=True, check=False)
    modules = [line.split("|")[-1].strip() for line in r.stderr.splitlines()
               if line.startswith("import time:")]
    return any(m == "scipy" or m.startswith("scipy.") for m in modules)


def bench_startup(env: dict[str, str]) -> None:
    base = median_wall([str(PY), "-c", "pass"], env)
    print(f"(a) python -c pass                      {base:6.3f} s  {cpu()} the floor")
    for args in (["--help"], ["validate", "--tasks", "tasks"]):
        t = median_wall([str(EVAL), *args], env)
        used = cpu()
        scipy = imports_scipy(args, env)
        verdict = "ok" if t <= 0.3 else "OVER 0.3 s"
        print(f"    eval.sh {' '.join(args):30} {t:6.3f} s  {used} {verdict}; scipy imported: {scipy}")


def make_tasks(root: Path, n: int) -> None:
    suites = ("fixed", "fresh", "invariant")
    for i in range(n):
        suite = suites[i % 3]
        d = root / suite / f"task-{i:05d}"
        (d / "files").mkdir(parents=True)
        created = "created_at = 2026-12-01T10:00:00.000000Z\n" if suite == "fresh" else ""
        kind = i % 3
        verifier = (
            '[verifier]\nkind = "exact"\nexpected = "42"\n' if kind == 0 else
            '[verifier]\nkind = "regex"\npattern = "4[0-9]+"\n' if kind == 1 else
            '[verifier]\nkind = "json"\nexpected = {answer = 42, list = [1, 2, 3]}\n'
        )
        (d / "task.toml").write_text(f'{created}tags = ["bench"]\ntimeout_s = 30\n{verifier}')
        (d / "prompt.md").write_text(f"Task {i}: what is 6 x 7?\n")
        (d / "files" / "input.txt").write_text(f"{i}\n" * 20)


def bench_validate(tmp: Path, env: dict[str, str], n: int) -> None:
    root = tmp / "tasks"
    make_tasks(root, n)
    t = median_wall([str(EVAL), "validate", "--tasks", str(root)], env, runs=5)
    verdict = "ok" if t <= 1.5 else "OVER 1.5 s"
    print(f"(b) validate on {n} generated tasks     {t:6.3f} s  {cpu()} {verdict}")


def make_checkpoint(root: Path, files: int, total: int) -> None:
    root.mkdir(parents=True)
    (root / "checkpoint.toml").write_text('name = "bench"\n[agent]\ncommand = ["python3", "agent.py"]\n')
    size = total // files
    block = os.urandom(1 << 20)
    for i in range(files):
        d = root / f"d{i // 100:03d}"
        d.mkdir(exist_ok=True)
        reps = block * (size // len(block) + 1)
        (d / f"f{i:05d}.bin").write_bytes(reps[(i * 7919) % 1000: (i * 7919) % 1000 + size])


def bench_seal(tmp: Path, env: dict[str, str], files: int, total: int) -> None:
    ckpt = tmp / "ckpt"
    make_checkpoint(ckpt, files, total)
    nbytes = sum(p.stat().st_size for p in ckpt.rglob("*") if p.is_file())
    listing = tmp / "files.txt"
    paths = sorted(str(p) for p in ckpt.rglob("*") if p.is_file())
    listing.write_text("\0".join(paths))
    sha = ["bash", "-c", f"xargs -0 sha256sum < {listing} > /dev/null"]
    seal = [str(EVAL), "seal", str(ckpt)]
    # Both read the same files once before timing (a warm cache): the comparison is of
    # hashing and walking, not of the disk.
    t_sha = median_wall(sha, env, runs=3)
    c_sha = cpu()
    t_seal = median_wall(seal, env, runs=3)
    c_seal = cpu()
    mb = nbytes / 1e6
    ratio = t_sha / t_seal
    verdict = "ok" if ratio >= 0.8 else "UNDER 80 %"
    print(f"(c) {files} files, {mb:.0f} MB")
    print(f"    sha256sum                           {t_sha:6.3f} s  {mb / t_sha:7.1f} MB/s  {c_sha}")
    print(f"    eval.sh seal                        {t_seal:6.3f} s  {mb / t_seal:7.1f} MB/s  {c_seal}")
    print(f"    seal throughput / sha256sum's       {ratio:6.2f}     {verdict}")
    bench_hash_versions(ckpt)


def bench_hash_versions(ckpt: Path) -> None:
    """CPU of the content hash in process, per hash version (docs/checkpoint.md): version 2
    (what `seal` and every run's start compute), version 1, and both from one read (a home
    that still holds version-1 seals not sealed again). Median of 5, warm cache."""
    from evalrig.store.tree import hash_trees

    for versions in ((1,), (2,), (2, 1)):
        times = []
        for _ in range(5):
            t = time.process_time()
            hash_trees(ckpt, versions, exclude=frozenset({"SEAL.json"}), exclude_dirs=False)  # type: ignore[arg-type]
            times.append(time.process_time() - t)
        label = " + ".join(f"v{v}" for v in versions)
        print(f"    hash_trees {label:<24} {statistics.median(times):6.3f} s cpu")


def main() -> int:
    quick = "--quick" in sys.argv
    tmp = Path(tempfile.mkdtemp(prefix="evalrig-bench-"))
    env = {**os.environ, "EVALRIG_HOME": str(tmp / "home"), "NO_COLOR": "1"}
    try:
        subprocess.run([str(EVAL), "--version"], cwd=ROOT, env=env, check=True, capture_output=True)
        bench_startup(env)
        bench_validate(tmp, env, 200 if quick else 2000)
        bench_seal(tmp, env, 1000 if quick else 10_000, (20 if quick else 200) * 1_000_000)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
