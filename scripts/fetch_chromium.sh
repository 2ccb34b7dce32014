#!/usr/bin/env bash
# Installs Debian's Chromium for the web console's browser tests (tests/e2e/test_console.py), once: Playwright
# drives it (no browser download). Does nothing when /usr/bin/chromium is there; without root or apt-get it says
# so and the console's browser tests skip.
set -euo pipefail
if command -v chromium >/dev/null; then
  exit 0
fi
if ! command -v apt-get >/dev/null || [[ $(id -u) != 0 ]]; then
  echo "fetch_chromium: no chromium, and no root apt-get to install Debian's; the console's browser tests skip" >&2
  exit 0
fi
echo "fetch_chromium: installing Debian's chromium (once)" >&2
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -qq chromium >/tmp/fetch_chromium.log 2>&1; then
  apt-get update -qq >/dev/null 2>&1 || true
  apt-get install -y -qq chromium >/tmp/fetch_chromium.log 2>&1 || {
    tail -n 20 /tmp/fetch_chromium.log >&2
    echo "fetch_chromium: apt-get install chromium failed" >&2
    exit 1
  }
fi
