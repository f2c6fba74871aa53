#!/usr/bin/env bash
# Retakes the web console's screenshots in docs/console/ (PNG): the browser
# tests run against the real binary in headless Chromium and save each page.
# Needs Chromium (apt-get install -y --no-install-recommends chromium).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v chromium >/dev/null || [ -n "${HOURGLASS_CHROMIUM:-}" ] || {
  echo "no chromium: apt-get install -y --no-install-recommends chromium, or set HOURGLASS_CHROMIUM"; exit 1; }
mkdir -p docs/console
HOURGLASS_CONSOLE_SCREENSHOTS="$PWD/docs/console" go test ./e2e/ -run '^TestConsole' -count=1
ls -l docs/console
