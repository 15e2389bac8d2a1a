#!/usr/bin/env bash
# Instructions per proxied request, which machine noise does not move: runs the gateway under
# valgrind's callgrind on the config a bench/run.sh run left in bench/out, warms it, zeroes the
# counters, loads it with wrk -c4 for 10 s and divides. Usage: bench/callgrind.sh [binary]
# (default target/release/opencode-gateway); the profile is left in bench/out/callgrind.out.*
# for callgrind_annotate.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-target/release/opencode-gateway}")
OUT=bench/out
[ -f $OUT/gateway.toml ] || { echo "run bench/run.sh first (it writes $OUT/gateway.toml)" >&2; exit 1; }
command -v valgrind >/dev/null || apt-get install -y -qq valgrind >/dev/null
UP=$(grep -o 'upstream = "http://127.0.0.1:[0-9]*' $OUT/gateway.toml | grep -o '[0-9]*$')
GP=$(grep -o 'listen = "127.0.0.1:[0-9]*' $OUT/gateway.toml | grep -o '[0-9]*$')
AUTH=$(printf 'bench:bench-password-1' | base64)
bench/tools/target/release/upstream "$UP" >/dev/null 2>&1 & up=$!
(cd $OUT && RUST_LOG=warn exec valgrind --tool=callgrind --callgrind-out-file=callgrind.out "$BIN" serve -c gateway.toml) >$OUT/callgrind.log 2>&1 & vg=$!
trap 'kill $vg $up 2>/dev/null || true' EXIT
for _ in $(seq 60); do curl -sk -o /dev/null "https://127.0.0.1:$GP/" && break; sleep 1; done
wrk -t1 -c4 -d3s -H "Authorization: Basic $AUTH" "https://127.0.0.1:$GP/global/health" >/dev/null
callgrind_control -z "$vg" >/dev/null
n=$(wrk -t1 -c4 -d10s -H "Authorization: Basic $AUTH" "https://127.0.0.1:$GP/global/health" | grep -o '[0-9]* requests in' | grep -o '^[0-9]*')
callgrind_control -d "$vg" >/dev/null
sleep 1
f=$(ls -t $OUT/callgrind.out.* | head -1)
ir=$(callgrind_annotate "$f" 2>/dev/null | grep 'PROGRAM TOTALS' | tr -d , | grep -o '^[0-9]*')
echo "requests $n, instructions per request $((ir / n)) ($f)"
