#!/usr/bin/env bash
# Rebuilds console/dist, the web console's assets that the binary embeds
# (package console), from console/web with the npm packages pinned in its
# package-lock.json: npm ci, the TypeScript check, then esbuild. The built
# files are committed, so that building the binary never needs node.
# With --check, builds into a temporary directory and fails when the
# committed console/dist differs (CI runs it).
set -euo pipefail
cd "$(dirname "$0")/../console/web"
npm ci --no-audit --no-fund --loglevel=error
npx --no-install tsc --noEmit
if [ "${1:-}" = "--check" ]; then
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  node build.mjs "$tmp"
  if ! diff -r ../dist "$tmp" >/dev/null; then
    diff -r ../dist "$tmp" | head -c 2000; echo
    echo "console/dist is stale: run bash scripts/build-console.sh and commit the result"; exit 1
  fi
  echo "console/dist is up to date"
  exit 0
fi
node build.mjs
echo "console/dist rebuilt"
