"""How sound is the default policy? Seeded synthetic release trains through the real core.

Each train draws per-task true pass rates, simulates k trials per task per side, builds the
Comparison with `evalrig.core.compare.build_comparison` and decides it with `evalrig.core.gate.decide`
under `policies/default.toml` — the same code `compare` and `gate` run, not a re-implementation.
Every invariant is made to hold, so only the statistics decide.

Scenarios (k = 5; 30, 60, 100 fresh tasks; N trains each):
- null: the candidate is the champion (same true rates, same cost distribution). Any
  promotion is false; reported per route (quality, efficiency).
- margin: the candidate is cheaper (half the cost) but worse by exactly the
  non-inferiority margin (5 points). A promotion on efficiency is false.
- +5 / +10 points: the candidate's rates are raised so that the mean gain is 5 or 10
  points (p' = p + (1 − p)·δ / mean(1 − p)). Power = P(promote).
- fixed: 50 stable fixed tasks (true rates 1.0 for 40 %, else uniform in [0.9, 1)),
  candidate = champion; a block is false.

Trials of the two sides are independent draws (no common random numbers), the cautious
case. Fresh true rates are Beta(0.6, 0.4): many tasks near 0 or 1, as real suites are.

    .venv/bin/python bench/bench_policy_sim.py            # 2,000 trains per cell
    .venv/bin/python bench/bench_policy_sim.py --quick    # 200 trains per cell
    .venv/bin/python bench/bench_policy_sim.py --write-docs   # also rewrite docs/policy-soundness.md
"""

from __future__ import annotations

import argparse
import sys
import time
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from evalrig.core.compare import RunView, TaskView, TrialOutcome, build_comparison, history_check
from evalrig.core.gate import decide
from evalrig.core.policy import parse_policy
from evalrig.models.comparison import Integrity, RunRef, SideFacts
from evalrig.models.run import PolicyPin

ROOT = Path(__file__).resolve().parent.parent
K = 5
SIZES = (30, 60, 100)
DIGEST = "sha256:" + "a" * 64
SEALED = datetime(2026, 12, 1, 9, tzinfo=UTC)
CREATED = datetime(2026, 12, 1, 10, tzinfo=UTC)
POLICY = parse_policy(tomllib.loads((ROOT / "policies" / "default.toml").read_text()), "default.toml")
HISTORY = history_check(None, None)


def facts(name: str, suites: dict[str, int], attempts: int) -> SideFacts:
    """A run for which every invariant holds."""
    return SideFacts(
        run_id=name, checkpoint_id="sha256:" + name[0] * 64, status="complete", subset=False, repeat=K,
        taskset_suites=suites, run_suites={s: n for s, n in suites.items() if n}, trials=attempts,
        scored=attempts, unscored=0, attempts=attempts, infra_errors=0, infra_error_rate=0.0,
        sandbox={"bwrap": attempts, "process": 0}, network_attempts=0, seal_checks=2, seal_checks_matched=2,
        registered=True, sealed_at=SEALED, canary_found=0, history="none",
        policy_pin=PolicyPin(name="default", version=1, digest=DIGEST),
        integrity=Integrity(verified_files=5),
    )


def view(name: str, suite: str, passes: np.ndarray, costs: np.ndarray) -> RunView:
    """A run from a (tasks × k) matrix of outcomes and one of costs."""
    tasks = {}
    for i in range(passes.shape[0]):
        tid = f"{suite}-{i:04d}"
        # metered: the simulation studies the efficiency rule's statistics on cost the rig measured
        # (a self-reported cost never grants, docs/gate.md)
        outcomes = tuple(TrialOutcome(passed=bool(p), reward=float(p), cost=float(c), wall_s=1.0, cpu_s=0.5,
                                      cost_source="metered")
                         for p, c in zip(passes[i], costs[i], strict=True))
        tasks[tid] = TaskView(tid, suite, outcomes)  # type: ignore[arg-type]
    n = passes.shape[0]
    suites = {"fixed": 0, "fresh": 0, "invariant": 0, suite: n}
    created = {t: CREATED for t in tasks} if suite == "fresh" else {}
    return RunView(ref=RunRef(run_id=name, checkpoint_id="sha256:" + name[0] * 64, bundle_digest=DIGEST),
                   repeat=K, seed=0, taskset_id=DIGEST, tasks=tasks, facts=facts(name, suites, n * K),
                   fresh_created_at=created, fresh_content={t: DIGEST for t in created})


def verdict(champ: RunView, cand: RunView) -> tuple[str, str]:
    c = build_comparison(champ, cand, HISTORY, False)
    d = decide(c, POLICY, DIGEST, None, False, DIGEST)
    return d.verdict, d.reason


def costs(rng: np.random.Generator, base: np.ndarray, scale: float) -> np.ndarray:
    """Per-attempt cost: the task's base cost × scale × lognormal noise (sd 0.3 in logs)."""
    return base[:, None] * scale * np.exp(rng.normal(0.0, 0.3, size=(base.size, K)))


def fresh_train(rng: np.random.Generator, n: int, gain: float, cost_scale: float = 1.0,
                loss: float = 0.0) -> tuple[str, str]:
    p = rng.beta(0.6, 0.4, size=n)
    if gain:
        q = np.clip(p + (1 - p) * gain / max(1e-9, float(np.mean(1 - p))), 0.0, 1.0)
    elif loss:
        q = np.clip(p - p * loss / max(1e-9, float(np.mean(p))), 0.0, 1.0)
    else:
        q = p
    base = rng.lognormal(np.log(0.02), 0.5, size=n)
    champ = view("champion", "fresh", rng.random((n, K)) < p[:, None], costs(rng, base, 1.0))
    cand = view("candidate", "fresh", rng.random((n, K)) < q[:, None], costs(rng, base, cost_scale))
    return verdict(champ, cand)


def fixed_train(rng: np.random.Generator, n: int = 50) -> tuple[str, str]:
    p = np.where(rng.random(n) < 0.4, 1.0, rng.uniform(0.9, 1.0, size=n))
    base = np.full(n, 0.02)
    champ = view("champion", "fixed", rng.random((n, K)) < p[:, None], costs(rng, base, 1.0))
    cand = view("candidate", "fixed", rng.random((n, K)) < p[:, None], costs(rng, base, 1.0))
    return verdict(champ, cand)


@dataclass
class Cell:
    scenario: str
    tasks: int
    trains: int
    counts: dict[tuple[str, str], int]

    def rate(self, verdict: str | None = None, reason: str | None = None) -> float:
        hits = sum(c for (v, r), c in self.counts.items()
                   if (verdict is None or v == verdict or (verdict == "promote*" and v.startswith("promote")))
                   and (reason is None or r == reason))
        return hits / self.trains


def simulate(trains: int, seed: int) -> list[Cell]:
    cells = []
    scenarios = [("null", dict(gain=0.0)), ("margin", dict(gain=0.0, loss=0.05, cost_scale=0.5)),
                 ("+5", dict(gain=0.05)), ("+10", dict(gain=0.10))]
    for si, (name, kw) in enumerate(scenarios):
        for n in SIZES:
            rng = np.random.default_rng([seed, si, n])
            counts: dict[tuple[str, str], int] = {}
            for _ in range(trains):
                key = fresh_train(rng, n, **kw)  # type: ignore[arg-type]
                counts[key] = counts.get(key, 0) + 1
            cells.append(Cell(name, n, trains, counts))
    rng = np.random.default_rng([seed, 99])
    counts = {}
    for _ in range(trains):
        key = fixed_train(rng)
        counts[key] = counts.get(key, 0) + 1
    cells.append(Cell("fixed", 50, trains, counts))
    return cells


def se(p: float, n: int) -> float:
    return (p * (1 - p) / n) ** 0.5


def table(cells: list[Cell]) -> list[str]:
    lines = ["| scenario | fresh tasks | trains | promote (quality) | promote (efficiency) | keep: tie | "
             "keep: inconclusive | keep: loss | block |", "|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        lines.append(
            f"| {c.scenario} | {c.tasks if c.scenario != 'fixed' else '0 (50 fixed)'} | {c.trains} | "
            f"{100 * c.rate('promote', 'quality'):.1f} % | {100 * c.rate('promote', 'efficiency'):.1f} % | "
            f"{100 * c.rate('keep-champion', 'tie'):.1f} % | {100 * c.rate('keep-champion', 'inconclusive'):.1f} % | "
            f"{100 * c.rate('keep-champion', 'loss'):.1f} % | {100 * c.rate('block'):.1f} % |"
        )
    return lines


def verdict_on(rate: float, goal: float, n: int, at_most: bool = True) -> str:
    """'met', or by how much it misses, and whether that is within two standard errors."""
    miss = rate - goal if at_most else goal - rate
    if miss <= 0:
        return "met"
    band = 2 * se(goal, n)
    where = "within simulation error" if miss <= band else "a real miss"
    return f"MISSED by {100 * miss:.2f} points ({where}: 2 se = {100 * band:.2f})"


def goals(cells: list[Cell]) -> list[str]:
    def cell(s: str, n: int) -> Cell:
        return next(c for c in cells if c.scenario == s and c.tasks == n)

    out = []
    for n in SIZES:
        c = cell("null", n)
        q, e = c.rate("promote", "quality"), c.rate("promote", "efficiency")
        out.append(f"- false promotion, candidate = champion, {n} tasks: quality {100 * q:.2f} %, "
                   f"efficiency {100 * e:.2f} % (goal ≤ 2.5 % per route: {verdict_on(max(q, e), 0.025, c.trains)})")
    for n in SIZES:
        c = cell("margin", n)
        m = c.rate("promote", "efficiency")
        out.append(f"- false efficiency promotion, half the cost but 5 points worse, {n} tasks: {100 * m:.2f} % "
                   f"(nominal 2.5 %: {verdict_on(m, 0.025, c.trains)})")
    for s in ("+5", "+10"):
        for n in SIZES:
            c = cell(s, n)
            pw = c.rate("promote*")
            extra = ""
            if s == "+10" and n == 60:
                extra = f" (goal ≥ 80 %: {verdict_on(pw, 0.8, c.trains, at_most=False)})"
            out.append(f"- power at {s} points, {n} tasks: {100 * pw:.1f} % ± {100 * se(pw, c.trains):.1f}" + extra)
    fixed = next(c for c in cells if c.scenario == "fixed")
    fb = fixed.rate("block")
    out.append(f"- false block, 50 stable fixed tasks: {100 * fb:.2f} % (goal ≤ 2 %: {verdict_on(fb, 0.02, fixed.trains)})")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="200 trains per cell instead of 2,000")
    ap.add_argument("--trains", type=int, default=None)
    ap.add_argument("--seed", type=int, default=20261202)
    ap.add_argument("--write-docs", action="store_true", help="rewrite the figures in docs/policy-soundness.md")
    args = ap.parse_args()
    trains = args.trains or (200 if args.quick else 2000)
    t0 = time.perf_counter()
    cells = simulate(trains, args.seed)
    wall = time.perf_counter() - t0
    body = table(cells) + ["", *goals(cells), "",
                           f"{sum(c.trains for c in cells)} trains, seed {args.seed}, {wall:.0f} s"]
    print("\n".join(body))
    if args.write_docs:
        write_docs(body)
    return 0


def write_docs(body: list[str]) -> None:
    path = ROOT / "docs" / "policy-soundness.md"
    text = path.read_text() if path.exists() else ""
    start, end = "<!-- figures: start -->", "<!-- figures: end -->"
    block = "\n".join([start, *body, end])
    if start in text and end in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end):]
    else:
        text += "\n" + block + "\n"
    path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
