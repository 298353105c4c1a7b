#!/usr/bin/env bash
# Make (or reuse) the virtual environment for one test group and print its path.
#   scripts/env.sh core        -> ~/.cache/tether/venvs/core-<hash of envs/core.txt + checkout path>
# The key is the pinned lock file and the checkout: a changed pin builds a new env, an unchanged
# one is reused in well under a second, and two clones never re-point each other's editable
# installs (each has its own venv; uv's cache makes the second one seconds).
set -euo pipefail
name=${1:?usage: scripts/env.sh ENV_NAME}
root=$(cd "$(dirname "$0")/.." && pwd)
lock="$root/envs/$name.txt"
[ -f "$lock" ] || { echo "no lock file $lock" >&2; exit 2; }
cache=${TETHER_CACHE:-$HOME/.cache/tether}
command -v uv >/dev/null 2>&1 || python3 -m pip install -q "uv==0.9.30" >&2
key=$( (cat "$lock" "$root/scripts/env.sh"; echo "$root") | sha256sum | cut -c1-12)
venv="$cache/venvs/$name-$key"
mkdir -p "$cache/venvs"
exec 9>"$venv.lock"
flock 9  # one builder at a time; the others wait and reuse its result
if [ ! -f "$venv/.complete" ]; then
  # Before building, drop the venvs of checkouts that are gone (deleted clones: ~1 GB each, and a
  # CI machine makes a clone per run). A venv names its checkout in .checkout; one in use by a
  # live checkout is never touched.
  for mark in "$cache"/venvs/*/.checkout; do
    [ -f "$mark" ] && [ ! -d "$(cat "$mark")" ] || continue
    old=$(dirname "$mark")
    (flock -n 8 && rm -rf "$old" && rm -f "$old.lock") 8>"$old.lock" || true
  done
  rm -rf "$venv"
  # Say what is being built and why it takes a while (the first `tether` call waits for it): the
  # lock's package count and the packages its .in names; uv then shows its own progress.
  count=$(grep -c '^[A-Za-z0-9-]' "$lock" || true)
  named=$(sed -e 's/#.*//' -e '/^-r /d' -e 's/^-e //' "$root/envs/$name.in" 2>/dev/null | xargs | sed 's/ /, /g' || true)
  echo "tether: building the $name environment (once per checkout and lock; about a minute from a cold cache):" \
    "$count packages from envs/$name.txt${named:+, among them $named}" >&2
  started=$SECONDS
  uv venv -q -p 3.11 "$venv" >&2
  # Editable installs point at this checkout; paths in the lock are relative to the repo root.
  # --compile-bytecode: every test process would otherwise compile the frameworks' sources again
  # when PYTHONDONTWRITEBYTECODE is set (as on CI runners and here): measured 28 of 77 s of one
  # conformance attempt's CPU, under load. Not quiet: on a terminal uv draws its progress (what it
  # downloads, builds and installs), elsewhere it names each package installed.
  (cd "$root" && VIRTUAL_ENV="$venv" uv pip install --compile-bytecode -r "$lock" >&2)
  echo "$root" >"$venv/.checkout"
  touch "$venv/.complete"
  echo "tether: the $name environment is ready ($((SECONDS - started)) s): $venv" >&2
fi
echo "$venv"
