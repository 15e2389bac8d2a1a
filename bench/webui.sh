#!/bin/sh
# The web UI's cold load on a throttled phone network alone (issue 14): OpenCode direct, the
# gateway (first load and warm cache), nginx with gzip and Caddy with encode, side by side.
# bench/run.sh runs it with everything else; WEBUI_ROUNDS=3 by default.
exec env SECTIONS=webui "$(dirname "$0")/run.sh"
