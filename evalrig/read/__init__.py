"""Reading the evidence (docs/reading.md): `show` and `export`, over the one store.

Everything here reads; nothing writes a bundle. Untrusted text (whatever an agent or a
driver wrote) is returned as data and escaped where it is shown (`text.untrusted`)."""
