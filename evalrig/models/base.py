"""Shared pieces of every file format: strictness, timestamps, digests, versions.

Every model rejects unknown keys and non-finite numbers and is frozen. Records the rig
writes carry `schema_version` as their first field ("MAJOR.MINOR"): a file of another
major version is refused, a newer minor is read (unknown keys of a newer minor still
fail, so writers only add optional keys within a major).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
)


def format_ts(ts: datetime) -> str:
    """`2026-12-02T10:15:03.123456Z`: UTC, always with microseconds (docs/statistics.md)."""
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")



SCHEMA_MAJOR = 1
SCHEMA_VERSION = "1.0"


def _aware(ts: datetime) -> datetime:
    if ts.tzinfo is None or ts.utcoffset() is None:
        raise ValueError("timestamp has no time zone; write it in UTC with a trailing Z")
    return ts.astimezone(UTC)


Timestamp = Annotated[
    datetime,
    AfterValidator(_aware),
    PlainSerializer(format_ts, return_type=str, when_used="json"),
]
"""A timezone-aware time, normalised to UTC, written with microseconds and `Z`."""

DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
Digest = Annotated[str, Field(pattern=DIGEST_PATTERN)]
"""`sha256:<64 hex>`."""

TaskId = Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]+$", min_length=1)]

PATH_ID_PATTERN = r"^(?:[A-Za-z0-9_-]|\.[A-Za-z0-9_-]|\.\.[A-Za-z0-9._-])[A-Za-z0-9._-]*$"
"""One path component of `[A-Za-z0-9._-]`, never `.` or `..` (written without look-ahead,
which the schema's regex engine lacks): "..." and ".x" are names, "." and ".." are not."""

PathId = Annotated[str, Field(pattern=PATH_ID_PATTERN, min_length=1)]
"""An id that names a path (attempt, run, estimate ids: docs/security.md): a
bundle holding `../x` fails its schema before the id touches a path."""

ChainHash = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
"""A bare hex sha256, the `prev` of a hash-chained line."""


class Strict(BaseModel):
    """Base of every model: frozen, keyword-only in spirit, no unknown keys, finite numbers."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
        populate_by_name=True,
        # Build each model's validator on first use, not at import: start-up time matters
        # (`eval.sh validate` loads only a few of the formats).
        defer_build=True,
    )


class Record(Strict):
    """A record the rig writes: `schema_version` first."""

    schema_version: str = Field(
        default=SCHEMA_VERSION,
        description="Format version MAJOR.MINOR; another major is refused.",
    )

    @field_validator("schema_version")
    @classmethod
    def _known_major(cls, v: str) -> str:
        major, _, minor = v.partition(".")
        if not (major.isdigit() and minor.isdigit()):
            raise ValueError(f"schema_version {v!r} is not MAJOR.MINOR")
        if int(major) != SCHEMA_MAJOR:
            raise ValueError(
                f"schema_version {v} is not readable by this rig (major {SCHEMA_MAJOR}); "
                "use the rig version that wrote it"
            )
        return v


class ChainHead(Strict):
    """One chained file of the home as a signed line saw it when it was written."""

    lines: int = Field(ge=0, description="Its complete lines.")
    sha256: ChainHash | None = Field(description="The bare hex sha256 of its last line; null when empty.")


class Signed(Strict):
    """What the home adds to every line it signs (docs/security.md, "The home signs what it records")."""

    key: str | None = Field(
        default=None, pattern=r"^sha256:[0-9a-f]{64}$",
        description="The signer's fingerprint: `sha256:` + hex of its raw 32-byte Ed25519 public key.")
    sig: str | None = Field(
        default=None, description="Padded base64 of the Ed25519 signature over the canonical JSON of the "
        "line with `key` and without `sig`. Absent on legacy lines (shown, never believed).")
    heads: dict[str, ChainHead] | None = Field(
        default=None, description="For each chained file of the home (by name), its line count and last "
        "line's sha256 when this line was written: a file cut shorter than a later line says is refused.")


SIGNED_KEYS = ("key", "sig", "heads")


def without_nulls(out: Any, keys: tuple[str, ...]) -> Any:
    for k in keys:
        out = without_null(out, k)
    return out


class ChainedRecord(Record, Signed):
    """A line of one of the rig's hash-chained home files (seals, gates, runs, sign-offs).

    The chain's store (`evalrig.store.jsonl.chained_append`) sets `prev`; a record written
    anywhere else (a bundle's copy of a sign-off) has none, and leaves the key out rather
    than writing null, so that no unchained line ever looks chained.
    """

    prev: ChainHash | None = Field(
        default=None,
        description="The bare hex sha256 of the previous line's bytes (without its newline); on the "
        "first chained line, of every byte before it. Absent on legacy lines and outside the home.",
    )

    _optional_keys: ClassVar[tuple[str, ...]] = ()
    """Keys a format added later: left out when null, so older lines keep their bytes."""

    @model_serializer(mode="wrap")
    def _no_null_prev(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_nulls(handler(self), ("prev", *SIGNED_KEYS, *self._optional_keys))


def without_null(out: Any, key: str) -> Any:
    """A serialized record without `key` when it is null: an optional key added to a format
    is left out rather than written as null, so records without it keep their bytes."""
    if isinstance(out, dict) and out.get(key, "") is None:
        del out[key]
    return out


def dump(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json")
