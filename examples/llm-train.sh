#!/usr/bin/env bash
# A release train of an LLM agent through the rig's model gateway (docs/gateway.md,
# docs/models.md), written as a release flow writes one: every step is an eval.sh call, and
# the flow branches on exit codes (docs/release-flow.md).
#
#   examples/llm-train.sh [TRAIN_DIR]
#
# The agent (examples/llm-agent/) is written with the official `openai` SDK. The champion
# calls openai/gpt-4.1, the candidate openai/gpt-4.1-mini; a stand-in provider on loopback
# (examples/model-standin/standin.py, NOT a model) plays OpenAI and gives both the same,
# right answers, so the two builds tie on quality and differ in cost. The rig's gateway
# serves every call: no network and no key in the sandbox, the models pinned by the sealed
# build, each call metered and priced with genai-prices' table. Both sides' cost being
# metered, the default policy's efficiency route is open:
#
# seal both builds -> this train's fresh tasks (after the seal) and the stand-in's answers ->
# start the stand-in -> validate -> run both with --gateway and the default policy pinned ->
# compare -> gate (expected: `promote (efficiency)`, the cost metered) -> stop the stand-in ->
# replay the candidate's run from its recorded calls (`run --replay`: no stand-in, no key,
# nothing spent).
#
# Exits 0 when the gate promoted and the replay completed; 1 when the gate keeps the
# champion, 3 when it blocks; 4/5/6 on trouble. Run again with the same TRAIN_DIR, it resumes
# (the stand-in is started again; the fresh tasks and its answers are kept).
# Environment: JOBS (run --jobs), REPEAT (trials per task, default 3), FRESH_COUNT (default 20).
set -u
here=$(cd -P "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
ev=$root/eval.sh
train=${1:-$root/train/llm-$(date -u +%Y%m%dT%H%M%SZ)}
policy=$root/policies/default.toml
repeat=${REPEAT:-3}

step() { printf '\n== %s\n' "$*" >&2; }
stop() { local code=$1; shift; echo "llm-train: $* (exit $code); train directory: $train" >&2; exit "$code"; }

mkdir -p "$train" || stop 6 "cannot create $train"
train=$(cd -P "$train" && pwd)

step "the official SDKs in the rig's .venv (the agent's interpreter: evalrig's 'examples' extra)"
"$ev" --version >/dev/null || stop 6 "eval.sh could not set up .venv"
py=$root/.venv/bin/python
if ! "$py" -c 'import openai' 2>/dev/null; then
  "$py" -m pip install --disable-pip-version-check -q -e "$root[examples]" \
    || stop 6 "installing the openai SDK into $root/.venv failed"
fi
# The agent runs on this interpreter inside the sandbox: the operator names its installation
# (the venv and the Python it was made from) with --interpreter-prefix, read-only there.
base=$("$py" -c 'import sys; print(sys.base_prefix)') || stop 6 "cannot ask $py for its base prefix"
prefixes=(--interpreter-prefix "$root/.venv" --interpreter-prefix "$base")

step "the two builds, as this machine runs them: examples/llm-agent/<side> with the command naming $py"
# The same files; only the interpreter differs from the repository's copies (their
# `python3` is the system's, which may not have the SDK). Made once per train.
for side in champion candidate; do
  if [ ! -d "$train/builds/$side" ]; then
    rm -rf "$train/builds/$side.partial" && mkdir -p "$train/builds"
    cp -R "$here/llm-agent/$side" "$train/builds/$side.partial" || stop 6 "copying the $side build failed"
    sed -i "s|^command = \[\"python3\", |command = [\"$py\", |" "$train/builds/$side.partial/checkpoint.toml"
    grep -qF "command = [\"$py\"" "$train/builds/$side.partial/checkpoint.toml" \
      || stop 6 "could not point the $side build at $py"
    mv "$train/builds/$side.partial" "$train/builds/$side"
  fi
done
champion=$train/builds/champion
candidate=$train/builds/candidate

step "seal the champion and the candidate (their [models] are part of the seal)"
"$ev" seal "$champion" || stop $? "sealing the champion failed"
"$ev" seal "$candidate" || stop $? "sealing the candidate failed"

step "this train's fresh tasks, made after the seal, and the stand-in's answers to them"
answers=$train/standin-answers.json
if [ ! -d "$train/tasks" ]; then
  rm -rf "$train/tasks.partial"
  "$py" "$here/llm-agent/make_tasks.py" "$train/tasks.partial" "$answers" --count "${FRESH_COUNT:-20}" \
    || stop 6 "generating the fresh tasks failed"
  mv "$train/tasks.partial" "$train/tasks"
fi

step "start the stand-in provider on loopback (a made-up key it checks; the gateway adds it to each call)"
export STANDIN_API_KEY=${STANDIN_API_KEY:-standin-key-$RANDOM$RANDOM}
port_file=$train/standin.port
gateway=$train/gateway.toml
# A resumed train serves on the port of its first start: the gateway file is part of the
# runs' inputs (its digest is in their manifests), and a run refuses to resume with another.
port=0
[ -f "$gateway" ] && port=$(sed -n 's|^base_url = "http://127.0.0.1:\([0-9]*\)/v1"$|\1|p' "$gateway" | head -1)
rm -f "$port_file"
"$py" "$here/model-standin/standin.py" --port "${port:-0}" --port-file "$port_file" --key "$STANDIN_API_KEY" \
  --answers "$answers" --log "$train/standin-requests.jsonl" 2>>"$train/standin.log" &
standin_pid=$!
stop_standin() { [ -n "${standin_pid:-}" ] && kill "$standin_pid" 2>/dev/null && wait "$standin_pid" 2>/dev/null; standin_pid=; }
trap stop_standin EXIT
for _ in $(seq 100); do [ -s "$port_file" ] && break; sleep 0.1; done
[ -s "$port_file" ] || stop 6 "the stand-in did not start on port ${port:-0} (see $train/standin.log)"
# examples/gateway/standin.toml names port 8377; this train's copy names the port bound.
# The file's digest goes into each run's manifest: both runs use this one copy.
if [ ! -f "$gateway" ]; then
  sed "s|http://127.0.0.1:8377|http://127.0.0.1:$(cat "$port_file")|" "$here/gateway/standin.toml" > "$gateway.tmp" \
    && mv "$gateway.tmp" "$gateway" || stop 6 "writing $gateway failed"
fi

"$ev" validate --tasks "$train/tasks" --checkpoint "$champion" --checkpoint "$candidate" "${prefixes[@]}" \
  || stop $? "the task set or a build does not validate"

for side in champion candidate; do
  step "run the $side through the gateway"
  dir=$champion; [ "$side" = candidate ] && dir=$candidate
  "$ev" run --checkpoint "$dir" --tasks "$train/tasks" --out "$train/$side" --policy "$policy" \
    --gateway "$gateway" --repeat "$repeat" "${prefixes[@]}" ${JOBS:+--jobs "$JOBS"}
  rc=$?
  case $rc in
    0) ;;
    5) stop 5 "the $side run is incomplete; run this script again with $train to resume" ;;
    *) stop "$rc" "the $side run failed" ;;
  esac
done

step "compare (both sides' calls priced with one table: genai-prices as of the candidate run)"
if [ ! -f "$train/comparison/comparison.json" ]; then
  "$ev" compare "$train/champion" "$train/candidate" --out "$train/comparison" || stop $? "compare refused the runs"
fi

step "gate"
"$ev" gate "$train/comparison" --policy "$policy"
verdict=$?
case $verdict in
  0|1|3) ;;
  *) stop "$verdict" "the gate could not decide" ;;
esac
for f in "$train"/comparison/decisions/*.md; do
  [ -f "$f" ] && { cat "$f"; echo; echo "verdict file: $f"; }
done
[ "$verdict" = 0 ] || stop "$verdict" "the gate did not promote"

step "stop the stand-in: the replay below reaches no provider"
stop_standin
trap - EXIT

step "replay the candidate's run from its recorded calls (no stand-in, no key, nothing spent; never decides)"
unset STANDIN_API_KEY
"$ev" run --replay "$train/candidate" --checkpoint "$candidate" --tasks "$train/tasks" \
  --out "$train/candidate-replay" --policy "$policy" --repeat "$repeat" "${prefixes[@]}" ${JOBS:+--jobs "$JOBS"}
rc=$?
[ "$rc" = 0 ] || stop "$rc" "the replay did not complete"
"$ev" show "$train/candidate-replay" || stop $? "show could not read the replay"
exit 0
