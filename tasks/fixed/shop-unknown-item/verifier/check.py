"""The command verifier of the bundled "shop" episodes: the orders in the shop's final
world (driver/world.json, which the driver wrote after the episode) are exactly the ones
check.json expects. Grades from the evidence alone; the driver is not run again."""

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main():
    expected = json.loads((HERE / "check.json").read_text())["orders"]
    world_file = Path(os.environ["EVALRIG_EVIDENCE"]) / "driver" / "world.json"
    try:
        world = json.loads(world_file.read_text())
    except (OSError, ValueError):
        print(f"no readable {world_file}", file=sys.stderr)
        return 1
    if world.get("orders") != expected:
        print(f"orders {world.get('orders')!r}, expected {expected!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
