#!/usr/bin/env bash
# Resident memory before, at the peak of and a minute after a flood of 10 000 silent TLS
# connections (issue 21, C). A benchmark, not a test; figures in docs/performance.md.
# Knobs (environment): GATEWAY_BIN (default: a release build made here), FLOOD, ADDRESSES,
# HEAD_TIMEOUT, AFTER, PARALLEL (see bench/flood_rss.py).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${GATEWAY_BIN:-}" ]; then
  cargo build --release --locked
  export GATEWAY_BIN="${CARGO_TARGET_DIR:-target}/release/opencode-gateway"
fi
# 10 000 sockets in the client; the gateway raises its own limit to the hard one.
ulimit -n "$(ulimit -Hn)"
exec python3 bench/flood_rss.py
