"""The name of every file the rig keeps: a run bundle, a comparison bundle, the rig's home.

Each name is written here once; code builds paths from these constants, so that a reader
finds the whole layout in one place (docs/internals.md, docs/security.md for the home).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

# -- every bundle ------------------------------------------------------------------------

MANIFEST = "manifest.json"

# -- a run bundle (docs/attempts.md) -----------------------------------------------------

ATTEMPTS_JSONL = "attempts.jsonl"
ESTIMATES_JSONL = "estimates.jsonl"
ACTUALS_JSONL = "actuals.jsonl"
RESULTS_JSONL = "results.jsonl"
RUN_JSONL = (ATTEMPTS_JSONL, ESTIMATES_JSONL, ACTUALS_JSONL, RESULTS_JSONL)
"""The run's record files, in the order an attempt writes to them."""
PROVENANCE = "provenance.json"
HISTORY = "history.jsonl"
"""The checkpoint's declared event log, copied as sealed."""
ATTEMPTS_DIR = "attempts"
"""One folder of evidence per attempt."""
TRANSCRIPT = "transcript.jsonl"
"""attempts/<attempt_id>/transcript.jsonl: an episode's frames, written by the rig (docs/reading.md)."""
STDOUT_TXT = "stdout.txt"
STDERR_TXT = "stderr.txt"
ANSWER_TXT = "out/answer.txt"
ANSWER_JSON = "out/answer.json"
"""attempts/<attempt_id>/out/answer.*: the agent's answer, kept from its attempt root (docs/tasks.md)."""
VERIFIER_DIR = "verifier"
"""attempts/<attempt_id>/verifier/: the rig's verifier output, one run-N folder per run."""
UNTRUSTED_JSONL = "untrusted.jsonl"
"""attempts/<attempt_id>/verifier/untrusted.jsonl: each call the verifier made to the
untrusted-run service, as the rig saw it (docs/tasks.md)."""
DRIVER_DIR = "driver"
"""attempts/<attempt_id>/driver/: what an episode's driver left in its out/ (docs/tasks.md)."""
NETWORK_JSONL = "network.jsonl"
"""attempts/<attempt_id>/network.jsonl: the egress proxy's records (docs/security.md)."""
EVIDENCE_INDEX = "evidence_index.json"
"""attempts/<attempt_id>/evidence_index.json: every entry of the attempt root, kept or not."""
MODEL_JSONL = "model.jsonl"
"""attempts/<attempt_id>/model.jsonl: the model gateway's record of each call (docs/security.md)."""
MODEL_DIR = "model"
"""attempts/<attempt_id>/model/: the bodies of the gateway's calls."""
AGENT_DIR = "agent"
"""The checkpoint copy inside an attempt root: not indexed, walked only when a glob reaches it."""
EVIDENCE_RESERVED = frozenset({
    STDOUT_TXT, STDERR_TXT, TRANSCRIPT, DRIVER_DIR, NETWORK_JSONL, EVIDENCE_INDEX, VERIFIER_DIR,
    MODEL_JSONL, MODEL_DIR,
})
"""Names the rig writes at an evidence folder's root: an attempt-root entry so named is never kept."""
LOCK = ".lock"
LOCK_HOLDER = ".lock.holder"
REPORT_HTML = "report.html"
"""`evalrig report`'s default output in a bundle (docs/report.md): a view made later, by
whoever asks, so never digested (like a comparison's decisions/)."""
NOT_DIGESTED = frozenset({MANIFEST, LOCK, LOCK_HOLDER, REPORT_HTML})
"""Never digested: the manifest holds the digests, the lock files are the live process's,
the report is a view of the others."""

# -- a comparison bundle (docs/gate.md) --------------------------------------------------

COMPARISON_JSON = "comparison.json"
COMPARISON_MD = "comparison.md"
DECISIONS = "decisions"
ADVISORY = "advisory"
"""decisions/advisory/: decisions under a policy the runs did not pin (never signed)."""
ISSUED = "issued.jsonl"
"""decisions/issued.jsonl: each time gate issued a decision."""
SIGNOFFS = "signoffs.jsonl"
"""decisions/signoffs.jsonl (the bundle's copy, for people) and the home's record."""

# -- the rig's home, $EVALRIG_HOME (docs/security.md) ------------------------------------

SEALS = "seals.jsonl"
RUNS = "runs.jsonl"
GATES = "gates.jsonl"
HOME_SIGNOFFS = SIGNOFFS
EXPORTS = "exports.jsonl"
"""Every `export`: the bundles, suites and content digests of the tasks it took out (docs/reading.md)."""
COMPARISONS = "comparisons.jsonl"
"""Every comparison `compare` wrote: its digest; `gate` takes no other (docs/security.md)."""
KEY = "key"
"""The home's Ed25519 private key, PKCS#8 PEM, mode 0600 (docs/security.md, "The home signs what it records")."""
KEY_PUB = "key.pub"
TRUSTED_KEYS = "trusted_keys"
"""Other homes' public keys the operator trusts, each for one scope (`release-log` or `register`)."""
RELEASES = "releases.jsonl"
"""The release log: what served, and why (docs/release-engineers.md); `--log FILE` elsewhere."""
HOME_CHAINED = (SEALS, RUNS, COMPARISONS, GATES, HOME_SIGNOFFS, EXPORTS, RELEASES)
"""The chained files of the home, whose lengths every signed line records (`heads`)."""
VERIFIED_LOGS = "verified-logs"
"""What the rig last verified of each release log it read: their digests, so that a long log
is not parsed again line by line (store/releases.py)."""


def home_path(environ: Mapping[str, str]) -> Path:
    """`$EVALRIG_HOME`, else `~/.local/state/evalrig` (not checked: `store.checkpoint.evalrig_home`
    refuses a home that cannot be one)."""
    env = environ.get("EVALRIG_HOME")
    return Path(env).expanduser() if env else Path.home() / ".local" / "state" / "evalrig"

# -- a comparison bundle, after the train (docs/curves.md, "Retiring a train's fresh tasks") ---

RETIRE_JSON = "retire.json"
"""What `retire` moved out of the task set's fresh/ for this train."""

# -- a task set (docs/tasks.md) ----------------------------------------------------------

RETIRED = "retired"
"""DIR/retired/<short comparison digest>/: retired fresh tasks; no command reads it as a suite."""
