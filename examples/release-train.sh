#!/usr/bin/env bash
# A whole release train on the bundled examples, written as a release flow writes one:
# every step is an eval.sh call, and the flow branches on exit codes (docs/release-flow.md).
#
#   examples/release-train.sh [TRAIN_DIR]
#
# seal champion and candidate -> generate this train's fresh tasks (after the seal) ->
# validate -> run both with the default policy pinned -> compare -> gate -> show the verdict.
# Exits with the gate's code: 0 promote, 1 keep the champion, 3 block; 4/5/6 on trouble.
set -u
here=$(cd -P "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
ev=$root/eval.sh
train=${1:-$root/train/$(date -u +%Y%m%dT%H%M%SZ)}
policy=$root/policies/default.toml
champion=$here/champion
candidate=$here/candidate

step() { printf '\n== %s\n' "$*" >&2; }
stop() { local code=$1; shift; echo "release-train: $* (exit $code); train directory: $train" >&2; exit "$code"; }

mkdir -p "$train" || stop 6 "cannot create $train"

step "seal the champion and the candidate"
"$ev" seal "$champion" || stop $? "sealing the champion failed"
"$ev" seal "$candidate" || stop $? "sealing the candidate failed"

step "assemble the task set: the locked fixed suite, the invariants, the public benchmarks (reported, never deciding), and a fresh set made now"
# A resumed train keeps the task set it was given: fresh tasks are made once per train.
if [ ! -d "$train/tasks" ]; then
  rm -rf "$train/tasks.partial" && mkdir -p "$train/tasks.partial"
  cp -R "$root/tasks/fixed" "$root/tasks/invariant" "$root/tasks/public" "$root/tasks/fixed.lock" "$train/tasks.partial/" \
    || stop 6 "copying the bundled tasks failed"
  "$root/.venv/bin/python" "$here/make_fresh_tasks.py" "$train/tasks.partial" --count "${FRESH_COUNT:-30}" \
    || stop 6 "generating the fresh tasks failed"
  mv "$train/tasks.partial" "$train/tasks"
fi
"$ev" validate --tasks "$train/tasks" --policies "$root/policies" || stop $? "the task set does not validate"

for side in champion candidate; do
  step "run the $side"
  dir=$champion; [ "$side" = candidate ] && dir=$candidate
  "$ev" run --checkpoint "$dir" --tasks "$train/tasks" --out "$train/$side" --policy "$policy" \
    ${JOBS:+--jobs "$JOBS"}
  rc=$?
  case $rc in
    0) ;;
    5) stop 5 "the $side run is incomplete; run this script again with $train to resume" ;;
    *) stop "$rc" "the $side run failed" ;;
  esac
done

step "compare"
"$ev" compare "$train/champion" "$train/candidate" --out "$train/comparison" || stop $? "compare refused the runs"

step "gate"
"$ev" gate "$train/comparison" --policy "$policy"
verdict=$?
case $verdict in
  0) outcome="promote: the candidate may ship once a person signs" ;;
  1) outcome="keep the champion" ;;
  3) outcome="block: a person must look before anything ships" ;;
  *) stop "$verdict" "the gate could not decide" ;;
esac

step "verdict ($outcome)"
for f in "$train"/comparison/decisions/*.md; do
  [ -f "$f" ] && { cat "$f"; echo; echo "verdict file: $f"; }
done
echo "sign it with: $ev sign $train/comparison/decisions/default-v2.json --approve|--reject --by NAME" >&2
exit "$verdict"
