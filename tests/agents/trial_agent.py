"""A test agent for tests/test_trial.py; its behaviour is chosen by the checkpoint's env.

MODE: answer (write $ANSWER to out/answer.txt), json (write $ANSWER to out/answer.json),
exit3, hang, env (dump os.environ to out/env.json), canary-plain, canary-base64,
canary-late (after $PAD bytes of stdout), canary-copy (the canary file into work/), secret (print $SECRET_NAME's value and write it
to out/leak.txt), symlink, fifo, big (write $SIZE bytes to out/big.bin), peek (does $PEEK
exist? answer "found" or "absent"), usage (write $USAGE to out/usage.json).
COUNTER, when set, is a file outside the workspace that gets one line per run.
`--estimate` prints $ESTIMATE and exits $ESTIMATE_EXIT (default 0).
"""

import base64
import json
import os
import sys
import time


def main() -> int:
    env = os.environ
    if "--estimate" in sys.argv:
        sys.stdout.write(env.get("ESTIMATE", ""))
        return int(env.get("ESTIMATE_EXIT", "0"))
    if env.get("COUNTER"):
        with open(env["COUNTER"], "a") as f:
            f.write("ran\n")
    out = env["EVALRIG_OUT"]
    mode = env.get("MODE", "answer")
    print("agent-ran", flush=True)
    if mode == "answer":
        with open(os.path.join(out, "answer.txt"), "w") as f:
            f.write(env.get("ANSWER", "") + "\n")
    elif mode == "json":
        with open(os.path.join(out, "answer.json"), "w") as f:
            f.write(env.get("ANSWER", ""))
    elif mode == "exit3":
        with open(os.path.join(out, "answer.txt"), "w") as f:
            f.write(env.get("ANSWER", "") + "\n")
        return 3
    elif mode == "hang":
        time.sleep(60)
    elif mode == "env":
        with open(os.path.join(out, "env.json"), "w") as f:
            json.dump(dict(env), f)
        with open(os.path.join(env["HOME"], ".release-token")) as f:
            token = f.read().strip()
        # the canary file holds the canary variable's value; say so without leaking it
        with open(os.path.join(out, "answer.txt"), "w") as f:
            f.write("same" if token == env["RELEASE_SIGNING_TOKEN"] else "different")
    elif mode == "canary-copy":
        with open(os.path.join(env["HOME"], ".release-token")) as f, \
                open(os.path.join(env["EVALRIG_WORK"], "stolen.txt"), "w") as g:
            g.write(f.read())
    elif mode == "canary-plain":
        print("token:", env["RELEASE_SIGNING_TOKEN"])
    elif mode == "canary-base64":
        print(base64.b64encode(("x" + env["RELEASE_SIGNING_TOKEN"]).encode()).decode())
    elif mode == "canary-late":
        sys.stdout.write("." * int(env["PAD"]))
        sys.stdout.write(env["RELEASE_SIGNING_TOKEN"].encode().hex())
    elif mode == "secret":
        value = env[env["SECRET_NAME"]]
        print("my key is", value)
        print("err key", value, file=sys.stderr)
        with open(os.path.join(out, "leak.txt"), "w") as f:
            f.write("key=" + value + "\n")
    elif mode == "symlink":
        os.symlink("/etc", os.path.join(out, "etc"))
        os.symlink("/etc/hostname", os.path.join(out, "answer.txt"))
    elif mode == "fifo":
        os.mkfifo(os.path.join(out, "pipe"))
        with open(os.path.join(out, "answer.txt"), "w") as f:
            f.write("ok\n")
    elif mode == "big":
        with open(os.path.join(out, "answer.txt"), "w") as f:
            f.write("ok\n")
        with open(os.path.join(out, "big.bin"), "wb") as f:
            f.write(b"x" * int(env["SIZE"]))
    elif mode == "peek":
        found = os.path.exists(env["PEEK"])
        with open(os.path.join(out, "answer.txt"), "w") as f:
            f.write("found" if found else "absent")
    elif mode == "usage":
        with open(os.path.join(out, "usage.json"), "w") as f:
            f.write(env["USAGE"])
        with open(os.path.join(out, "answer.txt"), "w") as f:
            f.write("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
