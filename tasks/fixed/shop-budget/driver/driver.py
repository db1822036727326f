"""The driver of the bundled "shop" episodes (docs/episodes.md): a scripted customer of a
small shop, and the shop's two tools, over a world kept in memory.

The customer opens with `scenario.json`'s request. `lookup(item)` answers the price or
marks an error (an item the catalog lacks); `order(item, qty)` places an order. The driver
is total (docs/episodes.md): any call it cannot use (an unknown tool, a missing or
mistyped argument, arguments that are not an object) is answered with a tool message
marked `"error": true`, never a crash, since a driver fault after the agent's first frame
counts against the candidate. When the
agent answers without a tool call, the customer either hangs up (`"after_answer": "end"`)
or keeps chatting (`"chat"`), so that the episode ends by whatever bound the task sets.
After `finish` it writes world.json (the orders, lookups, errors and the termination) into
$EVALRIG_DRIVER_OUT for the task's verifier. Standard library only, no model.
"""

import json
import os
import sys

TOOLS = [
    {"type": "function", "function": {
        "name": "lookup", "description": "The price of an item of the catalog, in dollars.",
        "parameters": {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]}}},
    {"type": "function", "function": {
        "name": "order", "description": "Place an order for qty of an item.",
        "parameters": {"type": "object", "properties": {"item": {"type": "string"}, "qty": {"type": "integer"}},
                       "required": ["item", "qty"]}}},
]  # fmt: skip


def send(frame):
    sys.stdout.write(json.dumps(frame) + "\n")
    sys.stdout.flush()


def call(world, catalog, name, args):
    """(content, is_error) of one tool call; never raises, whatever the call holds."""
    if name not in ("lookup", "order"):
        world["errors"] += 1
        return f"no tool {name!r}: the tools are lookup and order", True
    if not isinstance(args, dict):
        world["errors"] += 1
        return "the arguments must be a JSON object", True
    item = args.get("item")
    if not isinstance(item, str):
        world["errors"] += 1
        return f"{name}: item must be a string, got {json.dumps(item)[:80]}", True
    if item not in catalog:
        world["errors"] += 1
        return f"no item {item!r} in the catalog", True
    if name == "lookup":
        world["lookups"] += 1
        return f"{item}: {catalog[item]} dollars", False
    qty = args.get("qty")
    if isinstance(qty, int) and not isinstance(qty, bool) and qty > 0:
        world["orders"].append({"item": item, "qty": qty})
        return f"order {len(world['orders'])} placed: {qty} x {item}", False
    world["errors"] += 1
    return f"cannot {name} that", True


def main():
    with open("scenario.json", encoding="utf-8") as f:
        scenario = json.load(f)
    catalog = scenario["catalog"]
    world = {"orders": [], "lookups": 0, "errors": 0, "termination": None}
    start = json.loads(sys.stdin.readline())
    assert start["type"] == "start"
    send({"type": "session", "tools": TOOLS, "messages": [{"role": "user", "content": scenario["opening"]}]})
    for line in sys.stdin:
        frame = json.loads(line)
        if frame["type"] == "finish":
            world["termination"] = frame["termination"]
            break
        calls = frame["message"].get("tool_calls") or []
        if calls:
            replies = []
            for c in calls:
                function = c.get("function") if isinstance(c, dict) else None
                function = function if isinstance(function, dict) else {}
                try:
                    args = json.loads(function.get("arguments") or "{}")
                except (TypeError, ValueError):
                    args = None
                content, error = call(world, catalog, function.get("name"), args)
                reply = {"role": "tool", "tool_call_id": c.get("id") if isinstance(c, dict) else None,
                         "content": content}
                if error:
                    reply["error"] = True
                replies.append(reply)
            send({"type": "reply", "messages": replies})
        elif scenario.get("after_answer") == "chat":
            send({"type": "reply", "messages": [{"role": "user", "content": "Thanks! Anything else I should know?"}]})
        else:
            send({"type": "end", "reason": "the customer hung up"})
    with open(os.path.join(os.environ["EVALRIG_DRIVER_OUT"], "world.json"), "w", encoding="utf-8") as f:
        json.dump(world, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
