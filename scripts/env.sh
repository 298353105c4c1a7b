#!/usr/bin/env bash
# Make (or reuse) the virtual environment for one test group and print its path.
#   scripts/env.sh core        -> ~/.cache/tether/venvs/core-<hash of envs/core.txt>
# The hash of the pinned lock file is the cache key: a changed pin builds a new env,
# an unchanged one is reused in well under a second.
set -euo pipefail
name=${1:?usage: scripts/env.sh ENV_NAME}
root=$(cd "$(dirname "$0")/.." && pwd)
lock="$root/envs/$name.txt"
[ -f "$lock" ] || { echo "no lock file $lock" >&2; exit 2; }
cache=${TETHER_CACHE:-$HOME/.cache/tether}
command -v uv >/dev/null 2>&1 || python3 -m pip install -q "uv==0.9.30" >&2
key=$(cat "$lock" "$root/scripts/env.sh" | sha256sum | cut -c1-12)
venv="$cache/venvs/$name-$key"
if [ ! -f "$venv/.complete" ]; then
  rm -rf "$venv"
  uv venv -q -p 3.11 "$venv" >&2
  # Editable installs point at this checkout; paths in the lock are relative to the repo root.
  (cd "$root" && VIRTUAL_ENV="$venv" uv pip install -q -r "$lock" >&2)
  touch "$venv/.complete"
fi
# Editable installs must point at *this* checkout (CI clones elsewhere): re-link cheaply.
(cd "$root" && VIRTUAL_ENV="$venv" uv pip install -q --no-deps $(grep -E '^-e ' "$lock" | sed 's/^-e /-e /' | tr '\n' ' ') >&2)
echo "$venv"
