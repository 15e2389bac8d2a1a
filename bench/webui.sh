#!/bin/sh
# A cold load of OpenCode's web UI on a throttled mobile network (1.6 Mbps down, 750 kbps up,
# 150 ms RTT), directly against OpenCode and through the gateway (issue 14): bytes transferred
# and time until the prompt input is visible. Uses the test suite's real stack (OpenCode from
# node_modules, the gateway as built by cargo test) and Debian's Chromium, as scripts/test.sh
# installs them. Not part of the test suite. ROUNDS=2 by default (direct, gateway, alternating).
set -eu
cd "$(dirname "$0")/.."
mkdir -p bench/out
cargo test --features bench-webui --test integration bench_webui_cold_load -- --include-ignored --nocapture 2>&1 \
  | grep '^{"target"' | tee bench/out/webui.jsonl
