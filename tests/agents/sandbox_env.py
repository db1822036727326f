"""Test agent: prints its environment, directory and ids as JSON, then exits with argv[1]."""

import json
import os
import sys

print(
    json.dumps(
        {"env": dict(os.environ), "cwd": os.getcwd(), "uid": os.getuid(), "gid": os.getgid()}
    )
)
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
