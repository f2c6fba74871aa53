#!/usr/bin/env bash
# Regenerates gen/ (Go) from proto/ with buf and the plugins pinned in
# go.mod's tool block, and clients/typescript/src/gen (TypeScript) with
# protoc-gen-es from clients/typescript's node_modules when it is there
# (npm ci in clients/typescript first). With --check, fails when the
# committed code is stale (the TypeScript check needs node_modules too,
# and is skipped with a line that says so without them).
set -euo pipefail
cd "$(dirname "$0")/.."
BUF="${HOURGLASS_BUF:-go run github.com/bufbuild/buf/cmd/buf@v1.75.0}"
ts=clients/typescript
have_ts() { [ -x "$ts/node_modules/.bin/protoc-gen-es" ]; }
if [ "${1:-}" = "--check" ]; then
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  cp -r gen "$tmp/gen.before"
  (cd proto && $BUF generate)
  if ! diff -r "$tmp/gen.before" gen >/dev/null; then
    diff -r "$tmp/gen.before" gen | head -20
    echo "gen/ is stale: run bash scripts/gen.sh and commit the result"; exit 1
  fi
  echo "gen/ is up to date"
  if have_ts; then
    cp -r "$ts/src/gen" "$tmp/ts.before"
    (cd proto && $BUF generate --template buf.gen.ts.yaml)
    if ! diff -r "$tmp/ts.before" "$ts/src/gen" >/dev/null; then
      diff -r "$tmp/ts.before" "$ts/src/gen" | head -20
      echo "$ts/src/gen is stale: run bash scripts/gen.sh and commit the result"; exit 1
    fi
    echo "$ts/src/gen is up to date"
  else
    echo "$ts/src/gen not checked: run npm ci in $ts first"
  fi
  exit 0
fi
(cd proto && $BUF lint && $BUF generate)
if have_ts; then
  (cd proto && $BUF generate --template buf.gen.ts.yaml)
  # The console's bundle holds the generated code: rebuild it.
  bash scripts/build-console.sh
else
  echo "TypeScript code not regenerated: run npm ci in $ts first"
fi
