#!/usr/bin/env bash
# Instructions per proxied request, which machine noise does not move: runs the proxy under
# valgrind's callgrind on the configs a bench/run.sh run left in bench/out, warms it, zeroes the
# counters, loads it with wrk -c4 for 10 s (keep-alive GET /global/health, with Basic
# credentials) and divides. User-space instructions only: the kernel's socket work (about the
# same for every proxy, docs/performance.md) is not counted.
# Usage: [UPSTREAM=nginx] [BOX=1] bench/callgrind.sh [binary | nginx]
#   UPSTREAM=nginx: nginx serving the same JSON is the upstream, instead of the stand-in
#   BOX=1: the gateway whose project is on a box (bench/boxhop.py's config and sshd, which a
#          bench/run.sh run with the box target left in bench/out), to set beside the direct one
#   binary: the gateway to profile (default target/release/opencode-gateway)
#   nginx:  nginx with TLS and no auth (one worker, master off), the figure issue 14 compares with
# The profile is left in bench/out/callgrind-{gateway,nginx}.out.* for callgrind_annotate.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=bench/out
[ -f $OUT/gateway.toml ] || { echo "run bench/run.sh first (it writes $OUT/gateway.toml)" >&2; exit 1; }
command -v valgrind >/dev/null || apt-get install -y -qq valgrind >/dev/null
UP=$(grep -o 'upstream = "http://127.0.0.1:[0-9]*' $OUT/gateway.toml | grep -o '[0-9]*$')
AUTH=$(printf 'bench:bench-password-1' | base64)
if [ "${UPSTREAM:-}" = nginx ]; then
  # A real HTTP server as the upstream (issue 43): nginx answering the stand-in's JSON, with its
  # own defaults (among them keepalive_requests 1000: it closes a kept-alive connection after
  # 1 000 requests; UPSTREAM_KEEPALIVE_REQUESTS changes that).
  mkdir -p $OUT/nginx-upstream
  cat >$OUT/nginx-upstream/nginx.conf <<CONF
worker_processes 1;
pid $PWD/$OUT/nginx-upstream/nginx.pid;
error_log $PWD/$OUT/nginx-upstream/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    ${UPSTREAM_KEEPALIVE_REQUESTS:+keepalive_requests $UPSTREAM_KEEPALIVE_REQUESTS;}
    server {
        listen 127.0.0.1:$UP;
        location = /global/health { default_type application/json; return 200 '{"healthy":true,"version":"1.18.33"}'; }
    }
}
CONF
  nginx -c "$PWD/$OUT/nginx-upstream/nginx.conf" -g "daemon off;" >/dev/null 2>&1 & up=$!
else
  bench/tools/target/release/upstream "$UP" >/dev/null 2>&1 & up=$!
fi
# Our own upstream, not one an earlier section left on the port (suspected, not proven, behind a
# full run's count of 60 k where the script alone gave 47 k).
sleep 0.5
kill -0 $up 2>/dev/null || { echo "the stand-in upstream could not start on port $UP (still in use?)" >&2; exit 1; }
if [ "${1:-}" = nginx ]; then
  # The no-auth server of bench.py's nginx.conf (the second `listen`).
  PORT=$(grep -o 'listen 127.0.0.1:[0-9]* ssl' $OUT/nginx.conf | sed -n 2p | grep -o '[0-9]*' | tail -1)
  (RUST_LOG=warn exec valgrind --tool=callgrind --callgrind-out-file=$OUT/callgrind-nginx.out \
    nginx -c "$PWD/$OUT/nginx.conf" -g "daemon off; master_process off;") >$OUT/callgrind.log 2>&1 & vg=$!
else
  BIN=$(realpath "${1:-target/release/opencode-gateway}")
  CONF=gateway.toml
  if [ "${BOX:-}" = 1 ]; then
    [ -f $OUT/gateway-box.toml ] && [ -f $OUT/box/sshd_config ] || { echo "BOX=1: run bench/run.sh with the box target first" >&2; exit 1; }
    CONF=gateway-box.toml
    mkdir -p /run/sshd 2>/dev/null || true
    /usr/sbin/sshd -D -e -f "$PWD/$OUT/box/sshd_config" 2>>$OUT/sshd.log & sshd=$!
  fi
  PORT=$(grep -o 'listen = "127.0.0.1:[0-9]*' $OUT/$CONF | grep -o '[0-9]*$')
  (cd $OUT && RUST_LOG=warn exec valgrind --tool=callgrind --callgrind-out-file=callgrind-gateway.out "$BIN" serve -c $CONF) >$OUT/callgrind.log 2>&1 & vg=$!
fi
trap 'kill $vg $up ${sshd:-} 2>/dev/null || true' EXIT
for _ in $(seq 60); do curl -sk -o /dev/null "https://127.0.0.1:$PORT/" && break; sleep 1; done
# One authenticated request answered before anything is counted: under callgrind the gateway's
# first argon2 run takes seconds, and one still running in the measured window (a loaded machine)
# added 13 k instructions to every request's share.
for _ in $(seq 120); do
  [ "$(curl -sk -o /dev/null -w '%{http_code}' -H "Authorization: Basic $AUTH" "https://127.0.0.1:$PORT/global/health")" = 200 ] && break
  sleep 1
done
wrk -t1 -c4 -d3s -H "Authorization: Basic $AUTH" "https://127.0.0.1:$PORT/global/health" >/dev/null
callgrind_control -z "$vg" >/dev/null
n=$(wrk -t1 -c4 -d10s -H "Authorization: Basic $AUTH" "https://127.0.0.1:$PORT/global/health" | grep -o '[0-9]* requests in' | grep -o '^[0-9]*')
name=gateway; [ "${1:-}" = nginx ] && name=nginx
rm -f $OUT/callgrind-$name.out.*
callgrind_control -d "$vg" >/dev/null
f=""
for _ in $(seq 50); do f=$(ls -t $OUT/callgrind-$name.out.* 2>/dev/null | head -1) && [ -n "$f" ] && break; sleep 0.2; done
[ -n "$f" ] || { echo "callgrind wrote no profile (see $OUT/callgrind.log)" >&2; exit 1; }
sleep 1
ir=$(callgrind_annotate "$f" 2>/dev/null | grep 'PROGRAM TOTALS' | tr -d , | grep -o '^[0-9]*')
echo "requests $n, instructions per request $((ir / n)) ($f)"
