"""`key`: the home's public key and its fingerprint (docs/release-engineers.md, "The home's key")."""

from __future__ import annotations

import os

from evalrig.cli.app import DebugOpt, JsonOpt, command, emit_json, say


@command("key", "evalrig key --json")
def key_cmd(json_out: JsonOpt = False, debug: DebugOpt = False) -> int:
    """The home's public key (base64 of the raw Ed25519 key, as `key.pub` and `trusted_keys` hold it)
    and its fingerprint (`sha256:` + hex of the raw key). The key pair is made on first use.

    Another home trusts this one by adding a line `PUBKEY SCOPE [comment]` to its
    `$EVALRIG_HOME/trusted_keys` (scope `release-log` or `register`); a release flow pins the
    fingerprint with `--home-key` or `EVALRIG_HOME_KEY`. Exit 0; 4 when the key file is refused.
    """
    from evalrig.store.layout import KEY, KEY_PUB, home_path
    from evalrig.store.ledger import ensure_dir, refuse_unusable_home
    from evalrig.store.signing import b64, home_key

    home = home_path(os.environ)
    refuse_unusable_home(home)
    ensure_dir(home)
    k = home_key(home)
    pub = b64(k.raw_public)
    if json_out:
        emit_json({"public_key": pub, "fingerprint": k.fingerprint, "home": str(home),
                   "key": str(home / KEY), "key_pub": str(home / KEY_PUB)})
    else:
        say([f"public key: {pub}", f"fingerprint: {k.fingerprint}", f"home: {home}"])
    return 0
