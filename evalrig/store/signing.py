"""The home's key, and the signatures and heads of every line the rig appends to a chained file
of its home or to a release log (docs/security.md, "The home signs what it records").

A hash chain catches an edit, not a well-formed append by anyone who can write the file. So
each home has an Ed25519 key pair: `$EVALRIG_HOME/key` (PKCS#8 PEM, mode 0600, made with
O_EXCL under the home's lock on first use) and `key.pub` (base64 of the raw public key). A
signed line carries `key` (the signer's fingerprint, `sha256:` + hex of the raw public key)
and `sig` (padded base64 of the signature over the canonical JSON of the line with `key` and
without `sig`), and `heads`: each chained file of the home's line count and last line's sha256
when the line was written, so that a file cut shorter than a later line says is a break.

Reading a chain checks every signed line: the home's own files accept only the home's key; a
release log also the keys `$EVALRIG_HOME/trusted_keys` lists for `release-log`. After the first
signed line, a line without a signature that verifies is a break (exit 4, naming the file and
line). Unsigned lines before it are legacy: shown, never believed for a decision.

Only `ed25519` of `cryptography` is imported on the way of every command (9 ms); the PEM is
read by its fixed layout, and `serialization` is imported only to make a key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from evalrig.core.digest import canonical_json, loads
from evalrig.core.errors import EvalrigError, invalid
from evalrig.store.chain import chain_broken, chain_hash, whole_lines
from evalrig.store.layout import HOME_CHAINED, KEY, KEY_PUB, TRUSTED_KEYS

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

Scope = Literal["release-log", "register"]
SCOPES: tuple[Scope, ...] = ("release-log", "register")

_PKCS8_ED25519 = bytes.fromhex("302e020100300506032b657004220420")
"""The DER of a PKCS#8 Ed25519 private key before its 32-byte seed (RFC 8410)."""
_PEM_HEAD, _PEM_TAIL = b"-----BEGIN PRIVATE KEY-----", b"-----END PRIVATE KEY-----"


def fingerprint(raw_public: bytes) -> str:
    return "sha256:" + hashlib.sha256(raw_public).hexdigest()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _public_key(raw: bytes) -> Ed25519PublicKey:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    return Ed25519PublicKey.from_public_bytes(raw)


def signed_bytes(obj: Mapping[str, Any]) -> bytes:
    """What a line's `sig` signs: its canonical JSON with `key` and without `sig`."""
    return canonical_json({k: v for k, v in obj.items() if k != "sig"})


@dataclass
class HomeKey:
    """The home's key pair."""

    private: Ed25519PrivateKey
    raw_public: bytes
    fingerprint: str = field(init=False)

    def __post_init__(self) -> None:
        self.fingerprint = fingerprint(self.raw_public)

    def sign(self, plain: dict[str, Any]) -> dict[str, Any]:
        """`plain` with `key` set and `sig` the signature over the rest."""
        out = {k: v for k, v in plain.items() if k != "sig"}
        out["key"] = self.fingerprint
        out["sig"] = b64(self.private.sign(canonical_json(out)))
        return out


# -- the key files ---------------------------------------------------------------------------


def check_key_file(path: Path) -> os.stat_result | None:
    """Refuse (exit 4, naming it) a key file that is a symbolic link, not owned by the rig's user,
    or writable by its group or others; None when it does not exist."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise invalid(f"cannot be read ({e.strerror})", file=path) from None
    why = None
    if stat.S_ISLNK(st.st_mode):
        why = "is a symbolic link"
    elif not stat.S_ISREG(st.st_mode):
        why = "is not a regular file"
    elif st.st_uid != os.geteuid():
        why = f"is owned by uid {st.st_uid}, not by the rig's user (uid {os.geteuid()})"
    elif st.st_mode & 0o022:
        why = f"is writable by its group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    if why is not None:
        raise invalid(f"{why}: the rig does not trust a key file anyone else could have put there", file=path,
                      hint="make it a plain file of the rig's user that only it may write "
                      f"(chmod go-w {path}; the private key `key` mode 0600)")
    return st


def _read_pem(path: Path, data: bytes) -> Ed25519PrivateKey:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    body = data.strip()
    if body.startswith(_PEM_HEAD) and body.endswith(_PEM_TAIL):
        try:
            der = base64.b64decode(b"".join(body[len(_PEM_HEAD):-len(_PEM_TAIL)].split()), validate=True)
        except binascii.Error:
            der = b""
        if len(der) == 48 and der.startswith(_PKCS8_ED25519):
            return Ed25519PrivateKey.from_private_bytes(der[16:])
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        key = load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as e:
        raise invalid(f"is not a PKCS#8 PEM private key without a password ({e})", file=path,
                      hint="restore the home's key from a backup; a new key (remove the file) makes "
                      "every line this home signed before unverifiable") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise invalid("is not an Ed25519 key", file=path, hint="restore the home's key from a backup")
    return key


_KEYS: dict[Path, HomeKey] = {}


def home_key(home: Path) -> HomeKey:
    """The home's key pair, made on first use (O_EXCL, under the home's lock)."""
    home = Path(home)
    got = _KEYS.get(home)
    if got is not None:
        return got
    path = home / KEY
    if check_key_file(path) is None:
        from evalrig.store.files import exclusive_lock

        home.mkdir(parents=True, exist_ok=True)
        with exclusive_lock(home / ".key.lock"):
            if check_key_file(path) is None:
                _make_key(home)
    check_key_file(path)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        data = b""
        while chunk := os.read(fd, 1 << 16):
            data += chunk
    finally:
        os.close(fd)
    private = _read_pem(path, data)
    got = _KEYS[home] = HomeKey(private, private.public_key().public_bytes_raw())
    return got


def _make_key(home: Path) -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        NoEncryption,
        PrivateFormat,
        PublicFormat,
    )

    from evalrig.store.files import write_all, write_bytes_atomic

    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    raw = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    fd = os.open(home / KEY, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        write_all(fd, pem)
        os.fsync(fd)
    finally:
        os.close(fd)
    write_bytes_atomic(home / KEY_PUB, f"{b64(raw)}\n".encode())


def existing_home_fingerprint(home: Path) -> str | None:
    """The home's fingerprint when it has a key (none is made)."""
    if check_key_file(Path(home) / KEY) is None:
        return None
    return home_key(home).fingerprint


# -- the keys a reader believes ----------------------------------------------------------------


@dataclass
class Keyring:
    """The home's public key (when it has one) and the operator's trusted keys, by fingerprint."""

    home: str | None
    keys: dict[str, bytes]
    scopes: dict[str, frozenset[str]]
    _loaded: dict[str, Ed25519PublicKey] = field(default_factory=dict)

    def accepts(self, fpr: str, scope: Scope | None) -> bool:
        """Whether a line signed by `fpr` is believed where `scope` applies (None: the home's own
        files, which take only the home's key)."""
        if fpr == self.home:
            return scope != "register"
        return scope is not None and scope in self.scopes.get(fpr, frozenset())

    def verifies(self, obj: Mapping[str, Any], scope: Scope | None) -> str | None:
        """None when `obj`'s signature verifies under a key believed in `scope`; else why not."""
        fpr, sig = obj.get("key"), obj.get("sig")
        if type(sig) is not str:
            return "it has no signature (sig)"
        if type(fpr) is not str:
            return "it names no key"
        if not self.accepts(fpr, scope):
            where = "the home's own files take only the home's key" if scope is None else \
                f"no key trusted for {scope} has this fingerprint"
            return f"it is signed by {fpr}, which is not a key this home believes here ({where})"
        pub = self._loaded.get(fpr)
        if pub is None:
            pub = self._loaded[fpr] = _public_key(self.keys[fpr])
        try:
            raw_sig = base64.b64decode(sig, validate=True)
        except (binascii.Error, ValueError):
            return "its sig is not base64"
        from cryptography.exceptions import InvalidSignature

        try:
            pub.verify(raw_sig, signed_bytes(obj))
        except InvalidSignature:
            return f"its signature does not verify under {fpr}: the line was written or changed by someone " \
                "without that key"
        return None


def _trusted(home: Path) -> tuple[dict[str, bytes], dict[str, frozenset[str]]]:
    path = Path(home) / TRUSTED_KEYS
    if check_key_file(path) is None:
        return {}, {}
    keys: dict[str, bytes] = {}
    scopes: dict[str, set[str]] = {}
    for i, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        parts = line.split(None, 2)
        if not parts or parts[0].startswith("#"):
            continue
        hint = "each line: the base64 of a raw Ed25519 public key (another home's key.pub), then " \
            "`release-log` or `register`, then an optional comment"
        try:
            raw = base64.b64decode(parts[0], validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) != 32:
            raise invalid("is not the base64 of a 32-byte public key", file=path, line=i, hint=hint)
        if len(parts) < 2 or parts[1] not in SCOPES:
            raise invalid(f"names no scope ({' or '.join(SCOPES)})", file=path, line=i, hint=hint)
        fpr = fingerprint(raw)
        keys[fpr] = raw
        scopes.setdefault(fpr, set()).add(parts[1])
    return keys, {k: frozenset(v) for k, v in scopes.items()}


_RINGS: dict[Path, Keyring] = {}


def keyring(home: Path) -> Keyring:
    """What the home believes: its own key (made when missing) and its trusted keys."""
    home = Path(home)
    got = _RINGS.get(home)
    if got is None:
        own = home_key(home)
        keys, scopes = _trusted(home)
        keys[own.fingerprint] = own.raw_public
        got = _RINGS[home] = Keyring(own.fingerprint, keys, scopes)
    return got


def check_signed(path: Path, objs: Sequence[Any], ring: Keyring, scope: Scope | None,
                 start: int = 0, signed_before: bool = False) -> int | None:
    """Check the signature of every line from `start` (0-based): after the first signed line,
    one without a signature that verifies is a break (exit 4 naming it). Returns the 0-based
    index of the first signed line (None: all legacy)."""
    first: int | None = None if not signed_before else -1
    for i in range(start, len(objs)):
        obj = objs[i]
        if first is None and "sig" not in obj:
            continue
        why = ring.verifies(obj, scope)
        if why is not None:
            raise chain_broken(path, i + 1, why)
        if first is None:
            first = i
    return None if first == -1 else first


def believed(obj: Any) -> bool:
    """A line read through a verified chain that may count for a decision: a signed one (its
    signature was checked on read; unsigned lines before the first signed are legacy)."""
    sig = obj.get("sig") if isinstance(obj, dict) else getattr(obj, "sig", None)
    return sig is not None


# -- heads -------------------------------------------------------------------------------------


def _home_files(home: Path, known: Mapping[str, list[bytes]] | None = None) -> dict[str, list[bytes]]:
    out: dict[str, list[bytes]] = dict(known or {})
    for name in HOME_CHAINED:
        if name in out:
            continue
        try:
            data = (Path(home) / name).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            continue
        except OSError as e:
            raise invalid(f"cannot be read ({e.strerror})", file=Path(home) / name) from None
        out[name] = whole_lines(data)[0]
    return out


def heads(home: Path, name: str | None = None, lines: int = 0, last: str | None = None) -> dict[str, Any]:
    """Each chained file of the home: its complete lines and its last line's sha256, now. `name`:
    the file being appended to, as its writer knows it (`lines`, `last`)."""
    out: dict[str, Any] = {}
    files = _home_files(home)
    for n, got in files.items():
        out[n] = {"lines": len(got), "sha256": chain_hash(got[-1]) if got else None}
    if name is not None:
        out[name] = {"lines": lines, "sha256": last}
    return out


def check_heads(home: Path, known: Mapping[str, list[bytes]] | None = None) -> None:
    """Refuse (exit 4) a chained file of the home shorter than the last signed line of any of
    them says it was, or whose line there is not the one that line saw."""
    files = _home_files(home, known)
    ring: Keyring | None = None
    for name, lines in files.items():
        if not lines:
            continue
        try:
            obj = loads(lines[-1])
        except ValueError:
            continue  # its own read names the line
        if not isinstance(obj, dict) or not isinstance(obj.get("heads"), dict):
            continue
        ring = ring or keyring(home)
        if ring.verifies(obj, "release-log" if name == HOME_CHAINED[-1] else None) is not None:
            continue  # its own read refuses it
        for other, head in obj["heads"].items():
            if other not in HOME_CHAINED or not isinstance(head, dict):
                continue
            n, h = head.get("lines"), head.get("sha256")
            if type(n) is not int or n <= 0:
                continue
            got = files.get(other, [])
            if len(got) < n or chain_hash(got[n - 1]) != h:
                raise _cut(Path(home), other, len(got), n, name, len(lines))
    return None


def _cut(home: Path, other: str, has: int, n: int, by: str, line: int) -> EvalrigError:
    return invalid(
        f"the file has {has} complete lines, but line {line} of {by} (signed by this home) says it had "
        f"{n} lines ending in another line: lines were removed or replaced", file=home / other,
        line=min(has, n) or None,
        hint="the home's files are append-only and only the rig writes them; restore this file from a "
        "backup (a removed sign-off, export or release event would otherwise go unseen)")


def signed_lines(objs: Iterable[Any]) -> list[Any]:
    return [o for o in objs if believed(o)]


def check_pinned(home: Path, pinned: str | None) -> None:
    """Refuse (exit 4) a home whose key is not the one a release flow pinned (`--home-key FPR` or
    `EVALRIG_HOME_KEY`): a replaced key would sign whatever its holder wrote."""
    if not pinned:
        return
    got = existing_home_fingerprint(home)
    if got != pinned:
        raise invalid(f"the home's key is {got or 'missing'}, not the pinned {pinned}: the key was replaced, or "
                      "this is another home", file=Path(home) / KEY, field="--home-key",
                      hint="release from the home whose key the flow pinned (`evalrig key` prints a home's "
                      "fingerprint); if the key was replaced on purpose, pin the new fingerprint")
