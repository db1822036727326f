"""What a run's model gateway is built from (docs/gateway.md): `GatewaySetup`, made by
`run/inputs.py` before the first attempt, and handed to the run loop, which starts one
`evalrig.attempt.gateway.Gateway` per rig process from it (`setup.gateway()`, or
`Gateway(setup.upstream_conns(), setup.price, replay=setup.replay())`).

A setup holds the keys in memory only (never in the manifest, a bundle or a log), and what
the manifest records: `facts` (the gateway file's digest, the price table) and `replay_of`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from evalrig.core.pricing import Pricer, pricer
from evalrig.models.gateway import GatewayFacts, GatewayFile, ReplayOf
from evalrig.store.recording import Recording

if TYPE_CHECKING:
    from evalrig.attempt.gateway import Gateway, Replay, UpstreamConn

@dataclass(frozen=True)
class GatewaySetup:
    """The built inputs of the run's gateway: upstreams with their keys, the pricer, and
    (for `--replay`) the recording. Exactly one of `file` and `recording` is set."""

    price: Pricer
    facts: GatewayFacts | None
    """The manifest's `gateway`: the file that served the run (None for a replay)."""
    replay_of: ReplayOf | None = None
    file: GatewayFile | None = None
    keys: Mapping[str, str | None] = field(default_factory=dict, repr=False)
    recording: Recording | None = None

    def upstream_conns(self) -> dict[str, UpstreamConn]:
        """Each upstream with its key (for a replay: the recorded run's upstreams, keyless,
        serving every role: only the recording answers, matched by role and digest)."""
        from evalrig.attempt.modelcalls import file_conns, replay_conns

        if self.file is not None:
            return file_conns(self.file, self.keys)
        return replay_conns(self.recording.gateway if self.recording is not None else None)

    def replay(self) -> Replay | None:
        """The recording as the gateway serves it, or None when the run calls upstreams."""
        if self.recording is None:
            return None
        from evalrig.attempt.gateway import Replay

        return Replay(self.recording.calls)

    def gateway(self) -> Gateway:
        """One process's gateway (the run's, or a Ray worker's)."""
        from evalrig.attempt.gateway import Gateway

        return Gateway(self.upstream_conns(), self.price, replay=self.replay())


def setup_for_file(file: GatewayFile, facts: GatewayFacts, keys: Mapping[str, str | None]) -> GatewaySetup:
    return GatewaySetup(price=pricer(file.prices), facts=facts, file=file, keys=dict(keys))


def setup_for_replay(recording: Recording) -> GatewaySetup:
    """A replay spends nothing and reads no key; its pricer prices nothing new (each served
    call carries the recording's cost)."""
    return GatewaySetup(price=pricer({}), facts=None, replay_of=recording.replay_of, recording=recording)
