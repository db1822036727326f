"""Every file format, by name. `FORMATS` is the source of `schemas/` (evalrig schema)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import BaseModel


def formats() -> dict[str, type[BaseModel]]:
    """Name → model of every file format the rig reads or writes. The modules are imported
    here, not with the package: importing one model (a run's manifest, say) must not import
    them all, a quarter of a second of every command's start-up (docs/internals.md)."""
    from evalrig.models import (
        agent,
        comparison,
        episode,
        gateway,
        inputs,
        lock,
        reading,
        releases,
        retire,
        run,
    )

    return {
        "checkpoint": inputs.CheckpointFile,
        "task": inputs.TaskFile,
        "policy": inputs.PolicyFile,
        "run-defaults": inputs.RunDefaultsFile,
        "seal": run.SealFile,
        "seal-registry-entry": run.SealEntry,
        "run-registry-entry": run.RunEntry,
        "run-manifest": run.RunManifest,
        "provenance": run.Provenance,
        "attempt": run.AttemptEvent,
        "estimate": run.Estimate,
        "actual": run.Actual,
        "result": run.Result,
        "network-connection": run.NetworkConnection,
        "gateway": gateway.GatewayFile,
        "model-call": gateway.ModelCall,
        "evidence-index": run.EvidenceIndex,
        "fixed-lock": lock.FixedLock,
        "usage": agent.UsageFile,
        "reward": agent.RewardFile,
        "estimate-output": agent.EstimateLine,
        "frame": episode.Frame,
        "transcript-line": episode.TranscriptLine,
        "export-entry": reading.ExportEntry,
        **comparison.FORMATS,
        **releases.FORMATS,
        **retire.FORMATS,
    }
