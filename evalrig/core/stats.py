"""The pure statistics of docs/statistics.md: paired task-level comparison of two runs.

Everything here is a function of values: no files, no clock, no randomness, and no
import from the shell. The task is the unit: callers pass per-task counts, never pooled
trials. Exact p-values are `fractions.Fraction` (the gate compares them as rationals);
floats are for display and for the t / normal quantiles.

scipy is imported lazily, inside the few functions that need a quantile, so that
`evalrig --help` does not pay for it. We call `scipy.special.stdtrit` / `ndtri`, the
functions behind `scipy.stats.t.ppf` / `norm.ppf`, because `scipy.special` imports in a
third of the time of `scipy.stats`; the tests check them against `scipy.stats`.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from operator import add, mul

__all__ = [
    "Bounds",
    "Discordant",
    "Efficiency",
    "McNemar",
    "PairedSummary",
    "ScaledDiffs",
    "SideSummary",
    "SignFlip",
    "brier",
    "discordant_from_majority",
    "discordant_from_pairs",
    "efficiency",
    "fisher_worse",
    "fisher_worse_exact",
    "interval_coverage",
    "interval_score",
    "interval_score_one",
    "majority_pass",
    "mcnemar",
    "floored_mde",
    "mde",
    "paired_summary",
    "scale_diffs",
    "side_summary",
    "sign_flip",
    "t_bounds",
    "t_quantile",
    "tasks_for_margin",
    "tasks_needed",
    "z_quantile",
]

ONE = Fraction(1)

# Every result below is a frozen, keyword-only dataclass: named fields, never a bare tuple.


# ---------------------------------------------------------------------------
# Quantiles (the only place scipy is needed)


def t_quantile(level: float, df: int) -> float:
    """The `level` quantile of Student's t with `df` degrees of freedom (scipy)."""
    from scipy.special import stdtrit  # lazy: keeps CLI start-up free of scipy

    return float(stdtrit(df, level))


def z_quantile(level: float) -> float:
    """The `level` quantile of the standard normal distribution (scipy)."""
    from scipy.special import ndtri  # lazy, as above

    return float(ndtri(level))


def _check_alpha(alpha: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")


# ---------------------------------------------------------------------------
# Exact sign-flip permutation test


@dataclass(frozen=True, kw_only=True, slots=True)
class ScaledDiffs:
    """Per-task differences as integers over one common denominator: d_i = values[i] / denominator."""

    values: tuple[int, ...]
    denominator: int


def scale_diffs(diffs: Sequence[Fraction]) -> ScaledDiffs:
    """Write rational diffs over their least common denominator.

    For a complete run with k trials per task the denominator divides k; on an
    incomplete run (unequal scored counts) it is the LCM of every d_i's denominator.
    The sign-flip test is invariant under this positive scaling.
    """
    fracs = [Fraction(d) for d in diffs]
    denominator = math.lcm(*(f.denominator for f in fracs)) if fracs else 1
    values = tuple(int(f * denominator) for f in fracs)
    return ScaledDiffs(values=values, denominator=denominator)


@dataclass(frozen=True, kw_only=True, slots=True)
class SignFlip:
    """Exact sign-flip test of an observed sum t of per-task values.

    T is the sum when each nonzero value keeps or flips its sign with probability ½
    independently (2^n_nonzero equally likely patterns).
    """

    t: int
    n_nonzero: int
    p_one_sided: Fraction  # P(T >= t): evidence that the sum is positive
    p_worse: Fraction  # P(T <= t): evidence that the sum is negative
    p_two_sided: Fraction  # P(|T| >= |t|)


def sign_flip(diffs_scaled: Sequence[int]) -> SignFlip:
    """Exact sign-flip permutation p-values over integer per-task values.

    Definition: t = Σ v_i; under the null each nonzero v_i is +|v_i| or −|v_i| with
    probability ½, independently; T is the resulting sum. Returns
    p_one_sided = P(T ≥ t), p_worse = P(T ≤ t), p_two_sided = P(|T| ≥ |t|), as exact
    fractions over 2^m (m = the number of nonzero values). Zeros contribute nothing;
    with no nonzero value all three are 1.

    How: T = 2S − W where W = Σ|v_i| and S is the sum of the |v_i| that kept a plus
    sign, so every p is a tail of the subset-sum counts of the |v_i|, i.e. of the
    coefficients of Π (1 + x^|v_i|). That distribution is symmetric (S ↔ W − S), so
    only the coefficients up to h = min(s, W − s) are needed, s being the observed S.
    """
    values = list(diffs_scaled)
    if not all(isinstance(v, int) for v in values):
        # int() would truncate a Fraction silently and corrupt the test
        raise TypeError("sign_flip takes integers; put rational diffs through scale_diffs first")
    t = sum(values)
    magnitudes = [abs(v) for v in values if v]
    m = len(magnitudes)
    if m == 0:
        return SignFlip(t=t, n_nonzero=0, p_one_sided=ONE, p_worse=ONE, p_two_sided=ONE)

    # Dividing every magnitude by their gcd rescales S and W alike: same tails, less work.
    g = math.gcd(*magnitudes)
    magnitudes = [a // g for a in magnitudes]
    total = sum(magnitudes)
    observed = sum(a // g for a in values if a > 0)  # the observed S
    h = min(observed, total - observed)

    counts = _subset_sum_counts(Counter(magnitudes), h)
    below_h = sum(counts)  # #patterns with S <= h
    denom = 1 << m
    lower = Fraction(below_h, denom)  # P(S <= h) = P(S >= W - h) by symmetry
    if 2 * h == total:
        # t = 0: both one-sided tails are P(S >= W/2) = P(S <= W/2), and every pattern
        # is at least as extreme as the observed one.
        return SignFlip(t=t, n_nonzero=m, p_one_sided=lower, p_worse=lower, p_two_sided=ONE)
    # h < W/2, so the two tails {S <= h} and {S >= W - h} are disjoint.
    two_sided = 2 * lower
    # The tail away from the centre is P(S <= h) (or its mirror); the one through the
    # centre is its complement plus the point mass at the observed S.
    other = ONE - lower + Fraction(counts[h], denom)
    if observed > h:  # observed S above the centre: t > 0
        p_one, p_worse = lower, other
    else:
        p_one, p_worse = other, lower
    return SignFlip(t=t, n_nonzero=m, p_one_sided=p_one, p_worse=p_worse, p_two_sided=two_sided)


def _subset_sum_counts(multiplicity: Counter[int], h: int) -> list[int]:
    """Coefficients 0..h of P(x) = Π_v (1 + x^v)^{m_v}, exactly.

    Values that occur often go through a linear recurrence (cost per coefficient ~ the
    sum of those distinct values, independent of how many tasks share them); rare values
    are multiplied in one at a time (cost per coefficient ~ their count). For k = 5 on a
    complete run there are at most five distinct values, so 10,000 tasks cost about as
    much as the recurrence over ~h coefficients with windows of ≤ 15.
    """
    # Cost model: a value v in the recurrence adds ~2v multiply-adds per coefficient;
    # multiplying it in directly costs m_v additions per coefficient.
    frequent = {v: m for v, m in multiplicity.items() if m > 2 * v}
    rare = [(v, m) for v, m in multiplicity.items() if v not in frequent]
    counts = [1] + [0] * h
    if frequent:
        # The frequent values often share a factor the rare ones lack (an incomplete run
        # with k = 5: most values are multiples of 12 over the denominator 60). Run the
        # recurrence in y = x^g and spread the result back out.
        g = math.gcd(*frequent)
        compressed = _recurrence_counts({v // g: m for v, m in frequent.items()}, h // g)
        counts = [0] * (h + 1)
        counts[::g] = compressed
    for v, m in rare:
        if v > h:
            continue  # x^v and above lie beyond the coefficients we keep
        for _ in range(m):
            # multiply by (1 + x^v), truncated at degree h
            counts = counts[:v] + list(map(add, counts[v:], counts))
    return counts


def _poly_mul_binomial(poly: list[int], v: int) -> list[int]:
    """poly · (1 + x^v), untruncated."""
    out = poly + [0] * v
    for i, c in enumerate(poly):
        out[i + v] += c
    return out


def _recurrence_counts(multiplicity: dict[int, int], h: int) -> list[int]:
    """Coefficients 0..h of P(x) = Π_v (1 + x^v)^{m_v} from its differential equation.

    With Q(x) = Π_v (1 + x^v) (over distinct v) and
    R(x) = Σ_v m_v·v·x^v · Π_{u≠v} (1 + x^u), the log-derivative of P gives
    Q(x)·x·P'(x) = R(x)·P(x). Equating coefficients of x^n (q_0 = 1, r_0 = 0):

        n·p_n = Σ_{i=1..D} (r_i + i·q_i)·p_{n−i} − n·Σ_{i=1..D} q_i·p_{n−i}

    with D = deg Q; the division by n is exact. Each coefficient costs two dot products
    of length D over the previous D coefficients.
    """
    distinct = sorted(multiplicity)
    q = [1]
    for v in distinct:
        q = _poly_mul_binomial(q, v)
    degree = len(q) - 1
    r = [0] * (degree + 1)
    for v in distinct:
        others = [1]
        for u in distinct:
            if u != v:
                others = _poly_mul_binomial(others, u)
        weight = multiplicity[v] * v
        for i, c in enumerate(others):
            r[i + v] += weight * c
    a = [r[i] + i * q[i] for i in range(1, degree + 1)]
    b = [q[i] for i in range(1, degree + 1)]
    top = min(h, sum(v * m for v, m in multiplicity.items()))  # beyond: all zero
    p = [0] * degree + [1]  # `degree` leading zeros stand for p_{-1}, p_{-2}, ...
    for n in range(1, top + 1):
        window = p[-1 : -degree - 1 : -1]  # p_{n-1}, p_{n-2}, ..., p_{n-D}
        numerator = sum(map(mul, a, window)) - n * sum(map(mul, b, window))
        p.append(numerator // n)
    return p[degree:] + [0] * (h - top)


# ---------------------------------------------------------------------------
# Paired summary over the tasks of a suite


@dataclass(frozen=True, kw_only=True, slots=True)
class Bounds:
    """One-sided bounds at level 1 − α each: mean ∓ t_{1−α, n−1} · se."""

    lower: float
    upper: float


def t_bounds(mean: float | None, se: float | None, n: int, alpha: float) -> Bounds | None:
    """Lower and upper one-sided (1 − alpha) t bounds of a mean: mean ∓ t_{1−α, n−1}·se.

    None when mean or se is None or n < 2 (no degrees of freedom).
    """
    _check_alpha(alpha)
    if mean is None or se is None or n < 2:
        return None
    half = t_quantile(1.0 - alpha, n - 1) * se
    return Bounds(lower=mean - half, upper=mean + half)


def mde(se: float | None, alpha: float, power: float = 0.8) -> float | None:
    """Minimum detectable effect of a one-sided level-α test: (z_{1−α} + z_power)·se."""
    _check_alpha(alpha)
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must be in (0, 1), got {power!r}")
    if se is None:
        return None
    return (z_quantile(1.0 - alpha) + z_quantile(power)) * se


def tasks_needed(n: int, mde_value: float | None, margin: float) -> int | None:
    """Tasks needed for the minimum detectable effect to reach `margin`: ceil(n·(MDE/m)²).

    The MDE scales as 1/√n at a fixed spread of d_i, so this is the suite size at which
    it would equal the margin. A relative slack of 1e-9 keeps float noise (60.0000000001)
    from adding a task. None when the MDE is None.
    """
    if margin <= 0:
        raise ValueError(f"margin must be positive, got {margin!r}")
    if mde_value is None:
        return None
    need = n * (mde_value / margin) ** 2
    return math.ceil(need * (1 - 1e-9))


def floored_mde(se_d: float | None, n: int, k: int, alpha: float, min_discordant: int,
                power: float = 0.8) -> float | None:
    """The smallest fresh-suite win the gate could show with n tasks of k trials
    (docs/statistics.md, "What the suite could detect").

    `mde` with `se_d` floored at 1/(k·n), as `fresh.noninferior` floors it (identical
    deterministic sides have se_d = 0, which is no evidence of precision), and never below
    min_discordant/(k·n), the smallest mean difference `fresh.quality` could ever grant.
    """
    if se_d is None or n < 1 or k < 1:
        return None
    raw = mde(max(se_d, 1.0 / (k * n)), alpha, power)
    assert raw is not None
    return max(raw, min_discordant / (k * n))


def tasks_for_margin(se_d: float | None, n: int, k: int, alpha: float, margin: float,
                     min_tasks: int, min_discordant: int, power: float = 0.8) -> int | None:
    """The smallest n' >= max(min_tasks, 1) at which `floored_mde`, with se_d scaled by
    √(n/n'), reaches `margin`.

    Each term of the floored MDE falls as n' grows, so n' is the largest of the sizes at
    which each term alone reaches the margin: n·(z·se_d/m)² for the spread, z/(k·m) for
    the floor of se_d, min_discordant/(k·m) for the quality rule. A relative slack of 1e-9
    keeps float noise (60.0000000001) from adding a task. None when se_d is None.
    """
    if margin <= 0:
        raise ValueError(f"margin must be positive, got {margin!r}")
    if se_d is None or n < 1 or k < 1:
        return None
    _check_alpha(alpha)
    z = z_quantile(1.0 - alpha) + z_quantile(power)
    sizes = (n * (z * se_d / margin) ** 2, z / (k * margin), min_discordant / (k * margin))
    return max(math.ceil(max(sizes) * (1 - 1e-9)), min_tasks, 1)


@dataclass(frozen=True, kw_only=True, slots=True)
class PairedSummary:
    """The paired statistics of one suite (docs/statistics.md); None where undefined."""

    n: int  # tasks paired (scored on both sides)
    unpaired: int  # tasks left out: a side had no scored trial
    diffs: tuple[Fraction, ...]  # d_i = b_i/n_b,i − a_i/n_a,i, in input order (paired only)
    mean_d_exact: Fraction | None
    mean_d: float | None  # None with n = 0
    se_d: float | None  # sample sd (n − 1) / √n; None with n < 2
    better: int  # tasks with d_i > 0
    worse: int  # d_i < 0
    equal: int  # d_i = 0
    discordant: int  # better + worse
    p_one_sided: Fraction | None  # sign-flip P(T ≥ t): "candidate better"; None with n < 2
    p_worse: Fraction | None  # sign-flip P(T ≤ t): "candidate worse"
    p_two_sided: Fraction | None  # sign-flip P(|T| ≥ |t|)
    alpha: float
    bounds: Bounds | None  # one-sided (1 − alpha) t bounds of mean_d
    mde: float | None  # (z_{1−α} + z_0.8)·se_d
    margin: float
    tasks_needed: int | None  # ceil(n·(mde/margin)²)


def paired_summary(
    champion_passes: Sequence[int],
    candidate_passes: Sequence[int],
    champion_n: Sequence[int],
    candidate_n: Sequence[int],
    *,
    alpha: float = 0.025,
    margin: float = 0.05,
) -> PairedSummary:
    """Paired task-level statistics of a suite (docs/statistics.md).

    Inputs are per task, aligned: passes and scored-trial counts of each side. A task
    with no scored trial on a side has no d_i; it is counted in `unpaired` and left out.
    d_i = candidate_passes/candidate_n − champion_passes/champion_n; mean_d their mean;
    se_d = sd(d, n−1)/√n; the sign-flip p's are over d_i scaled to integers by their
    common denominator. With n < 2 every statistic beyond mean_d is None.
    `alpha` sets the t bounds and the MDE (one-sided level 1 − alpha, 80 % power);
    `margin` is the effect `tasks_needed` is computed for.
    """
    _check_alpha(alpha)
    columns = (champion_passes, candidate_passes, champion_n, candidate_n)
    if len({len(c) for c in columns}) != 1:
        raise ValueError("paired_summary: the four per-task sequences differ in length")
    diffs: list[Fraction] = []
    unpaired = 0
    for a, b, na, nb in zip(*columns, strict=True):
        _check_count(a, na)
        _check_count(b, nb)
        if na == 0 or nb == 0:
            unpaired += 1
            continue
        diffs.append(Fraction(b, nb) - Fraction(a, na))

    n = len(diffs)
    better = sum(1 for d in diffs if d > 0)
    worse = sum(1 for d in diffs if d < 0)
    scaled = scale_diffs(diffs)
    mean_exact = Fraction(sum(scaled.values), n * scaled.denominator) if n else None
    se = _standard_error(scaled) if n >= 2 else None
    flip = sign_flip(scaled.values) if n >= 2 else None
    mean_float = float(mean_exact) if mean_exact is not None else None
    effect = mde(se, alpha)
    return PairedSummary(
        n=n,
        unpaired=unpaired,
        diffs=tuple(diffs),
        mean_d_exact=mean_exact,
        mean_d=mean_float,
        se_d=se,
        better=better,
        worse=worse,
        equal=n - better - worse,
        discordant=better + worse,
        p_one_sided=flip.p_one_sided if flip else None,
        p_worse=flip.p_worse if flip else None,
        p_two_sided=flip.p_two_sided if flip else None,
        alpha=alpha,
        bounds=t_bounds(mean_float, se, n, alpha),
        mde=effect,
        margin=margin,
        tasks_needed=tasks_needed(n, effect, margin),
    )


def _check_count(passes: int, scored: int) -> None:
    if scored < 0 or not 0 <= passes <= scored:
        raise ValueError(f"need 0 <= passes <= scored, got passes={passes}, scored={scored}")


def _standard_error(scaled: ScaledDiffs) -> float:
    """sd(d, n−1)/√n, with the variance computed exactly over the integers."""
    n = len(scaled.values)
    s1 = sum(scaled.values)
    s2 = sum(v * v for v in scaled.values)
    # var = (n·Σv² − (Σv)²) / (n(n−1)·D²); se² = var / n
    se_squared = Fraction(n * s2 - s1 * s1, n * n * (n - 1) * scaled.denominator**2)
    return math.sqrt(se_squared)


# ---------------------------------------------------------------------------
# McNemar on per-task outcomes


@dataclass(frozen=True, kw_only=True, slots=True)
class Discordant:
    """Discordant pairs: b = the candidate passed and the champion failed; c = the reverse."""

    b: int
    c: int


def majority_pass(passes: int, scored: int) -> bool:
    """A task passes for a side when more than half its scored trials pass."""
    return 2 * passes > scored


def discordant_from_majority(
    champion_passes: Sequence[int],
    candidate_passes: Sequence[int],
    champion_n: Sequence[int],
    candidate_n: Sequence[int],
) -> Discordant:
    """Discordant tasks by per-task majority outcome (the McNemar input, docs/statistics.md).

    Tasks with no scored trial on a side are left out, as in `paired_summary`.
    """
    b = c = 0
    for a, bp, na, nb in zip(
        champion_passes, candidate_passes, champion_n, candidate_n, strict=True
    ):
        if na == 0 or nb == 0:
            continue
        champ, cand = majority_pass(a, na), majority_pass(bp, nb)
        b += cand and not champ
        c += champ and not cand
    return Discordant(b=b, c=c)


def discordant_from_pairs(pairs: Iterable[tuple[bool, bool]]) -> Discordant:
    """Discordant pairs from rep-aligned trials: each pair is (champion passed, candidate passed)."""
    b = c = 0
    for champ, cand in pairs:
        b += cand and not champ
        c += champ and not cand
    return Discordant(b=b, c=c)


@dataclass(frozen=True, kw_only=True, slots=True)
class McNemar:
    """Exact McNemar test: under the null, b ~ Binomial(b + c, ½)."""

    two_sided: Fraction  # min(1, 2·min(P(X ≥ b), P(X ≤ b)))
    one_sided_better: Fraction  # P(X ≥ b): the candidate wins more
    one_sided_worse: Fraction  # P(X ≤ b): the candidate loses more
    mid_p: Fraction  # two-sided mid-p: min(1, 2·min tail − P(X = b))


def mcnemar(b: int, c: int) -> McNemar:
    """Exact (binomial) McNemar on discordant counts.

    b = candidate-only wins, c = champion-only wins, X ~ Binomial(b + c, ½):
    one_sided_better = P(X ≥ b), one_sided_worse = P(X ≤ b),
    two_sided = min(1, 2·min of the two), mid_p = min(1, 2·min of the two − P(X = b)).
    With no discordant pair every p is 1.
    """
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got b={b}, c={c}")
    n = b + c
    denom = 1 << n
    pmf = [math.comb(n, x) for x in range(n + 1)]
    upper = Fraction(sum(pmf[b:]), denom)
    lower = Fraction(sum(pmf[: b + 1]), denom)
    point = Fraction(pmf[b], denom)
    tail = min(upper, lower)
    return McNemar(
        two_sided=min(ONE, 2 * tail),
        one_sided_better=upper,
        one_sided_worse=lower,
        mid_p=min(ONE, 2 * tail - point),
    )


# ---------------------------------------------------------------------------
# Fisher's exact test per task


def fisher_worse_exact(
    champion_pass: int, champion_n: int, candidate_pass: int, candidate_n: int
) -> Fraction:
    """Fisher's exact one-sided p of "the candidate is worse", as a fraction.

    Conditioning on the total passes K = a + b of the 2×2 table, the candidate's passes
    X are hypergeometric (N = n_a + n_b trials, K passes, n_b drawn):
    p = P(X ≤ b) = Σ_{x ≤ b} C(K, x)·C(N − K, n_b − x) / C(N, n_b).
    """
    _check_count(champion_pass, champion_n)
    _check_count(candidate_pass, candidate_n)
    total = champion_n + candidate_n
    passes = champion_pass + candidate_pass
    fails = total - passes
    ways = sum(
        math.comb(passes, x) * math.comb(fails, candidate_n - x) for x in range(candidate_pass + 1)
    )
    return Fraction(ways, math.comb(total, candidate_n))


def fisher_worse(
    champion_pass: int, champion_n: int, candidate_pass: int, candidate_n: int
) -> float:
    """`fisher_worse_exact` as a float, for display."""
    return float(fisher_worse_exact(champion_pass, champion_n, candidate_pass, candidate_n))


# ---------------------------------------------------------------------------
# Per side


@dataclass(frozen=True, kw_only=True, slots=True)
class SideSummary:
    """One side's task-level summary; None where no task qualifies."""

    tasks: int  # tasks with at least one scored trial
    pass_rate: float | None  # mean over tasks of passes / scored
    pass_rate_se: float | None  # sd of per-task rates (n − 1) / √n; None with < 2 tasks
    mean_reward: float | None  # mean over tasks of the task's mean reward
    pass_hat_k: dict[str, float | None]  # pass^j, keys "1".."k"
    pass_at_k: dict[str, float | None]  # pass@j, keys "1".."k"


def side_summary(
    passes: Sequence[int],
    n_scored: Sequence[int],
    rewards: Sequence[Sequence[float]] | None = None,
) -> SideSummary:
    """Pass rate, its task-clustered SE, mean reward, pass^j and pass@j of one side.

    Per task i with n_i scored trials and c_i passes (tasks with n_i = 0 are left out):
    pass_rate = mean(c_i/n_i); pass_rate_se = sd(c_i/n_i, n−1)/√n;
    pass^j = mean over tasks with n_i ≥ j of C(c_i, j)/C(n_i, j);
    pass@j = mean over the same tasks of 1 − C(n_i − c_i, j)/C(n_i, j) (Chen et al.);
    for j = 1..k with k = max n_i; a j with no eligible task is None.
    `rewards[i]` is the rewards of task i's scored trials that have one; mean_reward is
    the mean over tasks with any of the task's mean (the task is the unit), else None.
    """
    if len(passes) != len(n_scored) or (rewards is not None and len(rewards) != len(passes)):
        raise ValueError("side_summary: the per-task sequences differ in length")
    scored = [(c, n) for c, n in zip(passes, n_scored, strict=True) if _checked_scored(c, n)]
    # Tasks share few distinct (passes, scored) pairs (at most (k+1)·k): sum exact
    # fractions once per pair, weighted by its count, instead of once per task.
    pairs = Counter(scored)
    rates: Counter[Fraction] = Counter()
    for (c, n), m in pairs.items():
        rates[Fraction(c, n)] += m
    k = max((n for _, n in pairs), default=0)
    pass_hat: dict[str, float | None] = {}
    pass_at: dict[str, float | None] = {}
    for j in range(1, k + 1):
        eligible = [((c, n), m) for (c, n), m in pairs.items() if n >= j]
        count = sum(m for _, m in eligible)
        if not count:
            pass_hat[str(j)] = pass_at[str(j)] = None
            continue
        hat = sum(m * Fraction(math.comb(c, j), math.comb(n, j)) for (c, n), m in eligible)
        at = sum(m * (1 - Fraction(math.comb(n - c, j), math.comb(n, j))) for (c, n), m in eligible)
        pass_hat[str(j)] = float(hat / count)
        pass_at[str(j)] = float(at / count)
    task_rewards = [sum(r) / len(r) for r in (rewards or ()) if len(r)]
    tasks = len(scored)
    return SideSummary(
        tasks=tasks,
        pass_rate=float(sum(m * r for r, m in rates.items()) / tasks) if tasks else None,
        pass_rate_se=_se_of_counted(rates),
        mean_reward=math.fsum(task_rewards) / len(task_rewards) if task_rewards else None,
        pass_hat_k=pass_hat,
        pass_at_k=pass_at,
    )


def _se_of_counted(values: Counter[Fraction]) -> float | None:
    """sd (n − 1) over √n of a multiset of exact values."""
    n = sum(values.values())
    if n < 2:
        return None
    mean = sum(m * v for v, m in values.items()) / n
    var = sum(m * (v - mean) ** 2 for v, m in values.items()) / (n - 1)
    return math.sqrt(var / n)


def _checked_scored(passes: int, scored: int) -> bool:
    _check_count(passes, scored)
    return scored > 0


# ---------------------------------------------------------------------------
# Efficiency


@dataclass(frozen=True, kw_only=True, slots=True)
class Efficiency:
    """Geometric-mean ratio candidate/champion of a per-task metric and its upper bound."""

    ratio: float | None  # exp(mean log r_i)
    upper: float | None  # exp(mean + t_{1−α, n−1}·sd/√n) of the log ratios
    n: int  # tasks
    log_mean: float | None = None  # mean log r_i, and its sample sd (statistics.stdev): carried
    log_sd: float | None = None  # in comparison.json so that the gate can recompute the bound


def efficiency(
    champion_values: Sequence[float | None],
    candidate_values: Sequence[float | None],
    alpha: float,
) -> Efficiency:
    """Efficiency ratio of a metric (cost, wall_s, cpu_s) (docs/statistics.md).

    r_i = candidate_i / champion_i; ratio = exp(mean log r_i); upper =
    exp(mean + t_{1−α, n−1}·sd/√n) with sd the sample sd (n − 1) of log r_i.
    Defined only when n ≥ 2 and every task has a finite, positive value on both sides;
    otherwise ratio and upper are None (and a None never satisfies a rule).
    """
    _check_alpha(alpha)
    if len(champion_values) != len(candidate_values):
        raise ValueError("efficiency: the two per-task sequences differ in length")
    n = len(champion_values)
    usable = all(positive_finite(v) for v in (*champion_values, *candidate_values))
    if n < 2 or not usable:
        return Efficiency(ratio=None, upper=None, n=n)
    logs = [
        math.log(b) - math.log(a)
        for a, b in zip(champion_values, candidate_values, strict=True)
        if a is not None and b is not None  # all are: checked by positive_finite
    ]
    mean = math.fsum(logs) / n
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in logs) / (n - 1))
    upper = mean + t_quantile(1.0 - alpha, n - 1) * sd / math.sqrt(n)
    return Efficiency(ratio=math.exp(mean), upper=math.exp(upper), n=n, log_mean=mean, log_sd=statistics.stdev(logs))


def positive_finite(value: float | None) -> bool:
    """A value usable in a ratio of logs: present, finite and above zero."""
    return value is not None and math.isfinite(value) and value > 0


# ---------------------------------------------------------------------------
# Calibration of the agent's estimates (the reward channel; the gate never reads it)


def brier(p: Sequence[float], outcomes: Sequence[bool]) -> float | None:
    """Brier score: mean of (p_i − o_i)², o_i = 1 for a pass. None on empty input."""
    _same_length(p, outcomes)
    if not p:
        return None
    return math.fsum(
        (pi - (1.0 if o else 0.0)) ** 2 for pi, o in zip(p, outcomes, strict=True)
    ) / len(p)


def interval_coverage(
    lo: Sequence[float], hi: Sequence[float], actual: Sequence[float]
) -> float | None:
    """Share of actuals inside their closed range [lo_i, hi_i]. None on empty input."""
    _same_length(lo, hi, actual)
    if not lo:
        return None
    inside = sum(1 for a, b, x in zip(lo, hi, actual, strict=True) if a <= x <= b)
    return inside / len(lo)


def interval_score_one(lo: float, hi: float, actual: float, level: float) -> float:
    """Gneiting–Raftery interval score of one central range at nominal coverage `level`.

    (hi − lo) + (2/α)(lo − x)·[x < lo] + (2/α)(x − hi)·[x > hi], α = 1 − level.
    Lower is better; a range that misses pays 2/α per unit of the miss.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    alpha = 1.0 - level
    score = hi - lo
    if actual < lo:
        score += (2.0 / alpha) * (lo - actual)
    elif actual > hi:
        score += (2.0 / alpha) * (actual - hi)
    return score


def interval_score(
    lo: Sequence[float],
    hi: Sequence[float],
    actual: Sequence[float],
    level: float | Sequence[float],
) -> float | None:
    """Mean interval score (see `interval_score_one`); `level` one value or one per range.

    None on empty input.
    """
    _same_length(lo, hi, actual)
    levels = [float(level)] * len(lo) if isinstance(level, int | float) else list(level)
    _same_length(lo, levels)
    if not lo:
        return None
    scores = [
        interval_score_one(a, b, x, lv) for a, b, x, lv in zip(lo, hi, actual, levels, strict=True)
    ]
    return math.fsum(scores) / len(scores)


def _same_length(*columns: Sequence[object]) -> None:
    if len({len(c) for c in columns}) > 1:
        raise ValueError("calibration: the sequences differ in length")
