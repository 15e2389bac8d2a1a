#!/usr/bin/env bash
# The benchmark, one command: installs nginx, Caddy, wrk, valgrind and Chromium from Debian and the pinned
# npm packages (OpenCode, playwright-core) if missing, builds the gateway and the bench tools in
# release mode, and runs bench/bench.py (results in bench/out/results.md). Not part of the test
# suite. Knobs: ROUNDS, DURATION, STREAMS, HANDSHAKES, EVENTS, SECTIONS, TARGETS, BEFORE (an older build, run beside this one), UPSTREAM=nginx (throughput only), WEBUI_ROUNDS, SETTLE_MS.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
for p in nginx caddy wrk chromium openssl curl git valgrind; do command -v "$p" >/dev/null || need+=("$p"); done
# OpenCode's file search: without ripgrep on PATH it tries to download it.
command -v rg >/dev/null || need+=(ripgrep)
# The SSH hop to a box (bench/boxhop.py) runs its own OpenSSH server.
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
if [ "${#need[@]}" -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
# Debian starts the packaged services; the benchmark runs its own instances.
systemctl stop nginx caddy 2>/dev/null || true
scripts/npm-deps.sh
cargo build --release --locked
(cd bench/tools && cargo build --release --locked)
exec python3 bench/bench.py
