#!/usr/bin/env bash
# Build the wheel and the sdist of every Tether distribution into dist/ (or DIR):
#   scripts/build-dist.sh [DIR]
# tether (runtime/), tether-testing (testing/), tether-operator (operator/) and tether-<id> for
# every adapters/<id>/. All carry one version, the runtime's, and depend on each other at exactly
# that version: a distribution whose version or whose pin on another drifts stops the build
# (tests/core/test_dist.py checks the same). Install them with uv or pip (README, "Install").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-$root/dist}" && cd "${1:-$root/dist}" && pwd)
command -v uv >/dev/null 2>&1 || python3 -m pip install -q "uv==0.9.30" >&2
projects=(runtime testing operator)
for adapter in "$root"/adapters/*/; do
  [ -f "$adapter/pyproject.toml" ] && projects+=("adapters/$(basename "$adapter")")
done

version_of() { sed -n 's/^version = "\(.*\)"$/\1/p' "$root/$1/pyproject.toml" | head -n1; }
version=$(version_of runtime)
drift=()
for p in "${projects[@]}"; do
  [ "$(version_of "$p")" = "$version" ] || drift+=("$p/pyproject.toml: version $(version_of "$p"), not $version")
  # Every dependency on a Tether distribution (extras or not: tether[cli]) is pinned to exactly this version.
  while IFS= read -r pin; do
    [ "$pin" = "==$version" ] || drift+=("$p/pyproject.toml: depends on a Tether distribution at '${pin:-any version}', not ==$version")
  done < <(sed -n 's/^ *"tether\(-[a-z-]*\)\{0,1\}\(\[[a-z0-9,]*\]\)\{0,1\}\([^"]*\)",.*/\3/p' "$root/$p/pyproject.toml")
done
if [ ${#drift[@]} -gt 0 ]; then
  printf 'build-dist: the distributions are not in step:\n' >&2
  printf '  %s\n' "${drift[@]}" >&2
  exit 1
fi

for p in "${projects[@]}"; do
  echo "build-dist: $p ($version)" >&2
  uv build -q --wheel --sdist "$root/$p" -o "$out"
done
ls -1 "$out" | grep -F -- "-$version" >&2 || true
echo "$out"
