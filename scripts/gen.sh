#!/usr/bin/env bash
# Regenerates gen/ from proto/ with buf and the plugins pinned in go.mod's
# tool block. With --check, fails when the committed gen/ is stale.
set -euo pipefail
cd "$(dirname "$0")/.."
BUF="${HOURGLASS_BUF:-go run github.com/bufbuild/buf/cmd/buf@v1.75.0}"
if [ "${1:-}" = "--check" ]; then
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  cp -r gen "$tmp/gen.before"
  (cd proto && $BUF generate)
  if ! diff -r "$tmp/gen.before" gen >/dev/null; then
    diff -r "$tmp/gen.before" gen | head -20
    echo "gen/ is stale: run bash scripts/gen.sh and commit the result"; exit 1
  fi
  echo "gen/ is up to date"
  exit 0
fi
(cd proto && $BUF lint && $BUF generate)
