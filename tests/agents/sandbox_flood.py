"""Test agent: writes argv[1] bytes of b"x" to stdout as fast as it can, then the bytes
of the hex string argv[2] (if given) to the stream named by argv[3] (default stdout)."""

import os
import sys

total = int(sys.argv[1])
block = b"x" * (8 << 20)
left = total
while left > 0:
    left -= os.write(1, block[: min(left, len(block))])
if len(sys.argv) > 2:
    tail = bytes.fromhex(sys.argv[2])
    fd = 2 if len(sys.argv) > 3 and sys.argv[3] == "stderr" else 1
    while tail:
        tail = tail[os.write(fd, tail) :]
