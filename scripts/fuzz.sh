#!/usr/bin/env bash
# Bounded coverage-guided fuzzing of the request parsers (cargo-fuzz / libFuzzer).
# Usage: scripts/fuzz.sh [seconds per target, default 15]
# The machine's toolchain is stable; RUSTC_BOOTSTRAP lets cargo-fuzz use libFuzzer's flags.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-15}"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked --version 0.13.2
export RUSTC_BOOTSTRAP=1
cd fuzz
cargo fuzz build --dev
for target in credentials route_and_rewrite directory_pin; do
  echo "fuzzing $target for ${secs}s"
  cargo fuzz run --dev "$target" -- -max_total_time="$secs" -rss_limit_mb=2048 2>&1 | grep -E "^Done|ERROR|panicked" || true
  # libFuzzer writes crash-* files into artifacts/ when a target fails.
  if ls "artifacts/$target"/crash-* >/dev/null 2>&1; then
    echo "fuzz target $target found a crash: fuzz/artifacts/$target/" >&2
    exit 1
  fi
done
