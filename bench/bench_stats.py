"""Benchmark of the exact paired statistics: 10,000 tasks × k = 5.

Run: .venv/bin/python bench/bench_stats.py [--tasks N] [--repeat R]

Times `sign_flip` alone and `paired_summary` (which includes it), and, as a baseline
measured in the same run on the same machine, numpy's mean and standard deviation of the
same per-task differences — the float work any paired test does at the least. Prints the
best of R runs of each and the ratios to the baseline. Also times an incomplete run
(1 % of tasks with 4 or 3 scored trials), where the common denominator becomes 60.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

import numpy as np

from evalrig.core.stats import paired_summary, scale_diffs, sign_flip


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def complete_run(n: int, k: int, effect: float, rng: random.Random) -> tuple[list[int], list[int]]:
    """Per-task pass counts with a realistic spread of difficulty and a given effect."""
    champion, candidate = [], []
    for _ in range(n):
        p = rng.betavariate(0.7, 0.7)  # tasks from near-always-fail to near-always-pass
        q = min(1.0, max(0.0, p + rng.gauss(effect, 0.08)))
        champion.append(sum(rng.random() < p for _ in range(k)))
        candidate.append(sum(rng.random() < q for _ in range(k)))
    return champion, candidate


def bench_complete(
    champion: list[int], candidate: list[int], k: int, repeat: int, effect: float
) -> None:
    n = len(champion)
    trials = [k] * n
    values = [b - a for a, b in zip(champion, candidate, strict=True)]
    diffs = np.array(values, dtype=float) / k

    baseline = best_of(repeat, lambda: (diffs.mean(), diffs.std(ddof=1)))
    flip = best_of(repeat, lambda: sign_flip(values))
    summary = best_of(repeat, lambda: paired_summary(champion, candidate, trials, trials))
    result = paired_summary(champion, candidate, trials, trials)
    nonzero = sign_flip(values).n_nonzero
    print(f"tasks={n} k={k} effect={effect} nonzero={nonzero} (best of {repeat})")
    print(f"  numpy mean+std baseline : {baseline * 1e3:9.3f} ms")
    print(f"  sign_flip               : {flip * 1e3:9.3f} ms  ({flip / baseline:,.0f}x baseline)")
    print(
        f"  paired_summary          : {summary * 1e3:9.3f} ms  ({summary / baseline:,.0f}x baseline)"
    )
    p = float(result.p_one_sided or 1)
    print(f"  mean_d={result.mean_d:.5f} se_d={result.se_d:.5f} p_one_sided={p:.6g}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    n, k = args.tasks, args.k
    rng = random.Random(20261202)

    for effect in (0.0, 0.02):
        # no effect is the slow case: the observed sum sits mid-distribution, so about
        # half of the subset-sum coefficients are needed; a real effect needs fewer.
        champion, candidate = complete_run(n, k, effect, rng)
        bench_complete(champion, candidate, k, args.repeat, effect)

    # incomplete (the last run above): 1 % of tasks lost a trial or two on one side
    short_a = [k - 1 if rng.random() < 0.01 else k for _ in range(n)]
    short_b = [k - 2 if rng.random() < 0.01 else k for _ in range(n)]
    champ_i = [min(c, t) for c, t in zip(champion, short_a, strict=True)]
    cand_i = [min(c, t) for c, t in zip(candidate, short_b, strict=True)]
    incomplete = best_of(1, lambda: paired_summary(champ_i, cand_i, short_a, short_b))
    denominator = scale_diffs(paired_summary(champ_i, cand_i, short_a, short_b).diffs).denominator
    print(f"  incomplete (1 % short, denominator {denominator}): {incomplete * 1e3:9.1f} ms")


if __name__ == "__main__":
    main()
