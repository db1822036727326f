"""Test agent: tries what argv[1] (a JSON object) asks and prints what happened as JSON.

{"read": [paths], "list": [dirs], "write": [paths], "connect": [[host, port]],
 "fork": n (children kept alive until all are started)}"""

import json
import os
import socket
import sys
import time

ask = json.loads(sys.argv[1])
seen: dict[str, object] = {}
for path in ask.get("read", []):
    try:
        with open(path, "rb") as f:
            seen["read:" + path] = f.read(100).decode(errors="replace")
    except OSError as exc:
        seen["read:" + path] = "error:" + type(exc).__name__
for path in ask.get("list", []):
    try:
        seen["list:" + path] = sorted(os.listdir(path))
    except OSError as exc:
        seen["list:" + path] = "error:" + type(exc).__name__
for path in ask.get("write", []):
    try:
        with open(path, "w") as f:
            f.write("agent was here")
        seen["write:" + path] = "ok"
    except OSError as exc:
        seen["write:" + path] = f"error:{exc.errno}"
for host, port in ask.get("connect", []):
    try:
        socket.create_connection((host, port), timeout=3).close()
        seen[f"connect:{port}"] = "ok"
    except OSError as exc:
        seen[f"connect:{port}"] = "error:" + type(exc).__name__
if "fork" in ask:
    started, failed, pids = 0, 0, []
    for _ in range(ask["fork"]):
        try:
            pid = os.fork()
        except OSError:
            failed += 1
            continue
        if pid == 0:  # stay alive so that every child counts against the limit at once
            time.sleep(30)
            os._exit(0)
        started += 1
        pids.append(pid)
    for pid in pids:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    seen["fork"] = {"started": started, "failed": failed}
print(json.dumps(seen))
