"""The tripwires judged on one run of the serving champion (docs/release-engineers.md, "tripwire").

Pure: each check is the gate's own invariant rule (`evalrig.core.gate.INVARIANT_RULES`)
applied to the run compared with itself, so that a tripwire means what the gate's
invariant of the same name means.
"""

from __future__ import annotations

from collections.abc import Sequence

from evalrig.core.gate import INVARIANT_RULES
from evalrig.models.comparison import Comparison, RuleResult
from evalrig.models.inputs import PolicyFile, TripwireCheck
from evalrig.models.releases import CheckHeld


def _detail(r: RuleResult) -> str:
    figures = ", ".join(f"{k}={v}" for k, v in r.numbers.items() if v not in (None, [], 0, False))
    return r.says + (f" ({figures})" if figures and not r.held else "")


def tripwire_checks(run_status: str, unscored: int, self_comparison: Comparison,
                    checks: Sequence[TripwireCheck], policy: PolicyFile) -> list[CheckHeld]:
    """The tripwires on one run of the serving champion (docs/release-engineers.md, "tripwire").

    `self_comparison` is the run compared with itself, so that each check is the gate's own
    invariant rule (every "both sides" is the one run). `complete` always comes first and
    holds only for a complete run: an invariant not shown to hold does not hold.
    """
    # a trial unscored for good (a fault after the agent's first input) counts as failed here
    # too (docs/release-engineers.md): a complete run with one does not hold
    held = run_status == "complete" and unscored == 0
    out = [CheckHeld(name="complete", held=held,
                     detail="every trial scored" if held
                     else f"the run is {run_status}: {unscored} trials unscored after their retries"
                     if run_status != "complete"
                     else f"{unscored} trials unscored for good (a fault after the agent's first input), "
                     "counted as failed")]
    for name in checks:
        if name == "complete":
            continue
        r = INVARIANT_RULES[name](self_comparison, policy)
        out.append(CheckHeld(name=name, held=r.held, detail=_detail(r)))
    return out
