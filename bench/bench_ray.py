"""Overhead of `run --executor ray` against `--executor local`, measured in the same run.

    .venv/bin/python bench/bench_ray.py [--attempts N] [--rounds R] [--sandbox auto|bwrap|process]

1,000 attempts (by default) of a no-op agent (`/bin/true`, an exact verifier) per run, on
each executor: local at --jobs 2, and a local two-node Ray cluster of 1 CPU per node (the
same total CPU count) at --jobs 2. Goal: Ray's wall time <= 1.5x local once the cluster
is up.

Each measured run is a whole `run_eval` — the code `evalrig run` calls — of all the
attempts, so a Ray run includes starting its runner actors, as every `evalrig run`
does. The runs alternate local, ray, ray, local over `--rounds` rounds (2 by default):
on a shared machine the load drifts, and this order keeps a drift from favouring either
side. Each run's time is taken from its manifest's created_at / finished_at.

Also printed: the machine's busy CPU per attempt over each executor's runs (from
/proc/stat: the driver, Ray's processes and the agents', and whatever else runs on the
machine, so read it on an otherwise idle one). Reported apart: the cluster's start-up (head, second node, both registered, the driver
joined) and a first, untimed run on it, which starts the cluster's worker processes
and fills the nodes' tree caches (once per cluster, not per run).
The cluster listens on 127.0.0.1 only and is shut down by this script (never by name).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Before Ray is imported: a node takes the loopback address as its own and binds there.
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0",
                "RAY_AUTH_MODE": "disabled"}
os.environ.update(LOOPBACK_ENV)

from evalrig.store.bundle import load_run  # noqa: E402
from evalrig.store.checkpoint import seal  # noqa: E402

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


def busy_cpu_s() -> float:
    """CPU seconds the whole machine has spent busy since boot (/proc/stat: all but idle
    and iowait), so a run's figure covers every process: driver, Ray's, the agents'."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def run_rig(ck: Path, tasks: Path, out: Path, repeat: int, sandbox: str, home: Path,
            executor: str, address: str | None = None) -> tuple[float, float]:
    """Seconds from the manifest's created_at to its finished_at, and the machine's busy
    CPU seconds over the run."""
    from evalrig.run.lifecycle import run_eval
    from evalrig.run.settings import RunRequest

    req = RunRequest(out=out, checkpoint=ck, tasks=tasks, repeat=repeat, jobs=2,
                     sandbox=sandbox, executor=executor, ray_address=address)
    cpu0 = busy_cpu_s()
    summary = run_eval(req, home, os.environ)
    cpu = busy_cpu_s() - cpu0
    m = load_run(out).manifest
    assert summary.status == "complete" and m.counts.attempts == repeat * TASKS, m.counts
    assert m.finished_at is not None
    return (m.finished_at - m.created_at).total_seconds(), cpu


def start_cluster() -> object:
    import ray
    from ray.cluster_utils import Cluster

    node: dict[str, Any] = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "object_store_memory": 100 << 20}
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    cluster.add_node(**node)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, logging_level=logging.ERROR, log_to_driver=False)
    return cluster


ORDER = ("local", "ray", "ray", "local")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--attempts", type=int, default=1000, help="attempts per run (default 1000)")
    ap.add_argument("--rounds", type=int, default=2,
                    help="rounds of local, ray, ray, local (default 2)")
    ap.add_argument("--sandbox", default="auto", choices=["auto", "bwrap", "process"])
    args = ap.parse_args()
    repeat = max(1, args.attempts // TASKS)
    n = repeat * TASKS
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        root = Path(tmp)
        home = root / "home"
        ck, tasks = make_inputs(root, home)

        import ray

        t0 = time.perf_counter()
        cluster = start_cluster()
        startup_s = time.perf_counter() - t0
        address = cluster.address  # type: ignore[attr-defined]
        took: dict[str, list[float]] = {"local": [], "ray": []}
        cpu: dict[str, list[float]] = {"local": [], "ray": []}
        try:
            warm_s, _ = run_rig(ck, tasks, root / "warm-up", 1, args.sandbox, home, "ray",
                                address)
            for i, kind in enumerate(ORDER * args.rounds):
                wall, busy = run_rig(ck, tasks, root / f"{kind}-{i}", repeat, args.sandbox,
                                     home, kind, address)
                took[kind].append(wall)
                cpu[kind].append(busy)
        finally:
            ray.shutdown()
            cluster.shutdown()  # type: ignore[attr-defined]

    local_s, ray_s = (sum(took[k]) / len(took[k]) for k in ("local", "ray"))
    ratio = ray_s / local_s
    runs = len(took["ray"])
    print(f"{n} no-op attempts per run, --jobs 2, --sandbox {args.sandbox} "
          f"({runs} runs per executor, interleaved; mean per run)")
    print(f"  local executor (2 threads)          {local_s:7.2f} s  {n / local_s:7.1f} attempts/s"
          f"   runs: {', '.join(f'{t:.2f}' for t in took['local'])}")
    print(f"  ray executor (2 nodes x 1 CPU)      {ray_s:7.2f} s  {n / ray_s:7.1f} attempts/s"
          f"   runs: {', '.join(f'{t:.2f}' for t in took['ray'])}")
    print(f"  ray / local                          {ratio:6.2f}x  (goal <= {GOAL}x) "
          f"{'ok' if ratio <= GOAL else 'OVER'}")
    local_ms, ray_ms = (1000 * sum(cpu[k]) / (n * len(cpu[k])) for k in ("local", "ray"))
    print(f"  CPU per attempt, every process      local {local_ms:5.1f} ms, ray {ray_ms:5.1f} ms "
          f"({ray_ms / local_ms:.2f}x; the whole machine's, other work included)")
    print(f"  cluster start-up (2 nodes, apart)   {startup_s:7.2f} s")
    print(f"  first run on it ({TASKS} attempts, workers starting) {warm_s:5.2f} s")


if __name__ == "__main__":
    main()
