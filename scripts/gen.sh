#!/usr/bin/env bash
# Regenerates gen/ (Go) from proto/ with buf and the plugins pinned in
# go.mod's tool block; clients/typescript/src/gen (TypeScript) with
# protoc-gen-es from clients/typescript's node_modules when it is there
# (npm ci in clients/typescript first); and the generated modules of
# clients/python/src/hourglass/v1 (Python) with Debian's protoc and
# grpc_python_plugin when they are there (apt-get install
# protobuf-compiler protobuf-compiler-grpc). With --check, fails when the
# committed code is stale (the TypeScript and Python checks need their
# tools too, and are skipped with a line that says so without them).
set -euo pipefail
cd "$(dirname "$0")/.."
BUF="${HOURGLASS_BUF:-go run github.com/bufbuild/buf/cmd/buf@v1.75.0}"
ts=clients/typescript
have_ts() { [ -x "$ts/node_modules/.bin/protoc-gen-es" ]; }
py=clients/python/src/hourglass/v1
have_py() { command -v protoc >/dev/null && command -v grpc_python_plugin >/dev/null; }
# The Python template does not clean its output directory (the package's
# hand-written code is there too): remove the generated files first.
gen_py() { rm -f "$py"/*_pb2.py "$py"/*_pb2.pyi "$py"/*_pb2_grpc.py; (cd proto && $BUF generate --template buf.gen.py.yaml); }
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
  if have_py; then
    cp -r "$py" "$tmp/py.before"
    gen_py
    if ! diff -r "$tmp/py.before" "$py" >/dev/null; then
      diff -r "$tmp/py.before" "$py" | head -20
      echo "$py is stale: run bash scripts/gen.sh and commit the result"; exit 1
    fi
    echo "$py is up to date"
  else
    echo "$py not checked: apt-get install protobuf-compiler protobuf-compiler-grpc first"
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
if have_py; then
  gen_py
else
  echo "Python code not regenerated: apt-get install protobuf-compiler protobuf-compiler-grpc first"
fi
