"""The model gateway: the agent's only way to a model (docs/gateway.md for operators,
docs/models.md for agent authors).

The rig binds a listener at `GATEWAY_ADDRESS` inside each sandbox's network namespace (as
it binds the egress proxy's) and serves it here, in the rig's process, on the process's
one asyncio loop (attempt/aioloop.py). Every call is routed, bounded, checked against the
build's allowed models and the attempt's budget, scanned for the canary (never forwarded
when found), forwarded with the real key, passed back chunk by chunk, metered, priced and
recorded in the attempt's `model.jsonl` (or served from a recording, `run --replay`).

Modules: routes.py (what is served and refused, the providers' error shapes), usage.py
(usage from responses and streams, the rig's own count), budget.py (admission and
reservations), ledger.py (model.jsonl and model/), replay.py (recorded calls), server.py
(the server and the upstream client).
"""

from __future__ import annotations

from evalrig.attempt.gateway.budget import IN_FLIGHT
from evalrig.attempt.gateway.ledger import CallLedger
from evalrig.attempt.gateway.replay import RecordedCall, Replay
from evalrig.attempt.gateway.server import (
    BODY_LIMIT,
    FORWARDED_HEADERS,
    Gateway,
    Grant,
    Pricer,
    Session,
    UpstreamConn,
)

__all__ = [
    "BODY_LIMIT", "FORWARDED_HEADERS", "GATEWAY_ADDRESS", "GATEWAY_PORT", "GATEWAY_URL", "IN_FLIGHT",
    "CallLedger", "Gateway", "Grant", "Pricer", "RecordedCall", "Replay", "Session", "UpstreamConn",
]

GATEWAY_PORT = 4000
"""The same port in every sandbox: each has a network namespace of its own."""
GATEWAY_ADDRESS = ("127.0.0.1", GATEWAY_PORT)
GATEWAY_URL = f"http://127.0.0.1:{GATEWAY_PORT}"
