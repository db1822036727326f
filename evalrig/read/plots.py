"""The report's plots, drawn by matplotlib as inline SVG (docs/report.md).

Only `evalrig report` imports this module, and only when it draws: matplotlib takes a
noticeable part of a second to import, and no other command's start-up should pay it.
Every plot aggregates, so that its size does not grow with the number of tasks: sorted
differences are drawn as runs of equal values, per-task scatters become means per pass
rate beyond a few hundred tasks.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")  # no display: the report is a file

from matplotlib import pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

plt.rcParams.update({
    "svg.fonttype": "none",  # text stays text: smaller, and searchable in the page
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
})

SIDES = (("champion", "#4c72b0"), ("candidate", "#dd8452"))
SCATTER_MAX = 400
"""Tasks per side beyond which the cost plot shows means per pass rate instead of points."""


@dataclass(frozen=True)
class TaskPoint:
    suite: str
    pass_rate: float | None
    cost: float | None


def _svg(fig: plt.Figure, name: str) -> str:
    """The figure as an <svg> element to inline: no XML prolog, no metadata, ids unique to
    the figure (several plots share one page), bytes that depend on the data only."""
    plt.rcParams["svg.hashsalt"] = name
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)
    return text.replace("<svg ", f'<svg role="img" aria-label="{name}" class="plot" ', 1)


def _note(ax: plt.Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#777")
    ax.set_xticks([])
    ax.set_yticks([])


def _panels(names: Sequence[str]) -> list[tuple[str, plt.Figure, plt.Axes]]:
    """One small figure per suite: a multi-panel plot is drawn as panels side by side on a
    wide screen and one per row on a phone (the page lays them out), each readable alone."""
    out = []
    for name in names:
        fig, ax = plt.subplots(figsize=(3.2, 2.6))
        out.append((name, fig, ax))
    return out


def differences(by_suite: Mapping[str, Sequence[float]]) -> str:
    """Per-task differences d_i (candidate − champion pass rate), sorted, one panel per suite.
    Drawn as a step line over the task's rank (0–1), one segment per run of equal values."""
    svgs = []
    for suite, fig, ax in _panels(list(by_suite) or ["no suite"]):
        ds = sorted(by_suite.get(suite, ()))
        ax.set_title(f"{suite} ({len(ds)} tasks)")
        ax.set_ylabel("candidate − champion pass rate")
        ax.axhline(0, color="#999", lw=0.8)
        if ds:
            xs, ys = [0.0], [ds[0]]
            n = len(ds)
            for i in range(1, n):
                if ds[i] != ds[i - 1]:
                    xs += [i / n, i / n]
                    ys += [ds[i - 1], ds[i]]
            xs.append(1.0)
            ys.append(ds[-1])
            ax.plot(xs, ys, color="#333", lw=1.4)
            ax.fill_between(xs, ys, 0, where=[y > 0 for y in ys], color="#55a868", alpha=0.4, step=None)
            ax.fill_between(xs, ys, 0, where=[y < 0 for y in ys], color="#c44e52", alpha=0.4, step=None)
            ax.set_xlim(0, 1)
            ax.set_ylim(-1.05, 1.05)
            ax.set_xlabel("tasks, sorted (fraction)")
        else:
            _note(ax, "no tasks")
        svgs.append(_svg(fig, f"per-task differences: {suite}"))
    return "".join(svgs)


def pass_k(by_suite: Mapping[str, Mapping[str, tuple[Mapping[str, float | None], Mapping[str, float | None]]]]) -> str:
    """pass^j and pass@j against j, both sides, one panel per suite. `by_suite[suite][side]`
    is (pass_hat_k, pass_at_k), keyed by j as a string."""
    svgs = []
    legend = True
    for suite, fig, ax in _panels(list(by_suite) or ["no suite"]):
        ax.set_title(suite)
        drawn = False
        for side, color in SIDES:
            if side not in by_suite.get(suite, {}):
                continue
            hat, at = by_suite[suite][side]
            for series, style, word in ((hat, "-", "pass^k"), (at, "--", "pass@k")):
                pts = sorted((int(j), v) for j, v in series.items() if v is not None)
                if pts:
                    ax.plot([j for j, _ in pts], [v for _, v in pts], style, marker="o", ms=3, color=color,
                            label=f"{side} {word}")
                    drawn = True
        if not drawn:
            _note(ax, "no scored tasks")
        else:
            ax.set_ylim(-0.02, 1.02)
            ax.set_xlabel("k (attempts)")
            ax.set_ylabel("rate")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            if legend:  # the first drawn panel carries the key, below its axes
                ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=2, frameon=False, fontsize=7)
                legend = False
        svgs.append(_svg(fig, f"pass^k and pass@k: {suite}"))
    return "".join(svgs)


def cost_vs_pass(points: Mapping[str, Sequence[TaskPoint]]) -> str:
    """Mean cost per task against its pass rate, per side: every task while there are few,
    else the mean and quartiles of cost at each pass rate (the rates take k + 1 values)."""
    fig, ax = plt.subplots(figsize=(5.2, 3.0))
    drawn = False
    for side, color in SIDES:
        pts = [(p.pass_rate, p.cost) for p in points.get(side, ()) if p.pass_rate is not None
               and p.cost is not None and math.isfinite(p.cost)]
        if not pts:
            continue
        drawn = True
        if len(pts) <= SCATTER_MAX:
            off = -0.01 if side == "champion" else 0.01
            ax.scatter([x + off for x, _ in pts], [y for _, y in pts], s=12, alpha=0.6, color=color, label=side)
            continue
        groups: dict[float, list[float]] = {}
        for x, y in pts:
            groups.setdefault(round(x, 6), []).append(y)
        xs = sorted(groups)
        means, lo, hi = [], [], []
        for x in xs:
            ys = sorted(groups[x])
            means.append(sum(ys) / len(ys))
            lo.append(means[-1] - ys[len(ys) // 4])
            hi.append(ys[(3 * len(ys)) // 4] - means[-1])
        ax.errorbar(xs, means, yerr=[[max(v, 0) for v in lo], [max(v, 0) for v in hi]], fmt="o-", ms=4,
                    capsize=3, color=color, label=f"{side} (mean, quartiles; {len(pts)} tasks)")
    if not drawn:
        _note(ax, "no task has a recorded cost")
    else:
        ax.set_xlabel("pass rate of the task")
        ax.set_ylabel("mean cost per attempt (USD)")
        ax.set_xlim(-0.05, 1.05)
        ax.legend(frameon=False, fontsize=8)
    return _svg(fig, "cost against pass rate")


def calibration(pairs: Mapping[str, Sequence[tuple[float, bool]]], bins: int = 10) -> str:
    """The reward channel: predicted p_success in `bins` equal bins against the observed pass
    rate of the attempts in each bin, both sides; the diagonal is a calibrated agent."""
    fig, ax = plt.subplots(figsize=(3.6, 3.2))
    ax.plot([0, 1], [0, 1], color="#999", lw=0.8, ls=":")
    drawn = False
    for side, color in SIDES:
        counts = [0] * bins
        passes = [0] * bins
        sums = [0.0] * bins
        for p, ok in pairs.get(side, ()):
            b = min(int(p * bins), bins - 1)
            counts[b] += 1
            passes[b] += ok
            sums[b] += p
        xs = [sums[b] / counts[b] for b in range(bins) if counts[b]]
        ys = [passes[b] / counts[b] for b in range(bins) if counts[b]]
        if xs:
            drawn = True
            ax.plot(xs, ys, "o-", ms=4, color=color, label=f"{side} ({sum(counts)} attempts)")
    if not drawn:
        _note(ax, "no valid p_success estimate")
    else:
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("predicted p_success (bin mean)")
        ax.set_ylabel("observed pass rate")
        ax.legend(frameon=False, fontsize=8)
    return _svg(fig, "calibration of p_success")


def histogram(by_suite: Mapping[str, Sequence[float]]) -> str:
    """A run bundle's per-task pass rates, one panel per suite (a run has nothing to pair)."""
    svgs = []
    for suite, fig, ax in _panels(list(by_suite) or ["no suite"]):
        rates = by_suite.get(suite, ())
        ax.set_title(f"{suite} ({len(rates)} tasks)")
        if rates:
            ax.hist(rates, bins=[i / 10 for i in range(11)], color=SIDES[0][1], edgecolor="white")
            ax.set_xlabel("pass rate of the task")
            ax.set_ylabel("tasks")
        else:
            _note(ax, "no tasks")
        svgs.append(_svg(fig, f"per-task pass rates: {suite}"))
    return "".join(svgs)


@dataclass(frozen=True)
class Mark:
    at: float
    """Position on the train axis (train index, fractional between trains)."""
    kind: str
    label: str


def spread(marks: Sequence[Mark], width: float = 0.3) -> list[Mark]:
    """Marks that fall at one place (a ship and its rollback between the same two trains) set
    side by side around it, in their order, so that each line shows."""
    groups: dict[float, list[int]] = {}
    for i, m in enumerate(marks):
        groups.setdefault(round(m.at, 6), []).append(i)
    out = list(marks)
    for at, idx in groups.items():
        if len(idx) < 2:
            continue
        step = width / (len(idx) - 1)
        for j, i in enumerate(idx):
            out[i] = Mark(at - width / 2 + j * step, marks[i].kind, marks[i].label)
    return out


def curves(series: Mapping[str, Sequence[float | None]], labels: Sequence[str], marks: Sequence[Mark],
           bands: Mapping[str, Sequence[tuple[float, float] | None]] | None = None) -> str:
    """The release curves (docs/report.md): one panel per series over the trains, with ships,
    rollbacks and alerts marked as vertical lines, each labelled with its event number above
    the first panel (marks at one place are set side by side); `bands` shades a series'
    bounds. Each panel is named by its title, which is never clipped as a long y label is."""
    names = list(series)
    fig, axes = plt.subplots(len(names) or 1, 1, figsize=(7.5, 1.9 * max(len(names), 1)), squeeze=False,
                             sharex=True)
    style = {"ship": ("#55a868", "-"), "rollback": ("#c44e52", "--"), "alert": ("#dd8452", ":")}
    placed = spread(marks)
    for ax, name in zip(axes[:, 0], names, strict=False):
        ys = series[name]
        pts = [(i, y) for i, y in enumerate(ys) if y is not None]
        if pts:
            ax.plot([i for i, _ in pts], [y for _, y in pts], "o-", ms=3, color="#333")
        band = [(i, b) for i, b in enumerate((bands or {}).get(name, ())) if b is not None]
        if band:
            ax.fill_between([i for i, _ in band], [b[0] for _, b in band], [b[1] for _, b in band],
                            color="#4c72b0", alpha=0.2, lw=0)
            ax.axhline(0, color="#999", lw=0.6)
        ax.set_title(name, loc="left", fontsize=8, pad=3)
        ax.tick_params(axis="y", labelsize=7)
        for m in placed:
            color, ls = style.get(m.kind, ("#999", "-"))
            ax.axvline(m.at, color=color, ls=ls, lw=1.2)
    if not names:
        _note(axes[0][0], "no trains in the gate ledger")
    top = axes[0][0]
    for m in placed:  # each mark's event number, above the first panel, in its colour
        color, _ = style.get(m.kind, ("#999", "-"))
        top.annotate(f"{m.kind[0]}{m.label}", (m.at, 1.0), xycoords=("data", "axes fraction"), xytext=(0, 12),
                     textcoords="offset points", ha="center", fontsize=6, color=color, rotation=90,
                     annotation_clip=False)
    for kind, (color, ls) in style.items():
        top.plot([], [], color=color, ls=ls, label=kind)
    top.legend(frameon=False, fontsize=8, ncol=3, loc="lower left", bbox_to_anchor=(0, 1.3))
    bottom = axes[-1][0]
    if labels:
        step = max(1, len(labels) // 12)
        bottom.set_xticks(range(0, len(labels), step))
        bottom.set_xticklabels(labels[::step], rotation=30, ha="right", fontsize=7)
    ats = [m.at for m in placed]
    if labels or ats:  # every train and every mark inside the axes, a mark set aside included
        bottom.set_xlim(min([-0.6] + [a - 0.2 for a in ats]), max([len(labels) - 0.4] + [a + 0.2 for a in ats]))
    bottom.set_xlabel("trains (gates), in ledger order: number and date")
    return _svg(fig, "release curves")
