#!/usr/bin/env bash
# Package the Helm chart for a registry: scripts/chart-package.sh [DIR] -> DIR/tether-VERSION.tgz
# (default dist/; the path is the last line printed). Push it with `helm push DIR/tether-VERSION.tgz
# oci://REGISTRY/PATH` (docs/images.md). The chart's version and appVersion are the distributions'
# version, runtime/pyproject.toml's (the one version source, as for scripts/build-dist.sh): a chart
# out of step stops here and packages nothing. helm: $TETHER_K8S_BIN/helm (scripts/k8s-tools.sh),
# else the one on PATH.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-$root/dist}" && cd "${1:-$root/dist}" && pwd)
helm=${TETHER_K8S_BIN:+$TETHER_K8S_BIN/helm}
helm=${helm:-$(command -v helm || true)}
[ -x "$helm" ] || { echo "chart-package: no helm (set TETHER_K8S_BIN from scripts/k8s-tools.sh, or put helm on PATH)" >&2; exit 2; }
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/runtime/pyproject.toml" | head -n1)
chart="$root/charts/tether/Chart.yaml"
drift=()
for field in version appVersion; do
  got=$(sed -n "s/^$field: *\"\{0,1\}\([^\"]*\)\"\{0,1\} *$/\1/p" "$chart")
  [ "$got" = "$version" ] || drift+=("charts/tether/Chart.yaml: $field ${got:-missing}, not $version (runtime/pyproject.toml)")
done
if [ ${#drift[@]} -gt 0 ]; then
  printf 'chart-package: the chart is not in step with the distributions:\n' >&2
  printf '  %s\n' "${drift[@]}" >&2
  exit 1
fi
"$helm" lint --strict "$root/charts/tether" --set store.s3.bucket=runs --set 'watchNamespaces={default}' >&2
"$helm" package "$root/charts/tether" --destination "$out" >&2
echo "$out/tether-$version.tgz"
