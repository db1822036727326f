"""Overhead of `run --executor ray` against `--executor local`, measured in the same run.

    .venv/bin/python bench/bench_ray.py [--attempts N] [--sandbox auto|bwrap|process]

1,000 attempts (by default) of a no-op agent (`/bin/true`, an exact verifier) twice:
on the local executor at --jobs 2, and on a local two-node Ray cluster of 1 CPU per node
(the same total CPU count) at --jobs 2. Goal: Ray's wall time <= 1.5x local once the
cluster is up. The cluster's start-up (head, second node, both registered) is timed and
reported apart.

Each run is `python -m evalrig run` in a subprocess; its time is taken from the
manifest's created_at / finished_at, so interpreter start-up and joining the cluster are
not counted — but everything of the run itself is, the Ray workers' start included.
The cluster listens on 127.0.0.1 only and is shut down by this script (never by name).
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Before Ray is imported: a node takes the loopback address as its own and binds there.
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0",
                "RAY_AUTH_MODE": "disabled"}
os.environ.update(LOOPBACK_ENV)

from evalrig.bundle import load_run  # noqa: E402
from evalrig.checkpoint import seal  # noqa: E402

GOAL = 1.5
TASKS = 10


def make_inputs(root: Path, home: Path) -> tuple[Path, Path]:
    ck = root / "ckpt"
    ck.mkdir()
    (ck / "checkpoint.toml").write_text('name = "noop"\n[agent]\ncommand = ["/bin/true"]\n')
    seal(ck, home, datetime(2026, 12, 1, tzinfo=UTC))
    for i in range(TASKS):
        d = root / "tasks" / "fixed" / f"t{i:02d}"
        d.mkdir(parents=True)
        (d / "prompt.md").write_text("Do nothing.\n")
        (d / "task.toml").write_text('[verifier]\nkind = "exact"\nexpected = "x"\n')
    return ck, root / "tasks"


def run_rig(ck: Path, tasks: Path, out: Path, repeat: int, sandbox: str, env: dict[str, str],
            *executor: str) -> float:
    """Seconds from the manifest's created_at to its finished_at."""
    argv = [sys.executable, "-m", "evalrig", "run", "--checkpoint", str(ck), "--tasks", str(tasks),
            "--out", str(out), "--repeat", str(repeat), "--jobs", "2", "--sandbox", sandbox,
            "--json", *executor]
    p = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True)
    if p.returncode != 0:
        raise SystemExit(f"rig failed ({p.returncode}): {p.stderr.decode()[-2000:]}")
    m = load_run(out).manifest
    assert m.status == "complete" and m.counts.attempts == repeat * TASKS, m.counts
    assert m.finished_at is not None
    return (m.finished_at - m.created_at).total_seconds()


def start_cluster() -> object:
    import ray
    from ray.cluster_utils import Cluster

    node = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "object_store_memory": 100 << 20}
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    cluster.add_node(**node)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, logging_level=logging.ERROR, log_to_driver=False)
    return cluster


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--attempts", type=int, default=1000, help="attempts per executor (default 1000)")
    ap.add_argument("--sandbox", default="auto", choices=["auto", "bwrap", "process"])
    args = ap.parse_args()
    repeat = max(1, args.attempts // TASKS)
    n = repeat * TASKS
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        root = Path(tmp)
        home = root / "home"
        env = {**os.environ, "EVALRIG_HOME": str(home)}
        ck, tasks = make_inputs(root, home)

        local_s = run_rig(ck, tasks, root / "local", repeat, args.sandbox, env)

        import ray

        t0 = time.perf_counter()
        cluster = start_cluster()
        startup_s = time.perf_counter() - t0
        try:
            address = cluster.address  # type: ignore[attr-defined]
            ray_s = run_rig(ck, tasks, root / "ray", repeat, args.sandbox, env,
                            "--executor", "ray", "--ray-address", address)
        finally:
            ray.shutdown()
            cluster.shutdown()  # type: ignore[attr-defined]

    ratio = ray_s / local_s
    print(f"{n} no-op attempts, --jobs 2, --sandbox {args.sandbox}")
    print(f"  local executor (2 threads)          {local_s:7.2f} s  {n / local_s:7.1f} attempts/s")
    print(f"  ray executor (2 nodes x 1 CPU)      {ray_s:7.2f} s  {n / ray_s:7.1f} attempts/s")
    print(f"  ray / local                          {ratio:6.2f}x  (goal <= {GOAL}x) "
          f"{'ok' if ratio <= GOAL else 'OVER'}")
    print(f"  cluster start-up (2 nodes, apart)   {startup_s:7.2f} s")


if __name__ == "__main__":
    main()
