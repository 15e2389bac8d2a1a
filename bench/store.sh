#!/usr/bin/env bash
# The state database's cost, SQLite against PostgreSQL (issue 27): installs wrk and PostgreSQL
# from Debian if missing, builds the gateway and the bench tools in release mode, and runs
# bench/store.py (results in bench/out/store.md). Not part of the test suite.
# Knobs: ROUNDS (default 5), DURATION (default 10s), BEFORE (another build of the gateway, run
# on PostgreSQL beside the two in the same rounds: a change measured before and after).
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v wrk >/dev/null || need+=(wrk)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
if [ "${#need[@]}" -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
# Debian starts the packaged cluster; the benchmark runs its own.
systemctl stop postgresql 2>/dev/null || true
cargo build --release --locked
(cd bench/tools && cargo build --release --locked)
exec python3 bench/store.py
