#!/usr/bin/env bash
# eval.sh — the entry point a release flow calls. The first call creates .venv beside this
# file and installs evalrig into it; every later call is a plain exec of .venv/bin/evalrig.
# Its own failures exit 6 (docs/release-flow.md, "Exit codes"), never 1 or 3, so that no script mistakes them for
# a verdict.
set -u

src=${BASH_SOURCE[0]}
while [ -L "$src" ]; do  # follow symlinks to find the real checkout
  dir=$(cd -P "$(dirname "$src")" >/dev/null 2>&1 && pwd) || exit 6
  src=$(readlink "$src")
  case $src in /*) ;; *) src=$dir/$src ;; esac
done
root=$(cd -P "$(dirname "$src")" >/dev/null 2>&1 && pwd) || { echo "eval.sh: cannot find its own directory" >&2; exit 6; }
venv=$root/.venv
stamp=$venv/.evalrig-installed
# The rig quotes commands back to people (hints, the verdict file's sign line) as they
# invoke it: `./eval.sh sign …` rather than a bare `evalrig` that is not on their PATH.
export EVALRIG_PROG=$0

# Fast path: installed, and pyproject.toml not touched since.
if [ -x "$venv/bin/evalrig" ] && [ -f "$stamp" ] && ! [ "$root/pyproject.toml" -nt "$stamp" ]; then
  exec "$venv/bin/evalrig" "$@"
fi

fail() { echo "eval.sh: $*" >&2; exit 6; }

find_python() {
  local c
  for c in ${EVALRIG_PYTHON:-} python3.14 python3.13 python3.12 python3.11 python3 python; do
    command -v "$c" >/dev/null 2>&1 || continue
    if "$c" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
      command -v "$c"; return 0
    fi
  done
  return 1
}

project_hash() { "$1" -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$root/pyproject.toml"; }

install() {
  local py log
  py=$(find_python) || fail "no Python 3.11 or newer found on PATH (set EVALRIG_PYTHON to one); nothing was installed"
  log=$root/.venv-install.log
  # Another eval.sh may be installing at the same moment: wait for it rather than race it.
  exec 9>"$root/.venv.lock"
  command -v flock >/dev/null 2>&1 && flock 9
  if [ -x "$venv/bin/evalrig" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$(project_hash "$py")" ]; then
    touch "$stamp"; return 0
  fi
  echo "eval.sh: setting up $venv (first run, or pyproject.toml changed; log: $log)" >&2
  {
    [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
  } >"$log" 2>&1 || fail "could not create $venv with $py (see $log)"
  "$venv/bin/python" -m pip install --disable-pip-version-check -q -e "$root" >>"$log" 2>&1 \
    || fail "installing evalrig into $venv failed (see $log); fix the cause and run eval.sh again"
  # pip can succeed on a project that declares no `evalrig` script: that is an install
  # that failed too, and exec would exit 127.
  [ -x "$venv/bin/evalrig" ] \
    || fail "installing into $venv gave no $venv/bin/evalrig (is pyproject.toml the evalrig project?)"
  project_hash "$venv/bin/python" >"$stamp" || fail "could not write $stamp"
}

install
exec "$venv/bin/evalrig" "$@"
