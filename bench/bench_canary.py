"""Throughput of the canary scan over a 64 MiB evidence tree (docs/attempts.md "The canary").

Run: .venv/bin/python bench/bench_canary.py [--mib 64] [--repeat 3]

Builds a tree of mixed evidence (logs with UUIDs and base64 lines, JSON, random binaries,
a float array, a base64 blob, gzip, zip, bz2 and xz archives of logs) and scans every file
as an attempt does (evidence.scan_file, 1 MiB reads), three ways, best of `--repeat`:
- read only: the same reads with no scan (the floor);
- plain: the stream pass alone (the forms in the bytes as they are and in their hex
  digits; no normalised text, no containers, no decoded runs), the baseline;
- full: the scan the rig runs.
Prints MB/s of each, the full scan's ratio to the plain one, and the extra seconds a full
64 MiB of evidence costs an attempt. Also times the scan of a no-op attempt's evidence
(a few small files) and of an 8 MiB request body (streams.scan_body, the gateway's check).
"""

from __future__ import annotations

import argparse
import base64
import bz2
import gzip
import io
import json
import lzma
import os
import random
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evalrig.attempt.canary import needle, new_canary  # noqa: E402
from evalrig.attempt.evidence import scan_file  # noqa: E402
from evalrig.attempt.streams import MAX_DEPTH, StreamScanner, needle_forms, scan_body  # noqa: E402

MIB = 1 << 20
WORDS = ("request", "served", "error", "cache", "miss", "ok", "user", "token", "retry", "GET", "POST", "latency")


def log_text(size: int, rng: random.Random) -> bytes:
    lines, total = [], 0
    while total < size:
        kind = rng.random()
        if kind < 0.6:
            line = " ".join(rng.choice(WORDS) for _ in range(8)) + f" ms={rng.random() * 100:.2f}"
        elif kind < 0.8:
            h = rng.randbytes(16).hex()
            line = f"id={h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]} sha={rng.randbytes(32).hex()}"
        elif kind < 0.9:
            line = json.dumps({"event": rng.choice(WORDS), "n": rng.randrange(1 << 30), "path": "/usr/lib/x/y.py"})
        else:
            line = base64.b64encode(rng.randbytes(57)).decode()
        lines.append(line)
        total += len(line) + 1
    return ("\n".join(lines) + "\n").encode()[:size]


def make_tree(root: Path, mib: int) -> tuple[int, int]:
    """Files adding up to about `mib` MiB; returns their total size and the bytes the
    scan looks at (an archive's content too, besides its own bytes)."""
    rng = random.Random(20)
    part = mib * MIB // 16
    files: dict[str, bytes] = {}
    content = 0
    for i in range(4):
        files[f"logs/app{i}.log"] = log_text(part, rng)  # 4/16 text
    for i in range(3):
        files[f"bin/blob{i}.bin"] = rng.randbytes(part)  # 3/16 random binary
    import array
    floats = array.array("f", (rng.gauss(0, 1) if rng.random() < 0.3 else 0.0 for _ in range(part // 4)))
    files["bin/weights.f32"] = floats.tobytes()  # 1/16 a mostly-zero array
    files["data/blob.b64"] = base64.encodebytes(rng.randbytes(part * 3 // 4))  # 1/16 base64
    files["data/records.json"] = json.dumps([{"k": rng.randbytes(8).hex(), "v": log_text(200, rng).decode()}
                                             for _ in range(part // 300)]).encode()[:part]
    # compressed: each about 1/16 of the tree, holding about 4x that decompressed
    for name, pack in (("gz", gzip.compress), ("bz2", bz2.compress), ("xz", lzma.compress)):
        body, data = b"", b""
        while len(body) < part:
            data += log_text(part // 2, rng)
            body = pack(data)
            if len(data) > 8 * part:
                break
        files[f"archive/logs.{name}"] = body
        content += len(data)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        while buf.tell() < part:
            z.writestr(f"f{buf.tell()}.txt", log_text(MIB, rng) + rng.randbytes(MIB // 4))
            content += MIB + MIB // 4
    files["archive/logs.zip"] = buf.getvalue()
    files["misc/mixed.bin"] = b"".join(log_text(4096, rng) + rng.randbytes(4096) for _ in range(part // 8192))
    total = 0
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        total += len(data)
    return total, total + content


def read_only(paths: list[Path]) -> None:
    for p in paths:
        with open(p, "rb") as f:
            while f.read(MIB):
                pass


def plain(paths: list[Path], needles: list[bytes]) -> None:
    forms = needle_forms(needles)
    for p in paths:
        s = StreamScanner(forms, _depth=MAX_DEPTH)  # the stream pass alone
        with open(p, "rb") as f:
            while block := f.read(MIB):
                s.feed(block)
        assert not s.found


def full(paths: list[Path], needles: list[bytes]) -> None:
    forms = needle_forms(needles)
    for p in paths:
        assert not scan_file(p, forms)


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    needles = [needle(new_canary())]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        total, looked = make_tree(root / "tree", args.mib)
        paths = sorted(p for p in (root / "tree").rglob("*") if p.is_file())
        mb = total / 1e6
        floor = best_of(args.repeat, lambda: read_only(paths))
        base = best_of(args.repeat, lambda: plain(paths, needles))
        scan = best_of(args.repeat, lambda: full(paths, needles))
        print(f"evidence tree: {len(paths)} files, {total / MIB:.1f} MiB (best of {args.repeat}, os.cpu_count()={os.cpu_count()})")
        print(f"  read only          : {floor:7.2f} s  {mb / floor:8.0f} MB/s")
        print(f"  plain scan (before): {base:7.2f} s  {mb / base:8.0f} MB/s")
        print(f"  full scan          : {scan:7.2f} s  {mb / scan:8.0f} MB/s  ({scan / base:.1f}x plain); "
              f"{looked / MIB:.0f} MiB looked at with the archives' content: {looked / 1e6 / scan:.0f} MB/s")
        print(f"  extra per 64 MiB of evidence: {(scan - base) * 64 * MIB / total:.2f} s")
        per_file = {}
        for p in paths:
            per_file[p.relative_to(root / "tree").as_posix()] = best_of(1, lambda p=p: full([p], needles))
        slowest = sorted(per_file.items(), key=lambda kv: -kv[1])[:4]
        print("  slowest files: " + ", ".join(f"{k} {p.stat().st_size / MIB:.1f} MiB {t:.2f} s"
                                             for (k, t), p in ((kv, root / "tree" / kv[0]) for kv in slowest)))
        small = root / "noop"
        small.mkdir()
        (small / "answer.txt").write_text("ok\n")
        (small / "stdout.txt").write_text("done in 3 steps\n" * 20)
        (small / "evidence_index.json").write_text(json.dumps({"entries": [{"path": "out/answer.txt"}] * 3}))
        few = sorted(small.iterdir())
        noop = best_of(200, lambda: full(few, needles))
        noop_plain = best_of(200, lambda: plain(few, needles))
        print(f"  a no-op attempt's evidence (3 small files): full {noop * 1e3:.3f} ms, plain {noop_plain * 1e3:.3f} ms")
    body = json.dumps({"messages": [{"role": "user", "content": log_text(8 * MIB, random.Random(3)).decode()}]}).encode()
    gate = best_of(args.repeat, lambda: scan_body(body, needles))
    print(f"  an 8 MiB request body (scan_body): {gate:.2f} s  {len(body) / 1e6 / gate:.0f} MB/s")


if __name__ == "__main__":
    main()
