"""A small train for the report's tests: two run bundles with evidence (answers, a hostile
one among them, and an episode's transcript), their comparison, and a gate's decision.

Built with gate_bundles' real files and digests; the evidence is written before the run's
manifest, so that the bundles verify like those of `evalrig run`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import orjson
from gate_bundles import Side, Task, write_run
from redteam import add_task

from evalrig.core.digest import canonical_line
from evalrig.store.compare import compare_bundles
from evalrig.store.files import sha256_file
from evalrig.store.tasks import load_taskset

ROOT = Path(__file__).resolve().parent.parent
POLICY = ROOT / "policies" / "default.toml"
HOSTILE = '</script><script>alert(1)</script><img src="http://127.0.0.1:9/x.png" onerror="alert(2)">[bold]\x1b[31m'
EPISODE_TASK = "ep-000"
EPISODE_SAY = "I will look up order #417 for you."


@dataclass(frozen=True)
class Train:
    root: Path
    champion: Path
    candidate: Path
    cmp: Path
    tasks: list[str]
    taskset: Path


def _transcript() -> bytes:
    frames = [
        {"type": "session", "tools": [{"type": "function", "function": {"name": "find_order"}}],
         "messages": [{"role": "user", "content": "Where is my order?"}]},
        {"type": "message", "message": {"role": "assistant", "content": EPISODE_SAY, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "find_order", "arguments": '{"id": 417}'}}]}},
        {"type": "turn", "messages": [{"role": "tool", "tool_call_id": "c1", "content": "not found", "error": True}]},
        {"type": "message", "message": {"role": "assistant", "content": HOSTILE}},
        {"type": "end", "termination": "driver_end"},
    ]
    who = [("rig", "agent"), ("agent", "rig"), ("rig", "agent"), ("agent", "rig"), ("rig", "agent")]
    lines = [{"seq": i, "from": f, "to": t, "frame": fr, "t_ms": 10 * i} for i, ((f, t), fr) in
             enumerate(zip(who, frames, strict=True))]
    lines.append({"seq": 5, "from": "agent", "to": "rig", "raw": "not json {", "reason": "not a JSON object",
                  "t_ms": 60})
    return b"".join(canonical_line(x) for x in lines) + orjson.dumps({"seq": 6})[:-2]  # and a torn line


def relayed_transcript() -> bytes:
    """An episode as the rig records it (docs/episodes.md): every frame in both directions, the
    rig's hops to and from the driver carrying the same messages again; the agent's first
    answer is a turn of tool calls only."""
    say = {"role": "assistant", "content": EPISODE_SAY}
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "find_order", "arguments": '{"id": 417}'}}]}
    opening = [{"role": "user", "content": "Where is my order?"}]
    result = [{"role": "tool", "tool_call_id": "c1", "content": "not found", "error": True}]
    tools = [{"type": "function", "function": {"name": "find_order"}}]
    hops = [
        ("rig", "driver", {"type": "start", "task_id": EPISODE_TASK, "attempt_id": "x", "seed": 1}),
        ("driver", "rig", {"type": "session", "tools": tools, "messages": opening}),
        ("rig", "agent", {"type": "session", "tools": tools, "messages": opening}),
        ("agent", "rig", {"type": "message", "message": call}),
        ("rig", "driver", {"type": "message", "message": call}),
        ("driver", "rig", {"type": "reply", "messages": result}),
        ("rig", "agent", {"type": "turn", "messages": result}),
        ("agent", "rig", {"type": "message", "message": say}),
        ("rig", "driver", {"type": "message", "message": say}),
        ("driver", "rig", {"type": "end", "reason": "the user is satisfied"}),
        ("rig", "agent", {"type": "end", "termination": "driver_end"}),
        ("rig", "driver", {"type": "finish", "termination": "driver_end"}),
    ]
    return b"".join(canonical_line({"seq": i, "from": f, "to": t, "frame": fr, "t_ms": 10 * i})
                    for i, (f, t, fr) in enumerate(hops))


LONG_LINES = 400
"""Lines of the long text file every attempt of t002 leaves (more than a page shows inline)."""


def _evidence(dir: Path, name: str, tasks: dict[str, Task], transcript: bytes | None = None,
              files: bool = False) -> None:
    """An answer for every attempt (the hostile text for one task), a transcript for the episode;
    with `files`, t002's attempts also leave a long text file, a binary one and a stderr."""
    for task_id, t in tasks.items():
        for rep in range(len(t.passes)):
            att = dir / "attempts" / f"{name}-{task_id}-{rep}-1"
            (att / "out").mkdir(parents=True)
            answer = HOSTILE if task_id == "t001" else ("42" if t.passes[rep] else "41")
            (att / "out" / "answer.txt").write_text(answer)
            (att / "stdout.txt").write_text("ok\n")
            if task_id == EPISODE_TASK:
                (att / "transcript.jsonl").write_bytes(transcript or _transcript())
            if files and task_id == "t002":
                (att / "out" / "notes.txt").write_text("".join(f"note line {i}\n" for i in range(LONG_LINES)))
                (att / "out" / "blob.bin").write_bytes(bytes(range(256)) * 4)
                (att / "stderr.txt").write_text("".join(f"{name} stderr line {i}\n" for i in range(30)))


def build_train(root: Path, home: Path, n: int = 24, k: int = 5, gate: bool = True,
                transcript: bytes | None = None, files: bool = False) -> Train:
    rng = random.Random(3)
    digest = sha256_file(POLICY)
    champ: dict[str, Task] = {}
    cand: dict[str, Task] = {}
    for i in range(n):
        suite = "fixed" if i % 4 == 0 else "fresh"
        p = rng.random()
        champ[f"t{i:03d}"] = Task(suite, [rng.random() < p for _ in range(k)], cost=0.01 + 0.01 * rng.random())
        cand[f"t{i:03d}"] = Task(suite, [rng.random() < min(1, p + 0.2) for _ in range(k)], cost=0.012)
    for side in (champ, cand):
        side[EPISODE_TASK] = Task("fresh", [True] * k)
        side["inv-000"] = Task("invariant", [True] * k)
    taskset = root / "tasks"
    for task_id, t in champ.items():
        add_task(taskset, t.suite, task_id, expected="42")
    taskset_id = load_taskset(taskset).id
    a, b = root / "champion", root / "candidate"
    _evidence(a, "champ", champ, transcript, files)
    _evidence(b, "cand", cand, transcript, files)
    write_run(a, Side("champ", champ, repeat=k, policy_digest=digest, taskset_id=taskset_id), home, full=True)
    write_run(b, Side("cand", cand, repeat=k, policy_digest=digest, taskset_id=taskset_id), home, full=True)
    cmp = root / "cmp"
    compare_bundles(a, b, cmp, home)
    if gate:
        from datetime import UTC, datetime

        from evalrig.store.decisions import gate_comparison

        gate_comparison(cmp, POLICY, None, False, home, datetime(2026, 12, 2, tzinfo=UTC))
    return Train(root, a, b, cmp, sorted(champ), taskset)


def write_curves(home: Path, fixed_rates: tuple[float, ...]) -> None:
    """Gate ledger lines carrying the curve figures (one train each, a day apart), appended as
    the gate appends them."""
    from datetime import UTC, datetime, timedelta

    from evalrig.core.digest import sha256_bytes
    from evalrig.models.comparison import Curve, CurveSides, GateLedgerEntry, PolicyRef
    from evalrig.store.ledger import record_gate

    for i, rate in enumerate(fixed_rates):
        record_gate(home, GateLedgerEntry(
            candidate_id="sha256:" + "a" * 64, champion_id=sha256_bytes(f"champ{i}".encode()),
            comparison_digest=f"sha256:{i:064x}", comparison_dir=f"/t/{i}",
            policy=PolicyRef(name="default", version=2, digest=sha256_bytes(b"policy")), exception=None,
            advisory=False, verdict="promote", reason="quality", decision_digest=f"sha256:{i + 1000:064x}",
            at=datetime(2026, 12, 1, 10, tzinfo=UTC) + timedelta(days=i),
            curve=Curve(fixed_pass_rate=CurveSides(champion=rate, candidate=rate + 0.01),
                        fresh_mean_d=0.05 - 0.01 * (i % 3), fresh_bounds=(0.01 - 0.01 * (i % 3), 0.09),
                        cost_per_task=CurveSides(champion=0.02, candidate=0.019 + 0.001 * (i % 2)),
                        public_pass_rate=CurveSides(champion=0.5, candidate=0.5 + 0.02 * (i % 2)))))


def _digest(x: object) -> str:
    from evalrig.core.digest import sha256_bytes

    return sha256_bytes(str(x).encode())


def ship_event(seq: int, at: str, checkpoint_id: str, name: str, replaces: str | None, decision: int = 0) -> dict:
    """A whole `ship` event as `ship` writes it (the store validates every event it reads)."""
    from evalrig.models.inputs import PolicyTripwires, PolicyWatch

    return {"schema_version": "1.0", "seq": seq, "at": at, "kind": "ship",
            "decision": {"path": f"d{decision}.json", "digest": f"sha256:{decision + 1000:064x}"},
            "verdict": "promote", "reason": "quality", "candidate": {"checkpoint_id": checkpoint_id, "name": name},
            "replaces": replaces, "policy": {"name": "default", "version": 2, "digest": _digest("policy")},
            "tripwires": PolicyTripwires().model_dump(mode="json"), "watch": PolicyWatch().model_dump(mode="json"),
            "signed_by": "alice", "note": None}


def tripwire_event(seq: int, at: str, checkpoint_id: str, held: bool) -> dict:
    return {"schema_version": "1.0", "seq": seq, "at": at, "kind": "tripwire", "checkpoint_id": checkpoint_id,
            "bundle": {"path": "trip", "digest": _digest(seq)}, "checks": [{"name": "sealed", "held": held,
            "detail": ""}], "held": held}


def rollback_event(seq: int, at: str, frm: str, to: str, evidence: int | None) -> dict:
    return {"schema_version": "1.0", "seq": seq, "at": at, "kind": "rollback", "from": frm, "to": to,
            "trigger": "tripwire" if evidence is not None else "person", "by": "rig", "reason": "a tripwire failed",
            "evidence": evidence}


def alert_event(seq: int, at: str, kind: str, detail: str) -> dict:
    return {"schema_version": "1.0", "seq": seq, "at": at, "kind": "alert", "alert_id": f"{kind}:x:{seq}",
            "alert_kind": kind, "metric": "promote", "trains": [], "detail": detail}


def release_events(n_trains: int) -> list[dict]:
    """A release log over the trains of write_curves: ships, a failed tripwire, its rollback, an alert."""
    out: list[dict] = []
    for i in range(n_trains):
        out.append(ship_event(len(out), f"2026-12-{i + 1:02d}T12:00:00.000000Z", f"sha256:{i:064x}", f"v{i}",
                              f"sha256:{i - 1:064x}" if i else "sha256:" + "f" * 64, decision=i))
        if i == 2:
            out.append(tripwire_event(len(out), "2026-12-03T13:00:00.000000Z", f"sha256:{i:064x}", False))
            out.append(rollback_event(len(out), "2026-12-03T13:00:01.000000Z", f"sha256:{i:064x}",
                                      f"sha256:{i - 1:064x}", len(out) - 1))
    out.append(alert_event(len(out), f"2026-12-{n_trains:02d}T14:00:00.000000Z", "stall", "no promote in 6 trains"))
    return out
