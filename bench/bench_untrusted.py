"""The untrusted-run service's cost per call (docs/tasks.md, "A verifier never runs the agent's code itself").

    .venv/bin/python bench/bench_untrusted.py [--n 40]

For each level, `--n` calls of `$EVALRIG_RUN_UNTRUSTED -- python3 -I -c pass` made the way a
verifier makes them (the client program, the socket, a fresh copy of a small evidence tree,
a fresh sandbox as the agent's uid, the record line), one after another, beside a floor
measured in the same run: the same command launched directly through the sandbox, with no
client, socket, copy or record. Prints milliseconds per call for both and the difference,
what the service adds to each call. A fix-code verification makes one call; a HumanEval
one about one per assert of the problem's test.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evalrig.attempt import untrusted  # noqa: E402
from evalrig.attempt.sandbox import Launch, launch, resolve_level  # noqa: E402
from evalrig.core.environment import MINIMAL_PATH  # noqa: E402

COMMAND = ["python3", "-I", "-c", "pass"]


def evidence(root: Path) -> Path:
    """A small attempt's evidence: out/, the two streams and a source file."""
    ev = root / "evidence"
    (ev / "out").mkdir(parents=True)
    (ev / "work" / "src").mkdir(parents=True)
    (ev / "out" / "answer.txt").write_text("fixed\n")
    (ev / "stdout.txt").write_text("")
    (ev / "stderr.txt").write_text("")
    (ev / "work" / "src" / "solution.py").write_text("def solve(x):\n    return 2 * x\n" * 20)
    return ev


def per_call_ms(n: int, one: object) -> float:
    """The median of n timed calls, in milliseconds."""
    times = []
    for _ in range(n):
        began = time.perf_counter()
        one()  # type: ignore[operator]
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def service_ms(level: str, root: Path, ev: Path, n: int) -> float:
    side = untrusted.AgentSide(level=level, slot=0, evidence=ev, timeout_s=10)
    svc = untrusted.start(side, root / "svc", root / "calls", root / "untrusted.jsonl", 1)
    try:
        def one() -> None:
            p = subprocess.run([str(svc.client), "--", *COMMAND], capture_output=True, stdin=subprocess.DEVNULL,
                               env={"PATH": MINIMAL_PATH, "LANG": "C.UTF-8"})  # as in a verifier's sandbox
            assert p.returncode == 0, p.stderr
        return per_call_ms(n, one)
    finally:
        svc.close()


def floor_ms(level: str, root: Path, n: int) -> float:
    work = root / "floor"
    work.mkdir()

    def one() -> None:
        fin = launch(Launch(argv=list(COMMAND), cwd=work, env={"PATH": MINIMAL_PATH, "LANG": "C.UTF-8"},
                            level=level, rw_paths=[work], ro_paths=[], network=False,  # type: ignore[arg-type]
                            timeout_s=10, max_output_bytes=1 << 20, stdout_path=root / "out.txt",
                            stderr_path=root / "err.txt", unprivileged=True))
        assert fin.exit_code == 0, fin
    return per_call_ms(n, one)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=40, help="calls per level (default 40)")
    args = parser.parse_args()
    print(f"{'level':8} {'service ms/call':>16} {'floor ms/launch':>16} {'service adds':>13}")
    for level in ("process", "bwrap"):
        if resolve_level("auto").level != "bwrap" and level == "bwrap":
            print(f"{level:8} (bwrap cannot run here)")
            continue
        with tempfile.TemporaryDirectory(prefix="bench-untrusted-") as tmp:
            root = Path(tmp)
            root.chmod(0o755)
            ev = evidence(root)
            floor = floor_ms(level, root, args.n)
            served = service_ms(level, root, ev, args.n)
        print(f"{level:8} {served:16.1f} {floor:16.1f} {served - floor:13.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
