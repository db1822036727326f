#!/usr/bin/env -S python3 -I -S
"""$EVALRIG_RUN_UNTRUSTED -- CMD ARGS...: ask the rig to run CMD on the agent's evidence.

The rig copies this file beside its socket in a folder of the verifier's alone
(evalrig.attempt.untrusted). It sends CMD and everything on its stdin, and gives back the
child's stdout, stderr and exit status (124 time-out, 128+N signal N, 125 the rig could
not run it). It starts nothing itself: the socket is the verifier's only way to the rig.
Standard library only; it runs under the verifier's python3.
"""

import json
import os
import socket
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv):
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: $EVALRIG_RUN_UNTRUSTED -- CMD [ARGS...]\n")
        return 125
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.chdir(HERE)  # a socket's path may hold 107 bytes; HERE may be longer
        conn.connect("run.sock")
        conn.sendall(json.dumps({"argv": argv[2:]}).encode() + b"\n")
        stdin = sys.stdin.buffer if sys.stdin is not None else None
        while stdin is not None:
            chunk = stdin.read1(1 << 16)
            if not chunk:
                break
            conn.sendall(chunk)
        conn.shutdown(socket.SHUT_WR)
        data = bytearray()
        while True:
            chunk = conn.recv(1 << 16)
            if not chunk:
                break
            data += chunk
    except OSError as e:
        sys.stderr.write(f"evalrig-run-untrusted: the rig's service is unreachable: {e}\n")
        return 125
    finally:
        conn.close()
    head, _, body = bytes(data).partition(b"\n")
    try:
        answer = json.loads(head)
        code, n_out, n_err = int(answer["exit"]), int(answer["stdout"]), int(answer["stderr"])
    except (ValueError, KeyError, TypeError):
        sys.stderr.write("evalrig-run-untrusted: the rig's answer was malformed\n")
        return 125
    sys.stdout.buffer.write(body[:n_out])
    sys.stdout.buffer.flush()
    sys.stderr.buffer.write(body[n_out:n_out + n_err])
    sys.stderr.buffer.flush()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
