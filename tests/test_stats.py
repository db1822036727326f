"""evalrig.core.stats: reference values, scipy as the oracle, and properties."""

from __future__ import annotations

import itertools
import math
import random
import subprocess
import sys
from collections import Counter
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from evalrig.core import stats
from evalrig.core.stats import (
    Bounds,
    Discordant,
    brier,
    discordant_from_majority,
    discordant_from_pairs,
    efficiency,
    fisher_worse,
    fisher_worse_exact,
    interval_coverage,
    interval_score,
    interval_score_one,
    mcnemar,
    mde,
    paired_summary,
    scale_diffs,
    side_summary,
    sign_flip,
    t_bounds,
    tasks_needed,
)

CHAMPION_20 = [5, 4, 5, 3, 2, 5, 0, 1, 4, 5, 3, 2, 5, 4, 1, 0, 5, 3, 4, 2]
CANDIDATE_20 = [5, 5, 4, 4, 4, 5, 1, 3, 3, 5, 4, 1, 5, 5, 3, 0, 5, 4, 5, 3]


def summary_of(champion: list[int], candidate: list[int], k: int = 5, **kw: float):
    n = len(champion)
    return paired_summary(champion, candidate, [k] * n, [k] * n, **kw)


def brute_sign_flip(values: list[int]) -> tuple[Fraction, Fraction, Fraction]:
    """Enumerate all 2^m sign patterns of the nonzero values (the definition itself)."""
    nonzero = [abs(v) for v in values if v]
    t = sum(values)
    ge = le = extreme = 0
    for signs in itertools.product((1, -1), repeat=len(nonzero)):
        total = sum(s * v for s, v in zip(signs, nonzero, strict=True))
        ge += total >= t
        le += total <= t
        extreme += abs(total) >= abs(t)
    denom = 2 ** len(nonzero)
    return Fraction(ge, denom), Fraction(le, denom), Fraction(extreme, denom)


def polynomial_counts(magnitudes: list[int], h: int) -> list[int]:
    """Coefficients 0..h of Π(1 + x^v), multiplied out one factor at a time."""
    counts = [1] + [0] * h
    for v in magnitudes:
        for s in range(h, v - 1, -1):
            counts[s] += counts[s - v]
    return counts


# ---------------------------------------------------------------------------
# Reference values


def test_reference_mcnemar() -> None:
    assert float(mcnemar(12, 2).two_sided) == pytest.approx(0.012939, abs=1e-6)
    assert mcnemar(12, 2).two_sided == Fraction(2 * (1 + 14 + 91), 2**14)
    assert mcnemar(6, 5).two_sided == 1


def test_reference_twenty_tasks() -> None:
    s = summary_of(CHAMPION_20, CANDIDATE_20)
    assert s.n == 20 and s.unpaired == 0
    assert s.mean_d_exact == Fraction(11, 100)
    assert s.mean_d == pytest.approx(0.11, abs=1e-12)
    assert s.se_d == pytest.approx(0.04224, abs=1e-5)
    assert s.p_one_sided is not None and s.p_two_sided is not None
    assert float(s.p_one_sided) == pytest.approx(0.016357, abs=1e-6)
    assert float(s.p_two_sided) == pytest.approx(0.032715, abs=1e-6)
    assert s.bounds is not None
    assert s.bounds.lower == pytest.approx(0.02159, abs=1e-5)
    assert (s.better, s.worse, s.equal, s.discordant) == (11, 3, 6, 14)


def test_reference_twenty_tasks_matches_brute_force_exactly() -> None:
    s = summary_of(CHAMPION_20, CANDIDATE_20)
    one, worse, two = brute_sign_flip(
        [b - a for a, b in zip(CHAMPION_20, CANDIDATE_20, strict=True)]
    )
    assert (s.p_one_sided, s.p_worse, s.p_two_sided) == (one, worse, two)


def test_reference_pass_hat_k() -> None:
    side = side_summary([5, 3, 0, 4], [5, 5, 5, 5])
    assert side.pass_hat_k["2"] == pytest.approx(0.475, abs=1e-12)
    assert side.pass_hat_k["5"] == pytest.approx(0.25, abs=1e-12)
    assert side.pass_at_k["2"] == pytest.approx(0.725, abs=1e-12)
    assert list(side.pass_hat_k) == ["1", "2", "3", "4", "5"]
    assert list(side.pass_at_k) == ["1", "2", "3", "4", "5"]


def test_reference_fisher() -> None:
    assert fisher_worse(5, 5, 1, 5) == pytest.approx(0.0238, abs=1e-4)
    assert fisher_worse(5, 5, 2, 5) == pytest.approx(0.0833, abs=1e-4)
    assert fisher_worse_exact(5, 5, 1, 5) == Fraction(6, 252)
    assert fisher_worse_exact(5, 5, 2, 5) == Fraction(21, 252)


# ---------------------------------------------------------------------------
# scipy as the oracle


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 60), st.integers(0, 60))
def test_mcnemar_matches_scipy_binomtest(b: int, c: int) -> None:
    result = mcnemar(b, c)
    n = b + c
    if n == 0:
        assert result.two_sided == result.one_sided_better == result.one_sided_worse == 1
        assert result.mid_p == 1
        return
    for ours, alternative in (
        (result.two_sided, "two-sided"),
        (result.one_sided_better, "greater"),
        (result.one_sided_worse, "less"),
    ):
        oracle = sps.binomtest(b, n, 0.5, alternative=alternative).pvalue
        assert float(ours) == pytest.approx(oracle, rel=1e-9, abs=1e-15)
    point = Fraction(math.comb(n, b), 2**n)
    assert result.mid_p == min(1, 2 * min(result.one_sided_better, result.one_sided_worse) - point)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_fisher_matches_scipy(data: st.DataObject) -> None:
    champion_n = data.draw(st.integers(1, 12))
    candidate_n = data.draw(st.integers(1, 12))
    a = data.draw(st.integers(0, champion_n))
    b = data.draw(st.integers(0, candidate_n))
    table = [[b, candidate_n - b], [a, champion_n - a]]
    oracle = sps.fisher_exact(table, alternative="less").pvalue
    assert fisher_worse(a, champion_n, b, candidate_n) == pytest.approx(oracle, rel=1e-9)


def test_fisher_with_an_empty_side_is_no_evidence() -> None:
    assert fisher_worse_exact(0, 0, 0, 5) == 1
    assert fisher_worse_exact(5, 5, 0, 0) == 1


def test_quantiles_match_scipy_stats() -> None:
    for df in (1, 2, 19, 159):
        assert stats.t_quantile(0.975, df) == pytest.approx(sps.t.ppf(0.975, df), rel=1e-12)
    assert stats.z_quantile(0.8) == pytest.approx(sps.norm.ppf(0.8), rel=1e-12)


def test_t_bounds_match_scipy_interval() -> None:
    bounds = t_bounds(0.11, 0.04224, 20, 0.025)
    lo, hi = sps.t.interval(0.95, 19, loc=0.11, scale=0.04224)
    assert bounds is not None
    assert (bounds.lower, bounds.upper) == (pytest.approx(lo), pytest.approx(hi))
    assert t_bounds(0.1, None, 20, 0.025) is None
    assert t_bounds(0.1, 0.01, 1, 0.025) is None
    assert t_bounds(0.1, 0.0, 5, 0.025) == Bounds(lower=0.1, upper=0.1)


# ---------------------------------------------------------------------------
# Sign-flip: against the definition, and its properties

small_values = st.lists(st.integers(-6, 6), min_size=0, max_size=11)


@settings(max_examples=300, deadline=None)
@given(small_values)
def test_sign_flip_matches_enumeration(values: list[int]) -> None:
    result = sign_flip(values)
    assert (result.p_one_sided, result.p_worse, result.p_two_sided) == brute_sign_flip(values)
    assert result.t == sum(values)
    assert result.n_nonzero == sum(1 for v in values if v)


@settings(max_examples=300, deadline=None)
@given(small_values)
def test_sign_flip_p_values_are_consistent(values: list[int]) -> None:
    r = sign_flip(values)
    for p in (r.p_one_sided, r.p_worse, r.p_two_sided):
        assert isinstance(p, Fraction) and 0 < p <= 1
    assert r.p_two_sided == min(1, 2 * min(r.p_one_sided, r.p_worse))
    # the two one-sided tails overlap exactly in the point mass at t
    assert r.p_one_sided + r.p_worse >= 1


@settings(max_examples=200, deadline=None)
@given(small_values, st.integers(1, 6))
def test_a_candidate_win_never_raises_p_one_sided(values: list[int], win: int) -> None:
    assert sign_flip([*values, win]).p_one_sided <= sign_flip(values).p_one_sided


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.integers(1, 9), st.integers(1, 40), max_size=5), st.integers(0, 400))
def test_subset_sum_counts_match_polynomial(multiplicity: dict[int, int], h: int) -> None:
    """Both code paths (recurrence for frequent values, direct product for rare) agree."""
    magnitudes = [v for v, m in multiplicity.items() for _ in range(m)]
    assert stats._subset_sum_counts(Counter(magnitudes), h) == polynomial_counts(magnitudes, h)


def test_recurrence_with_a_shared_factor_and_rare_values() -> None:
    # frequent multiples of 12 (run in y = x^12) plus rare odd values multiplied in
    magnitudes = [12] * 40 + [24] * 60 + [36] * 80 + [5, 7, 7, 3]
    h = sum(magnitudes) // 2
    assert stats._subset_sum_counts(Counter(magnitudes), h) == polynomial_counts(magnitudes, h)
    assert stats._recurrence_counts({1: 30, 2: 20, 5: 11}, 60) == polynomial_counts(
        [1] * 30 + [2] * 20 + [5] * 11, 60
    )


def test_sign_flip_without_nonzero_values() -> None:
    for values in ([], [0, 0, 0]):
        r = sign_flip(values)
        assert (r.p_one_sided, r.p_worse, r.p_two_sided, r.n_nonzero) == (1, 1, 1, 0)


def test_sign_flip_all_positive_is_the_smallest_p() -> None:
    r = sign_flip([1, 2, 3])
    assert r.p_one_sided == Fraction(1, 8)
    assert r.p_worse == 1
    assert r.p_two_sided == Fraction(1, 4)


def test_sign_flip_ten_thousand_tasks_k5() -> None:
    """n = 10,000, k = 5 runs (quickly) and agrees with the normal approximation."""
    rng = random.Random(20261202)
    values = [rng.choice([-5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 1, 2]) for _ in range(10_000)]
    r = sign_flip(values)
    # under sign flips T has mean 0 and variance Σv²; continuity-corrected normal tail
    sd = math.sqrt(sum(v * v for v in values))
    approx = 1 - sps.norm.cdf((r.t - 0.5) / sd)
    assert float(r.p_one_sided) == pytest.approx(approx, abs=2e-3)
    assert r.p_one_sided.denominator <= 2**r.n_nonzero


def test_sign_flip_refuses_non_integers() -> None:
    with pytest.raises(TypeError, match="scale_diffs"):
        sign_flip([Fraction(1, 2), 1])  # type: ignore[list-item]


def test_scale_diffs_uses_the_lcm() -> None:
    scaled = scale_diffs([Fraction(1, 5) - Fraction(1, 4), Fraction(2, 3), Fraction(0)])
    assert scaled.denominator == 60
    assert scaled.values == (-3, 40, 0)
    assert scale_diffs([]).values == () and scale_diffs([]).denominator == 1


# ---------------------------------------------------------------------------
# Paired summary properties

task_counts = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=0, max_size=14)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=2, max_size=30))
def test_a_run_compared_with_itself(passes: list[int]) -> None:
    s = summary_of(passes, passes)
    assert s.mean_d == 0 and s.se_d == 0
    assert s.p_one_sided == s.p_worse == s.p_two_sided == 1
    assert s.discordant == 0 and s.equal == len(passes)


@settings(max_examples=150, deadline=None)
@given(task_counts)
def test_swapping_sides(pairs: list[tuple[int, int]]) -> None:
    champion = [a for a, _ in pairs]
    candidate = [b for _, b in pairs]
    forward, backward = summary_of(champion, candidate), summary_of(candidate, champion)
    if forward.mean_d is None:
        assert backward.mean_d is None
    else:
        assert backward.mean_d == -forward.mean_d
    assert (forward.p_one_sided, forward.p_worse) == (backward.p_worse, backward.p_one_sided)
    assert forward.p_two_sided == backward.p_two_sided
    assert (forward.better, forward.worse) == (backward.worse, backward.better)


@settings(max_examples=150, deadline=None)
@given(task_counts)
def test_every_p_is_a_probability(pairs: list[tuple[int, int]]) -> None:
    s = summary_of([a for a, _ in pairs], [b for _, b in pairs])
    for p in (s.p_one_sided, s.p_worse, s.p_two_sided):
        assert p is None or 0 <= p <= 1
    if s.n < 2:
        assert s.p_one_sided is s.p_worse is s.p_two_sided is s.se_d is s.bounds is None
        assert s.mde is None and s.tasks_needed is None
    else:
        assert s.p_two_sided == min(1, 2 * min(s.p_one_sided, s.p_worse))  # type: ignore[type-var]


@settings(max_examples=100, deadline=None)
@given(task_counts, st.integers(1, 5))
def test_adding_a_task_the_candidate_wins_never_raises_p_one_sided(
    pairs: list[tuple[int, int]], margin: int
) -> None:
    champion = [a for a, _ in pairs] + [1, 0]
    candidate = [b for _, b in pairs] + [1, 0]
    before = summary_of(champion, candidate).p_one_sided
    after = summary_of([*champion, 0], [*candidate, margin]).p_one_sided
    assert before is not None and after is not None and after <= before


def test_unequal_scored_counts_use_exact_fractions() -> None:
    # an incomplete run: the candidate has 4 scored trials on the first task
    s = paired_summary([5, 3, 1], [4, 3, 2], [5, 5, 5], [4, 5, 5])
    assert s.diffs == (Fraction(0), Fraction(0), Fraction(1, 5))
    s = paired_summary([4, 3, 1], [3, 3, 2], [5, 5, 5], [4, 5, 5])
    assert s.diffs == (Fraction(3, 4) - Fraction(4, 5), Fraction(0), Fraction(1, 5))
    one, worse, two = brute_sign_flip([-1, 0, 4])  # over the denominator 20
    assert (s.p_one_sided, s.p_worse, s.p_two_sided) == (one, worse, two)


def test_tasks_unscored_on_a_side_are_unpaired() -> None:
    s = paired_summary([5, 0, 3], [5, 4, 0], [5, 0, 5], [5, 5, 0])
    assert s.n == 1 and s.unpaired == 2
    assert s.mean_d == 0.0 and s.se_d is None and s.p_one_sided is None
    empty = paired_summary([], [], [], [])
    assert empty.n == 0 and empty.mean_d is None and empty.mean_d_exact is None


def test_paired_summary_rejects_impossible_counts() -> None:
    with pytest.raises(ValueError, match="passes=6, scored=5"):
        paired_summary([6], [1], [5], [5])
    with pytest.raises(ValueError, match="differ in length"):
        paired_summary([1, 2], [1], [5], [5])


def test_mde_and_tasks_needed() -> None:
    s = summary_of(CHAMPION_20, CANDIDATE_20, alpha=0.025, margin=0.05)
    z = sps.norm.ppf(0.975) + sps.norm.ppf(0.8)
    assert s.mde == pytest.approx(z * s.se_d, rel=1e-12)  # type: ignore[operator]
    assert s.tasks_needed == math.ceil(20 * (s.mde / 0.05) ** 2)  # type: ignore[operator]
    assert mde(None, 0.025) is None and tasks_needed(20, None, 0.05) is None
    assert tasks_needed(20, 0.05, 0.05) == 20  # the suite already has exactly enough
    assert tasks_needed(20, 0.1, 0.05) == 80
    with pytest.raises(ValueError):
        tasks_needed(20, 0.1, 0.0)


# ---------------------------------------------------------------------------
# McNemar inputs


def test_discordant_from_majority() -> None:
    # a side passes a task when more than half its trials pass: 3/5 yes, 2/4 no
    got = discordant_from_majority(
        [3, 2, 5, 0, 1], [1, 3, 5, 3, 2], [5, 4, 5, 5, 0], [5, 5, 5, 5, 5]
    )
    assert got == Discordant(b=2, c=1)


def test_discordant_from_pairs() -> None:
    pairs = [(True, False), (False, True), (False, True), (True, True), (False, False)]
    assert discordant_from_pairs(pairs) == Discordant(b=2, c=1)


# ---------------------------------------------------------------------------
# Per side


def test_side_summary_pass_rate_and_clustered_se() -> None:
    side = side_summary([5, 3, 0, 4], [5, 5, 5, 5], [[1.0] * 5, [0.5, 0.5], [], [0.0, 1.0]])
    rates = [1.0, 0.6, 0.0, 0.8]
    assert side.tasks == 4
    assert side.pass_rate == pytest.approx(sum(rates) / 4)
    assert side.pass_rate_se == pytest.approx(sps.sem(rates), rel=1e-12)
    assert side.mean_reward == pytest.approx((1.0 + 0.5 + 0.5) / 3)  # the empty task is left out


def test_side_summary_leaves_short_tasks_out_of_large_j() -> None:
    # the second task has only two scored trials: it counts for j <= 2 only
    side = side_summary([3, 1], [3, 2])
    assert side.pass_hat_k == {
        "1": pytest.approx((1 + 0.5) / 2),
        "2": pytest.approx(1 / 2),
        "3": 1.0,
    }
    assert side.pass_at_k == {"1": pytest.approx(0.75), "2": 1.0, "3": 1.0}


def test_side_summary_of_nothing() -> None:
    side = side_summary([0], [0])
    assert side.tasks == 0 and side.pass_rate is None and side.pass_rate_se is None
    assert side.pass_hat_k == {} and side.pass_at_k == {} and side.mean_reward is None


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 5)), min_size=1, max_size=10))
def test_pass_hat_and_pass_at_are_ordered(tasks: list[tuple[int, int]]) -> None:
    tasks = [(min(c, n), n) for c, n in tasks]
    side = side_summary([c for c, _ in tasks], [n for _, n in tasks])
    assert side.pass_hat_k["1"] == pytest.approx(side.pass_at_k["1"])
    for key, hat in side.pass_hat_k.items():
        at = side.pass_at_k[key]
        assert hat is not None and at is not None and 0 <= hat <= at <= 1


# ---------------------------------------------------------------------------
# Efficiency


def test_efficiency_geometric_mean_and_upper_bound() -> None:
    champion = [1.0, 2.0, 4.0, 0.5]
    candidate = [0.8, 1.8, 3.0, 0.5]
    logs = [math.log(b / a) for a, b in zip(champion, candidate, strict=True)]
    result = efficiency(champion, candidate, 0.025)
    assert result.n == 4
    assert result.ratio == pytest.approx(math.exp(sum(logs) / 4), rel=1e-12)
    upper = sum(logs) / 4 + sps.t.ppf(0.975, 3) * sps.sem(logs)
    assert result.upper == pytest.approx(math.exp(upper), rel=1e-12)


@pytest.mark.parametrize(
    ("champion", "candidate"),
    [
        ([1.0], [0.5]),  # n < 2
        ([1.0, 0.0], [1.0, 1.0]),  # a zero
        ([1.0, 2.0], [1.0, None]),  # a missing figure
        ([1.0, math.inf], [1.0, 1.0]),
        ([1.0, math.nan], [1.0, 1.0]),
        ([1.0, -1.0], [1.0, 1.0]),
    ],
)
def test_efficiency_undefined(champion: list[float | None], candidate: list[float | None]) -> None:
    result = efficiency(champion, candidate, 0.025)
    assert result.ratio is None and result.upper is None


# ---------------------------------------------------------------------------
# Calibration


def test_brier() -> None:
    assert brier([0.7, 0.2], [True, False]) == pytest.approx((0.09 + 0.04) / 2)
    assert brier([], []) is None
    with pytest.raises(ValueError):
        brier([0.5], [])


def test_interval_coverage_and_score() -> None:
    lo, hi, actual = [5.0, 5.0, 5.0], [40.0, 40.0, 40.0], [10.0, 2.0, 50.0]
    assert interval_coverage(lo, hi, actual) == pytest.approx(1 / 3)
    # α = 0.2: a miss costs 2/0.2 = 10 per unit
    assert interval_score_one(5, 40, 10, 0.8) == pytest.approx(35)
    assert interval_score_one(5, 40, 2, 0.8) == pytest.approx(35 + 30)
    assert interval_score_one(5, 40, 50, 0.8) == pytest.approx(35 + 100)
    assert interval_score(lo, hi, actual, 0.8) == pytest.approx((35 + 65 + 135) / 3)
    assert interval_score(lo, hi, actual, [0.8, 0.8, 0.5]) == pytest.approx((35 + 65 + 75) / 3)
    assert interval_coverage([], [], []) is None and interval_score([], [], [], 0.8) is None
    with pytest.raises(ValueError):
        interval_score_one(1, 2, 3, 1.0)


# ---------------------------------------------------------------------------
# Import cost


def test_importing_stats_does_not_import_scipy() -> None:
    code = "import sys, evalrig.core.stats; print('scipy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_floored_mde_is_never_below_what_quality_could_grant() -> None:
    z = sps.norm.ppf(0.975) + sps.norm.ppf(0.8)
    # deterministic sides: se_d = 0 floors at 1/(k n), and 6 discordant tasks of 30 x 5 trials
    assert stats.floored_mde(0.0, 30, 5, 0.025, 6) == pytest.approx(6 / 150)
    assert stats.floored_mde(0.0, 30, 5, 0.025, 0) == pytest.approx(z / 150)
    assert stats.floored_mde(0.1, 30, 5, 0.025, 6) == pytest.approx(z * 0.1)  # a real spread wins
    assert stats.floored_mde(None, 30, 5, 0.025, 6) is None


def test_tasks_for_margin_examples() -> None:
    assert stats.tasks_for_margin(0.0, 30, 5, 0.025, 0.05, 20, 6) == 24  # 6 / (5 * 0.05)
    assert stats.tasks_for_margin(0.0, 30, 5, 0.025, 0.5, 20, 6) == 20  # never fewer than min_tasks
    assert stats.tasks_for_margin(0.0, 30, 5, 0.025, 0.5, 0, 0) == 2  # never 0 (z / (k m) = 1.12)
    assert stats.tasks_for_margin(None, 30, 5, 0.025, 0.05, 20, 6) is None
    with pytest.raises(ValueError):
        stats.tasks_for_margin(0.1, 30, 5, 0.025, 0.0, 20, 6)


@settings(max_examples=300, deadline=None)
@given(se=st.floats(0.0, 0.5), n=st.integers(1, 400), k=st.integers(1, 10),
       margin=st.floats(0.01, 0.5), min_tasks=st.integers(0, 100), min_discordant=st.integers(0, 20))
def test_tasks_for_margin_is_the_smallest_size_whose_floored_mde_reaches_the_margin(
        se: float, n: int, k: int, margin: float, min_tasks: int, min_discordant: int) -> None:
    need = stats.tasks_for_margin(se, n, k, 0.025, margin, min_tasks, min_discordant)
    assert need is not None and need >= max(min_tasks, 1)

    def at(size: int) -> float:
        got = stats.floored_mde(se * math.sqrt(n / size), size, k, 0.025, min_discordant)
        assert got is not None
        return got

    assert at(need) <= margin * (1 + 1e-9)
    if need > max(min_tasks, 1):
        assert at(need - 1) > margin * (1 - 1e-9)
