"""The operator's gateway file (`run --gateway FILE`, docs/gateway.md): loaded, checked
against what the run may call, its keys resolved from the rig's environment.

Every refusal is exit 4 before the first attempt, naming the file, the field and what to
do: an upstream whose `key_env` is unset, a model whose upstream the file lacks, a
`base_url` that is not http(s) (the model refuses it, reported at its line), a model
neither genai-prices nor `[prices]` can price. The keys are read here and handed on in
memory; nothing here writes them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from evalrig.core.digest import sha256_bytes
from evalrig.core.environment import GATEWAY_VARS
from evalrig.core.errors import Problem, invalid
from evalrig.core.pricing import genai_prices_version, is_priced, price_provider, prices_digest
from evalrig.core.tomlerr import (
    TomlDoc,
    key_lines,
    line_of,
    parse_toml,
    raise_problems,
    validate_doc,
)
from evalrig.models.gateway import GatewayFacts, GatewayFile, Upstream, UpstreamFacts, split_model
from evalrig.models.inputs import Role
from evalrig.store.checkpoint import CHECKPOINT_TOML, Checkpoint

GATEWAY_VARS_HINT = ("remove it from [agent] env: the rig points the agent at the model gateway itself "
                     f"({', '.join(GATEWAY_VARS)}), with a per-attempt token in place of any key, when the "
                     "run is given --gateway FILE (docs/gateway.md)")

_HINT = "fix the gateway file (evalrig schema gateway shows the format; docs/gateway.md)"


@dataclass(frozen=True)
class LoadedGateway:
    """A gateway file as `run` read it: its spec, its bytes' digest, its text (for lines)."""

    path: Path
    spec: GatewayFile
    digest: str
    text: str

    def line(self, *key: str) -> int | None:
        return line_of(key_lines(self.text), key)

    def facts(self) -> GatewayFacts:
        """The manifest's `gateway` (never a key)."""
        return GatewayFacts(
            file_digest=self.digest, genai_prices=genai_prices_version(),
            prices_digest=prices_digest(self.spec.prices),
            upstreams={name: UpstreamFacts(api=u.api, base_url=u.base_url, price_provider=price_provider(u))
                       for name, u in sorted(self.spec.upstreams.items())},
            prices=dict(sorted(self.spec.prices.items())))


def load_gateway_file(path: Path) -> LoadedGateway:
    """Parse and validate the gateway file; every problem reads `file:line: field: message`."""
    path = Path(path)
    if path.is_dir():
        raise invalid("is a directory, not a gateway file", file=path,
                      hint="give --gateway the path of the TOML file naming the upstreams (docs/gateway.md)")
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise invalid("no such file", file=path, field="--gateway",
                      hint="give --gateway the path of the TOML file naming the upstreams (docs/gateway.md)"
                      ) from None
    except OSError as e:
        raise invalid(f"cannot be read ({e.strerror})", file=path, field="--gateway") from None
    doc = parse_toml(str(path), raw)
    if isinstance(doc, Problem):
        raise_problems([doc], hint=_HINT)
    assert isinstance(doc, TomlDoc)
    spec = validate_doc(doc, GatewayFile)
    if isinstance(spec, list):
        raise_problems(spec, hint=_HINT)
    return LoadedGateway(path, spec, sha256_bytes(raw), doc.text)


def resolve_keys(gw: LoadedGateway, environ: Mapping[str, str]) -> dict[str, str | None]:
    """Each upstream's key from the rig's environment (None where `key_env = ""`); an
    unset (or empty) variable is refused, naming every upstream that lacks its key."""
    problems = []
    keys: dict[str, str | None] = {}
    for name, up in sorted(gw.spec.upstreams.items()):
        if not up.key_env:
            keys[name] = None
            continue
        value = environ.get(up.key_env)
        if not value:
            problems.append(Problem(str(gw.path), f"{up.key_env} is not set in the rig's environment",
                                    f"upstreams.{name}.key_env", gw.line("upstreams", name, "key_env")))
            continue
        keys[name] = value
    if problems:
        raise_problems(problems, hint="export the key in the environment that runs the rig (it is read "
                       "when the run starts and never written anywhere), or set key_env = \"\" for an "
                       "upstream that needs none")
    return keys


@dataclass(frozen=True)
class ModelUse:
    """A model something in the run may call, and where that is said (for the refusal)."""

    model: str
    role: Role
    file: str
    field: str
    line: int | None = None


def check_models(gw: LoadedGateway, uses: Sequence[ModelUse], as_of: datetime) -> None:
    """Refuse (exit 4, one problem per use) a model whose upstream the file lacks, whose
    upstream does not serve that role, or that neither `[prices]` nor genai-prices prices."""
    problems = []
    for use in uses:
        upstream_name, _ = split_model(use.model)
        up: Upstream | None = gw.spec.upstreams.get(upstream_name)
        if up is None:
            known = ", ".join(sorted(gw.spec.upstreams))
            problems.append(Problem(use.file, f"{use.model!r}: the gateway file {gw.path} has no upstream "
                                    f"{upstream_name!r} (it has: {known}); add [upstreams.{upstream_name}] "
                                    "to it or name a model of one of those", use.field, use.line))
            continue
        if use.role not in up.roles:
            problems.append(Problem(use.file, f"{use.model!r}: upstream {upstream_name!r} of {gw.path} does "
                                    f"not serve role {use.role} (roles = {up.roles}); add {use.role!r} to "
                                    f"upstreams.{upstream_name}.roles", use.field, use.line))
            continue
        if not is_priced(gw.spec.prices, use.model, price_provider(up), as_of):
            problems.append(Problem(use.file, f"{use.model!r}: genai-prices {genai_prices_version()} does not "
                                    f"price it (provider {price_provider(up)!r}); add "
                                    f"\"{use.model}\" = {{ input = ..., output = ... }} (USD per million "
                                    f"tokens) to [prices] of {gw.path}, or set "
                                    f"upstreams.{upstream_name}.price_provider", use.field, use.line))
    if problems:
        raise_problems(problems, hint="a call the rig cannot route or price would leave cost unmeasured: "
                       "fix the gateway file or the model names (docs/gateway.md)")


def gateway_var_problems(checkpoint: Checkpoint) -> list[Problem]:
    """Each of the gateway's variables the checkpoint's env sets (`run` refuses them; `validate`
    lists them): the rig sets them itself, so a checkpoint that does would aim the SDKs
    elsewhere or shadow the rig's."""
    path = checkpoint.dir / CHECKPOINT_TOML
    try:
        index = key_lines(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        index = {}
    return [Problem(str(path), f"{name} is the model gateway's variable, set by the rig", f"agent.env.{name}",
                    line_of(index, ("agent", "env", name)))
            for name in GATEWAY_VARS if name in checkpoint.spec.agent.env]
