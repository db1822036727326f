"""The environment contract every agent and command verifier starts from (docs/attempts.md,
"Environment"): which variables the rig sets, said once.

Pure: values in, a mapping out. The attempt code supplies the paths and ids; the runner
reads `RIG_SET` to refuse a `--secret` that the rig's own value would shadow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

MINIMAL_PATH = "/usr/local/bin:/usr/bin:/bin"
"""The PATH every agent and command verifier gets, and where a bare command name is looked up."""

CANARY_ENV = "RELEASE_SIGNING_TOKEN"
"""The canary's variable (docs/attempts.md "The canary"): a name a leaky agent would find
worth printing, and one no real setting of the rig uses."""

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
"""The variables that point a networked agent at its egress proxy (upper- and lower-case:
programs read one or the other)."""


GATEWAY_VARS = ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY",
                "EVALRIG_GATEWAY", "EVALRIG_GATEWAY_UPSTREAMS", "NO_PROXY", "no_proxy")
"""The variables that point an agent, driver or verifier at the model gateway
(docs/gateway.md): the rig sets them when a gateway serves the run, so a checkpoint's `env`
that sets any of them is refused (exit 4) rather than allowed to aim the SDKs elsewhere."""


GATEWAY_URL = "http://127.0.0.1:4000"
"""Where the model gateway listens inside every sandbox (evalrig.attempt.gateway.GATEWAY_URL;
each sandbox has a network namespace of its own, so the same address everywhere)."""


def gateway_env(upstreams: Sequence[tuple[str, str]], token: str) -> dict[str, str]:
    """The variables that point the official SDKs at the model gateway (docs/gateway.md):
    `upstreams` the gateway file's (name, api) in its order, `token` the launch's own
    (worth nothing outside the rig; never a provider's key).

    `OPENAI_BASE_URL` names the upstream called `openai` (of api openai), else the first of
    api openai; `ANTHROPIC_BASE_URL` likewise; `EVALRIG_GATEWAY_UPSTREAMS` is a JSON object
    of every name to its base URL (`/NAME/v1` for openai, `/NAME` for anthropic)."""
    # imported here: the sandbox imports this module and must not need orjson (a launch runs
    # under the system python in tests/test_sandbox.py's unprivileged harness)
    from evalrig.core.digest import canonical_json

    bases = {name: f"{GATEWAY_URL}/{name}/v1" if api == "openai" else f"{GATEWAY_URL}/{name}"
             for name, api in upstreams}
    env = {"EVALRIG_GATEWAY": GATEWAY_URL, "OPENAI_API_KEY": token, "ANTHROPIC_API_KEY": token,
           "EVALRIG_GATEWAY_UPSTREAMS": canonical_json(bases).decode(),
           "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    for var, api in (("OPENAI_BASE_URL", "openai"), ("ANTHROPIC_BASE_URL", "anthropic")):
        named = [name for name, a in upstreams if a == api]
        if named:
            env[var] = bases[api if api in named else named[0]]
    return env


def minimal_path() -> str:
    return MINIMAL_PATH


def _base(home: str, tmpdir: str) -> dict[str, str]:
    return {"PATH": MINIMAL_PATH, "HOME": home, "LANG": "C.UTF-8", "TMPDIR": tmpdir}


def _seconds(s: float) -> str:
    return f"{s:.3f}".rstrip("0").rstrip(".")


def agent_env(
    checkpoint_env: Mapping[str, str],
    secrets: Mapping[str, str],
    *,
    home: str,
    tmpdir: str,
    prompt: str,
    work: str,
    out: str,
    task_id: str,
    attempt_id: str,
    deadline_s: float,
    seed: int,
    canary: str | None = None,
    proxy_url: str | None = None,
    episode: bool = False,
    gateway: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """An agent's complete environment: the checkpoint's env, then the secrets, then the
    rig's own variables, so that neither of the first two overrides what the rig sets.
    `canary` (the attempt's run, never its estimate) and `proxy_url` (a granted network)
    add theirs; an episode's agent gets EVALRIG_EPISODE=1 (docs/episodes.md); `gateway`
    (`gateway_env`, the attempt's run only) the model gateway's, after everything else."""
    env = dict(checkpoint_env)
    env.update(secrets)
    env.update(_base(home, tmpdir))
    env.update({
        "EVALRIG_PROMPT": prompt,
        "EVALRIG_WORK": work,
        "EVALRIG_OUT": out,
        "EVALRIG_TASK_ID": task_id,
        "EVALRIG_ATTEMPT_ID": attempt_id,
        "EVALRIG_DEADLINE_S": _seconds(deadline_s),
        "EVALRIG_SEED": str(seed),
    })
    if episode:
        env["EVALRIG_EPISODE"] = "1"
    if canary is not None:
        env[CANARY_ENV] = canary
        if proxy_url is not None:
            env.update(dict.fromkeys(PROXY_VARS, proxy_url))
        if gateway is not None:
            env.update(gateway)
    return env


def verifier_env(*, home: str, tmpdir: str, evidence: str, verdict: str, tag: str,
                 secrets: Mapping[str, str] | None = None,
                 gateway: Mapping[str, str] | None = None) -> dict[str, str]:
    """A command verifier's complete environment. `tag` goes in EVALRIG_ATTEMPT_ID, the
    containment tag of its run (docs/attempts.md "Verifiers"); `secrets`, the
    --driver-secret values its task lists (granted()), come first so the rig's win;
    `gateway` (`gateway_env`: `[verifier] models = true`) last."""
    return {**(secrets or {}), **_base(home, tmpdir), "EVALRIG_EVIDENCE": evidence,
            "EVALRIG_VERDICT": verdict, "EVALRIG_ATTEMPT_ID": tag, **(gateway or {})}


DRIVER_TAG_ENV = "EVALRIG_DRIVER_TAG"
"""The mark on an episode driver's processes (docs/episodes.md, "The driver's side"): where
no PID namespace can be made, the rig kills the driver's leftovers by it, and the agent's
leftovers by its attempt id without it, since the driver carries that id too."""


def driver_env(*, home: str, tmpdir: str, out: str, task_id: str, attempt_id: str,
               seed: int, tag: str, secrets: Mapping[str, str] | None = None,
               gateway: Mapping[str, str] | None = None) -> dict[str, str]:
    """An episode driver's complete environment (docs/episodes.md, "The driver's side");
    `tag`, a value the agent cannot guess, goes in DRIVER_TAG_ENV; `secrets` and `gateway`
    (`[episode] models = true`) as for verifier_env."""
    return {**(secrets or {}), **_base(home, tmpdir), "EVALRIG_DRIVER_OUT": out,
            "EVALRIG_TASK_ID": task_id, "EVALRIG_ATTEMPT_ID": attempt_id, "EVALRIG_SEED": str(seed),
            DRIVER_TAG_ENV: tag, **(gateway or {})}


def granted(listed: Sequence[str], given: Mapping[str, str]) -> dict[str, str]:
    """Of the operator's --driver-secret values, those a task's driver or command verifier
    lists (`[episode] secrets`, `[verifier] secrets`): nothing else reaches it."""
    return {name: given[name] for name in listed if name in given}


RIG_SET = frozenset(agent_env({}, {}, home="", tmpdir="", prompt="", work="", out="", task_id="",
                              attempt_id="", deadline_s=0, seed=0, proxy_url="", canary="",
                              episode=True)
                    ) - {CANARY_ENV}
"""Variables the rig gives an agent itself beside the canary's (the proxy's when the
operator grants the network): a secret of one of these names would be shadowed."""

DRIVER_RIG_SET = frozenset(driver_env(home="", tmpdir="", out="", task_id="", attempt_id="", seed=0, tag="")
                           ) | frozenset(verifier_env(home="", tmpdir="", evidence="", verdict="", tag=""))
"""Variables the rig gives drivers and command verifiers itself: a --driver-secret of one of
these names would be shadowed."""
