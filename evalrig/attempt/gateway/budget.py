"""One session's budget (docs/gateway.md, "Budgets"): admission counts what is spent plus
what calls in flight have reserved; at most `IN_FLIGHT` calls of one session run at once.

Runs on the gateway's loop only (no locks)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from evalrig.models.gateway import Budget, CallUsage

__all__ = ["IN_FLIGHT", "Book", "Reservation"]

IN_FLIGHT = 4


@dataclass
class Reservation:
    tokens: int
    cost_usd: float
    settled: bool = False


class Book:
    def __init__(self, budget: Budget | None) -> None:
        self.budget = budget
        self.slots = asyncio.Semaphore(IN_FLIGHT)
        self.spent_cost = 0.0
        self.spent_tokens = 0
        self.calls = 0  # forwarded, ended or not
        self._reserved_tokens = 0
        self._reserved_cost = 0.0

    def admit(self, tokens: int, cost_usd: float) -> Reservation | str:
        """A reservation for a call that may start, or which bound is reached."""
        b = self.budget
        if b is not None:
            if b.max_calls is not None and self.calls >= b.max_calls:
                return f"max_calls = {b.max_calls} reached"
            if b.max_tokens is not None and self.spent_tokens + self._reserved_tokens >= b.max_tokens:
                return f"max_tokens = {b.max_tokens} reached (spent and reserved by calls in flight)"
            if b.max_cost_usd is not None and self.spent_cost + self._reserved_cost >= b.max_cost_usd:
                return f"max_cost_usd = {b.max_cost_usd} reached (spent and reserved by calls in flight)"
        self.calls += 1
        self._reserved_tokens += tokens
        self._reserved_cost += cost_usd
        return Reservation(tokens, cost_usd)

    def settle(self, r: Reservation, usage: CallUsage | None, cost_usd: float,
               forwarded: bool = True) -> None:
        """The call ended: its reservation becomes what it spent (nothing if not forwarded)."""
        if r.settled:
            return
        r.settled = True
        self._reserved_tokens -= r.tokens
        self._reserved_cost -= r.cost_usd
        if not forwarded:
            self.calls -= 1
            return
        if usage is not None:
            self.spent_tokens += usage.input_tokens + usage.output_tokens
        self.spent_cost += cost_usd
