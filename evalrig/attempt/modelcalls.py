"""An attempt's side of the model gateway (docs/gateway.md): which `Gateway` serves it, what
each of its sandboxes may call (`Grant`), the variables that point the SDKs at it, and the
spend its ledger metered.

- One `Gateway` per rig process (per run locally, per worker process under Ray), made from
  the run's `GatewayUse` the first time an attempt of that process needs it
  (`process_gateway`): the upstreams with their keys read from this process's
  environment (under Ray, the runtime environment of the worker's task; never a bundle),
  and the one pricer of the gateway file's `[prices]`. It lives as long as the process.
- One `CallLedger` per attempt, whose lines and bodies are the attempt's evidence
  (`model.jsonl`, `model/`): the candidate's calls and its episode driver's (role
  `driver`), in one `seq` order. A command verifier's calls (role `judge`) are made after
  the attempt ended, when its evidence is already digested and handed to the verifier, so
  they go to a ledger of their own under the verifier's output (`verifier/model.jsonl`,
  `verifier/model/`): out of the evidence digest and the judged view, as every verifier
  output is (docs/attempts.md).
- Budgets: the candidate's is the task's `[budget]` with `--max-cost-usd-per-attempt`
  (the lower wins, `merged_budget`); a driver's `[episode] budget`, a judge's
  `[verifier] budget`.
"""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from evalrig.core import environment
from evalrig.models.gateway import Budget, GatewayFacts, GatewayFile, Role
from evalrig.models.run import RoleSpend

if TYPE_CHECKING:
    from evalrig.attempt.gateway import CallLedger, Gateway, Grant, UpstreamConn
    from evalrig.attempt.verifiers import JudgeModels
    from evalrig.store.recording import Recording

__all__ = [
    "GatewayUse",
    "env_for",
    "grant_for",
    "merged_budget",
    "metered",
    "new_ledger",
    "process_gateway",
    "register",
    "release",
]


@dataclass(frozen=True)
class GatewayUse:
    """What every process needs to serve a run's model calls; picklable (it travels to Ray
    workers inside the attempt's spec) and holding no key. `key` names it: a process makes
    one `Gateway` per key. Exactly one of `file` (run --gateway) and `recording`
    (run --replay) is set."""

    key: str  # the gateway file's digest, or the replayed run's id
    upstreams: tuple[tuple[str, str], ...]  # (name, api), in the gateway file's order
    file: GatewayFile | None = None
    recording: Recording | None = None
    max_cost_usd_per_attempt: float | None = None

    @property
    def replayed(self) -> bool:
        return self.recording is not None


_LOCK = threading.Lock()
_GATEWAYS: dict[str, Gateway] = {}


def register(use: GatewayUse, make: Callable[[], Gateway]) -> None:
    """The run's own process: the `Gateway` its setup makes (with the keys `run` read),
    made once."""
    with _LOCK:
        if use.key not in _GATEWAYS:
            _GATEWAYS[use.key] = make()


def release(use: GatewayUse) -> None:
    """The run is over in this process: end its Gateway (every session, the upstream pools),
    so a later run in the same process makes its own with the keys it reads."""
    with _LOCK:
        gw = _GATEWAYS.pop(use.key, None)
    if gw is not None:
        try:
            gw.close()
        except Exception:  # noqa: BLE001, S110 - every session already ended with its sandbox; the run's records stand
            pass


def process_gateway(use: GatewayUse) -> Gateway:
    """This process's `Gateway` for `use`; one a Ray worker makes at its first attempt,
    with the keys read from its own environment (the runtime environment the run gave its
    runner), never stored anywhere else."""
    with _LOCK:
        gw = _GATEWAYS.get(use.key)
        if gw is None:
            gw = _GATEWAYS[use.key] = _made(use)
        return gw


def _made(use: GatewayUse) -> Gateway:
    from evalrig.attempt.gateway import Gateway, Replay
    from evalrig.core.pricing import pricer

    if use.file is not None:
        keys = {name: (os.environ.get(up.key_env) or None) if up.key_env else None
                for name, up in use.file.upstreams.items()}
        return Gateway(file_conns(use.file, keys), pricer(use.file.prices))
    assert use.recording is not None
    return Gateway(replay_conns(use.recording.gateway), pricer({}), replay=Replay(use.recording.calls))


ALL_ROLES: tuple[Role, ...] = ("candidate", "driver", "judge")


def file_conns(file: GatewayFile, keys: Mapping[str, str | None]) -> dict[str, UpstreamConn]:
    """Each upstream of the operator's gateway file with its key (`keys`, by name): what a
    run's process, or a Ray worker's, serves with (docs/gateway.md)."""
    from evalrig.attempt.gateway import UpstreamConn
    from evalrig.core.pricing import price_provider

    return {name: UpstreamConn(name=name, api=up.api, base_url=up.base_url, key=keys.get(name),
                               max_concurrent=up.max_concurrent, roles=tuple(up.roles),
                               price_provider=price_provider(up), timeout_s=up.timeout_s)
            for name, up in sorted(file.upstreams.items())}


def replay_conns(recorded: GatewayFacts | None) -> dict[str, UpstreamConn]:
    """A replay's upstreams: the recorded run's, keyless, serving every role (only the
    recording answers, matched by trial, role and digest; no upstream is called)."""
    from evalrig.attempt.gateway import UpstreamConn

    if recorded is None:
        return {}
    return {name: UpstreamConn(name=name, api=u.api, base_url=u.base_url, key=None, max_concurrent=16,
                               roles=ALL_ROLES, price_provider=u.price_provider or u.api, timeout_s=600.0)
            for name, u in sorted(recorded.upstreams.items())}


def merged_budget(*budgets: Budget | None) -> Budget | None:
    """The bounds of several budgets together: per figure, the lowest that is set."""
    fields = ("max_cost_usd", "max_tokens", "max_calls")
    got: dict[str, float | int | None] = dict.fromkeys(fields)
    for b in budgets:
        if b is None:
            continue
        for f in fields:
            v = getattr(b, f)
            if v is not None and (got[f] is None or v < got[f]):  # type: ignore[operator]
                got[f] = v
    return Budget(**got) if any(v is not None for v in got.values()) else None  # type: ignore[arg-type]


def grant_for(role: Role, allowed: Sequence[str], budget: Budget | None, needles: Sequence[bytes],
              trial: tuple[str, int]) -> Grant:
    from evalrig.attempt.gateway import Grant

    return Grant(role=role, allowed=frozenset(allowed), budget=budget, needles=tuple(needles), trial=trial)


def new_ledger(evidence_dir: Path, bodies_allowance: int) -> CallLedger:
    from evalrig.attempt.gateway import CallLedger

    evidence_dir.mkdir(parents=True, exist_ok=True)
    return CallLedger(evidence_dir, bodies_allowance=max(bodies_allowance, 0))


def env_for(use: GatewayUse) -> dict[str, str]:
    """The gateway's variables for one launch, with a fresh token of the rig's (worth
    nothing outside the rig: the gateway holds the real keys and ignores the agent's)."""
    return environment.gateway_env(use.upstreams, f"evalrig-{secrets.token_hex(16)}")


def judge_models(use: GatewayUse | None, verifier: object, output_dir: Path, max_evidence_bytes: int,
                 needles: Sequence[bytes], trial: tuple[str, int]) -> tuple[JudgeModels, CallLedger] | None:
    """`[verifier] models = true`: the judge's way to the gateway (its `models_allowed` and
    `budget`) and its ledger, writing under `output_dir` (the verifier's output: see the
    module docstring); None without a gateway or without `models`."""
    if use is None or not getattr(verifier, "models", False):
        return None
    from evalrig.attempt.sandbox import GatewayGrant
    from evalrig.attempt.verifiers import JudgeModels

    ledger = new_ledger(output_dir, max_evidence_bytes)
    grant = grant_for("judge", list(getattr(verifier, "models_allowed", [])), getattr(verifier, "budget", None),
                      needles, trial)
    return JudgeModels(GatewayGrant(process_gateway(use), grant, ledger), lambda: env_for(use)), ledger


def metered(ledger: CallLedger | None, role: Role) -> RoleSpend | None:
    """The role's spend as the ledger metered it (None: no ledger, or no call)."""
    return ledger.spend(role) if ledger is not None else None


def joined_requests(evidence_dir: Path) -> bytes:
    """Every request body the ledger kept under `model/`, joined in `seq` order (the
    attempt-end canary scan, docs/gateway.md "Limits fail closed")."""
    from evalrig.store.layout import MODEL_DIR

    folder = evidence_dir / MODEL_DIR
    if not folder.is_dir():
        return b""
    numbered = []
    for p in folder.iterdir():
        head, _, rest = p.name.partition(".")
        if rest == "request.json" and head.isdigit():
            numbered.append((int(head), p))
    return b"".join(p.read_bytes() for _, p in sorted(numbered))
