#!/usr/bin/env bash
# Bounded coverage-guided fuzzing of the request parsers (cargo-fuzz / libFuzzer).
# Usage: scripts/fuzz.sh [seconds per target, default 15]
# Any finding fails the script, naming the input libFuzzer saved: a crash or panic, running out
# of memory (-rss_limit_mb), one input taking longer than -timeout, a leak.
# The machine's toolchain is stable; RUSTC_BOOTSTRAP lets cargo-fuzz use libFuzzer's flags.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-15}"
# Every target fuzz/Cargo.toml declares: a new one is fuzzed without being listed here again
# (policy_rule, issue 40, was built but never run while this was a hand-kept list).
mapfile -t targets < <(sed -n 's/^name = "\([a-z_]*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^opencode-gateway-fuzz$')
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked --version 0.13.2
export RUSTC_BOOTSTRAP=1
cd fuzz
cargo fuzz build --dev
mkdir -p target
for target in "${targets[@]}"; do
  echo "fuzzing $target for ${secs}s"
  log="target/fuzz-$target.log"
  status=0
  # New inputs go to corpus/<target> (git-ignored); config_parse starts from the valid fixtures,
  # proxy_header from the headers HAProxy sent (tests/fixtures/proxy/).
  corpus=("corpus/$target")
  mkdir -p "corpus/$target"
  [ "$target" != config_parse ] || corpus+=(../tests/fixtures/valid)
  [ "$target" != proxy_header ] || corpus+=(../tests/fixtures/proxy)
  # A dictionary of the names OpenCode reads, where one is kept.
  dict=()
  [ ! -f "$target.dict" ] || dict=(-dict="$target.dict")
  cargo fuzz run --dev "$target" "${corpus[@]}" -- -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 "${dict[@]}" >"$log" 2>&1 || status=$?
  grep -E "^Done|ERROR|panicked" "$log" || true # the summary, shown; the verdict is the status
  if [ "$status" -ne 0 ]; then
    # libFuzzer: "Test unit written to ./artifacts/<target>/crash-…" (or oom-, timeout-, leak-).
    artifact=$(grep -oE "Test unit written to [^ ]+" "$log" | tail -1 | sed 's/^Test unit written to //' || true)
    kind=$(grep -oE "ERROR: libFuzzer: [a-z-]+|ERROR: AddressSanitizer: [a-z-]+|ERROR: LeakSanitizer|panicked" "$log" | head -1 || true)
    echo "--- the end of fuzz/$log:" >&2
    tail -40 "$log" >&2
    where="no input saved; see fuzz/$log"
    [ -z "$artifact" ] || where="the input is $artifact"
    echo "fuzz target $target failed (exit $status${kind:+, $kind}): $where" >&2
    echo "reproduce: cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run --dev $target ${artifact:-}" >&2
    exit 1
  fi
done
