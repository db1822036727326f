"""comparison.json of a comparison bundle, read and verified against the bundle's manifest
(docs/gate.md). Apart from `evalrig.store.compare`, which makes comparisons, so that the
commands that only check one (check-release, ship, sign) do not load the statistics."""

from __future__ import annotations

from pathlib import Path

from evalrig.core.digest import sha256_bytes
from evalrig.core.errors import invalid
from evalrig.models.comparison import Comparison, ComparisonManifest
from evalrig.store.files import parse_json, read_json
from evalrig.store.layout import COMPARISON_JSON, MANIFEST

RECOMPARE_HINT = ("compare the two runs again into a new --out, gate that comparison and sign its decision "
                  "(the rig never overwrites a comparison or a decision it wrote)")


def read_comparison(dir: Path) -> tuple[Comparison, str]:
    """The comparison of a comparison bundle and the digest of its bytes, verified against manifest.json."""
    path, data, digest = _verified_bytes(Path(dir))
    return parse_json(path, data, Comparison), digest


def comparison_digest(dir: Path) -> str:
    """The digest of a comparison bundle's comparison.json, verified against manifest.json,
    without parsing it: for a check that compares it with a digest the gate recorded
    (check-release, ship), the comparison's contents were read when it was gated."""
    return _verified_bytes(Path(dir))[2]


def _verified_bytes(dir: Path) -> tuple[Path, bytes, str]:
    path = dir / COMPARISON_JSON
    if not path.is_file():
        raise invalid("not a comparison bundle (no comparison.json)", file=dir,
                      hint="give the --out directory of `evalrig compare`")
    data = path.read_bytes()
    digest = sha256_bytes(data)
    manifest = read_json(dir / MANIFEST, ComparisonManifest)
    want = manifest.files.get(COMPARISON_JSON)
    if want != digest:
        raise invalid(f"was edited after compare wrote it: its digest {digest} differs from manifest.json's {want}",
                      file=path, hint=RECOMPARE_HINT)
    return path, data, digest
