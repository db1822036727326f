"""Anthropic's 1-hour cache writes (docs/gateway.md, "Usage"), through `eval.sh run
--gateway` with the stand-in reporting them as the API does
(`usage.cache_creation.ephemeral_1h_input_tokens`): the call is metered at the 1-hour write
price, streamed and not, and `verify` prices it again the same way.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.redteam import add_task, eval_sh, make_checkpoint, results
from tests.test_gateway_wire import KEY, Standin, _lines, standin

__all__ = ["standin"]  # the fixture, shared with test_gateway_wire.py

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the gateway needs a namespace of the sandbox's own")

MODEL = "written1h-100000"  # the stand-in: 100,000 more cache-creation tokens, all for 1 hour

CACHING_AGENT = f"""\
import json, os, urllib.request
for stream in (False, True):
    body = {{"model": "{MODEL}", "max_tokens": 16, "stream": stream,
            "system": [{{"type": "text", "text": "a long context",
                        "cache_control": {{"type": "ephemeral", "ttl": "1h"}}}}],
            "messages": [{{"role": "user", "content": "Answer ok."}}]}}
    req = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages", json.dumps(body).encode(),
                                 {{"Content-Type": "application/json", "anthropic-version": "2023-06-01",
                                  "x-api-key": os.environ["ANTHROPIC_API_KEY"]}})
    urllib.request.urlopen(req, timeout=30).read()
open(os.path.join(os.environ["EVALRIG_OUT"], "answer.txt"), "w").write("ok")
"""


def test_one_hour_cache_writes_are_metered_at_the_one_hour_rate(tmp_path: Path, standin: Standin) -> None:
    """repro-04: before, a 1-hour write was priced at the 5-minute rate ($3.75 here rather
    than $6 per million tokens), so a cache-heavy candidate looked cheaper than it was."""
    home = tmp_path / "home"
    ck = make_checkpoint(tmp_path / "ck", CACHING_AGENT)
    with (ck / "checkpoint.toml").open("a") as f:
        f.write(f'[models]\nallowed = ["anthropic/{MODEL}"]\n')
    assert eval_sh(home, "seal", ck).code == 0
    add_task(tmp_path / "tasks", "fixed", "t0")
    gw = tmp_path / "gateway.toml"
    gw.write_text(f'[upstreams.anthropic]\napi = "anthropic"\nbase_url = "http://127.0.0.1:{standin.port}"\n'
                  'key_env = "STANDIN_KEY"\n[prices]\n'
                  f'"anthropic/{MODEL}" = {{ input = 3.0, output = 15.0, cache_write = 3.75, cache_write_1h = 6.0 }}\n')
    step = eval_sh(home, "run", "--checkpoint", ck, "--tasks", tmp_path / "tasks", "--out", tmp_path / "out",
                   "--sandbox", "process", "--repeat", "1", "--gateway", gw, env={"STANDIN_KEY": KEY})
    [res] = results(tmp_path / "out")
    ev = tmp_path / "out" / "attempts" / str(res["attempt_id"])
    lines = _lines(ev / "model.jsonl")
    assert [(c["status"], c["stream"]) for c in lines] == [(200, False), (200, True)], (lines, step)
    for c in lines:
        u = c["usage"]
        assert isinstance(u, dict) and u["cache_write_tokens"] == 100_000 and u["cache_write_1h_tokens"] == 100_000, c
        plain = u["input_tokens"] - 100_000
        expected = (plain * 3.0 + 100_000 * 6.0 + u["output_tokens"] * 15.0) / 1e6
        assert c["cost_usd"] == pytest.approx(expected), c  # 5-minute rate: 0.225 less
    [spend] = [json.loads(x) for x in (tmp_path / "out" / "actuals.jsonl").read_text().splitlines()]
    assert spend["spend"]["candidate"]["cost_usd"] == pytest.approx(sum(c["cost_usd"] for c in lines)), spend
    check = eval_sh(home, "verify", tmp_path / "out")
    assert check.code == 0, check
