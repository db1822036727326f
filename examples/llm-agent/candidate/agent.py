"""An LLM agent written with the official `openai` SDK, unchanged (docs/models.md).

It reads the task's prompt ($EVALRIG_PROMPT is its path), asks the model its checkpoint
pins (`LLM_MODEL`, the provider's own name; `[models] allowed` names it qualified, as
`openai/<model>`) and writes the reply to out/answer.txt. Nothing in it knows the rig: the
SDK finds OPENAI_BASE_URL and OPENAI_API_KEY in its environment, and inside the sandbox the
rig's model gateway sets them (a base URL on loopback and a per-attempt token worth
nothing outside the attempt). The provider's key, the network and the price never reach
it; the rig meters the call.

Settings (all pinned in checkpoint.toml's [agent] env, so a change is a new build):
  LLM_MODEL    the model, e.g. gpt-4.1
  LLM_STREAM   "1": ask for a streamed reply (the gateway passes it on chunk by chunk)

Errors are the SDK's: a refused model (403), an exhausted budget (429 budget_exhausted),
an upstream fault (502/504) raise `openai.APIStatusError`; the agent prints the error's
status, type and message to stderr and exits 1 (docs/models.md, "When the gateway says no").
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SYSTEM = "You answer the task below. Reply with the answer only: no explanation, one line."


def main() -> int:
    import openai  # the official SDK: `pip install openai`, or evalrig's `examples` extra

    prompt = Path(os.environ["EVALRIG_PROMPT"]).read_text(encoding="utf-8")
    model = os.environ["LLM_MODEL"]
    stream = os.environ.get("LLM_STREAM") == "1"
    # No base_url, no api_key: the SDK reads OPENAI_BASE_URL and OPENAI_API_KEY, as it would
    # anywhere. max_retries=0: the rig never retries for the agent, and this agent chooses
    # not to either (a refusal or a fault is final for the attempt; the rig records it).
    client = openai.OpenAI(max_retries=0)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]
    # The trial's seed and temperature 0: both builds face the same luck on each trial.
    seed = int(os.environ.get("EVALRIG_SEED", "0"))
    try:
        if stream:
            parts = []
            for chunk in client.chat.completions.create(
                    model=model, messages=messages, temperature=0, seed=seed, max_tokens=256,
                    stream=True):
                if chunk.choices and chunk.choices[0].delta.content:
                    parts.append(chunk.choices[0].delta.content)
            text = "".join(parts)
        else:
            reply = client.chat.completions.create(
                model=model, messages=messages, temperature=0, seed=seed, max_tokens=256)
            text = reply.choices[0].message.content or ""
    except openai.APIStatusError as e:
        # the SDK parses the provider's error shape: e.type is e.g. budget_exhausted
        print(f"llm-agent: {model}: HTTP {e.status_code} ({e.type or e.code}): {e.message}",
              file=sys.stderr)
        return 1
    except openai.APIConnectionError as e:
        print(f"llm-agent: {model}: no connection to the model: {e}", file=sys.stderr)
        return 1
    out = Path(os.environ["EVALRIG_OUT"])
    (out / "answer.txt").write_text(text.strip() + "\n", encoding="utf-8")
    print(f"llm-agent: {model} answered in {len(text)} characters"
          f"{' (streamed)' if stream else ''}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
