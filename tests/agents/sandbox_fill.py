"""Test agent: fills argv[1] with 1 MiB writes until something stops it."""

import os
import sys

block = b"\0" * (1 << 20)
with open(sys.argv[1], "wb") as f:
    written = 0
    while True:
        try:
            f.write(block)
            f.flush()
            os.fsync(f.fileno()) if written % (64 << 20) == 0 else None
        except OSError as exc:
            print(f"stopped after {written} bytes: errno {exc.errno}", flush=True)
            sys.exit(7)
        written += len(block)
        if len(sys.argv) > 2 and written >= int(sys.argv[2]):
            break
