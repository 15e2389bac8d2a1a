#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what the tests drive (Debian packages, the
# pinned OpenCode from npm), then checks formatting and lints, and runs every test, including
# the ones marked #[ignore] that need the real OpenCode server and its clients.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
# The README's two commands must work in either order: this one may not change the tree the
# other (`cargo run --release -- serve`) runs on. Compared at the end (ignored files aside).
tree_before=$(git status --porcelain 2>/dev/null || true)

step() { printf '\n==> %s\n' "$*"; }

# The run_as isolation test (tests/integration/isolation.rs) creates OS users, which needs root:
# CI runs this script as root; elsewhere it re-runs itself through sudo when it may, or stops
# here. OCGW_SKIP_OS_USER_TESTS=1 skips that test knowingly (it says so, and this script repeats
# it at its end, with the skipped tests' own lines); as root the variable is ignored, so a root
# (CI) run never skips it.
if [ "$(id -u)" -eq 0 ] && [ -n "${OCGW_SKIP_OS_USER_TESTS:-}" ]; then
  echo "scripts/test.sh: running as root: OCGW_SKIP_OS_USER_TESTS is ignored, the run_as isolation test runs" >&2
  unset OCGW_SKIP_OS_USER_TESTS
fi
skipped_os_users=""
[ "${OCGW_SKIP_OS_USER_TESTS:-}" != 1 ] || skipped_os_users=1
if [ "$(id -u)" -ne 0 ] && [ -z "$skipped_os_users" ]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    step "re-running as root: the run_as isolation test creates OS users"
    exec sudo -E env "PATH=$PATH" "$0" "$@"
  fi
  echo "scripts/test.sh: needs root to create OS users for the run_as isolation test; run it as root (CI does), or set OCGW_SKIP_OS_USER_TESTS=1 to skip that test knowingly" >&2
  exit 1
fi

# A test that cannot run here (no PostgreSQL, no network namespaces, not root for OS users) skips
# itself through one helper (tests/support/skip.rs), which appends a line to this file: they are
# repeated at the end, whatever the outcome. Under CI (CI=true) such a test fails instead.
mkdir -p target
export OCGW_SKIPPED_FILE="$PWD/target/skipped-tests.txt"
: >"$OCGW_SKIPPED_FILE"
say_skipped() {
  if [ -s "$OCGW_SKIPPED_FILE" ]; then
    echo "scripts/test.sh: $(sort -u "$OCGW_SKIPPED_FILE" | wc -l) test(s) skipped themselves; what they claim is not proved by this run:" >&2
    sort -u "$OCGW_SKIPPED_FILE" >&2
  fi
}
# OpenCode's clients (a Bun binary) unpack a 5.4 MB native library into $TMPDIR as
# .bc<hash>-00000000.so each time `opencode run` or `opencode attach` starts, and leave it there
# (1.18.33; about 150 per run of this suite). Removed at the end, only those made during the run.
started_marker=$(mktemp)
tidy_up() {
  # OpenCode 2's clients leave .bun-0-<hash>.so (5.3 MB) the same way.
  find "${TMPDIR:-/tmp}" -maxdepth 1 \( -name '.bc*-00000000.so' -o -name '.bun-*.so' \) -newer "$started_marker" -delete 2>/dev/null || true
  rm -f "$started_marker"
  say_skipped
}
trap tidy_up EXIT

# A one-shot build: cargo's incremental caches would only take disk (14 GB here after a day).
export CARGO_INCREMENTAL=0

# Debian packages: ripgrep (OpenCode's file search, or it tries to download it), tmux (the TUI
# test), the OpenSSH client and ssh-keygen (SSH tests), Chromium (the web UI test), openssl
# (a standard client checks the dev CA's name constraints), curl and useradd (the run_as test),
# pebble and pebble-challtestsrv (the ACME test's CA and its DNS).
# prometheus (promtool checks /metrics) and systemd (systemd-analyze verifies the unit).
# iproute2 (the LAN phone test's network namespaces) and libnss3-tools (certutil: the phone's
# Chromium trusts the dev CA through its own NSS database). openssh-server (sshd stands in for a
# box the gateway reaches over SSH; only started by that test, on a loopback port).
need=()
command -v rg >/dev/null || need+=(ripgrep)
command -v tmux >/dev/null || need+=(tmux)
command -v ssh >/dev/null || need+=(openssh-client)
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v chromium >/dev/null || need+=(chromium)
command -v openssl >/dev/null || need+=(openssl)
command -v curl >/dev/null || need+=(curl)
command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || need+=(haproxy)
command -v pebble >/dev/null || need+=(pebble)
command -v promtool >/dev/null || need+=(prometheus)
command -v systemd-analyze >/dev/null || need+=(systemd)
command -v ip >/dev/null || need+=(iproute2)
command -v certutil >/dev/null || need+=(libnss3-tools)
[ "$(id -u)" -ne 0 ] || command -v useradd >/dev/null || need+=(passwd)
if [ "${#need[@]}" -gt 0 ]; then
  step "installing ${need[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

scripts/npm-deps.sh

step "vendored hyper: the published crate and vendor/hyper.patch, nothing else"
scripts/vendor-hyper.sh --check

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --all-targets --locked -- -D warnings

# Bounded: a test that hangs fails the run (with cargo's output so far) instead of holding it
# forever. Generous: the whole run (with the fuzzing below) must fit in 30 minutes on 2 cores.
step "cargo test (all, including the real-OpenCode tests; at most 45 min)"
# The output is kept too: CI shows only the head and tail of a long log, where a failing test's
# backtrace used to hide its message; the failures' own lines are printed again last.
log=target/test-output.log
mkdir -p target
set +e
timeout --signal=TERM --kill-after=60 2700 cargo test --all-targets --locked -- --include-ignored 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
  echo "scripts/test.sh: cargo test did not finish within 45 min (killed): a test hangs" >&2
fi
if [ "$status" -ne 0 ]; then
  echo "scripts/test.sh: what the failing tests said (in full in $log):" >&2
  grep -a -E -A6 "panicked at|FAILED at step|^---- " "$log" | grep -a -v -E "^ +[0-9]+: |^ +at " | cut -c1-400 | head -150 >&2 || true
  exit "$status"
fi

# Coverage-guided fuzzing of the parsers, briefly, always (building the instrumented targets from
# cold took 5 minutes on 2 cores, while tests ran too; then 10 s per target). A finding fails the run.
step "fuzzing (10 s per target)"
scripts/fuzz.sh 10

tree_after=$(git status --porcelain 2>/dev/null || true)
if [ "$tree_before" != "$tree_after" ]; then
  echo "scripts/test.sh: the suite changed the working tree (the README's serve would then run on another tree):" >&2
  diff <(printf '%s\n' "$tree_before") <(printf '%s\n' "$tree_after") >&2 || true
  exit 1
fi

echo "scripts/test.sh: passed in $(( $(date +%s) - started )) s"
if [ -n "$skipped_os_users" ]; then
  echo "SKIPPED: the run_as isolation test (OCGW_SKIP_OS_USER_TESTS=1, not root): this run does not prove isolation between OS users" >&2
fi
# (then the EXIT trap lists each test that skipped itself)
