"""Test agent: starts a setsid grandchild (double fork) that sleeps forever, then hangs
ignoring SIGTERM. Prints "ready" once the grandchild exists."""

import os
import signal
import sys
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:  # the grandchild: in its own session, orphaned at once
        os.close(r)
        os.write(w, b"x")
        os.close(w)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            time.sleep(3600)
    os._exit(0)
os.close(w)
os.read(r, 1)  # the grandchild is alive
print("ready", flush=True)
sys.stdout.flush()
while True:
    time.sleep(3600)
