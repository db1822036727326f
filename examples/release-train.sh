#!/usr/bin/env bash
# A whole release train on the bundled examples, and the release's life after the gate,
# written as a release flow writes one: every step is an eval.sh call, and the flow branches
# on exit codes (docs/release-flow.md, docs/release-engineers.md).
#
#   examples/release-train.sh [TRAIN_DIR]
#
# seal champion and candidate -> generate this train's fresh tasks (after the seal) ->
# validate -> run both with the default policy pinned -> compare -> gate -> show the verdict ->
# report.html;
# on promote: sign (as $SIGNER, standing in for the person) -> ship -> a tripwire run on the
# new champion -> retire the train's fresh tasks (the ones the new champion failed graduate
# into the train's fixed/) -> a second train, a maintenance release of the new champion (no
# fresh tasks, the policy's security-patch exception) -> sign -> ship -> a person's rollback
# of it and its ship again -> watch -> the release history -> a summary on stdout (each train's
# verdict and report.html, which sign made again so it says who signed; what serves now). The release log is
# TRAIN_DIR/releases.jsonl, so that every train directory has its own history; the train's
# task set is its own copy, so retire changes only that copy.
# Exits 0 when both releases shipped and the tripwire held; 1 when the gate keeps the
# champion, 3 when it blocks, the tripwire fired (rolled back) or an alert fires; 4/5/6 on trouble.
# Run again with the same TRAIN_DIR, it resumes and skips what it did before.
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
log=$train/releases.jsonl

# The train's last words, on stdout: each train's verdict (the verdict file's headline) and
# its report (sign makes it again, so it says who signed), then what serves now.
summary() {  # summary COMPARISON_DIR...
  local cmp md
  printf '\n== summary\n'
  for cmp in "$@"; do
    for md in "$cmp"/decisions/*.md; do
      [ -f "$md" ] && echo "verdict: $(head -n 1 "$md" | sed 's/^# //') ($md)"
    done
    [ -f "$cmp/report.html" ] && echo "report: $cmp/report.html"
  done
  if [ -f "$log" ] && "$ev" champion --log "$log" >/dev/null 2>&1; then
    "$ev" champion --log "$log" 2>/dev/null | sed -n '1s/^/serving now: /p; 2,3s/^/  /p'
  else
    echo "serving now: unchanged (this train directory's release log, $log, has no ship)"
  fi
}

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
retired=$train/comparison/retire.json   # written by `retire` below, once this train is over
if [ -f "$retired" ]; then
  # Retire moved this train's fresh tasks out of $train/tasks/fresh: the runs, made on the
  # task set as it was, stand as they are (a run on the changed set would be refused).
  step "this train's fresh tasks were retired: its runs and comparison stand as they are"
else
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
fi

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
decision=$train/comparison/decisions/default-v2.json

step "report (one HTML file: the verdict, its rules, plots, every task and its trials)"
"$ev" report "$train/comparison" || stop $? "report could not be made"
[ "$verdict" = 0 ] || { summary "$train/comparison"; exit "$verdict"; }

# -- after the gate (docs/release-engineers.md) ------------------------------------------
signer=${SIGNER:-"release-train example (stands in for a person)"}

ship() {  # ship DECISION CHECKPOINT: sign it as $signer (unless approved already), then ship it
  # A re-run of the script skips a release it shipped before (the log is plain JSONL): ship
  # itself says "already shipped" only while that release serves, and refuses it once a
  # newer one does (exit 4), as it must.
  if [ -f "$log" ] && grep -qF "\"path\":\"$1\"" "$log"; then echo "shipped before: $1"; return; fi
  "$ev" check-release "$1" --checkpoint "$2" >/dev/null 2>&1 \
    || "$ev" sign "$1" --approve --by "$signer" || stop $? "signing $1 failed"
  "$ev" ship "$1" --checkpoint "$2" --log "$log"
  local rc=$?
  case $rc in
    0) ;;
    1) stop 1 "$1 is not approved: nothing shipped" ;;
    *) stop "$rc" "ship refused $1" ;;
  esac
}

step "sign and ship (a person signs; here \$SIGNER stands in for one)"
ship "$decision" "$candidate"

step "tripwire: the new champion checked again, with the promoting policy's [tripwires]"
"$ev" tripwire --checkpoint "$candidate" --tasks "$train/tasks" --out "$train/tripwire-1" --log "$log" \
  ${JOBS:+--jobs "$JOBS"}
rc=$?
case $rc in
  0) ;;
  3) "$ev" history --log "$log"; stop 3 "a tripwire failed: the release was rolled back; a person must look" ;;
  130) stop "$rc" "the tripwire run was interrupted; run this script again with $train to resume" ;;
  *) stop "$rc" "the tripwire could not run" ;;
esac

step "retire the train's fresh tasks: those the new champion failed, and two it always passed, graduate into fixed/ (then locked); the rest go to retired/"
# Each train retires once (retire refuses a second time); a retire a crash left half-done
# (retire.json says complete: false) is finished by running it again.
if [ -f "$retired" ] && grep -q '"complete": true' "$retired"; then
  echo "retired before: $retired"
else
  "$ev" retire "$train/comparison" --tasks "$train/tasks" --graduate-failed --sample 2 \
    || stop $? "retire refused the train's fresh tasks"
fi

step "second train: a maintenance release of the new champion (security-patch exception, no fresh tasks)"
maint=$train/maintenance
patched=$maint/patched-build   # the new champion plus one file: a build of its own, sealed anew
if [ ! -d "$maint" ]; then
  rm -rf "$maint.partial" && mkdir -p "$maint.partial"
  cp -R "$candidate" "$maint.partial/patched-build" && rm -f "$maint.partial/patched-build/SEAL.json" \
    && echo "security patch: the example's one change" > "$maint.partial/patched-build/PATCH.txt" \
    && mkdir -p "$maint.partial/tasks" \
    && cp -R "$root/tasks/fixed" "$root/tasks/invariant" "$root/tasks/fixed.lock" "$maint.partial/tasks/" \
    || stop 6 "preparing the maintenance train failed"
  mv "$maint.partial" "$maint"
fi
"$ev" seal "$patched" || stop $? "sealing the patched candidate failed"
for side in champion candidate; do
  dir=$candidate; [ "$side" = candidate ] && dir=$patched   # the champion is the build now serving
  "$ev" run --checkpoint "$dir" --tasks "$maint/tasks" --out "$maint/$side" --policy "$policy" \
    ${JOBS:+--jobs "$JOBS"}
  rc=$?
  [ "$rc" = 0 ] || stop "$rc" "the maintenance train's $side run did not complete"
done
"$ev" compare "$maint/champion" "$maint/candidate" --out "$maint/comparison" || stop $? "compare refused the runs"
"$ev" gate "$maint/comparison" --policy "$policy" --exception security-patch
rc=$?
[ "$rc" = 0 ] || stop "$rc" "the maintenance train was not promoted (gate exit $rc)"
"$ev" report "$maint/comparison" || stop $? "the maintenance train's report could not be made"
maint_decision=$maint/comparison/decisions/default-v2+security-patch.json
ship "$maint_decision" "$patched"

step "a person's rollback: the on-call takes the maintenance release back, then ships it again"
# In a real week the release misbehaved where no tripwire looks, and a person rolled it back
# (--by and --reason are required: the log records who and why); here the example does it to
# show the events. `previous` is the build the maintenance release replaced (the first
# train's candidate). The release taken back stays in the log: a rollback is an event.
if [ -f "$log" ] && grep -qF '"trigger":"person"' "$log"; then
  echo "rolled back by a person before (the log keeps it)"
else
  "$ev" rollback --to previous --by "$signer" --log "$log" \
    --reason "example: the maintenance release taken back by a person, to show the event" \
    || stop $? "the rollback was refused"
fi
# The same signed decision ships again: its champion side serves again, so it is not stale;
# while the patched build serves, ship writes nothing and says "already shipped".
"$ev" ship "$maint_decision" --checkpoint "$patched" --log "$log" || stop $? "shipping $maint_decision again failed"

step "watch: the curves over the trains so far (a scheduled job pages a person on exit 3)"
"$ev" watch --log "$log"
rc=$?
case $rc in
  0) ;;
  3) stop 3 "an alert fires (docs/curves.md says what each means and what to do)" ;;
  *) stop "$rc" "watch could not read the ledger or the release log" ;;
esac

step "the release history"
"$ev" history --log "$log" || stop $? "the release log does not verify"
"$ev" champion --log "$log" >/dev/null || stop $? "nothing serves"
summary "$train/comparison" "$maint/comparison"
exit 0
