#!/usr/bin/env bash
# The official TypeScript reference MCP server, @modelcontextprotocol/server-everything, from npm,
# cached: the MCP tests run it over stdio and Streamable HTTP (tests/core/test_mcp_everything.py).
#
# Output: $TETHER_CACHE/npm/server-everything-<version>/ (TETHER_CACHE defaults to ~/.cache/tether);
# the server's executable is printed as the LAST line of stdout, progress goes to stderr. Warm: well
# under a second. Needs node and npm (Node 20 here); installs only this package and its
# dependencies (npm ci-like: --no-audit --no-fund, exact version).
set -euo pipefail
VERSION=2026.8.31
ROOT="${TETHER_CACHE:-$HOME/.cache/tether}/npm/server-everything-${VERSION}"
BIN="$ROOT/node_modules/.bin/mcp-server-everything"
mkdir -p "$ROOT"
exec 9>"$ROOT.lock"
flock 9  # one installer at a time; the others wait and reuse its result
if [ ! -f "$ROOT/.complete" ]; then
  command -v npm >/dev/null || { echo "[mcp-everything] npm is not installed (Node.js 20+ with npm)" >&2; exit 2; }
  echo "[mcp-everything] installing @modelcontextprotocol/server-everything@${VERSION} into $ROOT" >&2
  rm -rf "$ROOT/node_modules" "$ROOT/package.json" "$ROOT/package-lock.json"
  npm install --prefix "$ROOT" --no-audit --no-fund --loglevel=error "@modelcontextprotocol/server-everything@${VERSION}" >&2
  [ -x "$BIN" ] || { echo "[mcp-everything] no executable at $BIN after the install" >&2; exit 2; }
  touch "$ROOT/.complete"
fi
echo "$BIN"
